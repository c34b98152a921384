#!/usr/bin/env bash
# gRPC workers side by side (issue 17, acceptance 3): the same load through the direct path
# (HTTP sims), Switchboard in front of HTTP sims, Switchboard in front of the same sims in
# `--grpc-mode`, and SMG 1.13.0 in front of the gRPC sims. Systems alternate inside each
# repetition so a drift of the machine (other builds) hits all of them alike; every run gets
# fresh sims and a fresh gateway. Every gateway uses round_robin, so routing costs the same.
# Prints medians and min–max spreads, and each system's CPU as a ratio to Switchboard gRPC's
# from the same repetition.
#
#   bash benches/grpc_compare.sh [SCENARIO] [REPS]   SCENARIO: nonstream (default) or streams
#   env: COMPARE_SECS (5), COMPARE_WARMUP (2), COMPARE_SYSTEMS, COMPARE_OUT, COMPARE_LOAD (a
#   built load bench executable; default: build it)
#
# With taskset and ≥ 2 cores: gateways on core 0; sims and the load generator on core 1.
set -euo pipefail

SCENARIO=${1:-nonstream}
REPS=${2:-3}
SECS=${COMPARE_SECS:-5}
WARMUP=${COMPARE_WARMUP:-2}
MODEL=smollm2-135m-instruct
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/smg-1.13.0-venv
OUT=${COMPARE_OUT:-$(mktemp -d /tmp/switchboard-grpc-compare.XXXXXX)}
mkdir -p "$OUT"
# shellcheck source=benches/smg_model.sh
source "$ROOT/benches/smg_model.sh"
TOKENIZER=$(smg_model_dir "$OUT/model") # the sims and SMG read one model folder
SYSTEMS=${COMPARE_SYSTEMS:-"direct switchboard-http switchboard-grpc smg-grpc"}

PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

if [[ ! -x $VENV/bin/smg ]]; then
    echo "grpc_compare: installing smg 1.13.0 into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q smg==1.13.0
fi

cd "$ROOT"
LOAD=${COMPARE_LOAD:-$(cargo bench --bench load --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)}
[[ -x $LOAD ]] || { echo "grpc_compare: cannot build the load bench" >&2; exit 1; }
SB=$ROOT/target/release/switchboard
[[ -x $SB ]] || { echo "grpc_compare: build the release binary first" >&2; exit 1; }
SIM_ARGS=$("$LOAD" --scenario "$SCENARIO" --print-sim-args)

PIN_GW=() PIN_SIM=() PIN_FLAG=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_GW=(taskset -c 0) PIN_SIM=(taskset -c 1) PIN_FLAG=(--pin)
fi

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

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
    echo "grpc_compare: $url never became routable" >&2
    return 1
}

listener_pid() {
    ss -ltnpH "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

start_sims() { # http|grpc → SIM_URLS
    local mode=$1 i port side
    SIM_URLS=()
    for i in 1 2; do
        port=$(free_port)
        if [[ $mode == grpc ]]; then
            side=$(free_port)
            # shellcheck disable=SC2086 # SIM_ARGS is a list of flags
            "${PIN_SIM[@]}" "$SB" sim --grpc-mode --host 127.0.0.1 --port "$port" \
                --metrics-port "$side" --tokenizer-path "$TOKENIZER" $SIM_ARGS >/dev/null 2>&1 &
            PIDS+=($!)
            SIM_URLS+=("grpc://127.0.0.1:$port")
            for ((j = 0; j < 100; j++)); do
                curl -sf -m 1 "http://127.0.0.1:$side/health" >/dev/null && break
                sleep 0.1
            done
        else
            # shellcheck disable=SC2086
            "${PIN_SIM[@]}" "$SB" sim --host 127.0.0.1 --port "$port" \
                --tokenizer-path "$TOKENIZER" $SIM_ARGS >/dev/null 2>&1 &
            PIDS+=($!)
            SIM_URLS+=("http://127.0.0.1:$port")
            for ((j = 0; j < 100; j++)); do
                curl -sf -m 1 "http://127.0.0.1:$port/health" >/dev/null && break
                sleep 0.1
            done
        fi
    done
}

start_system() { # name port
    case $1 in
    switchboard-*)
        "${PIN_GW[@]}" "$SB" serve --host 127.0.0.1 --port "$2" --policy round_robin \
            --log-level warn --worker-urls "${SIM_URLS[@]}" >/dev/null 2>&1 &
        ;;
    smg-grpc)
        "${PIN_GW[@]}" "$VENV/bin/smg" launch --host 127.0.0.1 --port "$2" \
            --worker-urls "${SIM_URLS[@]}" --tokenizer-path "$TOKENIZER" --policy round_robin \
            --log-level warn --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" \
            >/dev/null 2>&1 &
        ;;
    *) echo "grpc_compare: unknown system $1" >&2; return 1 ;;
    esac
    PIDS+=($!)
}

