#!/usr/bin/env bash
# Proof by crash of the shop's outbound call, at length: N kills (default 100) per set-up
# of the shop, which charges each API order through the payments example (a process of
# its own) and is killed with SIGKILL right after the provider answered the charge,
# before the order and its record commit; the order is then retried against a restarted
# shop. Prints how many killed orders were charged twice with the outbound key derived
# from the order's record, and with a random key per call, and the commit it ran on.
# Usage: bash scripts/outbound-crash.sh [N] [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

kills=${1:-100}
[ $# -gt 0 ] && shift
case $kills in
    '' | *[!0-9]*) echo "usage: bash scripts/outbound-crash.sh [N] [cargo test arguments]" >&2; exit 2 ;;
esac

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . || commit="$commit, with uncommitted changes"
echo "commit $commit; $kills kills per set-up"
# The provider's binary, current, beside the test's.
cargo build --quiet -p example-payments --bin example-payments
# One set-up at a time, so neither slows the other; the figures are the tests' own lines.
IDEM_OUTBOUND_CRASHES=$kills cargo test -p example-webshop --test outbound_crash "$@" -- \
    --nocapture --test-threads 1 2>&1 | grep -oE 'outbound keys .*|^test result.*|panicked.*|FAILED.*'
