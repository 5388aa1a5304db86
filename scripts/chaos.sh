#!/usr/bin/env bash
# The chaos run at length: four instances of the chaos server (tests/src/bin/chaos_server.rs)
# on each store set-up, sent duplicates of every guarded kind while faults are injected, the
# executions counted from the servers' ledgers. Prints each run's report (Markdown) and the
# commit it ran on; exits 1 if a guarantee asserted on the durable set-ups (durable Redis,
# PostgreSQL) did not hold, or an answer of a Sentinel run with replica acks broke the
# bound with_replica_acks states.
#
#   1. durable Redis (AOF, appendfsync always): every fault, twice (REQUESTS requests)
#   2. durable Redis: ten instance kills, for the commit-to-record window's figure
#   3. Redis without persistence: three restarts
#   4. Sentinel, master + 1 replica: three failovers, without and with replica acks
#   5. the same with the replication link delayed 25 ms each way (a lagging replica)
#   6. PostgreSQL (fsync, synchronous_commit on), every guard on PostgresStore, the
#      idempotency routes' records completed in their commit's transaction: every fault
#      (restart with pg_ctl stop -m immediate, instance kill, pg_terminate_backend, link
#      stall, link reset), twice (REQUESTS requests)
#   7. PostgreSQL: ten instance kills, no double execution asserted even there
#
# Set-ups can be picked: CHAOS_SETUPS="postgres" runs 6 and 7 only (names: durable,
# volatile, sentinel, postgres; default all).
#
# Needs redis-server and PostgreSQL (bash scripts/test.sh installs them). Every process is started and
# stopped by the driver, by its pid; all traffic stays on 127.0.0.1.
# Usage: [CHAOS_SETUPS="..."] bash scripts/chaos.sh [REQUESTS]
#        (default 100000; the other runs scale with it)
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${1:-100000}
case $requests in
    '' | *[!0-9]*) echo "usage: bash scripts/chaos.sh [REQUESTS]" >&2; exit 2 ;;
esac

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . || commit="$commit, with uncommitted changes"
cargo build -q -p idem-tests --bin chaos --bin chaos_server
driver=target/debug/chaos

echo "# Chaos run: commit $commit, $(date -u +%Y-%m-%d), debug build"
setups=" ${CHAOS_SETUPS:-durable volatile sentinel postgres} "
status=0
run() {
    case $setups in
        *" $2 "*) echo; "$driver" "$@" || status=1 ;;
    esac
}
run --setup durable --rounds 2 --requests "$requests" --assert
run --setup durable --faults instance-kill --rounds 10 --requests $((requests / 5))
run --setup volatile --rounds 3 --requests $((requests / 5))
run --setup sentinel --rounds 3 --requests $((requests / 5))
run --setup sentinel --rounds 3 --requests $((requests / 5)) --replica-acks 1 --acks-within-ms 100 --assert
run --setup sentinel --rounds 3 --requests $((requests / 10)) --replication-delay-ms 25
run --setup sentinel --rounds 3 --requests $((requests / 20)) --replication-delay-ms 25 \
    --replica-acks 1 --acks-within-ms 500 --assert
run --setup postgres --rounds 2 --requests "$requests" --assert
run --setup postgres --faults instance-kill --rounds 10 --requests $((requests / 5)) --assert
exit $status
