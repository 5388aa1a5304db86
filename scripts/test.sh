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

# Runs a command as root: directly, or through sudo.
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# install WHAT APT_PACKAGES BREW_FORMULA INSTEAD: installs WHAT with apt-get (as root or
# through sudo) or Homebrew (when a formula is given); otherwise says how, and what to
# point at INSTEAD, and stops.
install() {
    local what=$1 apt_packages=$2 brew_formula=$3 instead=$4
    if have apt-get && { [ "$(id -u)" = 0 ] || have sudo; }; then
        # shellcheck disable=SC2086 # a list of packages
        as_root apt-get update -qq &&
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $apt_packages
    elif [ -n "$brew_formula" ] && have brew; then
        brew install "$brew_formula"
    else
        echo "$what is missing and this script cannot install it here." >&2
        echo "Install it (Debian/Ubuntu: apt-get install $apt_packages${brew_formula:+; macOS: brew install $brew_formula})," >&2
        echo "or $instead, then run this again." >&2
        exit 1
    fi
}

if [ -z "${IDEM_REDIS_SERVER:-}" ] && ! have redis-server; then
    echo "redis-server not found: installing it" >&2
    install redis-server redis-server redis "point IDEM_REDIS_SERVER at a redis-server binary"
fi

# Debian keeps PostgreSQL's programs off PATH, in /usr/lib/postgresql/<version>/bin,
# where the tests look too.
have_postgres() {
    [ -n "${IDEM_POSTGRES_BIN:-}" ] && return 0
    have postgres && have initdb && return 0
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

if ! have_postgres; then
    echo "PostgreSQL not found: installing it" >&2
    if have apt-get && { [ "$(id -u)" = 0 ] || have sudo; }; then
        # Debian's package would also create a cluster of its own and start it as a
        # service; the tests start their own servers, so it is told to create none.
        as_root mkdir -p /etc/postgresql-common/createcluster.d
        echo "create_main_cluster = false" |
            as_root tee /etc/postgresql-common/createcluster.d/idem-tests.conf >/dev/null
    fi
    install PostgreSQL postgresql postgresql \
        "point IDEM_POSTGRES_BIN at the directory holding postgres and initdb"
fi

if [ -z "${IDEM_CHROMEDRIVER:-}" ] && ! have chromedriver; then
    echo "chromedriver not found: installing chromium and chromium-driver" >&2
    install chromedriver "chromium chromium-driver" "" \
        "point IDEM_CHROMEDRIVER at a chromedriver binary"
fi

# The shop's messages are partly Chinese: without a CJK font the browser test's
# screenshot shows boxes. Only where this script can install it, and never a reason to stop.
if have fc-list && ! fc-list :lang=zh | grep -q . && have apt-get && [ "$(id -u)" = 0 ]; then
    echo "no CJK font found: installing fonts-noto-cjk" >&2
    apt-get install -y -qq fonts-noto-cjk || echo "fonts-noto-cjk could not be installed" >&2
fi

exec cargo test --workspace --all-features "$@"
