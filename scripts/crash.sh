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
cd "$(dirname "$0")/.."

crashes=${1:-100}
[ $# -gt 0 ] && shift
case $crashes in
    '' | *[!0-9]*) echo "usage: bash scripts/crash.sh [N] [cargo test arguments]" >&2; exit 2 ;;
esac

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . || commit="$commit, with uncommitted changes"
echo "commit $commit; $crashes crashes per set-up"
# One set-up at a time, so neither slows the other; the figures are the tests' own lines.
IDEM_CRASHES=$crashes cargo test -p example-payments --test crash "$@" -- \
    --nocapture --test-threads 1 2>&1 | grep -oE 'records in .*|^test result.*|panicked.*|FAILED.*'
