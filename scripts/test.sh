#!/usr/bin/env bash
# Runs every test of the workspace. The suites start their own redis-server (a free port,
# a temporary directory, no persistence), so this installs Redis where it is missing and
# this machine can; otherwise it says how, and stops. The example shop's browser test
# drives Debian's chromium through chromedriver, installed the same way.
# Extra arguments go to `cargo test` (e.g. `bash scripts/test.sh -p idem-core`).
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }

install_redis() {
    if have apt-get && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server
    elif have apt-get && have sudo; then
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server
    elif have brew; then
        brew install redis
    else
        echo "redis-server is missing and this script cannot install it here." >&2
        echo "Install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)," >&2
        echo "or point IDEM_REDIS_SERVER at a redis-server binary, then run this again." >&2
        exit 1
    fi
}

if [ -z "${IDEM_REDIS_SERVER:-}" ] && ! have redis-server; then
    echo "redis-server not found: installing it" >&2
    install_redis
fi

install_chromium() {
    if have apt-get && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
    elif have apt-get && have sudo; then
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
    else
        echo "chromedriver is missing and this script cannot install it here." >&2
        echo "Install chromium and its driver (Debian/Ubuntu: apt-get install chromium chromium-driver)," >&2
        echo "or point IDEM_CHROMEDRIVER at a chromedriver binary, then run this again." >&2
        exit 1
    fi
}

if [ -z "${IDEM_CHROMEDRIVER:-}" ] && ! have chromedriver; then
    echo "chromedriver not found: installing chromium and chromium-driver" >&2
    install_chromium
fi

exec cargo test --workspace --all-features "$@"
