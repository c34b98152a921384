#!/usr/bin/env bash
# The gateway under one of the load bench's scenarios, seen by `perf`: where its CPU time goes
# (kernel included, which callgrind.sh cannot count) or how many system calls a request or a
# stream costs. Two simulated workers with the scenario's engine knobs; the gateway pinned to
# core 0, the sims and the load generator to core 1 (with taskset and >= 2 cores); perf attaches
# to the gateway alone once the load has warmed up.
#
#   bash benches/perf.sh SCENARIO [POLICY] [MODE]
#     SCENARIO: a `load --scenario` preset (streams, streams-steady, nonstream, longprompt, ...)
#     POLICY: prefix_cost (default), round_robin, ...
#     MODE: profile (default): `perf record` at 9,999 Hz, then the samples by binary and the
#             top symbols; syscalls: `perf stat` of every syscall tracepoint, then the calls a
#             request (a stream, for streaming scenarios) and the commonest
#   env: PERF_SECS (8): how long perf watches; PERF_OUT (a temp file): perf's output
#        PERF_CALL_GRAPH (none): `--call-graph` for profile mode, e.g. dwarf,16384
#        PERF_FREQ (9999): samples a second in profile mode (fewer for long dwarf recordings)
#        PERF_LOAD_ARGS (none): load-generator flags after the scenario's, e.g. --concurrency 128
#        PERF_SERVE_ARGS (none): more `serve` flags; PERF_BIN: the `switchboard` binary
#        PERF_LOAD (a `load` bench binary, default: `cargo bench --bench load --no-run`'s)
set -euo pipefail

SCENARIO=${1:?usage: perf.sh SCENARIO [POLICY] [profile|syscalls]}
POLICY=${2:-prefix_cost}
MODE=${3:-profile}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${PERF_BIN:-$ROOT/target/release/switchboard}
SECS=${PERF_SECS:-8}
OUT=${PERF_OUT:-$(mktemp /tmp/switchboard-perf.XXXXXX)}
command -v perf >/dev/null || { echo "perf.sh: needs perf" >&2; exit 1; }
[[ -x $SB ]] || { echo "perf.sh: no binary at $SB (cargo build --release)" >&2; exit 1; }
[[ $MODE == profile || $MODE == syscalls ]] || { echo "perf.sh: unknown mode $MODE" >&2; exit 1; }

LOAD=${PERF_LOAD:-$(cd "$ROOT" && cargo bench --bench load --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[[ -x $LOAD ]] || { echo "perf.sh: cannot build the load bench" >&2; exit 1; }
SIM_ARGS=$("$LOAD" --scenario "$SCENARIO" --print-sim-args)

PIN_GW=() PIN_SIM=() PIN_FLAG=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_GW=(taskset -c 0) PIN_SIM=(taskset -c 1) PIN_FLAG=(--pin)
fi
# shellcheck source=common/sims.sh
source "$ROOT/benches/common/sims.sh"

PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

start_sims
GW_PORT=$(free_port)
# shellcheck disable=SC2086 # PERF_SERVE_ARGS is a list of flags
"${PIN_GW[@]}" "$SB" serve --host 127.0.0.1 --port "$GW_PORT" --policy "$POLICY" --log-level warn \
    ${PERF_SERVE_ARGS:-} --worker-urls "${SIM_URLS[@]}" >/dev/null 2>&1 &
GW=$!
PIDS+=("$GW")
GATEWAY=http://127.0.0.1:$GW_PORT
for ((i = 0; i < 600; i++)); do
    curl -s -o /dev/null -m 2 "$GATEWAY/readiness" && break
    sleep 0.2
done

# The load runs 2 s before perf attaches and 2 s after it detaches, so perf sees only load.
REPORT=$(mktemp /tmp/switchboard-perf-load.XXXXXX)
# shellcheck disable=SC2086 # PERF_LOAD_ARGS is a list of flags
"$LOAD" --scenario "$SCENARIO" ${PERF_LOAD_ARGS:-} "${PIN_FLAG[@]}" --skip-direct --warmup 2 \
    --secs $((SECS + 2)) --target "$GATEWAY" --target-pid "$GW" --label "$POLICY" >"$REPORT" 2>&1 &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
sleep 2
if [[ $MODE == profile ]]; then
    # shellcheck disable=SC2086 # PERF_CALL_GRAPH's flag is added only when set
    perf record -F "${PERF_FREQ:-9999}" ${PERF_CALL_GRAPH:+--call-graph $PERF_CALL_GRAPH} \
        -p "$GW" -o "$OUT" -- sleep "$SECS" 2>/dev/null
else
    perf stat -e 'syscalls:sys_enter_*' -x, -p "$GW" -o "$OUT" -- sleep "$SECS"
fi
wait "$LOAD_PID" || true

rate() { awk -v key="$1" 'index($0, key) == 1 { print $NF; exit }' "$REPORT"; }
per_s=$(rate "requests/s")
[[ -n $per_s ]] || { echo "perf.sh: the load did not run:" >&2; cat "$REPORT" >&2; exit 1; }
echo "perf.sh: $SCENARIO, policy $POLICY, $SB, $per_s requests/s"
if [[ $MODE == profile ]]; then
    perf report -i "$OUT" --no-children --sort dso 2>/dev/null | grep -E '^ +[0-9]' | head -6
    echo "top symbols:"
    perf report -i "$OUT" --no-children --sort sym 2>/dev/null | grep -E '^ +[0-9]' | head -25 |
        cut -c1-140
    echo "profile: $OUT (perf report -i $OUT)"
else
    # perf stat -x, lines: count,,event,...
    python3 - "$OUT" "$per_s" "$SECS" <<'PY'
import sys
path, per_s, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
calls = {}
for line in open(path):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[0].isdigit():
        calls[parts[2].removeprefix("syscalls:sys_enter_")] = int(parts[0])
units = per_s * secs
print(f"system calls a request: {sum(calls.values()) / units:.1f}")
for name, n in sorted(calls.items(), key=lambda kv: -kv[1])[:6]:
    if n / units >= 0.05:
        print(f"  {name:<16} {n / units:.1f}")
PY
fi
