#!/usr/bin/env bash
# idem beside its peers, in one run on one Redis: rslock (a Redis lock), `idempotent` 2.x (in
# memory and on Redis) and `axum-idempotent` 0.6 (in ruts sessions, in memory), each case
# next to a bare baseline measured seconds away from it in the same round.
#
#   bash bench/peers.sh    # about 20 minutes with the defaults, plus the first build;
#                          # writes bench/results/peers.md (every run's output: bench/results/peers-raw/)
#
# Every case is measured twice: pinned (the servers and the lock generator on CPU 0, wrk and
# Redis on CPU 1) and unpinned (every process free to use both cores, as in a container
# without CPU pinning, where the ranking follows CPU per request). Beside requests/s, the
# server's CPU time per request (user + system, from /proc; for the lock cases, the
# generator's own) is reported, and what the guard adds over the bare case.
#
# PEERS_MODES ("pinned unpinned"), PEERS_ROUNDS (3), PEERS_DURATION (5s, one wrk or lock
# run), PEERS_CONNECTIONS (50) and PEERS_THREADS (2, wrk's) change the runs. Everything listens on 127.0.0.1 only; the
# redis-server started here has a port and a temporary directory of its own, and every
# process started here is stopped by its pid on exit. The peers build in a workspace of their
# own, bench/peers (`idempotent` 2.x declares rust-version 1.98 and builds on older
# compilers with --ignore-rust-version). See BENCHMARKS.md, "Beside its peers".
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
results=$root/bench/results
rounds=${PEERS_ROUNDS:-3}
duration=${PEERS_DURATION:-5s}
seconds=${duration%s}
connections=${PEERS_CONNECTIONS:-50}
threads=${PEERS_THREADS:-2}
lock_tasks=50
modes=${PEERS_MODES:-pinned unpinned}
clock_ticks=$(getconf CLK_TCK)

# --- tools -----------------------------------------------------------------------------
source "$root/bench/tools.sh"
require wrk=wrk redis-server=redis-server redis-cli=redis-tools curl=curl

# Servers and the lock generator on CPU 0 (one tokio worker); wrk and redis-server on CPU 1.
split_cores "servers and the lock generator on CPU 0 (1 tokio worker); wrk and redis-server on CPU 1"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
top_before=$(top -bn1 | sed -n '8,12p' | awk '{print $9 "% " $12}' | paste -sd, -)
echo "== building bench/peers (release)"
(cd bench/peers && CARGO_INCREMENTAL=0 timeout 1800 cargo build --release --quiet --ignore-rust-version)
bin=$root/bench/peers/target/release/idem-peers
mkdir -p "$results"
raw=$results/peers-raw
rm -rf "$raw"
mkdir -p "$raw"

# --- processes -------------------------------------------------------------------------
scratch=$(mktemp -d)
trap 'stop_all; rm -rf "$scratch"' EXIT

start_redis "$raw/redis-server.log" --dir "$scratch"
redis_url=redis://127.0.0.1:$redis_port

kinds=(bare idem-memory idempotent-memory axum-idempotent idem-redis idem-redis-uncached idempotent-redis)
declare -A port_of pid_of
for kind in "${kinds[@]}"; do
    free_port
    port_of[$kind]=$port
    "${on_server_core[@]}" "$bin" serve --kind "$kind" --port "$port" --redis "$redis_url" \
        --workers 1 >"$raw/server-$kind.log" 2>&1 &
    pids+=("$!")
    pid_of[$kind]=$!
done
for kind in "${kinds[@]}"; do
    for _ in $(seq 100); do
        if curl -sf "http://127.0.0.1:${port_of[$kind]}/runs" >/dev/null; then break; fi
        sleep 0.1
    done
    curl -sf "http://127.0.0.1:${port_of[$kind]}/runs" >/dev/null ||
        { echo "the $kind server did not start (see $raw/server-$kind.log)" >&2; exit 1; }
done

