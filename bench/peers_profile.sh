#!/usr/bin/env bash
# Where the CPU of each row of bench/peers.sh goes: idem, its best peer and the bare case,
# each profiled under the same load, and what idem spends beyond the peer, by category.
#
#   bash bench/peers_profile.sh   # about 6 minutes, plus the first build;
#                                 # writes bench/results/peers-profile.md
#
# For every contestant of a row: the server (for the lock rows, the lock generator)
# pinned to CPU 0 with one worker, wrk and Redis on CPU 1, as bench/peers.sh's pinned run.
# CPU per request is the server's CPU time (user + system, /proc) over the requests wrk
# made, the lowest of PEERS_ROUNDS (3) runs of PEERS_DURATION (5s) each (other work on the
# machine only adds to it); then one more run under `perf record -e cpu-clock --call-graph
# dwarf`, whose samples bench/profile_report.py's categories group by self symbol. A
# category's µs per request is its share of the samples times the CPU per request.
# Everything listens on 127.0.0.1 only; every process started here is stopped by its pid.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
rounds=${PEERS_ROUNDS:-3}
duration=${PEERS_DURATION:-5s}
seconds=${duration%s}
connections=50
threads=2
lock_tasks=50
clock_ticks=$(getconf CLK_TCK)
report=$root/bench/results/peers-profile.md

source "$root/bench/tools.sh"
require wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl perf=linux-perf \
    python3=python3
split_cores "servers and the lock generator on CPU 0 (1 tokio worker); wrk and redis-server on CPU 1"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
date=$(date -u '+%Y-%m-%d %H:%M UTC')
echo "== building bench/peers (release)"
(cd bench/peers && CARGO_INCREMENTAL=0 nice -n 19 timeout 1800 cargo build --release --quiet --ignore-rust-version)
bin=$root/bench/peers/target/release/idem-peers

work=$(mktemp -d)
trap 'stop_all; rm -rf "$work"' EXIT
start_redis "$work/redis-server.log" --dir "$work"
redis_url=redis://127.0.0.1:$redis_port

# row|contestant|kind (idem-peers serve --kind, or lock:IMPL:KEYS)|keys (peers.lua's PEERS_KEYS)
cases=(
    "first request, memory|bare|bare|none"
    "first request, memory|idem|idem-memory|new_key"
    "first request, memory|idempotent|idempotent-memory|new_key"
    "replay, memory|idem|idem-memory|same_key"
    "replay, memory|idempotent|idempotent-memory|same_key"
    "first request, Redis|idem|idem-redis|new_key"
    "first request, Redis|idempotent|idempotent-redis|new_key"
    "lock, distinct keys|bare|lock:bare:distinct|-"
    "lock, distinct keys|idem|lock:idem:distinct|-"
    "lock, distinct keys|rslock|lock:rslock:distinct|-"
)

ticks_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# serve KIND: starts the server of KIND on the server core; its pid in server_pid, its
# address in url.
serve() {
    free_port
    "${on_server_core[@]}" "$bin" serve --kind "$1" --port "$port" --redis "$redis_url" \
        --workers 1 >"$work/server-$1.log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    url=http://127.0.0.1:$port/
    for _ in $(seq 100); do
        if curl -sf "${url}runs" >/dev/null; then return; fi
        sleep 0.1
    done
    echo "the $1 server did not start (see $work/server-$1.log)" >&2
    exit 1
}

# load KEYS DURATION OUTPUT: wrk against url, as bench/peers.sh's.
load() {
    PEERS_KEYS=$1 PEERS_SESSION=none timeout 120 "${on_load_core[@]}" wrk -t"$threads" \
        -c"$connections" -d"$2" -s "$root/bench/peers/wrk/peers.lua" "$url" >"$3"
}

# http_cpu KEYS: the server's CPU µs per request over one wrk run.
http_cpu() {
    local before after requests
    before=$(ticks_of "$server_pid")
    load "$1" "$duration" "$work/wrk.out"
    after=$(ticks_of "$server_pid")
    requests=$(awk '/ requests in / {print $1}' "$work/wrk.out")
    awk -v t=$((after - before)) -v n="$requests" -v hz="$clock_ticks" \
        'BEGIN {printf "%.3f\n", t * 1e6 / hz / n}'
}

# lock IMPL KEYS [PREFIX...]: one run of the lock generator; its CPU µs per pair.
lock_cpu() {
    local impl=$1 keys=$2 TIMEFORMAT='%3U %3S' user sys
    shift 2
    { time "$@" "${on_server_core[@]}" "$bin" lock --impl "$impl" --keys "$keys" \
        --redis "$redis_url" --tasks "$lock_tasks" --seconds "$seconds" --workers 1 \
        >"$work/lock.out" 2>"$work/lock.err"; } 2>"$work/lock.time"
    read -r user sys <"$work/lock.time"
    awk -v cpu="$user $sys" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}}
         END {split(cpu, c, " "); printf "%.3f\n", (c[1] + c[2]) * 1e6 / v["pairs"]}' "$work/lock.out"
}

lowest() { sort -g | head -1; }
perf_record=(perf record -q -e cpu-clock -F 1999 --call-graph dwarf,16384)
perf_script() { perf script -i "$1" -F comm,tid,period,ip,sym,dso --no-inline 2>/dev/null >"$2"; }

: >"$work/cpu.tsv"
n=0
for case in "${cases[@]}"; do
    IFS='|' read -r row contestant kind keys <<<"$case"
    n=$((n + 1))
    echo "== $row: $contestant"
    if [[ $kind == lock:* ]]; then
        IFS=: read -r _ impl lock_keys <<<"$kind"
        cpu=$(for _ in $(seq "$rounds"); do lock_cpu "$impl" "$lock_keys"; done | lowest)
        # The generator is profiled from its start: its set-up is a few ms of a 5 s run.
        lock_cpu "$impl" "$lock_keys" "${perf_record[@]}" -o "$work/$n.data" -- >/dev/null
    else
        serve "$kind"
        # A first run fills what a server keeps (records live 5 s), as they are in the rounds.
        load "$keys" "$duration" /dev/null
        cpu=$(for _ in $(seq "$rounds"); do http_cpu "$keys"; done | lowest)
        "${perf_record[@]}" -o "$work/$n.data" -p "$server_pid" -- sleep "$((seconds - 1))" &
        recorder=$!
        load "$keys" "$duration" /dev/null
        wait "$recorder"
        kill "$server_pid"
        wait "$server_pid" 2>/dev/null || true
    fi
    perf_script "$work/$n.data" "$work/$n.txt"
    rm -f "$work/$n.data"
    echo "   $cpu µs"
    printf '%s\t%s\t%s\t%s\n' "$row" "$contestant" "$cpu" "$work/$n.txt" >>"$work/cpu.tsv"
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench/peers idem-core idem-redis idem-axum || echo ' (+ uncommitted changes)')"
python3 "$root/bench/peers_profile_report.py" "$work/cpu.tsv" "$commit" "$date" \
    "$load_before" "$load_after" "$core_split" "$rounds" "$duration" >"$report"
echo "== wrote $report"
