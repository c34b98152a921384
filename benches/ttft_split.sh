#!/usr/bin/env bash
# Where a gateway's extra time to first token goes: one load run through the gateway, with the
# mean TTFT as three parties measure it over the same window. The sims' own
# (`sglang:time_to_first_token_seconds`, from a request's arrival at a worker to its first
# token) is the engine's queueing and prefill; the gateway's
# (`switchboard_time_to_first_token_seconds`, from its handler to the first token read back)
# minus the sims' is the gateway's own forwarding both ways (preparing, routing, writing the
# request, reading the first chunk, and waiting behind other streams' chunks on its thread);
# the client's minus the gateway's is what lies outside the handler (the client's socket,
# reading the request, writing the chunk out). `direct` runs the same load straight at the sims.
#
#   bash benches/ttft_split.sh [MODE] [SCENARIO]
#     MODE: direct, direct-rotating (each request to the next sim), or a policy (round_robin)
#     SCENARIO: a `load --scenario` preset (streams)
#   env: SPLIT_BIN (target/release/switchboard), SPLIT_LOAD (a `load` bench binary),
#        SPLIT_SECS (10), SPLIT_WARMUP (3), SPLIT_SERVE_ARGS (more `serve` flags), SPLIT_LOAD_ARGS (more load flags,
#        after the scenario's, e.g. `--concurrency 64`)
#
# The gateway and the sims are read when the load's warm-up ends (timed by this script, so to
# within a few milliseconds) and when the load has ended: the three means cover about the same
# requests, those still open at the end of the window aside (the client does not count them;
# the others may have timed their first token). With taskset and ≥ 2 cores: the gateway on
# core 0, the sims and the load generator on core 1, as in compare.sh.
set -euo pipefail

MODE=${1:-round_robin}
SCENARIO=${2:-streams}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${SPLIT_BIN:-$ROOT/target/release/switchboard}
SECS=${SPLIT_SECS:-10}
WARMUP=${SPLIT_WARMUP:-3}
[[ -x $SB ]] || { echo "ttft_split: no binary at $SB (cargo build --release)" >&2; exit 1; }
LOAD=${SPLIT_LOAD:-$(cd "$ROOT" && cargo bench --bench load --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[[ -x $LOAD ]] || { echo "ttft_split: cannot build the load bench" >&2; exit 1; }

PIN_GW=() PIN_SIM=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_GW=(taskset -c 0) PIN_SIM=(taskset -c 1)
fi
SIM_ARGS="$("$LOAD" --scenario "$SCENARIO" --print-sim-args) --enable-metrics"
# shellcheck source=common/sims.sh
source "$ROOT/benches/common/sims.sh"
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
start_sims

# "sum count" of a histogram over all its label sets.
scrape() { # url metric
    curl -s -m 5 "$1/metrics" |
        awk -v m="$2" 'index($1, m "_sum") == 1 { s += $2 } index($1, m "_count") == 1 { c += $2 }
            END { print s + 0, c + 0 }'
}
SIM_TTFT=sglang:time_to_first_token_seconds
GW_TTFT=switchboard_time_to_first_token_seconds
REPORT=$(mktemp /tmp/switchboard-ttft-split.XXXXXX)
# shellcheck disable=SC2206 # a list of flags
common=(--scenario "$SCENARIO" --warmup "$WARMUP" --secs "$SECS" --json "$REPORT"
    ${SPLIT_LOAD_ARGS:-})

sims_now() { for u in "${SIM_URLS[@]}"; do scrape "$u" $SIM_TTFT; done; }
# Runs the load in the background, reads `$@` (a function) when its warm-up ends and after it.
around_window() {
    "${PIN_SIM[@]}" "$LOAD" "${common[@]}" "${load_args[@]}" >/dev/null &
    local load=$!
    PIDS+=("$load")
    sleep "$WARMUP"
    before=$("$@")
    wait "$load"
    after=$("$@")
}
gw_before="0 0" gw_after="0 0"
case $MODE in
direct | direct-rotating)
    load_args=(--skip-gateway --direct-urls "${SIM_URLS[@]}")
    [[ $MODE == direct-rotating ]] && load_args+=(--direct-rotate)
    around_window sims_now
    sims_before=$before sims_after=$after
    ;;
*)
    port=$(free_port)
    # shellcheck disable=SC2086 # a list of flags
    "${PIN_GW[@]}" "$SB" serve --host 127.0.0.1 --port "$port" --policy "$MODE" \
        --log-level warn ${SPLIT_SERVE_ARGS:-} --worker-urls "${SIM_URLS[@]}" >/dev/null 2>&1 &
    PIDS+=($!)
    gw=http://127.0.0.1:$port
    for ((i = 0; i < 100; i++)); do
        curl -s -o /dev/null -m 2 "$gw/readiness" && break
        sleep 0.2
    done
    both_now() { scrape "$gw" $GW_TTFT && sims_now; }
    load_args=(--skip-direct --target "$gw")
    around_window both_now
    gw_before=$(head -1 <<<"$before") gw_after=$(head -1 <<<"$after")
    sims_before=$(tail -n +2 <<<"$before") sims_after=$(tail -n +2 <<<"$after")
    ;;
esac

python3 - "$REPORT" "$MODE" "$sims_before" "$sims_after" "$gw_before" "$gw_after" <<'EOF'
import json, sys
report, mode = json.load(open(sys.argv[1])), sys.argv[2]
def total(text):
    rows = [tuple(map(float, line.split())) for line in text.splitlines() if line.strip()]
    return sum(r[0] for r in rows), sum(r[1] for r in rows)
def mean_ms(before, after):
    (s0, c0), (s1, c1) = total(before), total(after)
    return (s1 - s0) / (c1 - c0) * 1000 if c1 > c0 else None
phase = report["phases"][0]
client, sims, gw = phase["ttft_ms"]["mean"], mean_ms(*sys.argv[3:5]), mean_ms(*sys.argv[5:7])
print(f"{mode}: {phase['requests_per_s']:.0f} req/s, client TTFT p50 / p99 "
      f"{phase['ttft_ms']['p50']:.2f} / {phase['ttft_ms']['p99']:.2f} ms")
print(f"mean TTFT: client {client:.2f} ms, sims {sims:.2f} ms", end="")
if gw is not None:
    print(f", gateway {gw:.2f} ms: gateway − sims {gw - sims:.2f} ms, client − gateway "
          f"{client - gw:.2f} ms")
else:
    print(f": client − sims {client - sims:.2f} ms")
EOF
rm -f "$REPORT"
