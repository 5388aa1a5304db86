#!/usr/bin/env python3
"""The report of bench/profile.sh: where a guarded request's CPU goes beyond its bare
baseline's, from the task-clock runs and the `perf script` text that script leaves in a
directory.

    profile_report.py DIR N COMMIT DATE LOAD_BEFORE LOAD_AFTER > report.md

DIR holds `taskclock.tsv` (case, round, requests, task-clock ms) and `<case>.txt`, the
`perf script -F comm,tid,period,ip,sym,dso --no-inline` of `guard_requests <case> 2N`.
A case's CPU per request is (t(2N) - t(N)) / N, so start-up cancels, each t the lowest of
the rounds; a category's share is its share of the profile's sampled CPU (each sample
weighted by its period, by its self symbol); its microseconds per request are that share
times the CPU per request.
"""

import re
import statistics
import sys
from collections import defaultdict

# Each guarded case, what it is, and the unguarded case it is compared with.
CASES = [
    ("avoid_repeat", "`#[avoid_repeat]` window (expire), new client", "bare"),
    ("avoid_repeat_layer", "`AvoidRepeatLayer` window, new client", "bare"),
    ("avoid_repeat_finish", "`#[avoid_repeat(release = \"finish\")]`, new client", "bare"),
    ("form", "form token issue+verify (a page and its post)", "form_bare"),
    ("form_replay_first", "form token issue+verify, `with_replay(true)`", "form_bare"),
    ("form_replay", "form replay (a repeat post of a spent token)", "order_bare"),
    ("idempotency", "idempotency, first request (new key)", "bare"),
    ("idempotency_replay", "idempotency replay", "bare"),
    ("lock", "lock acquire+release, new name", "bare"),
]
BASELINES = {
    "bare": "`POST /bare`",
    "form_bare": "`GET /plain/form` + `POST /plain/order`",
    "order_bare": "`POST /plain/order`",
}
CATEGORIES = [
    "allocation",
    "memmove/memcpy",
    "SHA-256 and key hashing",
    "store (idem_core)",
    "hashbrown",
    "idem_axum + futures plumbing",
    "tracing",
    "http/axum/tower",
    "tokio",
    "kernel",
    "other",
]
ALLOCATOR = re.compile(
    r"^(malloc|free|cfree|realloc|calloc|_int_\w+|unlink_chunk\w*|malloc_consolidate"
    r"|sysmalloc|tcache_\w+|__libc_(malloc|free|realloc|calloc)|__rust_(alloc|dealloc|realloc)"
    r"|__rdl_\w+)(\.\w+)*$"
)
COPY = re.compile(r"^(__)?mem(move|cpy|pcpy)\w*$")
PLUMBING = {"idem_axum", "futures_util", "futures_core", "futures", "either", "pin_project"}
HTTP = {
    "axum", "axum_core", "http", "http_body", "http_body_util", "hyper", "tower",
    "tower_service", "tower_layer", "matchit", "bytes", "serde_urlencoded",
    "form_urlencoded", "percent_encoding", "mime", "sync_wrapper",
}
GENERIC = {"core", "alloc", "std"}
HASH = re.compile(r"::h[0-9a-f]{16}$")
WRAPPERS = ("core::ptr::drop_in_place<", "<", "&", "mut ", "dyn ")


def head_crate(symbol):
    """The crate of the type or function a symbol names: `<idem_axum::X as tower::Service>`
    and `core::ptr::drop_in_place<idem_axum::X>` are idem_axum's; `<T as
    tower::util::CloneService>` (a type parameter) is the trait's."""
    s = symbol
    changed = True
    while changed:
        changed = False
        for wrapper in WRAPPERS:
            if s.startswith(wrapper):
                s = s[len(wrapper):]
                changed = True
    head = re.split(r"::|<|>| ", s, maxsplit=1)[0]
    if re.fullmatch(r"[A-Z]\w?", head) and " as " in s:
        return re.split(r"::|<|>| ", s.split(" as ", 1)[1], maxsplit=1)[0]
    return head


def category(symbol, dso):
    if "kernel.kallsyms" in dso or dso.startswith("[vdso"):
        return "kernel"
    symbol = re.sub(r"@.*$", "", re.sub(r"^__rustc::", "", symbol))
    if symbol.startswith("__rust_no_alloc_shim"):
        return "allocation"
    # axum's `Handler::call` for a function is the handler's body, inlined.
    if symbol.startswith("<F as axum::handler::Handler"):
        return "other"
    if ALLOCATOR.match(symbol) or symbol.startswith(("alloc::alloc::", "alloc::raw_vec::")):
        return "allocation"
    if COPY.match(symbol):
        return "memmove/memcpy"
    crate = head_crate(symbol)
    # `Key::hashed` and `digest_parts` are SHA-256's buffering and padding, inlined.
    if crate == "sha2" or "sha256" in symbol.lower() or symbol.startswith("idem_core::key::"):
        return "SHA-256 and key hashing"
    if "Instrumented" in symbol or crate in PLUMBING:
        return "idem_axum + futures plumbing"
    if crate in ("tracing", "tracing_core"):
        return "tracing"
    if crate == "idem_core":
        return "store (idem_core)"
    if crate == "hashbrown":
        return "hashbrown"
    if crate in HTTP:
        return "http/axum/tower"
    if crate == "tokio":
        return "tokio"
    return "other"