# --- correctness -----------------------------------------------------------------------
runs_of() { curl -sf "http://127.0.0.1:${port_of[$1]}/runs"; }
# A 22-character ruts session id for axum-idempotent; the others ignore the cookie.
check_session=CheckSessionId0000000A
post() { # kind, key, body, output headers file, [slow]
    curl -s -o "$4.body" -D "$4" -X POST "http://127.0.0.1:${port_of[$1]}/" \
        -H "x-client: peers" -H "idempotency-key: $2" -H "cookie: session=$check_session" \
        -H "content-type: application/json" ${5:+-H "x-slow: 1"} --data "$3"
}
status_of() { awk 'NR == 1 {print $2}' "$1"; }
marker_of() { # the response's headers other than the usual ones
    tr -d '\r' <"$1" | awk -F': ' 'NR > 1 && NF > 1 && tolower($1) !~ /^(content-type|content-length|date|set-cookie|retry-after)$/ {printf "%s`%s: %s`", sep, tolower($1), $2; sep = ", "}'
}
correctness=$raw/correctness.md
{
    echo "| server | 6 sequential requests, one key: handler runs | replay marker (2nd response) | 10 concurrent requests, one new key, handler 200 ms: statuses | … handler runs | same key, other body: status, headers, body |"
    echo "|---|---:|---|---|---:|---|"
} >"$correctness"
for kind in "${kinds[@]}"; do
    [[ $kind == bare ]] && continue
    echo "== correctness: $kind"
    tag=$(date +%s%N)
    before=$(runs_of "$kind")
    for i in 1 2 3 4 5 6; do post "$kind" "seq-$tag" '{"amount":1}' "$raw/check-$kind-seq-$i"; done
    seq_runs=$(($(runs_of "$kind") - before))
    replay_status=$(status_of "$raw/check-$kind-seq-2")
    replay_marker=$(marker_of "$raw/check-$kind-seq-2")
    before=$(runs_of "$kind")
    concurrent_pids=()
    for i in $(seq 10); do
        post "$kind" "par-$tag" '{"amount":1}' "$raw/check-$kind-par-$i" slow &
        concurrent_pids+=("$!")
    done
    for pid in "${concurrent_pids[@]}"; do wait "$pid" || true; done
    sleep 0.3
    par_runs=$(($(runs_of "$kind") - before))
    statuses=$(for i in $(seq 10); do status_of "$raw/check-$kind-par-$i"; done | sort | uniq -c | awk '{printf "%s%s× %s", sep, $1, $2; sep = ", "}')
    post "$kind" "seq-$tag" '{"amount":2}' "$raw/check-$kind-other"
    other_marker=$(marker_of "$raw/check-$kind-other")
    other="$(status_of "$raw/check-$kind-other"), ${other_marker:-no marker header}, \`$(head -c 80 "$raw/check-$kind-other.body" | tr -d '\r\n|')\`"
    echo "| $kind | $seq_runs | $replay_status, ${replay_marker:-none} | $statuses | $par_runs | $other |" >>"$correctness"
done
cat "$correctness"

