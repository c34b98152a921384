#!/usr/bin/env bash
# Prints the path of a python that has tests/python/requirements.txt plus
# sglang 0.5.9 (for bench_serving) installed. The venv is keyed by the hash of
# requirements.txt and this script, so a changed pin gets a fresh venv and a
# cached one costs nothing. Progress goes to stderr; the python path is the
# last line of stdout.
#   SWITCHBOARD_PYTHON=$(bash .ci/python-env.sh | tail -1) cargo test --test it python_clients::
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
req="$root/tests/python/requirements.txt"
# Installed separately with --no-deps: its declared deps pull in torch, and
# bench_serving needs none of it.
sglang_pin="sglang==0.5.9"
base_python=${PYTHON:-python3}

hash=$(cat "$req" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
venv="${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/venv-$hash"

# The marker is written last, so an interrupted install is redone, not trusted.
if [[ ! -f "$venv/.complete" ]]; then
    echo "python-env: creating $venv" >&2
    start=$SECONDS
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$sglang_pin" >&2
    # Fail here, not in a test, if bench_serving cannot import offline.
    HF_HUB_OFFLINE=1 "$venv/bin/python" -c 'import openai, anthropic, sglang.bench_serving, sglang.srt.function_call.function_call_parser' >&2
    touch "$venv/.complete"
    echo "python-env: ready in $((SECONDS - start)) s" >&2
else
    echo "python-env: cached $venv" >&2
fi
echo "$venv/bin/python"
