#!/usr/bin/env bash
# Same load, same two simulated workers, through: the direct path (each client keeping one
# worker; `direct-rotating`, not in the default list: each request to the next worker in turn),
# Switchboard (prefix_cost, round_robin), SMG 1.13.0 (cache_aware, round_robin) and vLLM router
# 0.1.17 (round_robin, cache_aware). Systems alternate inside each repetition so slow drifts of
# the machine hit all of them alike; every run gets fresh workers and a fresh gateway on fresh
# ports (SMG keeps its port for ~5 s after exit). Prints medians and min–max spreads as a
# markdown table.
#
#   bash benches/compare.sh [SCENARIO] [REPS]     SCENARIO: a `load --scenario` preset (nonstream)
#   env: COMPARE_SECS (5), COMPARE_WARMUP (2), COMPARE_SYSTEMS (all, space-separated names),
#        COMPARE_OUT (a fresh temp dir): where the per-run JSON files go,
#        COMPARE_BASELINE (a `switchboard` binary): serves the `baseline-<policy>` systems (name them
#        in COMPARE_SYSTEMS), to compare a change with the build before it in one run
#        COMPARE_BIN (a `switchboard` binary, default target/release/switchboard): runs every
#        run's sims and the `switchboard-<policy>` systems, e.g. a quicker build without LTO
#        COMPARE_LOAD (a `load` bench binary, default: `cargo bench --bench load --no-run`'s):
#        the load generator, e.g. one already built, so that comparing two builds of a changed
#        tree does not rebuild it
#        COMPARE_LOAD_ARGS (none): load-generator flags after the scenario's, which they override,
#        e.g. `--rate 350` (an open loop: every system gets the same arrivals)
#        COMPARE_SWITCHBOARD_ARGS (none): more `serve` flags for the `switchboard-<policy>` systems
#        (not `baseline-`), e.g. `--whole-answers at-once` against the same binary's default
#
# With taskset and ≥ 2 cores: gateways on core 0; workers and the load generator on core 1.
set -euo pipefail

SCENARIO=${1:-nonstream}
REPS=${2:-3}
SECS=${COMPARE_SECS:-5}
WARMUP=${COMPARE_WARMUP:-2}
LOAD_ARGS=${COMPARE_LOAD_ARGS:-}
MODEL=smollm2-135m-instruct
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/compare-venv
OUT=${COMPARE_OUT:-$(mktemp -d /tmp/switchboard-compare.XXXXXX)}
mkdir -p "$OUT"
ALL="direct switchboard-prefix_cost switchboard-round_robin smg-cache_aware smg-round_robin vllm-round_robin vllm-cache_aware"
SYSTEMS=${COMPARE_SYSTEMS:-$ALL}

# Every process started here is recorded and stopped on any exit (including Ctrl-C and errors).
PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# --- peers, installed once into a cached virtualenv -------------------------------------------
stamp="$VENV/.smg-1.13.0-vllm-router-0.1.17"
if [[ ! -f $stamp ]]; then
    echo "compare: installing smg 1.13.0 and vllm-router 0.1.17 into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q smg==1.13.0 vllm-router==0.1.17
    touch "$stamp"
fi

