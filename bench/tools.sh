# What the benchmark scripts share; sourced by bench/http.sh and bench/peers.sh.

# require_tools COMMAND=PACKAGE...: installs the Debian package of every command that is
# missing when run as root; otherwise says what to install and exits.
require_tools() {
    local missing=() pair
    for pair in "$@"; do
        command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
    done
    ((${#missing[@]})) || return 0
    if [[ $(id -u) != 0 ]]; then
        echo "missing: ${missing[*]}; install them (Debian: apt-get install -y ${missing[*]})" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

# split_cores: on a machine with two cores or more, sets on_server_core and on_load_core to
# the taskset prefixes for CPU 0 and CPU 1; with one core, to nothing, and returns 1.
split_cores() {
    if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
        on_server_core=(taskset -c 0)
        on_load_core=(taskset -c 1)
    else
        on_server_core=()
        on_load_core=()
        return 1
    fi
}
