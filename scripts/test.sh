#!/usr/bin/env bash
# Runs every test of the workspace. The suites start their own redis-server and
# PostgreSQL servers (a free port, a temporary directory), so this installs Redis and
# PostgreSQL where they are missing and this machine can; otherwise it says how, and
# stops. The example shop's browser test drives Debian's chromium through chromedriver,
# installed the same way.
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

# Debian keeps PostgreSQL's programs off PATH, in /usr/lib/postgresql/<version>/bin,
# where the tests look too.
have_postgres() {
    [ -n "${IDEM_POSTGRES_BIN:-}" ] && return 0
    have postgres && have initdb && return 0
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

# Debian's package would also create a cluster of its own and start it as a service; the
# tests start their own servers, so the package is told to create none.
no_debian_cluster='mkdir -p /etc/postgresql-common/createcluster.d &&
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/idem-tests.conf'

install_postgres() {
    if have apt-get && [ "$(id -u)" = 0 ]; then
        sh -c "$no_debian_cluster"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
    elif have apt-get && have sudo; then
        sudo sh -c "$no_debian_cluster"
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
    elif have brew; then
        brew install postgresql
    else
        echo "PostgreSQL is missing and this script cannot install it here." >&2
        echo "Install it (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql)," >&2
        echo "or point IDEM_POSTGRES_BIN at the directory holding postgres and initdb, then run this again." >&2
        exit 1
    fi
}

if ! have_postgres; then
    echo "PostgreSQL not found: installing it" >&2
    install_postgres
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
