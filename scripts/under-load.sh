#!/usr/bin/env bash
# Runs one test N times while every core is kept busy, and counts the runs that failed:
# what a case that must hold under contention (a thousand writers on one SQLite file, two
# hundred waiters for one PostgreSQL lock) does when the machine is overloaded.
#
#   bash scripts/under-load.sh store_conformance sqlite::one_start_among_1000_concurrent_begins 50
#   IDEM_LOAD=8 bash scripts/under-load.sh store_conformance postgres::one_winner_among_200_concurrent_fair_attempts
#
# Arguments: the test target of idem-tests, the test's exact name, and N (default 50).
# IDEM_LOAD busy loops run beside it (default: four per core). A failed run's output is
# kept in target/under-load/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/system-packages.sh
usage="usage: bash scripts/under-load.sh TEST_TARGET TEST_NAME [N]"
target=${1:?$usage} name=${2:?$usage} count=${3:-50}
case $count in '' | *[!0-9]*) echo "$usage" >&2; exit 2 ;; esac
require redis-server=redis-server
require_postgres

binary=$(cargo test -p idem-tests --all-features --test "$target" --no-run --message-format=json 2>/dev/null |
    grep -F '"kind":["test"]' | grep -F "\"name\":\"$target\"" |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$binary" ] || { echo "could not build the test target $target" >&2; exit 1; }

burners=()
stop_burners() { [ ${#burners[@]} -eq 0 ] || kill "${burners[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for _ in $(seq 1 "${IDEM_LOAD:-$(($(nproc) * 4))}"); do
    (while :; do :; done) &
    burners+=($!)
done

logs=target/under-load
mkdir -p "$logs"
failed=0
echo "commit $(git rev-parse --short HEAD): $name, $count runs beside ${#burners[@]} busy loops"
for run in $(seq 1 "$count"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if (cd tests && "$binary" "$name" --exact) > "$logs/run.log" 2>&1; then
        echo "run $run: ok (load $load)"
    else
        failed=$((failed + 1))
        mv "$logs/run.log" "$logs/failed-$run.log"
        echo "run $run: FAILED (load $load), output in $logs/failed-$run.log"
    fi
done
echo "$((count - failed)) of $count passed"
[ "$failed" -eq 0 ]
