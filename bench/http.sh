#!/usr/bin/env bash
# End-to-end HTTP benchmark: what each guarded request costs through axum, on MemoryStore
# and on Redis, next to the bare handler, to redis-benchmark on the same server and, for
# each Redis case, to its bare redis-rs baseline: a route that sends the same Redis
# commands with plain redis-rs and no guard (bench/src/bare_redis.rs), so that what the
# guard adds beyond its Redis traffic shows as a difference of server CPU per request.
#
#   bench/http.sh          # about 11 minutes; writes bench/results/http.md (+ *.raw)
#
# IDEM_BENCH_DURATION (5s), IDEM_BENCH_CONNECTIONS (32) and IDEM_BENCH_ROUNDS (3) change
# the wrk runs. Everything listens on 127.0.0.1 only, and everything started here is stopped on
# exit. See BENCHMARKS.md, "HTTP end to end", for what each case measures.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
results=$root/bench/results
duration=${IDEM_BENCH_DURATION:-5s}
# Every case once per round, and the median of the rounds reported: this VM's throughput
# drifts by a quarter within a minute, which one long run per case would pin on
# whichever cases it happened to hit.
rounds=${IDEM_BENCH_ROUNDS:-3}
connections=${IDEM_BENCH_CONNECTIONS:-32}
flood_keys=1000000
flood_ttl_ms=10000
# Enough SETs for redis-benchmark to run about as long as one wrk case here.
benchmark_requests=$((connections * 3000))

# --- tools -----------------------------------------------------------------------------
source "$root/bench/tools.sh"
require wrk=wrk redis-server=redis-server redis-benchmark=redis-tools curl=curl

# The server gets one core; wrk, redis-server and redis-benchmark the other. On a machine
# with one core there is nothing to split.
split_cores "server on CPU 0 (1 tokio worker); wrk, redis-server on CPU 1; redis-benchmark on CPU 0 (the client's core, the server idle meanwhile)"

cargo build --release --quiet -p idem-bench
mkdir -p "$results"

# --- processes -------------------------------------------------------------------------
trap stop_all EXIT
# The bench server connects to Redis as it starts, so Redis answers first.
start_redis "$results/redis-server.raw"
free_port
server_port=$port
"${on_server_core[@]}" "$root/target/release/idem-bench" --port "$server_port" \
    --redis "redis://127.0.0.1:$redis_port" --workers 1 >"$results/server.raw" 2>&1 &
server_pid=$!
pids+=("$server_pid")

base=http://127.0.0.1:$server_port
for _ in $(seq 100); do
    if redis ping >/dev/null 2>&1 && curl -sf "$base/flood" >/dev/null; then break; fi
    sleep 0.1
done
curl -sf "$base/flood" >/dev/null || { echo "the bench server did not start" >&2; exit 1; }

# --- measurements ----------------------------------------------------------------------
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status"; }
flood_entries() { curl -sf "$base/flood" | sed 's/entries=//'; }
wait_until_empty() {
    local waited=0
    while (($(flood_entries) > 0)) && ((waited < 60)); do
        sleep 1
        waited=$((waited + 1))
    done
}

# "user nice system idle iowait irq softirq steal" of each CPU, one line per CPU.
cpu_times() { awk '/^cpu[0-9]/ {print $1, $2, $3, $4, $5, $6, $7, $8, $9}' /proc/stat; }
# Percent busy and percent stolen of each CPU between two cpu_times snapshots, as
# "busy0,steal0,busy1,steal1,...".
cpu_use() {
    awk 'NR == FNR {for (i = 2; i <= 9; i++) a[$1, i] = $i; next}
         {total = 0; for (i = 2; i <= 9; i++) {d[i] = $i - a[$1, i]; total += d[i]}
          busy = d[2] + d[3] + d[4] + d[7] + d[8]
          printf "%s%d,%d", (FNR > 1 ? "," : ""), 100 * busy / total, 100 * d[9] / total}
         END {print ""}' "$1" "$2"
}

# The server's CPU time so far (all threads, user + system), in clock ticks.
server_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }

