#!/usr/bin/env bash
# Runs every test of the workspace. The suites start their own redis-server and
# PostgreSQL servers (a free port, a temporary directory), and the example shop's browser
# test drives Debian's chromium through chromedriver: this installs them where they are
# missing and this machine can (scripts/system-packages.sh); otherwise it says how, and
# stops.
# Extra arguments go to `cargo test` (e.g. `bash scripts/test.sh -p idem-core`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/system-packages.sh

[ -n "${IDEM_REDIS_SERVER:-}" ] || require redis-server=redis-server
require_postgres
[ -n "${IDEM_CHROMEDRIVER:-}" ] || require chromium=chromium chromedriver=chromium-driver

# The shop's messages are partly Chinese: without a CJK font the browser test's
# screenshot shows boxes. Installed where this script can, and never a reason to stop.
if have fc-list && ! fc-list :lang=zh | grep -q . && can_install; then
    install_packages fonts-noto-cjk || echo "fonts-noto-cjk could not be installed" >&2
fi

exec cargo test --workspace --all-features "$@"