# --- our binaries --------------------------------------------------------------------------------
cd "$ROOT"
LOAD=${COMPARE_LOAD:-$(cargo bench --bench load --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[[ -x $LOAD ]] || { echo "compare: cannot build the load bench" >&2; exit 1; }
SB=${COMPARE_BIN:-$ROOT/target/release/switchboard}
# shellcheck source=common/sims.sh
source "$ROOT/benches/common/sims.sh"
SIM_ARGS=$("$LOAD" --scenario "$SCENARIO" --print-sim-args)

PIN_GW=() PIN_SIM=() PIN_FLAG=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_GW=(taskset -c 0) PIN_SIM=(taskset -c 1) PIN_FLAG=(--pin)
fi

# Waits (bounded) until a chat request through $1 answers 200: registered, healthy, routable.
wait_routable() {
    local url=$1 i
    for ((i = 0; i < 300; i++)); do
        if [[ $(curl -s -o /dev/null -w '%{http_code}' -m 2 "$url/v1/chat/completions" \
            -H 'content-type: application/json' \
            -d "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}") == 200 ]]; then
            return 0
        fi
        sleep 0.2
    done
    echo "compare: $url never became routable" >&2
    return 1
}

# PID of the process listening on 127.0.0.1:$1 (a launcher may run the router in a child).
listener_pid() {
    ss -ltnpH "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

start_system() { # name port → starts the gateway in the background
    local name=$1 port=$2 policy=${1#*-}
    case $name in
    switchboard-* | baseline-*)
        local bin=$SB extra=()
        [[ $name == baseline-* ]] && bin=${COMPARE_BASELINE:?set COMPARE_BASELINE to a switchboard binary}
        # shellcheck disable=SC2206 # a list of flags
        [[ $name == switchboard-* ]] && extra=(${COMPARE_SWITCHBOARD_ARGS:-})
        "${PIN_GW[@]}" "$bin" serve --host 127.0.0.1 --port "$port" --policy "$policy" \
            --log-level warn "${extra[@]}" --worker-urls "${SIM_URLS[@]}" >/dev/null 2>&1 &
        ;;
    smg-*)
        "${PIN_GW[@]}" "$VENV/bin/smg" launch --host 127.0.0.1 --port "$port" \
            --worker-urls "${SIM_URLS[@]}" --policy "$policy" --log-level warn \
            --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" >/dev/null 2>&1 &
        ;;
    vllm-*)
        "${PIN_GW[@]}" "$VENV/bin/vllm-router" --host 127.0.0.1 --port "$port" \
            --worker-urls "${SIM_URLS[@]}" --policy "$policy" --log-level warning \
            --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" >/dev/null 2>&1 &
        ;;
    *) echo "compare: unknown system $name" >&2; return 1 ;;
    esac
    PIDS+=($!)
}

run_one() { # name rep
    local name=$1 rep=$2 port pid
    local common=(--scenario "$SCENARIO" --warmup "$WARMUP" --secs "$SECS" "${PIN_FLAG[@]}"
        --json "$OUT/$name.$rep.json" $LOAD_ARGS)
    start_sims
    if [[ $name == direct || $name == direct-rotating ]]; then
        local rotate=()
        [[ $name == direct-rotating ]] && rotate=(--direct-rotate)
        "$LOAD" "${common[@]}" "${rotate[@]}" --skip-gateway --direct-urls "${SIM_URLS[@]}" \
            >"$OUT/$name.$rep.txt"
    else
        port=$(free_port)
        start_system "$name" "$port"
        wait_routable "http://127.0.0.1:$port"
        pid=$(listener_pid "$port")
        "$LOAD" "${common[@]}" --skip-direct --target "http://127.0.0.1:$port" \
            --target-pid "$pid" --label "$name" >"$OUT/$name.$rep.txt"
    fi
    stop_all
}

echo "compare: scenario $SCENARIO, $REPS repetitions × {$SYSTEMS}, ${WARMUP}+${SECS} s each; results in $OUT" >&2
for ((rep = 1; rep <= REPS; rep++)); do
    for name in $SYSTEMS; do
        echo "compare: rep $rep $name" >&2
        run_one "$name" "$rep"
    done
done

python3 - "$OUT" "$SCENARIO" $SYSTEMS <<'EOF'
import json, pathlib, statistics, sys
out, scenario, systems = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
cols = [("req/s", "requests_per_s", 0), ("chunks/s", "chunks_per_s", 0),
        ("TTFT p50 ms", ("ttft_ms", "p50"), 2), ("TTFT p99 ms", ("ttft_ms", "p99"), 2),
        ("ITL p99 ms", ("itl_ms", "p99"), 2), ("E2E p50 ms", ("e2e_ms", "p50"), 2),
        ("E2E p99 ms", ("e2e_ms", "p99"), 2), ("CPU µs/req", "server_cpu_us_per_request", 0),
        ("of it kernel µs", "server_kernel_cpu_us_per_request", 0), ("RSS MiB", "server_rss_kib", 1),
        ("errors", "errors", 0)]
def get(phase, key):
    v = phase
    for k in (key if isinstance(key, tuple) else (key,)):
        v = v.get(k) if isinstance(v, dict) else None
    if v is not None and key == "server_rss_kib":
        v /= 1024
    return v
print(f"scenario `{scenario}`: median (min–max) over repetitions\n")
print("| system | " + " | ".join(c[0] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for s in systems:
    runs = [json.loads(p.read_text())["phases"][0] for p in sorted(out.glob(f"{s}.*.json"))]
    cells = []
    for _, key, d in cols:
        vals = [v for v in (get(r, key) for r in runs) if v is not None]
        cells.append("-" if not vals else
                     f"{statistics.median(vals):,.{d}f} ({min(vals):,.{d}f}–{max(vals):,.{d}f})")
    print(f"| {s} ({len(runs)}) | " + " | ".join(cells) + " |")
EOF
