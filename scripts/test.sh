#!/usr/bin/env bash
# Runs every test of the workspace. The suites start their own redis-server and
# PostgreSQL servers (a free port, a temporary directory), and the example shop's browser
# test drives Debian's chromium through chromedriver: this installs them where they are
# missing and this machine can (scripts/system-packages.sh); otherwise it says how, and
# stops. First it checks the Prometheus alerting rules in ops/prometheus with promtool
# (Debian's package `prometheus`), and runs their tests.
# Extra arguments go to `cargo test`. With none it tests the whole workspace (as CI does);
# arguments that select packages narrow the run to them (`bash scripts/test.sh -p idem-core
# --test x`), and any others (a test name, `-- --nocapture`) still apply to every package.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/system-packages.sh

[ -n "${IDEM_REDIS_SERVER:-}" ] || require redis-server=redis-server
require_postgres
[ -n "${IDEM_CHROMEDRIVER:-}" ] || require chromium=chromium chromedriver=chromium-driver
[ -n "${IDEM_PROMTOOL:-}" ] || require promtool=prometheus

# The alerting rules parse, and each alert fires and stays quiet on synthetic series.
promtool=${IDEM_PROMTOOL:-promtool}
"$promtool" check rules ops/prometheus/idem-rules.yml
(cd ops/prometheus && "$promtool" test rules idem-rules.test.yml)

# The shop's messages are partly Chinese: without a CJK font the browser test's
# screenshot shows boxes. Installed where this script can, and never a reason to stop.
if have fc-list && ! fc-list :lang=zh | grep -q . && can_install; then
    install_packages fonts-noto-cjk || echo "fonts-noto-cjk could not be installed" >&2
fi

# The whole workspace unless the arguments before a `--` choose packages themselves.
scope=(--workspace)
for arg in "$@"; do
    case "$arg" in
        --) break ;;
        -p* | --package | --package=* | --workspace | --all | --manifest-path*) scope=() ;;
    esac
done
exec cargo test "${scope[@]}" --all-features "$@"
