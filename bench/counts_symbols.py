#!/usr/bin/env python3
"""What one guarded request adds over a baseline, instruction by instruction: callgrind's
self cost per symbol, (case(2N) - case(N)) - (baseline(2N) - baseline(N)), over N, grouped
into categories, then the largest symbols. Used for bench/results/counts-symbols.md:

    bin=target/release/guard_requests   # cargo build --release -p idem-bench --bin guard_requests
    for c in idempotency bare; do for n in 2000 4000; do
        valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$c.$n $bin $c $n; done; done
    python3 bench/counts_symbols.py /tmp/cg.idempotency.{2000,4000} /tmp/cg.bare.{2000,4000} 2000
"""
import collections
import re
import subprocess
import sys


def load(path):
    out = subprocess.run(['callgrind_annotate', '--threshold=100', path],
                         capture_output=True, text=True, check=True).stdout
    costs = collections.Counter()
    for line in out.splitlines():
        found = re.match(r'\s*([\d,]+) \([^)]*\)\s+(.*?) \[', line)
        if found:
            name = found.group(2).split(':', 1)[-1]
            costs[name] += int(found.group(1).replace(',', ''))
    return costs


def category(symbol):
    if 'sha2::' in symbol:
        return 'SHA-256 (software under valgrind)'
    if re.search(r'malloc|free|_int_|__rdl|__rust_(de)?alloc|realloc|unlink_chunk|tcache', symbol):
        return 'allocation'
    if re.search(r'memcpy|memmove|memset', symbol):
        return 'copies'
    for crate in ('idem_axum', 'idem_core'):
        if symbol.startswith(crate) or f'<{crate}' in symbol:
            return crate
    if 'tracing' in symbol:
        return 'tracing'
    if re.search(r'http::|axum|tower|hyper|bytes::|matchit|http_body', symbol):
        return 'http/axum/tower'
    if re.search(r'hashbrown|hash_one|foldhash', symbol):
        return 'hash maps'
    return 'other'


def main():
    case_n, case_2n, base_n, base_2n, n = sys.argv[1:6]
    n = int(n)
    costs = [load(path) for path in (case_n, case_2n, base_n, base_2n)]
    symbols = set().union(*costs)
    added = {s: ((costs[1][s] - costs[0][s]) - (costs[3][s] - costs[2][s])) / n for s in symbols}
    by_category = collections.Counter()
    for symbol, cost in added.items():
        by_category[category(symbol)] += cost
    print('| category | instructions a request |\n|---|---:|')
    for name, cost in by_category.most_common():
        print(f'| {name} | {cost:,.0f} |')
    print(f'| **all** | **{sum(added.values()):,.0f}** |\n')
    print('| symbol (self cost) | category | instructions a request |\n|---|---|---:|')
    for symbol, cost in sorted(added.items(), key=lambda kv: -abs(kv[1])):
        if abs(cost) < 100:
            break
        shown = symbol if len(symbol) <= 100 else symbol[:97] + '…'
        print(f"| `{shown.replace('|', '/')}` | {category(symbol)} | {cost:,.0f} |")


if __name__ == '__main__':
    main()
