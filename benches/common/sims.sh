# Sourced by the shell benches: free ports and the two simulated workers they start.
# Uses SB (a `switchboard` binary), SIM_ARGS (sim flags), PIN_SIM (a taskset prefix, may be
# empty) and appends the sims' PIDs to PIDS; sets SIM_URLS.

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts two sims on fresh ports and waits (bounded) for their /health.
start_sims() {
    SIM_URLS=()
    local i port url
    for i in 1 2; do
        port=$(free_port)
        # shellcheck disable=SC2086 # SIM_ARGS is a list of flags
        "${PIN_SIM[@]}" "$SB" sim --host 127.0.0.1 --port "$port" $SIM_ARGS >/dev/null 2>&1 &
        PIDS+=($!)
        SIM_URLS+=("http://127.0.0.1:$port")
    done
    for url in "${SIM_URLS[@]}"; do
        for ((i = 0; i < 100; i++)); do
            curl -sf -m 1 "$url/health" >/dev/null && break
            sleep 0.1
        done
    done
}
