#!/usr/bin/env bash
# The simulator's gRPC mode read by SGLang's own gateway (issue 17, acceptance 1): SMG 1.13.0 in
# front of `switchboard sim --grpc-mode` (`smg launch --worker-urls grpc://…`) runs SGLang's
# bench_serving, `sglang-oai-chat`, 200 prompts; tests/python/bench_serving.py exits non-zero on
# any failed request or when the retokenized output count differs from the generated one.
#
#   bash benches/smg_grpc_check.sh        (needs python3 with venv; SMG goes into a cached venv)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/smg-1.13.0-venv
# shellcheck source=benches/smg_model.sh
source "$ROOT/benches/smg_model.sh"
MODEL_DIR=$(mktemp -d)
TOKENIZER=$(smg_model_dir "$MODEL_DIR")

PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap 'stop_all; rm -rf "$MODEL_DIR"' EXIT
trap 'exit 130' INT TERM

if [[ ! -x $VENV/bin/smg ]]; then
    echo "smg_grpc_check: installing smg 1.13.0 into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q smg==1.13.0
fi
cd "$ROOT"
PY=$(bash .ci/python-env.sh | tail -n 1)
cargo build -q
SB=$ROOT/target/debug/switchboard

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

SIM_OUT=$(mktemp)
# The tokenizer's path is what the sim reports in GetModelInfo; SMG loads its tokenizer from it.
"$SB" sim --grpc-mode --port 0 --time-scale 0.1 --tokenizer-path "$TOKENIZER" >"$SIM_OUT" 2>/dev/null &
PIDS+=($!)
for ((i = 0; i < 100; i++)); do
    grep -q 'listening on grpc://' "$SIM_OUT" && break
    sleep 0.1
done
WORKER=$(grep -o 'grpc://[0-9.:]*' "$SIM_OUT")
PORT=$(free_port)
"$VENV/bin/smg" launch --host 127.0.0.1 --port "$PORT" --worker-urls "$WORKER" \
    --tokenizer-path "$TOKENIZER" --log-level warn \
    --prometheus-host 127.0.0.1 --prometheus-port "$(free_port)" >/dev/null 2>&1 &
PIDS+=($!)
for ((i = 0; i < 300; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$PORT/v1/chat/completions" \
        -H 'content-type: application/json' \
        -d '{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":1}' || true)
    [[ $code == 200 ]] && break
    sleep 0.2
done
echo "smg_grpc_check: SMG on :$PORT in front of $WORKER" >&2
"$PY" tests/python/bench_serving.py --base-url "http://127.0.0.1:$PORT" --backend sglang-oai-chat \
    --dataset-name random-ids --num-prompts 200 --random-input-len 128 --random-output-len 32 \
    --max-concurrency 32 | tail -n 1
