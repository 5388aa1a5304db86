#!/usr/bin/env bash
# Proof by crash of a queue consumer, at length: N kills (default 100) per mode of the
# consumer example (examples/consumer), which bills orders from a Redis stream with a
# consumer group, each with a row in its SQLite database and a charge through the payments
# example. Consumers are killed with SIGKILL after their commit and before their XACK,
# after the provider's answer, or anywhere, while two producers send; then the group
# drains. Prints, for the consumer with idem's run_once and without it, how many orders
# were applied twice, charged twice and lost, and the commit it ran on.
# Usage: bash scripts/consumer-crash.sh [N] [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

kills=${1:-100}
[ $# -gt 0 ] && shift
case $kills in
    '' | *[!0-9]*) echo "usage: bash scripts/consumer-crash.sh [N] [cargo test arguments]" >&2; exit 2 ;;
esac

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . || commit="$commit, with uncommitted changes"
echo "commit $commit; $kills kills per mode"
# The provider's binary, current, beside the test's.
cargo build --quiet -p example-payments --bin example-payments
# One mode at a time, so neither slows the other; the figures are the tests' own lines.
IDEM_CONSUMER_CRASHES=$kills cargo test -p example-consumer --test crash "$@" -- \
    --nocapture --test-threads 1 2>&1 | grep -oE 'consumers with.*|^test result.*|panicked.*|FAILED.*|seed.*'
