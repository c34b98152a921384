#!/usr/bin/env bash
# Prints the path of Arize Phoenix's `phoenix` command (an OTLP trace receiver operators run),
# installed in a cached venv of its own: tests/it/traces.rs sends the gateway's traces to it.
# The venv is keyed by this script's hash, so a changed pin gets a fresh one.
#   SWITCHBOARD_PHOENIX=$(bash .ci/phoenix-env.sh | tail -n 1) cargo test --test it traces::
set -euo pipefail
pin="arize-phoenix==20.26.1"
base_python=${PYTHON:-python3}
hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
venv="${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/phoenix-$hash"
# The marker is written last, so an interrupted install is redone, not trusted.
if [[ ! -f "$venv/.complete" ]]; then
    echo "phoenix-env: creating $venv" >&2
    start=$SECONDS
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pin" >&2
    "$venv/bin/phoenix" --help > /dev/null
    touch "$venv/.complete"
    echo "phoenix-env: ready in $((SECONDS - start)) s" >&2
else
    echo "phoenix-env: cached $venv" >&2
fi
echo "$venv/bin/phoenix"
