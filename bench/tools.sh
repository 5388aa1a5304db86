# What the benchmark scripts share; sourced by bench/http.sh and bench/peers.sh.

# require COMMAND=PACKAGE...: installs what is missing, or says how.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/system-packages.sh"

# split_cores DESCRIPTION: on a machine with two cores or more, sets on_server_core and
# on_load_core to the taskset prefixes for CPU 0 and CPU 1, and core_split (for the report)
# to DESCRIPTION, the script's use of them; with one core, the prefixes to nothing and
# core_split to "not pinned".
split_cores() {
    if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
        on_server_core=(taskset -c 0)
        on_load_core=(taskset -c 1)
        core_split=$1
    else
        on_server_core=()
        on_load_core=()
        core_split="not pinned ($(nproc) CPU)"
    fi
}