FRAME = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)$")


def samples(path):
    """Each sample of a `perf script` text: its period and its frames, (symbol, dso),
    leaf first."""
    period, frames = None, []
    with open(path, errors="replace") as text:
        for line in text:
            if not line.strip():
                if period is not None:
                    yield period, frames
                period, frames = None, []
            elif line[0] in " \t" and period is not None:
                match = FRAME.match(line)
                if match:
                    frames.append((HASH.sub("", match.group(2)), match.group(3)))
            else:
                fields = line.split()
                period = int(fields[-1]) if fields and fields[-1].isdigit() else 0
    if period is not None:
        yield period, frames


def kernel_entry(frames):
    """What brought a kernel sample's thread into the kernel."""
    kernel = [symbol for symbol, dso in frames if "kernel.kallsyms" in dso]
    user = [symbol for symbol, dso in frames if "kernel.kallsyms" not in dso]
    if not kernel:
        return frames[0][0] + " (vDSO)"
    if any(symbol.startswith("asm_exc_page_fault") for symbol in kernel):
        return "page faults"
    if any(symbol.startswith(("asm_sysvec", "asm_common_interrupt")) for symbol in kernel):
        return "interrupts"
    calls = [symbol[len("__x64_sys_"):] for symbol in kernel if symbol.startswith("__x64_sys_")]
    if calls:
        return calls[-1] + " system call"
    if user:
        return re.sub(r"^(__GI_)?_*", "", user[0]) + " system call"
    return "other kernel work"


def caller(frames):
    """The first frame above an allocation or copy that belongs to a crate of its own,
    past the standard library's generic wrappers."""
    for symbol, dso in frames[1:]:
        if category(symbol, dso) in ("allocation", "memmove/memcpy"):
            continue
        if head_crate(symbol) in GENERIC or "libc.so" in dso:
            continue
        return symbol
    return "(none)"


class Profile:
    """One case's profile, in shares of its sampled CPU."""

    def __init__(self, path):
        self.by_category = defaultdict(int)
        self.by_symbol = defaultdict(int)
        self.by_caller = defaultdict(int)
        self.by_kernel_entry = defaultdict(int)
        self.total = 0
        for period, frames in samples(path):
            if not frames:
                continue
            symbol, dso = frames[0]
            cat = category(symbol, dso)
            self.total += period
            self.by_category[cat] += period
            self.by_symbol[symbol] += period
            if cat in ("allocation", "memmove/memcpy"):
                self.by_caller[(cat, caller(frames))] += period
            if cat == "kernel":
                self.by_kernel_entry[kernel_entry(frames)] += period

    def share(self, table, key):
        return table.get(key, 0) / self.total if self.total else 0.0


def cpu_per_request(path, n):
    """Each case's CPU per request, µs: (t(2N) - t(N)) / N from the lowest task-clock of the
    rounds at each N, and the per-round figures. Other work on the machine only ever adds
    to a run's task-clock (the two vCPUs share a core's caches, and often its execution
    units, with whatever runs beside), so the least disturbed run is the closest to the
    code's own cost; a per-round difference carries the noise of two runs."""
    runs = defaultdict(lambda: defaultdict(dict))
    with open(path) as tsv:
        for line in tsv:
            case, round_, requests, msec = line.split()
            runs[case][round_][int(requests)] = float(msec)
    cpu = {}
    for case, rounds in runs.items():
        complete = [r for r in rounds.values() if n in r and 2 * n in r]
        if not complete:
            continue
        lowest = (min(r[2 * n] for r in complete) - min(r[n] for r in complete)) * 1000.0 / n
        per_round = [(r[2 * n] - r[n]) * 1000.0 / n for r in complete]
        cpu[case] = (lowest, per_round)
    return cpu


def differences(guarded, baseline, table, us_g, us_b):
    """Each key of a profile table (a category, a symbol, a caller) with its µs per request
    in the guarded case and in the baseline, the most added first."""
    tg, tb = getattr(guarded, table), getattr(baseline, table)
    rows = []
    for key in set(tg) | set(tb):
        g = guarded.share(tg, key) * us_g
        b = baseline.share(tb, key) * us_b
        rows.append((g - b, key, g, b))
    return sorted(rows, key=lambda row: row[0], reverse=True)


def spread(values):
    return f"[{min(values):.2f}–{max(values):.2f}]"


