# What the crash scripts (crash.sh, outbound-crash.sh, consumer-crash.sh) share, sourced by
# each: it moves to the repository's root.
#
# crash_test USAGE UNIT VARIABLE PACKAGE TEST PATTERN [N] [cargo test arguments]: runs the
# test TEST of PACKAGE with VARIABLE=N (default 100), one test at a time, and prints the
# commit it runs on, then the test's lines that match PATTERN and its result. An N that is
# not a number prints USAGE and exits 2.
#
# build_provider: builds the payments example's binary, current, beside the tests'.

cd "$(dirname "${BASH_SOURCE[0]}")/.."

crash_test() {
    local usage=$1 unit=$2 variable=$3 package=$4 test=$5 pattern=$6
    shift 6
    local count=${1:-100}
    [ $# -gt 0 ] && shift
    case $count in
        '' | *[!0-9]*) echo "usage: $usage" >&2; exit 2 ;;
    esac
    local commit
    commit=$(git rev-parse --short HEAD)
    git diff --quiet HEAD -- . || commit="$commit, with uncommitted changes"
    echo "commit $commit; $count $unit"
    # One set-up at a time, so neither slows the other; the figures are the tests' own lines.
    env "$variable=$count" cargo test -p "$package" --test "$test" "$@" -- \
        --nocapture --test-threads 1 2>&1 | grep -oE "$pattern|^test result.*|panicked.*|FAILED.*"
}

build_provider() {
    cargo build --quiet -p example-payments --bin example-payments
}
