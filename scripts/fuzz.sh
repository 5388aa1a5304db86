#!/usr/bin/env bash
# The long run of the property tests of every parser that reads client input or stored
# bytes: the same tests `cargo test` runs with 256 cases each, here with PROPTEST_CASES
# cases each (default 1,000,000), one target at a time. Prints, per target, its
# properties, the cases run and the seconds taken; stops at the first panic or property
# violation, and exits non-zero. proptest then saves the failing case under
# idem-axum/proptest-regressions/, and every later `cargo test` runs it first: commit it.
#
# The build is the release profile with overflow checks and debug assertions on, so that
# whatever would panic in a debug build panics here too.
#
# Usage: bash scripts/fuzz.sh [TARGET...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."

export PROPTEST_CASES="${PROPTEST_CASES:-1000000}"
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true

# Each target: its name, then the test-name filters that select its properties.
targets=(
    "idempotency-key idempotency::key_header::tests::properties::"
    "client-identity client::trusted_proxy::tests::properties:: client::cookie::tests::properties:: client::header::tests::"
    "form-token-field form_token::field::tests::properties::"
    "stored-response-decoder idempotency::stored_response::tests::properties::no_stored_bytes"
    "stored-response-round-trip idempotency::stored_response::tests::properties::a_"
    "negotiation rejection::render::tests::properties:: idempotency::content_coding::tests::properties::"
)

selected=("$@")
cargo=(cargo test --release -p idem-axum --all-features --lib)
"${cargo[@]}" --no-run --quiet

printf '| target | properties | cases | seconds |\n|---|---:|---:|---:|\n'
total_cases=0
# Seconds since START, to a tenth.
since() { awk -v start="$1" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.1f", now - start }'; }
total_start=$EPOCHREALTIME
for target in "${targets[@]}"; do
    read -r name filters <<<"$target"
    if [ ${#selected[@]} -gt 0 ] && [[ " ${selected[*]} " != *" $name "* ]]; then
        continue
    fi
    log=$(mktemp)
    start=$EPOCHREALTIME
    # shellcheck disable=SC2086 # a list of filters
    if ! "${cargo[@]}" --quiet -- $filters >"$log" 2>&1; then
        cat "$log" >&2
        echo "$name: FAILED (the failing case is in the output above)" >&2
        exit 1
    fi
    seconds=$(since "$start")
    properties=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$log")
    rm "$log"
    if [ "${properties:-0}" -eq 0 ]; then
        echo "$name: no property matched $filters" >&2
        exit 1
    fi
    cases=$((properties * PROPTEST_CASES))
    total_cases=$((total_cases + cases))
    printf '| %s | %d | %d | %s |\n' "$name" "$properties" "$cases" "$seconds"
done
printf '| all | | %d | %s |\n' "$total_cases" "$(since "$total_start")"
echo "failures: 0"
