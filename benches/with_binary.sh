#!/usr/bin/env bash
# The load benchmark against a gateway built elsewhere (an older commit, say), for before/after
# figures: two sims and the gateway from BINARY on 127.0.0.1, then `benches/load.rs --target`.
#   bash benches/with_binary.sh BINARY LABEL [load bench flags...]
#   bash benches/with_binary.sh /tmp/switchboard-73c1759 before --scenario bigprompts
# Every process it starts is stopped on exit.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,5p' "$0"; exit 2; }
bin=$(realpath "$1"); label=$2; shift 2
cd "$(dirname "${BASH_SOURCE[0]}")/.."
load=$(cargo bench --bench load --no-run 2>&1 | sed -n 's/.*Executable benches\/load.rs (\(.*\))/\1/p')
[ -x "$load" ] || { echo "with_binary: could not build the load bench" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
# start NAME ARGS...: runs BINARY ARGS --port 0 and prints the address it reports.
start() {
  local name=$1; shift
  "$bin" "$@" --port 0 > "$dir/$name.log" 2>&1 &
  pids+=($!)
  echo $! > "$dir/$name.pid"
  for _ in $(seq 200); do
    local url
    url=$(grep -o 'listening on http://[0-9.:]*' "$dir/$name.log" | tail -1 | sed 's/listening on //') || true
    [ -n "$url" ] && { echo "$url"; return; }
    sleep 0.1
  done
  echo "with_binary: $name printed no address" >&2; exit 1
}
sim_args=$("$load" --print-sim-args "$@")
# shellcheck disable=SC2086 # the sim flags are words
s1=$(start sim1 sim $sim_args)
# shellcheck disable=SC2086
s2=$(start sim2 sim $sim_args)
gw=$(start gw serve --policy prefix_cost --worker-urls "$s1" "$s2")
for _ in $(seq 200); do curl -sf "$gw/readiness" > /dev/null && break; sleep 0.1; done
"$load" --target "$gw" --target-pid "$(cat "$dir/gw.pid")" --label "$label" --skip-direct "$@"