run_one() { # name rep
    local name=$1 rep=$2 port pid
    local common=(--scenario "$SCENARIO" --warmup "$WARMUP" --secs "$SECS" "${PIN_FLAG[@]}"
        --json "$OUT/$name.$rep.json")
    case $name in
    *-grpc) start_sims grpc ;;
    *) start_sims http ;;
    esac
    if [[ $name == direct ]]; then
        "$LOAD" "${common[@]}" --skip-gateway --direct-urls "${SIM_URLS[@]}" >"$OUT/$name.$rep.txt"
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

echo "grpc_compare: scenario $SCENARIO, $REPS × {$SYSTEMS}, ${WARMUP}+${SECS} s; load $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT" >&2
for ((rep = 1; rep <= REPS; rep++)); do
    for name in $SYSTEMS; do
        echo "grpc_compare: rep $rep $name" >&2
        run_one "$name" "$rep"
    done
done
echo "grpc_compare: done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$OUT" "$SCENARIO" $SYSTEMS <<'EOF'
import json, pathlib, statistics, sys
out, scenario, systems = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
def phase(p):
    return json.loads(p.read_text())["phases"][0]
runs = {s: {p.name.split(".")[1]: phase(p) for p in out.glob(f"{s}.*.json")} for s in systems}
def pct(r, k, q):
    return (r.get(k) or {}).get(q)
cols = [("req/s", lambda r: r.get("requests_per_s"), 0),
        ("CPU µs/req", lambda r: r.get("server_cpu_us_per_request"), 0),
        ("TTFT p99 ms", lambda r: pct(r, "ttft_ms", "p99"), 2),
        ("ITL p99 ms", lambda r: pct(r, "itl_ms", "p99"), 2),
        ("E2E p99 ms", lambda r: pct(r, "e2e_ms", "p99"), 2),
        ("errors", lambda r: r.get("errors"), 0)]
def med(vals, d):
    vals = [v for v in vals if v is not None]
    return "-" if not vals else f"{statistics.median(vals):,.{d}f} ({min(vals):,.{d}f}–{max(vals):,.{d}f})"
print(f"scenario `{scenario}`: median (min–max) over repetitions\n")
print("| system | " + " | ".join(c[0] for c in cols) + " | CPU ÷ Switchboard gRPC (same rep) |")
print("|---" * (len(cols) + 2) + "|")
base = runs.get("switchboard-grpc", {})
for s in systems:
    rs = runs[s]
    cells = [med([f(r) for r in rs.values()], d) for _, f, d in cols]
    ratios = [r["server_cpu_us_per_request"] / base[k]["server_cpu_us_per_request"]
              for k, r in rs.items() if k in base and r.get("server_cpu_us_per_request")
              and base[k].get("server_cpu_us_per_request")]
    cells.append(med(ratios, 2))
    print(f"| {s} ({len(rs)}) | " + " | ".join(cells) + " |")
direct = runs.get("direct", {})
if direct:
    print("\nadded to the direct path (median of the differences, ms):\n")
    print("| system | TTFT p99 | ITL p99 |")
    print("|---|---|---|")
    for s in systems:
        if s == "direct":
            continue
        row = []
        for k, q in (("ttft_ms", "p99"), ("itl_ms", "p99")):
            d = [pct(r, k, q) - pct(direct[n], k, q) for n, r in runs[s].items()
                 if n in direct and pct(r, k, q) is not None and pct(direct[n], k, q) is not None]
            row.append("-" if not d else f"{statistics.median(d):+.2f}")
        print(f"| {s} | " + " | ".join(row) + " |")
EOF
