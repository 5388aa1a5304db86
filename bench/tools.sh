# What the benchmark scripts share; sourced by bench/http.sh and bench/peers.sh.

# require COMMAND=PACKAGE...: installs what is missing, or says how.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/system-packages.sh"

# split_cores DESCRIPTION: on a machine with two cores or more, sets on_server_core and
# on_load_core to the taskset prefixes for CPU 0 and CPU 1, and core_split (for the report)
# to DESCRIPTION, the script's use of them; with one core, the prefixes to nothing and
# core_split to "not pinned".
split_cores() {
    if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
        on_server_core=(taskset -c 0)
        on_load_core=(taskset -c 1)
        core_split=$1
    else
        on_server_core=()
        on_load_core=()
        core_split="not pinned ($(nproc) CPU)"
    fi
}

# The processes a script starts (`pids+=("$!")`), stopped by their pids: `trap stop_all EXIT`.
pids=()
stop_all() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# free_port: sets `port` to a port no socket uses and that no earlier call gave out, below
# the kernel's range of ephemeral ports: a port in it may be taken by a client connection
# (wrk's, redis-cli's) between the check and the bind, as one was once.
used_ports=" "
free_port() {
    local lowest
    lowest=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    for _ in $(seq 1000); do
        port=$(shuf -i "20000-$((lowest - 1))" -n 1)
        if [[ -z $(ss -Htan "sport = :$port") && $used_ports != *" $port "* ]]; then
            used_ports+="$port "
            return
        fi
    done
    echo "no free port" >&2
    exit 1
}

# start_redis LOG [OPTION...]: a redis-server on a free port of 127.0.0.1, on the load core
# (split_cores), without persistence, logging to LOG; its port in redis_port, its pid in
# redis_pid (and pids). Returns once it answers, and `redis` is then redis-cli for it.
start_redis() {
    local log=$1
    shift
    free_port
    redis_port=$port
    "${on_load_core[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
        --appendonly no --logfile "$log" "$@" &
    redis_pid=$!
    pids+=("$redis_pid")
    for _ in $(seq 100); do
        if redis ping >/dev/null 2>&1; then break; fi
        sleep 0.1
    done
    # Another process may have taken the port between the check and the bind: measure only
    # against the redis-server started here.
    if [[ $(redis info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}') != "$redis_pid" ]]; then
        echo "redis-server did not start on port $redis_port (see $log)" >&2
        exit 1
    fi
}
redis() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@"; }