commandstats() { redis info commandstats | tr -d '\r' | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\).*/\1 \2/p' | tr '|' '_'; }

# wrk's figures: requests, requests/s, p50 and p99 in ms, non-2xx responses, socket errors.
wrk_figures() {
    awk 'function ms(v) {
             if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000
             return v }
         / requests in / {requests = $1}
         /^Requests\/sec:/ {rps = $2}
         /^ +50%/ {p50 = ms($2)}
         /^ +99%/ {p99 = ms($2)}
         /Non-2xx/ {bad = $NF}
         /Socket errors/ {errors = $0; sub(/.*errors: /, "", errors); gsub(/ /, "", errors)}
         END {printf "%s %s %.3f %.3f %d %s\n", requests, rps, p50, p99, bad, (errors == "" ? "-" : errors)}' "$1"
}

echo "== memory flood: $flood_keys unique keys, TTL $((flood_ttl_ms / 1000)) s"
# One flood left to expire: sets filled_rss and filled_entries once the keys are in,
# emptied_rss and emptied_entries once they have expired, and fill_seconds.
flood_and_expire() {
    local started
    started=$(date +%s.%N)
    curl -sf -X POST "$base/flood?n=$flood_keys&ttl_ms=$flood_ttl_ms" >/dev/null
    fill_seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
    filled_rss=$(rss_kib)
    filled_entries=$(flood_entries)
    wait_until_empty
    sleep 2
    emptied_rss=$(rss_kib)
    emptied_entries=$(flood_entries)
}
rss_start=$(rss_kib)
flood_and_expire
flood_seconds=$fill_seconds
rss_full=$filled_rss entries_full=$filled_entries
rss_expired=$emptied_rss entries_expired=$emptied_entries
flood_and_expire
rss_refilled=$filled_rss entries_refilled=$filled_entries
rss_reexpired=$emptied_rss entries_reexpired=$emptied_entries
echo "RSS KiB: start $rss_start, 1M live $rss_full ($entries_full entries, filled in ${flood_seconds}s), expired $rss_expired ($entries_expired), refilled $rss_refilled, expired again $rss_reexpired ($entries_reexpired)"

# name | wrk script mode | URL path | store. The bare handler runs before the first case
# of a round and again after every case (below), so each case has a bare run on each side.
# Each Redis case is followed by its bare redis-rs baseline (store "bare-redis", same name,
# same wrk mode, so its keys are fresh where the guard's are); a replay sends Redis nothing,
# so its baseline is the bare handler itself.
bare_case="bare handler|fixed|/bare|none"
cases=(
    "form handlers unguarded|form|/plain|none"
    "avoid_repeat expire|new_client|/memory/avoid_repeat|memory"
    "avoid_repeat finish|new_client|/memory/avoid_repeat_finish|memory"
    "form token issue+verify|form|/memory|memory"
    "idempotency first request|new_key|/memory/idempotency|memory"
    "idempotency replay|same_key|/memory/idempotency|memory"
    "lock acquire+release|new_client|/memory/lock|memory"
    "avoid_repeat expire|new_client|/redis/avoid_repeat|redis"
    "avoid_repeat expire|new_client|/bare-redis/avoid_repeat|bare-redis"
    "avoid_repeat finish|new_client|/redis/avoid_repeat_finish|redis"
    "avoid_repeat finish|new_client|/bare-redis/avoid_repeat_finish|bare-redis"
    "form token issue+verify|form|/redis|redis"
    "form token issue+verify|form|/bare-redis|bare-redis"
    "idempotency first request|new_key|/redis/idempotency|redis"
    "idempotency first request|new_key|/bare-redis/idempotency|bare-redis"
    "idempotency replay|same_key|/redis/idempotency|redis"
    "lock acquire+release|new_client|/redis/lock|redis"
    "lock acquire+release|new_client|/bare-redis/lock|bare-redis"
)

run_wrk() { # mode, url, connections, duration, output
    IDEM_CASE=$1 timeout 120 "${on_load_core[@]}" wrk -t1 -c"$3" -d"$4" --latency \
        -s "$root/bench/wrk/case.lua" "$base$2" >"$5"
}