def main():
    directory, n, commit, date, load_before, load_after = sys.argv[1:7]
    n = int(n)
    cpu = cpu_per_request(f"{directory}/taskclock.tsv", n)
    profiles = {}

    def profile(case):
        if case not in profiles:
            profiles[case] = Profile(f"{directory}/{case}.txt")
        return profiles[case]

    out = []
    out.append("# Where a guarded request's CPU goes — `bench/profile.sh`\n")
    out.append(
        f"Commit `{commit}`, {date}; load average {load_before} before, {load_after} "
        f"after. `guard_requests <case> N` in-process on `MemoryStore` (no sockets), "
        f"N = {n:,}; CPU per request = task-clock (t(2N) − t(N)) / N, each t the lowest "
        f"of the rounds (other work only ever adds to a run's task-clock: the vCPUs share "
        f"caches and cores with it), the per-round figures in brackets; categories by self symbol from `perf record -e cpu-clock --call-graph "
        f"dwarf` of the 2N run, as a share of its samples times the CPU per request. "
        f"\"Added\" is the guarded case minus its unguarded baseline. The split into "
        f"categories has a sampling error of about ±0.03 µs; a single round's "
        f"total moves as much as the brackets show [lowest–highest per-round "
        f"(t(2N) − t(N)) / N], more on a loaded machine.\n"
    )
    out.append("## Summary\n")
    out.append(
        "| case | baseline | bare µs [rounds] | guarded µs [rounds] | added µs "
        "| top 3 of the added µs |"
    )
    out.append("|---|---|---:|---:|---:|---|")
    details = []
    for case, label, base in CASES:
        if case not in cpu or base not in cpu:
            continue
        us_g, rounds_g = cpu[case]
        us_b, rounds_b = cpu[base]
        rows = differences(profile(case), profile(base), "by_category", us_g, us_b)
        top = ", ".join(f"{key} {added:.2f}" for added, key, _, _ in rows[:3] if added > 0)
        out.append(
            f"| {label} | `{base}` | {us_b:.2f} {spread(rounds_b)} | {us_g:.2f} "
            f"{spread(rounds_g)} | {us_g - us_b:.2f} | {top} |"
        )
        details.append((case, label, base, us_g, us_b, rounds_g, rounds_b))

    out.append(
        "\nCategories, by a sample's own (self) symbol: **allocation** glibc's malloc/free "
        "and their internals, `__rust_alloc`, `RawVec` growth; **memmove/memcpy**, mostly "
        "futures and requests moved by value; **SHA-256 and key hashing** `sha2` and "
        "`idem_core::key` (the digest's buffering, inlined); **store** every other "
        "`idem_core` symbol (`MemoryStore`, the lock); **hashbrown**; **idem_axum + futures "
        "plumbing** `idem_axum`, `futures_util` (`Either`, `Then`), `tracing`'s "
        "`Instrumented`, `run_to_completion`; **tracing** the rest of `tracing`; "
        "**http/axum/tower** `axum`, `http`, `hyper`, `tower`, `bytes`, urlencoding; "
        "**tokio**; **kernel** system calls, page faults, interrupts and the vDSO's clock "
        "reads; **other** the handlers' bodies (inlined into axum's `Handler::call`), "
        "the driver, base64, `core::hash`, `fmt`. Stores are dropped at exit, which frees "
        "every entry a run made: with no entry expiring within a run (windows 2 s, records "
        "5 s, tokens 30 min), that stands for the reaper's freeing of each one."
    )

    for case, label, base, us_g, us_b, rounds_g, rounds_b in details:
        g, b = profile(case), profile(base)
        out.append(f"\n## {label} — `{case}` beside `{base}` ({BASELINES[base]})\n")
        out.append(
            "CPU per request, each round's own (t(2N) − t(N)) / N: "
            + ", ".join(f"{v:.2f}" for v in rounds_g)
            + f" µs (baseline {', '.join(f'{v:.2f}' for v in rounds_b)} µs).\n"
        )
        out.append("| category | bare µs | guarded µs | added µs |")
        out.append("|---|---:|---:|---:|")
        for cat in CATEGORIES:
            cg = g.share(g.by_category, cat) * us_g
            cb = b.share(b.by_category, cat) * us_b
            if cg or cb:
                out.append(f"| {cat} | {cb:.2f} | {cg:.2f} | {cg - cb:+.2f} |")
        out.append(f"| **total** | {us_b:.2f} | {us_g:.2f} | {us_g - us_b:+.2f} |")
        out.append("\nSelf symbols adding the most (µs per request):\n")
        for added, symbol, _, _ in differences(g, b, "by_symbol", us_g, us_b)[:8]:
            out.append(f"- {added:+.2f} `{symbol[:150]}`")
        entries = [
            f"{key} {added:+.2f}"
            for added, key, _, _ in differences(g, b, "by_kernel_entry", us_g, us_b)[:4]
            if added > 0.02
        ]
        if entries:
            out.append("\nKernel time added, by what entered it: " + ", ".join(entries) + ".")
        callers = [row for row in differences(g, b, "by_caller", us_g, us_b)[:6] if row[0] > 0.02]
        if callers:
            out.append("\nAllocation and copies added, by their first caller outside `core`/`alloc`/`std`:\n")
            for added, (cat, symbol), _, _ in callers:
                out.append(f"- {added:+.2f} {cat} from `{symbol[:150]}`")
    print("\n".join(out))


if __name__ == "__main__":
    main()
