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
source "$(dirname "$0")/crash-runs.sh"
build_provider
crash_test "bash scripts/consumer-crash.sh [N] [cargo test arguments]" "kills per mode" \
    IDEM_CONSUMER_CRASHES example-consumer crash 'consumers with.*|seed.*' "$@"
