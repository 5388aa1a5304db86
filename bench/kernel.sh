#!/usr/bin/env bash
# What the kernel does for one guarded request over HTTP, beside the bare handler's and
# (on Redis) bare redis-rs sending the same commands: system calls, futex calls, context
# switches, migrations and page faults of the bench server per request, and its CPU split
# into user and system time, pinned and unpinned.
#
#   bash bench/kernel.sh     # about 6 minutes; writes bench/results/kernel.md
#
# The idem-bench server (bench/src/main.rs, release, one tokio worker) with its own
# redis-server; wrk -t1 -c32 per case. Pinned: the server on CPU 0, wrk and Redis on CPU 1;
# unpinned: all free to share both. Each case runs KERNEL_DURATION (6s); `perf stat -p`
# (tracepoints raw_syscalls:sys_enter and syscalls:sys_enter_futex, software events) counts
# the server's threads over the middle KERNEL_WINDOW (4s) of it, and /proc/<pid>/stat its
# user and system ticks (100 a second: read them as a rough split) and
# /proc/<pid>/task/*/status its voluntary context switches (a thread parked: nothing to do)
# and involuntary ones (preempted: the core was wanted) over the same window; the requests
# of the window are wrk's rate times the window.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
duration=${KERNEL_DURATION:-6}
window=${KERNEL_WINDOW:-4}
report=${KERNEL_REPORT:-$root/bench/results/kernel.md}
clock_ticks=$(getconf CLK_TCK)

source "$root/bench/tools.sh"
require wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl perf=linux-perf

nice -n 19 cargo build --release --quiet -p idem-bench --bin idem-bench
work=$(mktemp -d)
trap 'stop_all; rm -rf "$work"' EXIT

# name | wrk mode | path
cases=(
    "bare handler|fixed|/bare"
    "idempotency first request, memory|new_key|/memory/idempotency"
    "idempotency replay, memory|same_key|/memory/idempotency"
    "avoid_repeat, memory|new_client|/memory/avoid_repeat"
    "form token issue+verify, memory|form|/memory"
    "lock, memory|new_client|/memory/lock"
    "idempotency first request, Redis|new_key|/redis/idempotency"
    "idempotency first request, bare redis-rs|new_key|/bare-redis/idempotency"
    "avoid_repeat, Redis|new_client|/redis/avoid_repeat"
    "avoid_repeat, bare redis-rs|new_client|/bare-redis/avoid_repeat"
)
events=raw_syscalls:sys_enter,syscalls:sys_enter_futex,cpu-migrations,page-faults

# switches PID: the voluntary and the involuntary context switches of PID's threads so far.
switches() {
    cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {v += $2}
        /^nonvoluntary_ctxt_switches/ {n += $2} END {print v, n}'
}

# measure MODE: one table row per case, with the server and wrk placed as MODE says.
measure() {
    local mode=$1 server_cpu=() load_cpu=()
    if [[ $mode == pinned ]]; then
        split_cores "pinned"
        server_cpu=("${on_server_core[@]}")
        load_cpu=("${on_load_core[@]}")
    else
        on_server_core=()
        on_load_core=()
    fi
    start_redis "$work/redis-$mode.log"
    free_port
    "${server_cpu[@]}" "$root/target/release/idem-bench" --port "$port" \
        --redis "redis://127.0.0.1:$redis_port" --workers 1 >"$work/server-$mode.log" 2>&1 &
    local server=$! base=http://127.0.0.1:$port
    pids+=("$server")
    for _ in $(seq 100); do
        curl -sf "$base/flood" >/dev/null && break
        sleep 0.1
    done
    for spec in "${cases[@]}"; do
        IFS='|' read -r name wrk_mode path <<<"$spec"
        IDEM_CASE=$wrk_mode "${load_cpu[@]}" wrk -t1 -c32 -d"${duration}s" \
            -s "$root/bench/wrk/case.lua" "$base$path" >"$work/wrk" &
        local wrk_pid=$!
        sleep $(((duration - window) / 2))
        local before after switches_before switches_after
        before=$(awk '{print $14, $15}' "/proc/$server/stat")
        switches_before=$(switches "$server")
        perf stat -x, -e "$events" -p "$server" -o "$work/stat" -- sleep "$window"
        after=$(awk '{print $14, $15}' "/proc/$server/stat")
        switches_after=$(switches "$server")
        wait "$wrk_pid"
        local rps requests
        rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk")
        requests=$(awk -v r="$rps" -v w="$window" 'BEGIN {print r * w}')
        awk -F, -v name="$name" -v mode="$mode" -v n="$requests" -v rps="$rps" \
            -v before="$before" -v after="$after" -v hz="$clock_ticks" \
            -v sb="$switches_before" -v sa="$switches_after" '
            {count[$3] = $1}
            END {
                split(before, b, " "); split(after, a, " ")
                split(sb, x, " "); split(sa, y, " ")
                user = (a[1] - b[1]) * 1e6 / hz / n; sys = (a[2] - b[2]) * 1e6 / hz / n
                printf "| %s | %s | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", name, mode, rps,
                    count["raw_syscalls:sys_enter"] / n, count["syscalls:sys_enter_futex"] / n,
                    (y[1] - x[1]) / n, (y[2] - x[2]) / n, count["cpu-migrations"] / n,
                    count["page-faults"] / n, user, sys
            }' "$work/stat" >>"$work/rows"
        echo "$mode: $name" >&2
    done
    kill "$server" "$redis_pid" 2>/dev/null || true
    wait "$server" "$redis_pid" 2>/dev/null || true
}

: >"$work/rows"
measure pinned
measure unpinned

mkdir -p "$(dirname "$report")"
{
    echo "# The kernel's share of a guarded request"
    echo
    echo "\`bash bench/kernel.sh\` at \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- idem-core idem-axum idem-redis bench/src || echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC'), load before $(cut -d' ' -f1-3 /proc/loadavg). Per request of the bench server (one tokio worker), over ${window}s of a ${duration}s wrk -t1 -c32 run; pinned: server on CPU 0, wrk and Redis on CPU 1."
    echo
    echo "| case | placement | requests/s | system calls | futex calls | switches, voluntary | switches, preempted | migrations | page faults | user µs | system µs |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    cat "$work/rows"
} >"$report"
cat "$report"
