# The one place that installs system packages for idem's scripts: sourced by
# scripts/test.sh (and so by .ci/run) and by the benchmark scripts.
#
# require COMMAND=PACKAGE...: every COMMAND that is not on PATH has its Debian PACKAGE
# installed, in one apt-get run, as root or through sudo. Where that cannot be done here,
# it says what to install (and which IDEM_* variable points at a binary instead) and exits.
#
# require_postgres: PostgreSQL's programs (the tests start servers of their own), found on
# PATH, in Debian's /usr/lib/postgresql/<version>/bin, or at IDEM_POSTGRES_BIN; installed
# the same way, without the cluster Debian would create and start for itself.

have() { command -v "$1" >/dev/null 2>&1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

can_install() {
    have apt-get && { [ "$(id -u)" = 0 ] || have sudo; }
}

# Where a binary may be named instead of installed, by the variable the tests read.
instead_of() {
    case $1 in
    redis-server) echo "or point IDEM_REDIS_SERVER at a redis-server binary" ;;
    chromedriver) echo "or point IDEM_CHROMEDRIVER at a chromedriver binary" ;;
    prometheus) echo "(for promtool) or point IDEM_PROMTOOL at a promtool binary" ;;
    postgresql) echo "or point IDEM_POSTGRES_BIN at the directory holding postgres and initdb" ;;
    esac
}

install_packages() {
    if ! can_install; then
        local package instead
        echo "missing, and this script cannot install them here: $*" >&2
        echo "Install them (Debian/Ubuntu: apt-get install -y $*; elsewhere the same programs from your system's packages)" >&2
        for package in "$@"; do
            instead=$(instead_of "$package")
            [ -z "$instead" ] || echo "  $package: $instead" >&2
        done
        echo "then run this again." >&2
        exit 1
    fi
    echo "installing: $*" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

require() {
    local missing=() pair
    for pair in "$@"; do
        have "${pair%%=*}" || missing+=("${pair#*=}")
    done
    ((${#missing[@]} == 0)) || install_packages "${missing[@]}"
}

have_postgres() {
    [ -n "${IDEM_POSTGRES_BIN:-}" ] && return 0
    have postgres && have initdb && return 0
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

require_postgres() {
    have_postgres && return 0
    if can_install; then
        as_root mkdir -p /etc/postgresql-common/createcluster.d
        echo "create_main_cluster = false" |
            as_root tee /etc/postgresql-common/createcluster.d/idem-tests.conf >/dev/null
    fi
    install_packages postgresql
}
