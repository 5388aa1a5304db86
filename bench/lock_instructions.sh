#!/usr/bin/env bash
# The instructions redis-server runs per lock pair (acquire + the release script), counted
# by callgrind, for the plain acquire (`SET NX PX GET`), the fenced acquire script, and a
# fenced acquire without Lua (`MULTI` `SET NX PX GET` `INCR` `EXEC`): BENCHMARKS.md
# section 6. Unlike pairs per second, these counts repeat within about 1 % on a busy machine.
#
#   bash bench/lock_instructions.sh     # a few minutes; prints one line per case
#
# Each case starts its own redis-server under valgrind (a free port, a temporary
# directory), feeds it the pairs with `redis-cli --pipe` on 50 reused lock names, and takes
# (Ir(12,000 pairs) − Ir(2,000 pairs)) / 10,000, so that start-up and shutdown cancel out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/tools.sh
require redis-server=redis-server redis-cli=redis-tools valgrind=valgrind

scripts=$root/idem-redis/src/scripts
release=$(cat "$scripts/release.lua")
fenced=$(cat "$scripts/acquire_fenced.lua")

# resp ARG...: one command in the Redis protocol.
resp() {
  printf '*%d\r\n' $#
  for arg in "$@"; do printf '$%d\r\n%s\r\n' ${#arg} "$arg"; done
}

# pairs CASE N RELEASE_SHA FENCED_SHA: N acquire + release pairs of CASE.
pairs() {
  local case=$1 n=$2 release_sha=$3 fenced_sha=$4 i lock fence owner
  for ((i = 0; i < n; i++)); do
    lock="{k$((i % 50))}:lock" fence="{k$((i % 50))}:fence" owner="owner-$((i % 50))"
    case $case in
      plain) resp SET "$lock" "$owner" NX PX 30000 GET ;;
      fenced) resp EVALSHA "$fenced_sha" 2 "$lock" "$fence" "$owner" 30000 ;;
      multi) resp MULTI; resp SET "$lock" "$owner" NX PX 30000 GET; resp INCR "$fence"; resp EXEC ;;
    esac
    resp EVALSHA "$release_sha" 1 "$lock" "$owner"
  done
}

# instructions CASE N: redis-server's instructions for starting, N pairs, and stopping.
instructions() {
  local dir port pid
  dir=$(mktemp -d)
  # A port nobody answers on.
  port=$((20000 + RANDOM % 20000))
  while redis-cli -p "$port" ping >/dev/null 2>&1; do port=$((20000 + RANDOM % 20000)); done
  valgrind --tool=callgrind --callgrind-out-file="$dir/out" \
    redis-server --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
  pid=$!
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
  local release_sha fenced_sha
  release_sha=$(redis-cli -p "$port" SCRIPT LOAD "$release")
  fenced_sha=$(redis-cli -p "$port" SCRIPT LOAD "$fenced")
  pairs "$1" "$2" "$release_sha" "$fenced_sha" | redis-cli -p "$port" --pipe >/dev/null
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$dir/out"
  rm -rf "$dir"
}

for case in plain fenced multi; do
  small=$(instructions "$case" 2000)
  large=$(instructions "$case" 12000)
  echo "$case: $(((large - small) / 10000)) instructions per pair"
done