# --- measurements ----------------------------------------------------------------------
# pin MODE: pinned puts the servers (and the lock generator, through server_prefix) on
# CPU 0 and Redis (and wrk, through load_prefix) on CPU 1; unpinned lets every process run
# on every core. The running processes are moved with `taskset -ap`.
pin() {
    local all="0-$(($(nproc) - 1))" server_cpus load_cpus kind
    if [[ $1 == pinned && ${#on_server_core[@]} -gt 0 ]]; then
        server_prefix=("${on_server_core[@]}") load_prefix=("${on_load_core[@]}")
        server_cpus=0 load_cpus=1
        mode_split=$core_split
    else
        server_prefix=() load_prefix=()
        server_cpus=$all load_cpus=$all
        mode_split="not pinned: servers, the lock generator, wrk and Redis share every core"
    fi
    for kind in "${kinds[@]}"; do taskset -apc "$server_cpus" "${pid_of[$kind]}" >/dev/null; done
    taskset -apc "$load_cpus" "$redis_pid" >/dev/null
}
# The CPU time of process PID so far (all threads, user + system), in clock ticks.
ticks_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wrk_figures() { # requests/s, non-2xx responses, socket errors, requests
    awk '/^Requests\/sec:/ {rps = $2}
         / requests in / {requests = $1}
         /Non-2xx/ {bad = $NF}
         /Socket errors/ {errors = $0; sub(/.*errors: /, "", errors); gsub(/ /, "", errors)}
         END {printf "%s %d %s %d\n", rps, bad, (errors == "" ? "-" : errors), requests}' "$1"
}
# kind, keys (none|same_key|new_key), session (none|shared|per_request), output:
# requests/s, non-2xx, socket errors, server CPU µs per request
run_wrk() {
    local before after rps bad errors requests
    before=$(ticks_of "${pid_of[$1]}")
    PEERS_KEYS=$2 PEERS_SESSION=$3 timeout 120 "${load_prefix[@]}" wrk -t"$threads" \
        -c"$connections" -d"$duration" -s "$root/bench/peers/wrk/peers.lua" \
        "http://127.0.0.1:${port_of[$1]}/" >"$4"
    after=$(ticks_of "${pid_of[$1]}")
    read -r rps bad errors requests < <(wrk_figures "$4")
    echo "$rps $bad $errors $(awk -v t=$((after - before)) -v n="$requests" -v hz="$clock_ticks" \
        'BEGIN {printf "%.2f", (n > 0 ? t * 1e6 / hz / n : 0)}')"
}
# impl, keys (distinct|hot), output: pairs/s, overlaps, misses, the generator's CPU µs per
# pair (user + system of the process and its children, from bash's `time`)
run_lock() {
    local TIMEFORMAT='%3U %3S' user sys
    { time timeout 120 "${server_prefix[@]}" "$bin" lock --impl "$1" --keys "$2" \
        --redis "$redis_url" --tasks "$lock_tasks" --seconds "$seconds" --workers 1 \
        >"$3" 2>"$3.err"; } 2>"$3.time"
    read -r user sys <"$3.time"
    awk -v cpu="$user $sys" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}}
         END {split(cpu, c, " "); printf "%s %s %s %.2f\n", v["pairs_per_second"], v["overlaps"],
              v["misses"], (v["pairs"] > 0 ? (c[1] + c[2]) * 1e6 / v["pairs"] : 0)}' "$3"
}

# group|name|store|kind|keys|session; HTTP cases against the bare server, lock cases
# against bare redis-rs.
http_cases=(
    "replay|idem|memory|idem-memory|same_key|none"
    "replay|idempotent|memory|idempotent-memory|same_key|none"
    "replay|axum-idempotent|memory (ruts sessions)|axum-idempotent|same_key|shared"
    "first request|idem|memory|idem-memory|new_key|none"
    "first request|idempotent|memory|idempotent-memory|new_key|none"
    "first request|axum-idempotent (a new session every request)|memory (ruts sessions)|axum-idempotent|new_key|per_request"
    "first request|axum-idempotent (one session per wrk thread)|memory (ruts sessions)|axum-idempotent|new_key|shared"
    "replay|idem|redis|idem-redis|same_key|none"
    "replay|idem, without the replay cache|redis|idem-redis-uncached|same_key|none"
    "replay|idempotent|redis|idempotent-redis|same_key|none"
    "first request|idem|redis|idem-redis|new_key|none"
    "first request|idempotent|redis|idempotent-redis|new_key|none"
)
lock_cases=(
    "lock, distinct keys|idem Lock|redis|idem|distinct|-"
    "lock, distinct keys|rslock|redis|rslock|distinct|-"
    "lock, one hot key|idem Lock|redis|idem|hot|-"
    "lock, one hot key|rslock|redis|rslock|hot|-"
)

# One line per case and round in figures-MODE.raw:
# round|group|name|store|value|bare before|bare after|ratio|non-2xx or overlaps|errors or misses|
# CPU µs per request (pair)|bare's before|bare's after
measure() { # mode
    local figures=$raw/figures-$1.raw round n m case group name store kind keys session
    local before after rps bad errors cpu cpu_before cpu_after ratio pairs overlaps misses
    local bare_overlaps impl case_keys
    pin "$1"
    : >"$figures"
    for round in $(seq "$rounds"); do
        echo "== $1, round $round of $rounds"
        read -r before _ _ cpu_before < <(run_wrk bare none none "$raw/$1-bare-$round-0.wrk")
        n=0
        for case in "${http_cases[@]}"; do
            IFS='|' read -r group name store kind keys session <<<"$case"
            n=$((n + 1))
            read -r rps bad errors cpu < <(run_wrk "$kind" "$keys" "$session" "$raw/$1-case-$round-$n.wrk")
            read -r after _ _ cpu_after < <(run_wrk bare none none "$raw/$1-bare-$round-$n.wrk")
            ratio=$(awk -v r="$rps" -v b="$before" -v a="$after" 'BEGIN {printf "%.3f", 2 * r / (b + a)}')
            echo "   $group, $name, $store: $rps req/s (bare $before, $after: × $ratio), server CPU $cpu µs/request (bare $cpu_before, $cpu_after), non-2xx $bad, socket errors $errors"
            echo "$round|$group|$name|$store|$rps|$before|$after|$ratio|$bad|$errors|$cpu|$cpu_before|$cpu_after" >>"$figures"
            before=$after cpu_before=$cpu_after
        done
        for keys in distinct hot; do
            read -r before _ _ cpu_before < <(run_lock bare "$keys" "$raw/$1-lock-$round-$keys-bare-0.out")
            m=0
            for case in "${lock_cases[@]}"; do
                IFS='|' read -r group name store impl case_keys _ <<<"$case"
                [[ $case_keys == "$keys" ]] || continue
                m=$((m + 1))
                read -r pairs overlaps misses cpu < <(run_lock "$impl" "$keys" "$raw/$1-lock-$round-$keys-$impl.out")
                read -r after bare_overlaps _ cpu_after < <(run_lock bare "$keys" "$raw/$1-lock-$round-$keys-bare-$m.out")
                ratio=$(awk -v r="$pairs" -v b="$before" -v a="$after" 'BEGIN {printf "%.3f", 2 * r / (b + a)}')
                echo "   $group, $name: $pairs pairs/s (bare $before, $after: × $ratio), CPU $cpu µs/pair (bare $cpu_before, $cpu_after), overlaps $overlaps (bare $bare_overlaps), misses $misses"
                echo "$round|$group|$name|$store|$pairs|$before|$after|$ratio|$overlaps|$misses|$cpu|$cpu_before|$cpu_after" >>"$figures"
                before=$after cpu_before=$cpu_after
            done
        done
    done
    declare -g "split_of_$1=$mode_split"
}
for mode in $modes; do measure "$mode"; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
top_after=$(top -bn1 | sed -n '8,12p' | awk '{print $9 "% " $12}' | paste -sd, -)

# --- report ----------------------------------------------------------------------------
median_awk='function median(list,    v, n, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {t = v[j]; v[j] = v[j - 1]; v[j - 1] = t}
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}'
report=$results/peers.md
version_of() { awk -v n="$1" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print; exit}' bench/peers/Cargo.lock; }
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench/peers bench/peers.sh idem-core idem-redis idem-axum idem-macros || echo ' (+ uncommitted changes)'); $(nproc) vCPUs, shared with other work (load average before $load_before, after $load_after; busiest processes before: $top_before; after: $top_after)."
    echo "Peers: idempotent $(version_of idempotent) (declares rust-version 1.98, built on $(rustc --version | cut -d' ' -f2) with --ignore-rust-version), axum-idempotent $(version_of axum-idempotent) on ruts $(version_of ruts), rslock $(version_of rslock); redis-rs $(version_of redis), axum $(version_of axum)."
    echo "wrk -t$threads -c$connections -d$duration per HTTP case and round; the lock cases $lock_tasks tokio tasks for $duration; $rounds rounds, medians shown. The bare baseline (the same handler unguarded; for locks, redis-rs SET NX PX and a Lua compare-and-delete) runs before the first case of a round and after every case."
    echo
    echo "× bare: a case's requests/s (lock pairs/s) over the mean of the two bare runs on either side of it, median over the rounds. CPU: the server process's CPU time (user + system) per request, for the lock cases the generator's per pair; + bare: what the case adds over the mean of its two bare runs, median over the rounds."
    for mode in $modes; do
        split_var=split_of_$mode
        echo
        echo "### $mode: ${!split_var}"
        echo
        echo "| case | contestant | store | requests/s or pairs/s | bare | × bare | × bare, each round | CPU µs | + bare µs | non-2xx (HTTP) or overlaps (locks), all rounds |"
        echo "|---|---|---|---:|---:|---:|---|---:|---:|---|"
        awk -F'|' "$median_awk"'
            !(($2, $3, $4) in seen) {seen[$2, $3, $4] = 1; order[++cases] = $2 SUBSEP $3 SUBSEP $4}
            {k = $2 SUBSEP $3 SUBSEP $4; v[k] = v[k] " " $5; b[k] = b[k] " " ($6 + $7) / 2; x[k] = x[k] " " $8; each[k] = each[k] (each[k] == "" ? "" : ", ") $8; bad[k] += $9
             c[k] = c[k] " " $11; d[k] = d[k] " " ($11 - ($12 + $13) / 2)}
            END {
                for (i = 1; i <= cases; i++) {
                    k = order[i]; split(k, f, SUBSEP)
                    printf "| %s | %s | %s | %.0f | %.0f | %.2f | %s | %.2f | %.2f | %d |\n", f[1], f[2], f[3], median(v[k]), median(b[k]), median(x[k]), each[k], median(c[k]), median(d[k]), bad[k]
                }
            }' "$raw/figures-$mode.raw"
    done
    echo
    echo "Correctness, checked once in the same run before the measurements (curl; \`/runs\` is the server's count of handler runs):"
    echo
    cat "$correctness"
} >"$report"
echo
cat "$report"
