#!/usr/bin/env bash
# Fleet scale: N simulated workers (one `switchboard sim --ports` process) behind one gateway,
# nothing being served. For each N it reports the gateway's idle CPU (% of one core), the
# background requests each worker received per second (the sims' `GET /sim/background`),
# `GET /workers` and `GET /metrics` latency (median of 5), and the gateway's RSS; memory per
# worker is the RSS growth over the 1-worker run.
#
# usage: benches/fleet.sh [N ...]          (default: 1 1000 4000)
# env:   BIN (default target/release/switchboard), WINDOW (idle seconds measured, default 30),
#        SETTLE (seconds from all-healthy to the window, default 10; the idle back-offs of load
#        polls and health probes reach their ceilings about 65 s in, so 70 measures the steady state),
#        FIRST_PORT (default 20000; N consecutive ports from it must be free), GATEWAY_ARGS.
set -euo pipefail
BIN=${BIN:-target/release/switchboard}
WINDOW=${WINDOW:-30}
FIRST_PORT=${FIRST_PORT:-20000}
GW_PORT=${GW_PORT:-19999}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1 1000 4000)
ulimit -n "$(ulimit -Hn)" # a socket per worker on each side
TICKS=$(getconf CLK_TCK)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Time on a CPU of the live threads, in ns: exact where the ticks are 10 ms, blind to threads that
# ended (the window's figure falls back to the ticks then, as `CpuReading::until` in
# benches/common/procs.rs does).
cpu_ns() {
  local sum=0 ns _ f
  for f in /proc/"$1"/task/*/schedstat; do read -r ns _ <"$f" && sum=$((sum + ns)); done
  echo "$sum"
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
background_total() {
  local sum=0 n=$1 port
  for ((i = 0; i < n; i += $(( n > 50 ? n / 50 : 1 )))); do
    port=$((FIRST_PORT + i))
    sum=$((sum + $(curl -s "http://127.0.0.1:$port/sim/background" | python3 -c 'import json,sys; print(sum(json.load(sys.stdin).values()))')))
  done
  echo "$sum"
}
sampled() { local n=$1; echo $(( (n + (n > 50 ? n / 50 : 1) - 1) / (n > 50 ? n / 50 : 1) )); }
median_ms() {
  local url=$1
  for _ in 1 2 3 4 5; do curl -s -o /dev/null -w '%{time_total}\n' "$url"; done |
    sort -n | sed -n 3p | awk '{printf "%.1f", $1 * 1000}'
}

printf '%-7s %-14s %-22s %-14s %-14s %-10s %s\n' workers "idle CPU %" "bg req/worker/s" "/workers ms" "/metrics ms" "RSS MiB" "KiB/worker"
base_rss=""
for n in "${SIZES[@]}"; do
  last=$((FIRST_PORT + n - 1))
  "$BIN" sim --ports "$FIRST_PORT-$last" --zero-latency >/tmp/fleet-sim.log 2>&1 &
  sim=$!; PIDS+=("$sim")
  for _ in $(seq 1 600); do grep -q "fleet listening" /tmp/fleet-sim.log && break; sleep 0.2; done
  urls=$(seq -f "http://127.0.0.1:%g" "$FIRST_PORT" "$last" | tr '\n' ' ')
  # shellcheck disable=SC2086
  "$BIN" serve --port "$GW_PORT" ${GATEWAY_ARGS:-} --worker-urls $urls >/tmp/fleet-gw.log 2>&1 &
  gw=$!; PIDS+=("$gw")
  for _ in $(seq 1 600); do
    healthy=$(curl -s "http://127.0.0.1:$GW_PORT/workers" | python3 -c 'import json,sys; print(sum(w["healthy"] for w in json.load(sys.stdin)["workers"]))' 2>/dev/null || echo 0)
    [ "$healthy" = "$n" ] && break
    sleep 0.5
  done
  sleep "${SETTLE:-10}" # let start-up work (first polls, discovery) settle
  c0=$(cpu_ticks "$gw"); n0=$(cpu_ns "$gw"); b0=$(background_total "$n"); t0=$(date +%s.%N)
  sleep "$WINDOW"
  c1=$(cpu_ticks "$gw"); n1=$(cpu_ns "$gw"); b1=$(background_total "$n"); t1=$(date +%s.%N)
  secs=$(echo "$t1 - $t0" | bc -l)
  cpu_s=$(echo "e = ($n1 - $n0) / 10^9; t = ($c1 - $c0) / $TICKS; if (e + 2 / $TICKS >= t) e else t" | bc -l)
  cpu=$(echo "$cpu_s / $secs * 100" | bc -l)
  per_worker=$(echo "($b1 - $b0) / $(sampled "$n") / $secs" | bc -l)
  workers_ms=$(median_ms "http://127.0.0.1:$GW_PORT/workers")
  metrics_ms=$(median_ms "http://127.0.0.1:$GW_PORT/metrics")
  rss=$(rss_kib "$gw")
  [ -n "$base_rss" ] || base_rss=$rss
  per=$([ "$n" -gt 1 ] && echo "$(( (rss - base_rss) / (n - 1) ))" || echo "-")
  printf '%-7s %-14.2f %-22.3f %-14s %-14s %-10s %s\n' "$n" "$cpu" "$per_worker" "$workers_ms" "$metrics_ms" "$((rss / 1024))" "$per"
  kill "$gw" "$sim"; wait "$gw" "$sim" 2>/dev/null || true
  PIDS=()
done
