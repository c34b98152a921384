#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, one after another, and prints how many
# executions each managed and whether it found a crash (kept under fuzz/artifacts/<target>/).
#
# cargo-fuzz wants a nightly toolchain for `-Zsanitizer`; RUSTC_BOOTSTRAP=1 lets the stable
# compiler accept those flags, which is enough for libFuzzer + AddressSanitizer here.
# Needs `cargo install cargo-fuzz`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
secs=${1:-60}
export RUSTC_BOOTSTRAP=1
targets=(sse_parser openai_request chat_template)
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    log=$(mktemp)
    # `-jobs`/`-workers` stay at 1: the machine's cores are shared with the build and tests.
    cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        echo "$t: ${execs:-?} executions in ${secs}s, no crash"
    else
        status=1
        echo "$t: FAILED (exit $rc) after ${execs:-?} executions; log tail:"
        tail -n 30 "$log"
    fi
    rm -f "$log"
done
exit "$status"
