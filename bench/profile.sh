#!/usr/bin/env bash
# Where a guarded request's CPU goes beyond its bare baseline's, per guard case, on
# MemoryStore, in-process (bench/src/bin/guard_requests.rs: no sockets, no loopback TCP).
#
#   bench/profile.sh           # about 3 minutes; writes bench/results/profiles.md
#   bench/profile.sh form lock # only these cases (and their baselines)
#
# For each case and baseline: the CPU per request, task-clock of `perf stat` over a run
# of 2N requests minus one of N, divided by N (start-up cancels), each the lowest of
# IDEM_PROFILE_ROUNDS (5) rounds (other work on the machine only adds to it); then
# `perf record -e cpu-clock --call-graph dwarf` of a 2N run, its samples grouped by self
# symbol (bench/profile_report.py). N is IDEM_PROFILE_REQUESTS (100000);
# IDEM_PROFILE_WORK keeps the raw data there, IDEM_PROFILE_REPORT writes the report
# elsewhere. cpu-clock because this VM has no hardware counters; perf rather than
# callgrind for where the time goes because SHA-256 runs on the CPU's SHA instructions,
# which valgrind does not emulate. The build is niced, the runs are not.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
n=${IDEM_PROFILE_REQUESTS:-100000}
rounds=${IDEM_PROFILE_ROUNDS:-5}
report=${IDEM_PROFILE_REPORT:-$root/bench/results/profiles.md}
guarded=(avoid_repeat avoid_repeat_layer avoid_repeat_finish form form_replay_first
    form_replay idempotency idempotency_replay lock)
(($# > 0)) && guarded=("$@")

source "$root/bench/tools.sh"
require perf=linux-perf python3=python3

# Line tables, so that perf can unwind through and name inlined frames' callers.
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only nice -n 19 \
    cargo build --release --quiet -p idem-bench --bin guard_requests
bin=${CARGO_TARGET_DIR:-$root/target}/release/guard_requests

# Each case, then the baselines the chosen cases are compared with.
cases=("${guarded[@]}")
for case in "${guarded[@]}"; do
    case $case in
    form | form_replay_first) baseline=form_bare ;;
    form_replay) baseline=order_bare ;;
    *) baseline=bare ;;
    esac
    [[ " ${cases[*]} " == *" $baseline "* ]] || cases+=("$baseline")
done

# IDEM_PROFILE_WORK keeps the task-clock runs and `perf script` texts in that directory.
if [[ -n ${IDEM_PROFILE_WORK:-} ]]; then
    work=$IDEM_PROFILE_WORK
    mkdir -p "$work"
    rm -f "$work/taskclock.tsv"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
date=$(date -u '+%Y-%m-%d %H:%M UTC')

# Task-clock, every case once per round, so that a burst of other work on the machine
# falls on one round of a case and not on all of them.
for round in $(seq "$rounds"); do
    for case in "${cases[@]}"; do
        for requests in "$n" $((2 * n)); do
            perf stat -x, -e task-clock -o "$work/stat" "$bin" "$case" "$requests"
            msec=$(awk -F, '$3 == "task-clock" {print $1}' "$work/stat")
            printf '%s\t%s\t%s\t%s\n' "$case" "$round" "$requests" "$msec" >>"$work/taskclock.tsv"
        done
    done
    echo "round $round of $rounds: task-clock done" >&2
done

for case in "${cases[@]}"; do
    perf record -q -e cpu-clock --call-graph dwarf -o "$work/perf.data" \
        "$bin" "$case" $((2 * n)) 2>/dev/null
    perf script -i "$work/perf.data" --no-inline -F comm,tid,period,ip,sym,dso \
        >"$work/$case.txt" 2>/dev/null
    rm -f "$work/perf.data"
    echo "profiled $case" >&2
done

mkdir -p "$(dirname "$report")"
python3 "$root/bench/profile_report.py" "$work" "$n" "$(git rev-parse --short HEAD)" \
    "$date" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$report"
echo "wrote $report" >&2
