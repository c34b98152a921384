#!/usr/bin/env bash
# Issue 22's speculative-decoding sweep on the simulator: for each (steps, topk, draft tokens) of
# the table (and no speculation), one fresh `switchboard sim` modelling the table's GPU (a 14.2 ms
# decode step), SGLang's bench_serving (--backend sglang, 16 requests × 512 output tokens,
# concurrency 8) against it directly, then through `switchboard serve` in front of it. Prints a
# markdown table: per-request tok/s (1000 / mean TPOT) and its ratio to no speculation, the step
# time (accept length × mean TPOT), the accept length, ITL p50 / p99 direct and through the
# gateway, each against the table's figures and the issue's tolerances (±15 %, ±0.2, < 1 ms).
#
#   cargo build --release && bash benches/spec_sweep.sh
#   env: SPEC_SWEEP_OUT (a fresh temp dir): where the bench_serving JSON lines and logs go;
#        SPEC_SWEEP_TIME_SCALE (1): the sims' --time-scale (0.5 halves the run, and the step times)
#
# Takes ~3 minutes in real time. Everything runs on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${SWITCHBOARD_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/switchboard}
OUT=${SPEC_SWEEP_OUT:-$(mktemp -d /tmp/switchboard-spec-sweep.XXXXXX)}
SCALE=${SPEC_SWEEP_TIME_SCALE:-1}
mkdir -p "$OUT"
[[ -x $SB ]] || { echo "spec_sweep: no $SB (cargo build --release)" >&2; exit 1; }
PY=$(bash "$ROOT/.ci/python-env.sh" | tail -n 1)

PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Starts "$@" in the background, logging to $log; prints the address it says it listens on.
start_listening() {
    local log=$1 i addr
    shift
    "$@" >"$log" 2>&1 &
    PIDS+=($!)
    for ((i = 0; i < 200; i++)); do
        addr=$(sed -n 's/.*listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$log" | head -1)
        [[ -n $addr ]] && { echo "$addr"; return 0; }
        sleep 0.1
    done
    echo "spec_sweep: $* never listened (see $log)" >&2
    return 1
}

wait_ok() { # url
    local i
    for ((i = 0; i < 300; i++)); do
        curl -sf -m 2 "$1" >/dev/null && return 0
        sleep 0.1
    done
    echo "spec_sweep: $1 never answered 200" >&2
    return 1
}

bench() { # base-url → one JSON line
    "$PY" "$ROOT/tests/python/bench_serving.py" --base-url "$1" --backend sglang \
        --dataset-name random-ids --num-prompts 16 --random-input-len 128 \
        --random-output-len 512 --random-range-ratio 1.0 --max-concurrency 8 2>>"$OUT/bench.log" |
        tail -n 1
}

GRID=("none" "3 1 4" "4 1 4" "5 1 4" "5 3 8" "6 4 12")
for point in "${GRID[@]}"; do
    spec=()
    if [[ $point != none ]]; then
        read -r steps topk draft <<<"$point"
        spec=(--speculative-algorithm EAGLE --speculative-num-steps "$steps"
            --speculative-eagle-topk "$topk" --speculative-num-draft-tokens "$draft")
    fi
    tag=${point// /-}
    sim=$(start_listening "$OUT/sim-$tag.log" "$SB" sim --port 0 --decode-base-us 14200 \
        --time-scale "$SCALE" "${spec[@]}")
    wait_ok "$sim/health"
    echo "spec_sweep: $point direct" >&2
    direct=$(bench "$sim")
    gw=$(start_listening "$OUT/gw-$tag.log" "$SB" serve --port 0 --log-level warn --worker-urls "$sim")
    wait_ok "$gw/readiness"
    echo "spec_sweep: $point through the gateway" >&2
    via=$(bench "$gw")
    printf '{"point": "%s", "direct": %s, "gateway": %s}\n' "$point" "$direct" "$via" >>"$OUT/results.jsonl"
    stop_all
done

"$PY" - "$OUT/results.jsonl" "$SCALE" <<'EOF'
import json, sys

# Issue 22's table: per-request tok/s, step ms, accept length, ITL p50, p99.
TABLE = {
    "none": (70.3, 14.2, None, 14.3, 14.6),
    "3 1 4": (108.1, 27.0, 2.92, 6.9, 41.9),
    "4 1 4": (116.5, 28.8, 3.35, 5.9, 53.2),
    "5 1 4": (122.0, 30.1, 3.67, 5.5, 46.8),
    "5 3 8": (116.7, 33.6, 3.92, 5.8, 49.6),
    "6 4 12": (108.8, 37.3, 4.06, 6.3, 53.2),
}
scale = float(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {r["point"]: r for r in rows}["none"]["direct"]
base_rate = 1000.0 / (base["mean_tpot_ms"] / scale)
print("| steps, topk, draft | tok/s (ratio) sim / table | step ms sim / table | accept length sim / table / gateway | ITL p50 / p99 ms direct | ITL p50 / p99 ms gateway | gateway adds to ITL p50 | within tolerance |")
print("|---|---|---|---|---|---|---|---|")
ok_all = True
for r in rows:
    p, d, g = r["point"], r["direct"], r["gateway"]
    t_rate, t_step, t_acc, _, _ = TABLE[p]
    tpot = d["mean_tpot_ms"] / scale  # the modelled GPU's time
    rate = 1000.0 / tpot
    acc = d["accept_length"] or 1.0
    step = acc * tpot
    ratio, t_ratio = rate / base_rate, t_rate / TABLE["none"][0]
    add = g["median_itl_ms"] - d["median_itl_ms"]
    checks = [abs(ratio / t_ratio - 1) <= 0.15, abs(step / t_step - 1) <= 0.15, add < 1.0]
    if t_acc is not None:
        checks.append(abs(acc - t_acc) <= 0.2)
        checks.append(g["accept_length"] is not None and abs(g["accept_length"] - acc) <= 0.01)
    ok = all(checks)
    ok_all &= ok
    acc_cell = "–" if t_acc is None else f"{acc:.2f} / {t_acc:.2f} / {g['accept_length']:.2f}"
    print(f"| {p} | {rate:.1f} ({ratio:.2f}) / {t_rate} ({t_ratio:.2f}) | {step:.1f} / {t_step} | {acc_cell} "
          f"| {d['median_itl_ms']:.1f} / {d['p99_itl_ms']:.1f} | {g['median_itl_ms']:.1f} / {g['p99_itl_ms']:.1f} "
          f"| {add:+.2f} | {'yes' if ok else 'NO'} |")
sys.exit(0 if ok_all else 1)
EOF
