#!/usr/bin/env python3
"""The longest stretches of back-to-back samples in a `perf script` dump (from a recording with
call graphs, e.g. `PERF_CALL_GRAPH=dwarf,4096 bash benches/perf.sh ...`) whose stacks all name
SYMBOL: how long the gateway's runtime thread stayed in one call, e.g. a hash table's growth.

    perf script -i PROFILE | python3 benches/longest_runs.py SYMBOL [N]

Prints the N (5) longest runs: samples and milliseconds (samples times the sampling period) and
when. A run ends at a sample outside SYMBOL, a sample of another thread, or a gap of more than
one and a half periods (the thread slept: cpu-clock samples only a running thread).
"""
import sys


def samples(lines):
    """(thread id, time in s, period in s, stack text) per sample."""
    head, stack = None, []
    for line in lines:
        if not line.strip():
            if head:
                yield (*head, "\n".join(stack))
            head, stack = None, []
        elif head is None:
            # "comm tid time: period event:" (comm may hold spaces: the time ends with ':')
            parts = line.split()
            at = next(
                i for i, p in enumerate(parts) if p[-1] == ":" and p[:-1].replace(".", "").isdigit()
            )
            head = (parts[at - 1], float(parts[at][:-1]), int(parts[at + 1]) / 1e9)
        else:
            stack.append(line)
    if head:
        yield (*head, "\n".join(stack))


def main():
    symbol = sys.argv[1]
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    runs, run, last, count = [], [], None, 0
    for tid, t, period, stack in samples(sys.stdin):
        count += 1
        inside = symbol in stack
        joins = run and inside and last[0] == tid and t - last[1] <= 1.5 * period
        if run and not joins:
            runs.append(run)
            run = []
        if inside:
            run.append((t, period))
        last = (tid, t)
    if run:
        runs.append(run)
    runs.sort(key=len, reverse=True)
    print(f"{count} samples; runs in {symbol}: {len(runs)}")
    for run in runs[:keep]:
        ms = sum(period for _, period in run) * 1e3
        print(f"  {len(run)} samples, {ms:.2f} ms, at {run[0][0]:.3f} s")


if __name__ == "__main__":
    main()
