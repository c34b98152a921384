#!/usr/bin/env bash
# The gateway's instructions for the same load, counted by callgrind: repeatable where CPU time
# on a shared machine moves by ±10 % (kernel time is not in them). Two simulated workers; the
# gateway alone under valgrind, counting from after a warm-up; prints the gateway's instructions
# in all and per request (nonstream, longprompt, longprompt-wide) or per client chunk (streams).
#
#   bash benches/callgrind.sh SCENARIO [BINARY] [POLICY]
#     SCENARIO: streams   16 chat streams of 64 tokens; sims: 20 ms to the first token, 40 ms
#                         per token (slow enough that the gateway under valgrind keeps up)
#               nonstream 16 clients, non-streaming chat of 16 tokens, zero-latency sims
#               longprompt 16 chat streams of 16 tokens, each a unique ~2,000-word prompt;
#                         sims as for streams
#               longprompt-wide  the same, its words drawn from 20,000 instead of 32
#     BINARY: a `switchboard` binary (default target/release/switchboard); POLICY: prefix_cost
#   env: CALLGRIND_OUT (a temp file): the callgrind profile, for `callgrind_annotate`
#        CALLGRIND_SECS (20), CALLGRIND_WARMUP (5)
#        CALLGRIND_SERVE_ARGS (none): more `serve` flags, e.g. `--whole-answers at-once`
#        CALLGRIND_LOAD (a `load` bench binary, default: `cargo bench --bench load --no-run`'s)
#
# Compare two builds by running this for each back to back: the counts per unit move by a few
# per cent between runs of one binary (how much one wake-up finds depends on timing).
set -euo pipefail

SCENARIO=${1:?usage: callgrind.sh streams|nonstream|longprompt[-wide] [BINARY] [POLICY]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${2:-$ROOT/target/release/switchboard}
POLICY=${3:-prefix_cost}
SECS=${CALLGRIND_SECS:-20}
WARMUP=${CALLGRIND_WARMUP:-5}
OUT=${CALLGRIND_OUT:-$(mktemp /tmp/switchboard-callgrind.XXXXXX)}
command -v valgrind >/dev/null || { echo "callgrind: needs valgrind" >&2; exit 1; }
[[ -x $SB ]] || { echo "callgrind: no binary at $SB (cargo build --release)" >&2; exit 1; }

case $SCENARIO in
streams)
    SIM_ARGS="--prefill-base-us 20000 --decode-base-us 40000"
    LOAD_ARGS=(--api chat --stream --concurrency 16 --max-tokens 64)
    ;;
longprompt)
    SIM_ARGS="--prefill-base-us 20000 --decode-base-us 40000"
    LOAD_ARGS=(--api chat --stream --concurrency 16 --max-tokens 16 --prompt-words 2000)
    ;;
longprompt-wide)
    SIM_ARGS="--prefill-base-us 20000 --decode-base-us 40000"
    LOAD_ARGS=(--api chat --stream --concurrency 16 --max-tokens 16 --prompt-words 2000
        --vocabulary 20000)
    ;;
nonstream)
    SIM_ARGS="--prefill-base-us 0 --decode-base-us 0"
    LOAD_ARGS=(--api chat --concurrency 16 --max-tokens 16)
    ;;
*) echo "callgrind: unknown scenario $SCENARIO" >&2; exit 1 ;;
esac
SIM_ARGS+=" --prefill-per-token-us 0 --prefill-attn-ns 0 --decode-batch-knee 1024"
SIM_ARGS+=" --decode-per-seq-us 0 --decode-per-1k-ctx-us 0"

LOAD=${CALLGRIND_LOAD:-$(cd "$ROOT" && cargo bench --bench load --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[[ -x $LOAD ]] || { echo "callgrind: cannot build the load bench" >&2; exit 1; }

PIN_GW=() PIN_SIM=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_GW=(taskset -c 0) PIN_SIM=(taskset -c 1)
fi
# shellcheck source=common/sims.sh
source "$ROOT/benches/common/sims.sh"

PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

start_sims
GW_PORT=$(free_port)
"${PIN_GW[@]}" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT" \
    "$SB" serve --host 127.0.0.1 --port "$GW_PORT" --policy "$POLICY" --log-level warn \
    ${CALLGRIND_SERVE_ARGS:-} --worker-urls "${SIM_URLS[@]}" >/dev/null 2>&1 &
GW=$!
PIDS+=("$GW")
GATEWAY=http://127.0.0.1:$GW_PORT
for ((i = 0; i < 600; i++)); do
    curl -s -o /dev/null -m 2 "$GATEWAY/readiness" && break
    sleep 0.2
done
sleep 1

run_load() { # secs label
    "${PIN_SIM[@]}" "$LOAD" "${LOAD_ARGS[@]}" --warmup 0 --secs "$1" --skip-direct \
        --target "$GATEWAY" --label "$2"
}
run_load "$WARMUP" warmup >/dev/null 2>&1
callgrind_control -i on "$GW" >/dev/null
report=$(run_load "$SECS" counted 2>&1)
callgrind_control -i off "$GW" >/dev/null
kill -INT "$GW"
wait "$GW" 2>/dev/null || true

total=$(callgrind_annotate "$OUT" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
rate() { echo "$report" | awk -v key="$1" 'index($0, key) == 1 { print $NF; exit }'; }
if [[ $SCENARIO == streams ]]; then
    unit="client chunk" per_s=$(rate "output chunks/s")
else
    unit="request" per_s=$(rate "requests/s")
fi
units=$(python3 -c "print(round($per_s * $SECS))")
echo "callgrind: $SCENARIO, policy $POLICY, $SB"
echo "gateway instructions: $total over $units ${unit}s ($SECS s counted)"
python3 -c "print(f'per $unit: {$total / $units / 1000:.1f} K instructions')"
echo "profile: $OUT"
