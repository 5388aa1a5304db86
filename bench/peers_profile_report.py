#!/usr/bin/env python3
"""The report of bench/peers_profile.sh: per row of bench/peers.sh, where idem's, its peer's
and the bare case's CPU per request goes, by bench/profile_report.py's categories.

    peers_profile_report.py CPU_TSV COMMIT DATE LOAD_BEFORE LOAD_AFTER SPLIT ROUNDS DURATION

CPU_TSV has one line per contestant: row, contestant, CPU µs per request, and the path of
the `perf script -F comm,tid,period,ip,sym,dso --no-inline` text of its profiled run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_report import CATEGORIES, Profile, differences  # noqa: E402


def main():
    tsv, commit, date, load_before, load_after, split, rounds, duration = sys.argv[1:9]
    rows = {}
    for line in open(tsv):
        row, contestant, cpu, path = line.rstrip("\n").split("\t")
        rows.setdefault(row, {})[contestant] = (float(cpu), Profile(path))
    # The HTTP rows share the bare server's run; the lock rows have their own bare generator.
    http_bare = next((r["bare"] for name, r in rows.items() if "bare" in r and "lock" not in name), None)

    out = ["# Where the CPU of each peers row goes — `bench/peers_profile.sh`\n"]
    out.append(
        f"Commit `{commit}`, {date}; load average {load_before} before, {load_after} after; "
        f"{split}. CPU per request: the server's (for the lock rows, the generator's) CPU time "
        f"over the requests (pairs) of a {duration} run, the lowest of {rounds}; its split "
        f"into categories: a further run under `perf record -e cpu-clock --call-graph "
        f"dwarf`, each category's share of the samples by self symbol times the CPU per "
        f"request (categories as in [`profiles.md`](profiles.md)). A share has a sampling "
        f"error of about ±0.1 µs here; the totals move by 1–2 µs between runs on this VM.\n"
    )
    for name, contestants in rows.items():
        bare = contestants.get("bare") or (http_bare if "lock" not in name else None)
        idem = contestants["idem"]
        peer_name = next(c for c in contestants if c not in ("bare", "idem"))
        peer = contestants[peer_name]
        unit = "pair" if "lock" in name else "request"
        out.append(f"## {name}: idem beside {peer_name}\n")
        header = "| category |" + (" bare µs |" if bare else "") + f" idem µs | {peer_name} µs | idem − {peer_name} |"
        out.append(header)
        out.append("|---|" + ("---:|" if bare else "") + "---:|---:|---:|")
        for cat in CATEGORIES:
            i = idem[1].share(idem[1].by_category, cat) * idem[0]
            p = peer[1].share(peer[1].by_category, cat) * peer[0]
            b = bare[1].share(bare[1].by_category, cat) * bare[0] if bare else 0.0
            if max(i, p, b) < 0.005:
                continue
            out.append(f"| {cat} |" + (f" {b:.2f} |" if bare else "") + f" {i:.2f} | {p:.2f} | {i - p:+.2f} |")
        out.append(
            f"| **CPU per {unit}** |" + (f" {bare[0]:.2f} |" if bare else "")
            + f" {idem[0]:.2f} | {peer[0]:.2f} | **{idem[0] - peer[0]:+.2f}** |"
        )
        if bare:
            out.append(
                f"\nOver bare: idem adds {idem[0] - bare[0]:.2f} µs, {peer_name} "
                f"{peer[0] - bare[0]:.2f} µs."
            )
        more = [r for r in differences(idem[1], peer[1], "by_symbol", idem[0], peer[0]) if r[0] > 0.05][:8]
        less = [r for r in reversed(differences(idem[1], peer[1], "by_symbol", idem[0], peer[0])) if r[0] < -0.05][:5]
        if more:
            out.append(f"\nSelf symbols where idem spends more than {peer_name} (µs per {unit}):\n")
            out.extend(f"- {added:+.2f} `{symbol[:140]}`" for added, symbol, _, _ in more)
        if less:
            out.append(f"\n… and less:\n")
            out.extend(f"- {added:+.2f} `{symbol[:140]}`" for added, symbol, _, _ in less)
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