redis_benchmark() { # output
    timeout 120 "${on_server_core[@]}" redis-benchmark -h 127.0.0.1 -p "$redis_port" -c "$connections" \
        -n "$benchmark_requests" -t set --csv >"$1"
    awk -F'","' 'NR == 2 {print $2, $5, $7}' "$1"
}

slug() { echo "$1-$2" | tr ' +' '__'; }

# Runs one case ("name|mode|path|store") once; prints its figures as
# round|name|store|requests|rps|p50|p99|non2xx|errors|cpu|top-level|in scripts|by name|
# server CPU µs/request, and a human line on stderr.
measure() { # case, round, raw file prefix
    local name mode path store raw=$3 round=$2
    IFS='|' read -r name mode path store <<<"$1"
    echo "== round $round: $store: $name (wrk -c$connections -d$duration $path, $mode)" >&2
    if [[ $store == *redis ]]; then commandstats >"$raw.commandstats-before.raw"; fi
    cpu_times >"$raw.cpu-before.raw"
    local ticks_before ticks requests rps p50 p99 bad errors cpu server_us
    ticks_before=$(server_ticks)
    run_wrk "$mode" "$path" "$connections" "$duration" "$raw.wrk.raw"
    cpu_times >"$raw.cpu-after.raw"
    ticks=$(($(server_ticks) - ticks_before))
    read -r requests rps p50 p99 bad errors < <(wrk_figures "$raw.wrk.raw")
    cpu=$(cpu_use "$raw.cpu-before.raw" "$raw.cpu-after.raw")
    server_us=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN {printf "%.2f", t * 1e6 / hz / n}')
    local top=- inner=- by_name=-
    if [[ $store == *redis ]]; then
        commandstats >"$raw.commandstats-after.raw"
        # Calls per request by command over the run, the bench's own INFO left out.
        # Redis 7 counts a script's inner calls under their own names as well.
        by_name=$(awk -v n="$requests" 'NR == FNR {before[$1] = $2; next}
            $1 != "info" && $2 > before[$1] {printf "%s%s=%.3f", sep, $1, ($2 - before[$1]) / n; sep = ","}' \
            "$raw.commandstats-before.raw" "$raw.commandstats-after.raw")
        if ((round == 1)); then
            # Which of them the server sent (round trips) and which ran inside a
            # script: MONITOR marks the latter "[0 lua]". It slows Redis down, so it
            # watches a short run of its own at low concurrency, once per case.
            # Not in `pids`: it ends by itself when redis-server does.
            redis-cli -h 127.0.0.1 -p "$redis_port" monitor >"$raw.monitor.raw" &
            local monitor_pid=$! sampled
            sleep 0.3
            run_wrk "$mode" "$path" 4 1s "$raw.monitor-wrk.raw"
            sleep 1
            kill "$monitor_pid"
            wait "$monitor_pid" 2>/dev/null || true
            sampled=$(awk '/ requests in / {print $1}' "$raw.monitor-wrk.raw")
            read -r top inner < <(awk -v n="$sampled" '$2 == "[0" && $3 ~ /^127/ {top++}
                $2 == "[0" && $3 == "lua]" {inner++}
                END {printf "%.3f %.3f\n", top / n, inner / n}' "$raw.monitor.raw")
            awk '$2 == "[0" {print ($3 == "lua]" ? "script" : "top-level"), tolower($4)}' "$raw.monitor.raw" |
                sort | uniq -c >"$raw.monitor-summary.raw"
        fi
    fi
    echo "$requests requests, $rps/s, p50 $p50 ms, p99 $p99 ms, non-2xx $bad, socket errors $errors, server CPU $server_us µs/request, CPU busy,steal $cpu${by_name:+, calls/request $by_name, top-level $top, in scripts $inner}" >&2
    printf '%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\n' "$round" "$name" "$store" "$requests" "$rps" \
        "$p50" "$p99" "$bad" "$errors" "$cpu" "$top" "$inner" "$by_name" "$server_us"
}

# One line per case and round: measure's fields, then the mean requests/s and server CPU
# µs/request of the bare runs just before and just after it. Requests/s on this kind of
# machine drift by a quarter within a minute; a case is compared with bare runs seconds
# away from it, not with one at the start of the round.
figures=$results/figures.raw
: >"$figures"
: >"$results/redis-benchmark.raw"
for round in $(seq "$rounds"); do
    benchmarked=""
    bare_runs=1
    before=$(measure "$bare_case" "$round" "$results/$(slug none bare)-$round-$bare_runs")
    echo "$before||" >>"$figures"
    for case in "${cases[@]}"; do
        IFS='|' read -r name _ _ store <<<"$case"
        raw=$results/$(slug "$store" "$name")-$round
        if [[ $store == redis && -z $benchmarked ]]; then
            echo "== round $round: redis-benchmark -c $connections -n $benchmark_requests -t set"
            redis_benchmark "$raw.redis-benchmark.raw" | tee -a "$results/redis-benchmark.raw"
            benchmarked=yes
        fi
        figures_line=$(measure "$case" "$round" "$raw")
        bare_runs=$((bare_runs + 1))
        after=$(measure "$bare_case" "$round" "$results/$(slug none bare)-$round-$bare_runs")
        echo "$after||" >>"$figures"
        echo "$figures_line|$(awk -F'|' -v b="$before" -v a="$after" 'BEGIN {
            split(b, x, "|"); split(a, y, "|"); printf "%.1f|%.2f", (x[5] + y[5]) / 2, (x[14] + y[14]) / 2}')" >>"$figures"
        before=$after
    done
done

# --- report ----------------------------------------------------------------------------
median_awk='function median(list,    v, n, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {t = v[j]; v[j] = v[j - 1]; v[j - 1] = t}
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}'
read -r rb rb_p50 rb_p99 < <(awk "$median_awk"'
    {rps = rps " " $1; p50 = p50 " " $2; p99 = p99 " " $3}
    END {print median(rps), median(p50), median(p99)}' "$results/redis-benchmark.raw")
report=$results/http.md
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- bench/src bench/wrk bench/http.sh idem-core idem-redis idem-axum idem-macros || echo ' (+ uncommitted changes)'); $(nproc) vCPUs."
    echo "wrk -t1 -c$connections -d$duration --latency per case and round, $rounds rounds, medians shown; the bare handler runs before the first case of a round and after every case; $core_split."
    echo
    echo "× bare: a case's requests/s (or the inverse of its server CPU per request) over the mean of the two bare runs on either side of it, median over the rounds."
    echo
    echo "| store | case | requests/s | p50 ms | p99 ms | × bare (requests/s) | × bare (server CPU) | Redis commands/request: top-level + in scripts | limit req/s | × limit | target | server CPU µs/request | CPU 0 / CPU 1 busy (steal) |"
    echo "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---|"
    awk -F'|' -v rb="$rb" "$median_awk"'
        !(($3, $2) in seen) {seen[$3, $2] = 1; order[++cases] = $3 SUBSEP $2}
        {
            k = $3 SUBSEP $2
            rps[k] = rps[k] " " $5; us[k] = us[k] " " $14; p50[k] = p50[k] " " $6; p99[k] = p99[k] " " $7
            bad[k] += $8; if ($9 != "-") errors[k] = errors[k] " " $9
            split($10, c, ","); for (i = 1; i <= 4; i++) cpu[k, i] += c[i]; runs[k]++
            if ($11 != "-") {top[k] = $11; inner[k] = $12}
            if ($15 != "") {xr[k] = xr[k] " " $5 / $15; xc[k] = xc[k] " " $16 / $14; bare[k] = bare[k] " " $15}
        }
        END {
            for (i = 1; i <= cases; i++) {
                k = order[i]; split(k, sn, SUBSEP); store = sn[1]; name = sn[2]
                r = median(rps[k])
                if (i == 1) {x = 1; xcpu = 1} else {x = median(xr[k]); xcpu = median(xc[k])}
                ratio[store, name] = x; ratio_cpu[store, name] = xcpu
                cpus = sprintf("%d%% (%d%%) / %d%% (%d%%)", cpu[k, 1] / runs[k], cpu[k, 2] / runs[k], cpu[k, 3] / runs[k], cpu[k, 4] / runs[k])
                if (store == "redis" || store == "bare-redis") {
                    limit = rb / top[k]; b = median(bare[k]); if (limit > b) limit = b
                    against = r / limit
                    target = (store == "bare-redis") ? "—" : (against >= 0.7 ? "met" : "missed") sprintf(" (%.2f vs 0.7)", against)
                    printf "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f + %.2f | %.0f | %.2f | %s | %.1f | %s |\n", store, name, r, median(p50[k]), median(p99[k]), x, xcpu, top[k], inner[k], limit, against, target, median(us[k]), cpus
                } else {
                    target = (store == "memory") ? ((x >= 0.9 ? "met" : "missed") sprintf(" (%.2f vs 0.9)", x)) : "—"
                    printf "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | — | — | — | %s | %.1f | %s |\n", store, name, r, median(p50[k]), median(p99[k]), x, xcpu, target, median(us[k]), cpus
                }
                if (bad[k] > 0 || errors[k] != "") notes = notes sprintf("\n- %s %s: %d non-2xx responses over the rounds; socket errors:%s", store, name, bad[k], (errors[k] == "" ? " none" : errors[k]))
            }
            plain = "none" SUBSEP "form handlers unguarded"
            printf "\nThe form case'"'"'s handlers do more than the bare one (a `Form` body parsed, a 22-character page); against the same handlers and the same traffic without the guard, form token issue+verify runs at %.2f (memory) and %.2f (redis) by requests/s, %.2f and %.2f by server CPU.\n", \
                ratio["memory", "form token issue+verify"] / ratio[plain], ratio["redis", "form token issue+verify"] / ratio[plain], \
                ratio_cpu["memory", "form token issue+verify"] / ratio_cpu[plain], ratio_cpu["redis", "form token issue+verify"] / ratio_cpu[plain]
            if (notes != "") print "\nNot every response was a 2xx:" notes
        }' "$figures"
    echo
    echo "Guard against bare redis-rs: the server CPU per request of each Redis case and of its baseline, which sends the same Redis commands with plain redis-rs over the same kind of connection and no guard (\`/bare-redis/...\`, bench/src/bare_redis.rs). Target: the guard adds at most 1 µs. Medians over the rounds; the difference is of the medians, then each round's own (the two run 10 s apart)."
    echo
    echo "| case | baseline | guard µs/request | baseline µs/request | difference µs | by round | target (≤ +1 µs) | guard requests/s | baseline requests/s |"
    echo "|---|---|---:|---:|---:|---|---|---:|---:|"
    awk -F'|' "$median_awk"'
        $15 == "" {next}
        {
            k = $3 SUBSEP $2
            us[k] = us[k] " " $14; rps[k] = rps[k] " " $5; run_us[k, $1] = $14
            bare_us[k] = bare_us[k] " " $16; bare_rps[k] = bare_rps[k] " " $15; run_bare_us[k, $1] = $16
            if ($1 > last) last = $1
        }
        $3 == "redis" && !($2 in seen) {seen[$2] = 1; order[++cases] = $2}
        END {
            for (i = 1; i <= cases; i++) {
                name = order[i]; g = "redis" SUBSEP name; b = "bare-redis" SUBSEP name
                rounds = ""
                if (b in us) {
                    baseline = "`/bare-redis` route"; base_us = median(us[b]); base_rps = median(rps[b])
                    for (r = 1; r <= last; r++) rounds = rounds sprintf("%s%+.2f", (r > 1 ? ", " : ""), run_us[g, r] - run_us[b, r])
                } else {
                    # No Redis command to send: the bare handler on either side of it.
                    baseline = "bare handler"; base_us = median(bare_us[g]); base_rps = median(bare_rps[g])
                    for (r = 1; r <= last; r++) rounds = rounds sprintf("%s%+.2f", (r > 1 ? ", " : ""), run_us[g, r] - run_bare_us[g, r])
                }
                diff = median(us[g]) - base_us
                target = (diff <= 1) ? "met" : sprintf("missed by %.2f µs", diff - 1)
                printf "| %s | %s | %.2f | %.2f | %+.2f | %s | %s | %.0f | %.0f |\n", name, baseline, median(us[g]), base_us, diff, rounds, target, median(rps[g]), base_rps
            }
        }' "$figures"
    echo
    printf 'redis-benchmark -c %s -n %s -t set, once a round before the Redis cases: median %.0f SET/s (p50 %s ms, p99 %s ms); all rounds: %s. A Redis case'"'"'s limit is the lower of the bare handler'"'"'s requests/s and that median divided by the case'"'"'s top-level commands per request.\n' \
        "$connections" "$benchmark_requests" "$rb" "$rb_p50" "$rb_p99" "$(awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}' "$results/redis-benchmark.raw")"
    echo
    echo "Redis calls per request in the last round, of each guard and of its bare redis-rs baseline (\`INFO commandstats\`; a script's inner calls are counted under their own names too), and the commands the server sent (top-level) and its scripts ran, from MONITOR in round 1. Same: every command's calls per request within 0.05 of the guard's."
    echo
    echo "| case | guard calls/request | guard top-level + in scripts | baseline calls/request | baseline top-level + in scripts | same commands |"
    echo "|---|---|---|---|---|---|"
    awk -F'|' -v last="$rounds" '
        function spaced(list) {gsub(/,/, ", ", list); gsub(/=/, " ", list); return list}
        $3 !~ /redis$/ || $15 == "" {next}
        {k = $3 SUBSEP $2}
        $11 != "-" {seen_by[k] = sprintf("%.2f + %.2f", $11, $12)}
        $1 == last {calls[k] = $13}
        $3 == "redis" && !($2 in listed) {listed[$2] = 1; order[++cases] = $2}
        END {
            for (i = 1; i <= cases; i++) {
                name = order[i]; g = "redis" SUBSEP name; b = "bare-redis" SUBSEP name
                if (!(b in calls)) {
                    printf "| %s | %s | %s | none (the bare handler) | — | — |\n", name, spaced(calls[g]), seen_by[g]
                    continue
                }
                delete per; delete commands; differs = ""
                n = split(calls[g], c, ","); for (j = 1; j <= n; j++) {split(c[j], f, "="); per[f[1], "g"] = f[2]; commands[f[1]] = 1}
                n = split(calls[b], c, ","); for (j = 1; j <= n; j++) {split(c[j], f, "="); per[f[1], "b"] = f[2]; commands[f[1]] = 1}
                for (command in commands) {
                    d = per[command, "g"] - per[command, "b"]
                    if (d > 0.05 || d < -0.05) differs = differs sprintf("%s%s %.3f vs %.3f", (differs == "" ? "" : ", "), command, per[command, "g"], per[command, "b"])
                }
                printf "| %s | %s | %s | %s | %s | %s |\n", name, spaced(calls[g]), seen_by[g], spaced(calls[b]), seen_by[b], (differs == "" ? "yes" : "no: " differs)
            }
        }' "$figures"
    echo
    echo "Memory flood ($flood_keys keys through \`MemoryStore::acquire\`, TTL $((flood_ttl_ms / 1000)) s, a store of its own, before any wrk case), the server's VmRSS:"
    echo
    echo "| moment | VmRSS MiB | entry_count |"
    echo "|---|---:|---:|"
    awk -v s="$rss_start" -v f="$rss_full" -v e="$rss_expired" -v r="$rss_refilled" -v a="$rss_reexpired" \
        -v ef="$entries_full" -v er="$entries_refilled" -v ee="$entries_expired" -v ea="$entries_reexpired" -v fs="$flood_seconds" 'BEGIN {
        printf "| started | %.1f | 0 |\n", s / 1024
        printf "| 1M live keys (filled in %.2f s) | %.1f | %d |\n", fs, f / 1024, ef
        printf "| expired and reclaimed | %.1f | %d |\n", e / 1024, ee
        printf "| 1M live keys again | %.1f | %d |\n", r / 1024, er
        printf "| expired again | %.1f | %d |\n", a / 1024, ea
    }'
} >"$report"
echo
cat "$report"
