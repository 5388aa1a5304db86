#!/usr/bin/env bash
# The measurements behind the capacity model (idem-axum/src/guide/capacity.md; BENCHMARKS.md
# section 16): what one guarded request of each guard costs a Redis master (commands,
# round trips, scripts, redis-server CPU time at two depths of batching, with and without
# a replica), PostgreSQL (statements, transactions, requests per second with fsync on) and
# each store's memory per live entry; and this disk's fdatasync rate, which sets
# PostgreSQL's commit rate.
#
#   bash bench/capacity.sh              # about 10 minutes once built; writes bench/results/capacity.md
#   IDEM_CAPACITY=redis bash bench/capacity.sh     # one part: redis, postgres or memory
#
# The servers are started by the benchmark itself (the test harness's redis-server and
# PostgreSQL: a free loopback port, a temporary directory, stopped by pid). redis-server is
# pinned to CPU 1, the client (and redis-benchmark, and the replica) to CPU 0, where the
# machine has two CPUs. Settings (environment): IDEM_BENCH_ROUNDS (3; every figure is the
# median of the rounds, with the lowest and highest), IDEM_BENCH_OPS (100000 requests per
# case and round on Redis, a twentieth on PostgreSQL), IDEM_BENCH_TASKS (50),
# IDEM_CAPACITY_ENTRIES (1000000 entries per kind in memory, a tenth on Redis and
# PostgreSQL). The benchmark is bench/benches/capacity.rs; the model's arithmetic is in
# the guide.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/tools.sh
require redis-server=redis-server redis-benchmark=redis-tools redis-cli=redis-tools taskset=util-linux
require_postgres

results=$root/bench/results
report=$results/capacity.md
mkdir -p "$results"

# The build at the lowest priority; the measurements not niced.
nice -n 19 cargo bench -p idem-bench --bench capacity --no-run
pg_test_fsync=$(
    for dir in ${IDEM_POSTGRES_BIN:-} $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x $dir/pg_test_fsync ]] && echo "$dir/pg_test_fsync" && break
    done
    true
)
{
    echo "Measured $(date -u '+%Y-%m-%d %H:%M') UTC on commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!*.md' || echo ' (with uncommitted changes)'); $(nproc) CPUs, load average before $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    # The disk PostgreSQL commits to: its data directory is a temporary directory here.
    if [[ -n $pg_test_fsync && ${IDEM_CAPACITY:-postgres} == *postgres* ]]; then
        probe=$(mktemp)
        rates=$(for _ in 1 2 3; do
            "$pg_test_fsync" -s 2 -f "$probe" |
                awk '/one 8kB write/ {on = 1} on && $1 == "fdatasync" {printf "%.0f\n", $2; exit}'
        done | paste -sd/ | sed 's|/| / |g')
        echo "This disk: \`fdatasync\` after one 8 kB write (PostgreSQL's WAL flush on Linux), \`pg_test_fsync -s 2\` on a file in $(dirname "$probe"), three runs: $rates per second."
        rm -f "$probe"
        echo
    fi
    cargo bench -p idem-bench --bench capacity
    echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)."
} | tee "$report"
echo "Report: $report"
