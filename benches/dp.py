#!/usr/bin/env python3
"""DP-rank-aware routing (issue 16, acceptance 4): cached share on the shared-prefix workload for

  dp_aware     ONE `switchboard sim --dp-size 4` behind `switchboard serve --policy P`: each DP rank
               is a routing unit, the rank named in every request
  dp_worker    the same sim behind `serve --disable-dp-routing`: the worker's own round robin
               (SGLang's default --load-balance-method) places each request on a rank
  four_sims    FOUR separate sims behind `serve --policy P` (what DP-aware routing must match)

Each rank (and each separate sim) has the same KV pool: --kv-capacity-tokens K, a quarter of the
groups' worth, as in benches/routing_quality.py, whose workloads, client and cached-share figure
(Σ sglang:cached_tokens_total / Σ sglang:prompt_tokens_total from the sims' /metrics) this reuses:
gsp_ids (bench_serving's generated-shared-prefix shape as token ids, shuffled) and zipf.

Usage:
  python benches/dp.py [--binary target/release/switchboard] [--policy prefix_cost]
      [--workloads gsp_ids,zipf] [--quick] [--out dp.json]
Acceptance: dp_aware's cached share within 5 points of four_sims.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import routing_quality as rq  # noqa: E402

CONFIGS = ["dp_aware", "dp_worker", "four_sims"]


def start_dp_sim(procs, binary, kv_capacity, time_scale):
    return rq.start_listening(procs, "sim-dp4", [binary, "sim", "--model-name", rq.MODEL, "--dp-size", "4",
                                                 "--kv-capacity-tokens", kv_capacity, "--time-scale", time_scale],
                              "/health")


def one_config(config, workload, args, plan, logroot):
    tag = f"{workload}-{config}"
    logdir = Path(logroot) / tag
    logdir.mkdir(parents=True, exist_ok=True)
    rq.log(f"\n=== {tag}")
    procs = rq.Procs(logdir)
    try:
        if config == "four_sims":
            urls = rq.start_sims(procs, args.binary, 4, args.kv_capacity, args.time_scale)
            extra = []
        else:
            urls = [start_dp_sim(procs, args.binary, args.kv_capacity, args.time_scale)]
            extra = ["--disable-dp-routing"] if config == "dp_worker" else []
        base = rq.start_gateway(procs, args.binary, args.policy, urls, None, extra=extra)
        if config != "four_sims":
            # The gateway learns dp_size when the worker turns healthy: check what it routes on.
            _, body = rq.http_get(base + "/workers", timeout=5)
            ranks = json.loads(body)["workers"][0].get("dp_ranks")
            want = 0 if config == "dp_worker" else 4
            if len(ranks or []) != want:
                raise RuntimeError(f"{config}: the gateway routes {len(ranks or [])} DP ranks, expected {want}")
        client = rq.run_own_client([base], args, plan[workload], workload)
        procs.check_alive()
        sims = rq.summarize_sims(rq.scrape_sims(urls))
    finally:
        procs.stop()
    res = {"config": config, "workload": workload, **client, **sims}
    rq.log(f"  -> completed {res['completed']}/{res['requests']}, cached {res['cached_share']:.1%}, "
           f"prefix misses {res['prefix_misses']}, TTFT p50 {res['ttft_p50_ms']:.1f} ms")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(rq.default_binary()))
    ap.add_argument("--policy", default="prefix_cost", choices=rq.SWITCHBOARD_POLICIES)
    ap.add_argument("--workloads", default="gsp_ids,zipf")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="dp.json")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-timeout", type=float, default=600)
    ap.add_argument("--log-dir", default=None)
    args = ap.parse_args()
    if args.quick:
        w = dict(groups=16, prompts_per_group=4, system_len=1024, question_len=64, zipf_requests=96)
    else:
        w = dict(groups=64, prompts_per_group=16, system_len=2048, question_len=128, zipf_requests=1024)
    w["output_len"] = args.output_len
    per_group = w["system_len"] + w["prompts_per_group"] * (w["question_len"] + w["output_len"])
    args.kv_capacity = (w["groups"] // 4) * per_group
    args.workload = w
    workloads = [x for x in args.workloads.split(",") if x]
    plan = rq.make_plans(args)
    machine = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "platform": platform.platform(),
        "binary": args.binary,
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=rq.REPO, capture_output=True,
                              text=True).stdout.strip(),
    }
    rq.log(f"machine: {machine}")
    rq.log(f"this script: {' '.join(shlex.quote(a) for a in [sys.executable] + sys.argv)}")
    logroot = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="dp-bench-"))
    rows = [one_config(c, wl, args, plan, logroot) for wl in workloads for c in CONFIGS]

    lines = [f"Machine: nproc {machine['nproc']}, {machine['platform']}; date {machine['date']}; load average "
             f"{' '.join(f'{x:.1f}' for x in machine['loadavg'])}; commit {machine['git']}; binary {args.binary}",
             f"Policy `{args.policy}`; KV per rank / per sim {args.kv_capacity} tokens; time scale "
             f"{args.time_scale:g}; concurrency {args.concurrency}; seed {args.seed}.", "",
             "| workload | configuration | cached share | prefix misses | TTFT p50 ms | TTFT p99 ms | completed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['config']} | {r['cached_share']:.1%} | {r['prefix_misses']} | "
                     f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['completed']}/{r['requests']} |")
    checks = []
    for wl in workloads:
        by = {r["config"]: r for r in rows if r["workload"] == wl}
        gap = (by["four_sims"]["cached_share"] - by["dp_aware"]["cached_share"]) * 100
        checks.append({"check": f"{wl}: dp_aware within 5 points of four_sims", "pass": gap <= 5.0,
                       "detail": f"{by['dp_aware']['cached_share']:.1%} vs {by['four_sims']['cached_share']:.1%} "
                                 f"(worker's own round robin: {by['dp_worker']['cached_share']:.1%})"})
    lines.append("")
    lines += [f"- [{'x' if c['pass'] else ' '}] {c['check']}: {c['detail']}" for c in checks]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(json.dumps({"machine": machine, "results": rows, "acceptance": checks,
                                          "commands": rq.RAN, "markdown": text}, indent=2))


if __name__ == "__main__":
    main()
