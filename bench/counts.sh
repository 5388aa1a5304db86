#!/usr/bin/env bash
# What one guarded request costs in counts that noise cannot move, per MemoryStore case of
# bench/profile.sh, in-process (bench/src/bin/guard_requests.rs: no sockets):
#
#   bash bench/counts.sh           # about 6 minutes; writes bench/results/counts.md
#   bash bench/counts.sh form lock # only these cases (and their baselines)
#
# Each count is (count(2N) − count(N)) / N, so start-up and shut-down cancel out:
# - instructions: `valgrind --tool=callgrind` (N = IDEM_COUNTS_REQUESTS, 5000);
# - allocations: `valgrind --tool=dhat`, blocks allocated;
# - system calls and futex calls: `strace -f -c` (every thread);
# - context switches: `perf stat -e context-switches` (every thread).
# - sha256: of those instructions, SHA-256's (sha2's compression function, inclusive).
# Under valgrind SHA-256 runs without the CPU's SHA instructions, so its instructions count
# far more than on the machine (a 64-byte block about 4,000 in software): the sha256 column
# says how much of each case that is, to read the rest apart from it.
#
# IDEM_COUNTS_KINDS narrows the counts ("allocations", "instructions allocations", ...);
# IDEM_COUNTS_FEATURES builds the driver with features of idem-bench ("metrics": idem's
# metrics on, into an installed Prometheus recorder); IDEM_COUNTS_PROFILE=dev counts a
# debug build (the same allocations as release, far more instructions; no release build).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
n=${IDEM_COUNTS_REQUESTS:-5000}
report=${IDEM_COUNTS_REPORT:-$root/bench/results/counts.md}
guarded=(layered_bare avoid_repeat avoid_repeat_layer avoid_repeat_finish form form_replay_first
    form_replay idempotency idempotency_replay lock run_once run_once_replay)
(($# > 0)) && guarded=("$@")

source "$root/bench/tools.sh"
require valgrind=valgrind strace=strace perf=linux-perf

profile=${IDEM_COUNTS_PROFILE:-release}
nice -n 19 cargo build --profile "$profile" --quiet -p idem-bench --bin guard_requests \
    --features "${IDEM_COUNTS_FEATURES:-}"
[[ $profile == dev ]] && profile=debug
bin=${CARGO_TARGET_DIR:-$root/target}/$profile/guard_requests

cases=()
for case in "${guarded[@]}"; do
    case $case in
    form | form_replay_first) baseline=form_bare ;;
    form_replay) baseline=order_bare ;;
    run_once | run_once_replay) baseline=work_bare ;;
    *) baseline=bare ;;
    esac
    [[ " ${cases[*]} " == *" $baseline "* ]] || cases+=("$baseline")
    cases+=("$case")
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# count KIND CASE REQUESTS: one figure for a run of REQUESTS requests of CASE.
count() {
    local kind=$1 case=$2 requests=$3
    case $kind in
    instructions)
        valgrind --tool=callgrind --callgrind-out-file="$work/cg.$requests" "$bin" "$case" \
            "$requests" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
        ;;
    sha256) # of those instructions (the run just before), SHA-256's compression function
        callgrind_annotate --inclusive=yes "$work/cg.$requests" 2>/dev/null |
            awk '/:sha2::sha256::compress256 \[/ && !found {gsub(",", "", $1); found = $1}
                END {print found + 0}'
        ;;
    allocations)
        valgrind --tool=dhat --dhat-out-file="$work/dhat" "$bin" "$case" "$requests" 2>&1 \
            >/dev/null | sed -n 's/.*Total: *[0-9,]* bytes in \([0-9,]*\) blocks.*/\1/p' | tr -d ,
        ;;
    syscalls | futex)
        strace -f -c -o "$work/strace" "$bin" "$case" "$requests" >/dev/null 2>&1
        if [[ $kind == syscalls ]]; then
            awk '$NF == "total" {print $(NF - 2)}' "$work/strace"
        else
            awk '$NF == "futex" {print $4} END {print 0}' "$work/strace" | head -1
        fi
        ;;
    switches)
        perf stat -x, -e context-switches -o "$work/stat" "$bin" "$case" "$requests" >/dev/null
        awk -F, '$3 == "context-switches" {print $1}' "$work/stat"
        ;;
    esac
}

read -ra kinds <<<"${IDEM_COUNTS_KINDS:-instructions sha256 allocations syscalls futex switches}"
printf 'case' >"$work/table"
printf '\t%s' "${kinds[@]}" >>"$work/table"
printf '\n' >>"$work/table"
for case in "${cases[@]}"; do
    printf '%s' "$case" >>"$work/table"
    for kind in "${kinds[@]}"; do
        one=$(count "$kind" "$case" "$n")
        two=$(count "$kind" "$case" $((2 * n)))
        printf '\t%s' "$(awk -v a="$one" -v b="$two" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / n}')" \
            >>"$work/table"
    done
    printf '\n' >>"$work/table"
    echo "counted $case" >&2
done

mkdir -p "$(dirname "$report")"
{
    echo "# Counts per request, in-process, MemoryStore"
    echo
    echo "\`bash bench/counts.sh\`${IDEM_COUNTS_FEATURES:+ (features: $IDEM_COUNTS_FEATURES)}${IDEM_COUNTS_PROFILE:+ (profile: $IDEM_COUNTS_PROFILE)} at \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD || echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC'), N = $n: (count(2N) − count(N)) / N."
    echo
    awk -F'\t' 'NR == 1 {printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; printf "\n|---|"; for (i = 2; i <= NF; i++) printf "---:|"; printf "\n"; next}
        {printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; printf "\n"}' "$work/table"
} >"$report"
cat "$report"
