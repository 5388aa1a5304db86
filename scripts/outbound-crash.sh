#!/usr/bin/env bash
# Proof by crash of the shop's outbound call, at length: N kills (default 100) per set-up
# of the shop, which charges each API order through the payments example (a process of
# its own) and is killed with SIGKILL right after the provider answered the charge,
# before the order and its record commit; the order is then retried against a restarted
# shop. Prints how many killed orders were charged twice with the outbound key derived
# from the order's record, and with a random key per call, and the commit it ran on.
# Usage: bash scripts/outbound-crash.sh [N] [extra cargo test arguments]
set -euo pipefail
source "$(dirname "$0")/crash-runs.sh"
build_provider
crash_test "bash scripts/outbound-crash.sh [N] [cargo test arguments]" "kills per set-up" \
    IDEM_OUTBOUND_CRASHES example-webshop outbound_crash 'outbound keys .*' "$@"
