#!/usr/bin/env bash
# Proof by crash, at length: N crashes (default 100) per set-up of the payments example's
# server, each killed with SIGKILL right after a payment's transaction commits and before
# it answers, then the payment retried against a restarted server. Prints how many
# retries paid a second time with the idempotency records in SQLite and in PostgreSQL (each
# committed with the payment, in the payments' own database) and in Redis (stored after it;
# AOF with appendfsync always), and the commit it ran on. Needs redis-server and PostgreSQL
# (bash scripts/test.sh installs them); the test starts and stops its own servers.
# Usage: bash scripts/crash.sh [N] [extra cargo test arguments]
set -euo pipefail
source "$(dirname "$0")/crash-runs.sh"
crash_test "bash scripts/crash.sh [N] [cargo test arguments]" "crashes per set-up" \
    IDEM_CRASHES example-payments crash 'records in .*' "$@"
