#!/usr/bin/env bash
# Soak: 500 concurrent streams through the gateway for SOAK_SECS (default 600) with 1 % of worker
# requests answered 500 (simulator fault knob); samples the gateway's RSS and in-flight gauge
# every 30 s, then checks that nothing is left in flight. Everything on 127.0.0.1.
#   cargo build --release && bash benches/soak.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${SOAK_SECS:-600}
# The load runs SOAK_WARMUP_SECS (default 300) before the measured window: the gateway's bounded
# caches (tokenizer chunk cache, prefix index) fill to their budgets in that time. RSS is reported
# cold (first sample under load), at the window's start and at its end; growth is end vs start.
warmup=${SOAK_WARMUP_SECS:-300}
bin=target/release/switchboard
# Build the load client first so the timeline below starts with the load.
cargo bench --bench load --no-run >/dev/null 2>&1
out=${SOAK_OUT:-$(mktemp -d)}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p1=$(port); p2=$(port); pg=$(port)
"$bin" sim --port "$p1" --time-scale 0.5 --fault-error-rate 0.01 >"$out/sim1.log" 2>&1 & pids+=($!)
"$bin" sim --port "$p2" --time-scale 0.5 --fault-error-rate 0.01 >"$out/sim2.log" 2>&1 & pids+=($!)
sleep 1
# SOAK_GATEWAY_ARGS: extra `switchboard serve` flags, e.g. a smaller --prefix-index-max-tokens.
# shellcheck disable=SC2086
"$bin" serve --port "$pg" --worker-urls "http://127.0.0.1:$p1" "http://127.0.0.1:$p2" --log-level warn ${SOAK_GATEWAY_ARGS:-} >"$out/gw.log" 2>&1 & gw=$!
pids+=("$gw")
sleep 3
inflight() { curl -s "127.0.0.1:$pg/metrics" | awk '/^switchboard_worker_in_flight_requests/ {s+=$2} END {print s+0}'; }
gauge() { curl -s "127.0.0.1:$pg/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
sample() {
  echo "t=$(($(date +%s) - t0)) rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$gw/status") in_flight=$(inflight)" \
       "tokenizer_cache_bytes=$(gauge switchboard_tokenizer_cache_bytes)" \
       "prefix_index_tokens=$(gauge switchboard_prefix_index_tokens)"
}
t0=$(date +%s)
: >"$out/rss.log"
( sleep 10; sample; sleep $((warmup - 10)); echo "start of window: $(sample)"
  for _ in $(seq 1 $((secs / 30 - 1))); do sleep 30; sample; done ) >>"$out/rss.log" & pids+=($!)
cargo bench --bench load -- --target "http://127.0.0.1:$pg" --target-pid "$gw" --skip-direct --stream \
    --concurrency 500 --max-tokens 64 --warmup "$warmup" --secs "$secs" --json "$out/load.json" | tee "$out/load.txt"
echo "end of window: $(sample)" >>"$out/rss.log"
sleep 5
echo "after: $(sample)" >>"$out/rss.log"
cat "$out/rss.log"
awk '/^start of window/ {for (i = 1; i <= NF; i++) if ($i ~ /^rss_kib=/) {split($i, a, "="); s = a[2]}}
     /^end of window/   {for (i = 1; i <= NF; i++) if ($i ~ /^rss_kib=/) {split($i, a, "="); e = a[2]}}
     END {if (s > 0) printf "RSS growth over the window: %.1f MiB -> %.1f MiB (%+.1f %%)\n", s/1024, e/1024, (e-s)*100/s}' "$out/rss.log"
curl -s "127.0.0.1:$pg/metrics" | grep -E '^switchboard_(requests_total|upstream_errors_total|worker_in_flight)' | tee "$out/metrics.txt"
echo "soak results in $out"
