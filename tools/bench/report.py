"""The report: markdown tables (printed, and written to ``--out``, e.g. BENCHMARKS.md),
the environment line, and number formatting.

Only ratios between results of the same run are printed next to the times; no target or
verdict is applied (the reader judges). Byte sizes are formatted by
``tqdm.tqdm.format_sizeof`` (tqdm is a dependency of mmapbloom).
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import subprocess
import time
from typing import Optional, Sequence

import numpy as np
from tqdm import tqdm

from .extras import BUSY_ROWS, LOCK_ROWS
from .measure import COUNTING_OPS, ROOT, LibResult, Run

__all__ = ["OPS", "environment_line", "fmt_bytes", "fmt_ns", "fmt_ratio", "fmt_seconds", "md_table", "render"]

#: The operations of the main table, in column order, with their headings.
OPS: tuple[tuple[str, str], ...] = (
    ("bulk_add", "bulk add"),
    ("bulk_present", "bulk query present"),
    ("bulk_absent", "bulk query absent"),
    ("item_add", "per-item add"),
    ("item_query", "per-item query"),
)

#: mmapbloom's extra paths (the table "mmapbloom paths"), with their headings.
MMAPBLOOM_PATHS: tuple[tuple[str, str], ...] = (
    ("bulk_add", "`update(keys)`"),
    ("add_many", "`add_many(keys)`"),
    ("bulk_present", "`contains_many(present)`"),
    ("bulk_absent", "`contains_many(absent)`"),
    ("item_add", "`add(key)`, lock taken per call"),
    ("item_add_held", "`add(key)` inside `with f.write_lock():`"),
    ("item_query", "`key in f`"),
    ("might_contain", "`f.might_contain(key)` (bound method)"),
)

#: Peer in the first ratio column.
REFERENCE_PEER = "pybloomfiltermmap3"
#: Libraries whose data lives only in process memory (the "fastest in-memory peer" is one).
IN_MEMORY = ("rbloom", "abloom", "fastbloom-rs")


# -- formatting ----------------------------------------------------------------------------


def fmt_ns(value: Optional[float]) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def fmt_ratio(value: Optional[float]) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f}x"


def fmt_bytes(n: Optional[int]) -> str:
    """Decimal units by ``tqdm.format_sizeof``: ``1_198_157`` -> ``'1.20MB'``; ``'-'`` for None."""
    return "-" if n is None else str(tqdm.format_sizeof(n, "B", 1000))


def fmt_seconds(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:,.0f} us"
    if s < 1:
        return f"{s * 1e3:,.1f} ms"
    return f"{s:,.2f} s"


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return a / b


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- environment ------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return f"{rev}{' + uncommitted changes' if dirty else ''}" if rev else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def environment_line(run: Run) -> str:
    """CPU, OS, Python and library versions, mmapbloom's backend and strategies, git
    revision and the load average at start and end."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    libs = ", ".join(f"{a.name} {a.version()}" for a in run.adapters)
    strategies = ", ".join(a.strategy.name for a in run.own)
    return (
        f"CPU {cpu_model()} ({os.cpu_count()} logical CPUs), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}, mmh3 {dist_version('mmh3')}, "
        f"portalocker {dist_version('portalocker')}; {libs}; mmapbloom backend {run.args.backend_label}, "
        f"strategies {strategies or '-'}; mmapbloom at git {git_revision()}; "
        f"load average {run.load_at_start:.2f} at start, {load:.2f} at end"
    )


# -- tables ------------------------------------------------------------------------------------


def fastest_in_memory(results: dict[str, LibResult], op: str) -> Optional[LibResult]:
    best = [r for r in results.values() if r.adapter.lib in IN_MEMORY and r.ns(op) is not None]
    return min(best, key=lambda r: r.ns(op)) if best else None  # type: ignore[arg-type,return-value]


def run_rounds(results: dict[str, LibResult]) -> int:
    counts = [len(v) for r in results.values() for v in r.seconds.values()]
    return max(counts) if counts else 0


def main_tables(
    run: Run, results: dict[str, LibResult], ops: Sequence[tuple[str, str]], nkeys: int, nabsent: int
) -> str:
    """Times (ns per item), FP rate, false negatives and size per library; then the time
    ratios against the reference peer and the fastest in-memory peer; with several
    strategies, also against the first mmapbloom strategy."""
    rows = []
    for res in results.values():
        fp = res.fp_rate()
        note = " (errors: " + "; ".join(res.errors) + ")" if res.errors else ""
        rows.append(
            [res.adapter.label + note]
            + [fmt_ns(res.ns(op)) for op, _ in ops]
            + [
                "-" if fp is None else f"{fp:.3%}",
                "-" if res.false_negatives is None else str(res.false_negatives),
                fmt_bytes(res.size),
            ]
        )
    for name, why in run.missing.items():
        rows.append([f"{name}: missing ({why})"] + ["-"] * (len(ops) + 3))
    out = [
        f"ns per item, median of {run_rounds(results)} round(s); {nkeys:,} present and {nabsent:,} absent keys, "
        f"p = {run.args.fp_rate:g}.\n",
        md_table(
            ["library"] + [h for _, h in ops] + ["FP rate", "false neg.", "file / memory"],
            rows,
            ["l"] + ["r"] * (len(ops) + 3),
        ),
    ]
    ref = results.get(REFERENCE_PEER)
    best = {op: fastest_in_memory(results, op) for op, _ in ops}
    rrows = []
    for res in results.values():
        cells = []
        for op, _ in ops:
            vs_ref = ratio(res.ns(op), ref.ns(op) if ref else None)
            b = best[op]
            vs_best = ratio(res.ns(op), b.ns(op) if b else None)
            cells.append(f"{fmt_ratio(vs_ref)} / {fmt_ratio(vs_best)}")
        rrows.append([res.adapter.name] + cells)
    best_names = ", ".join(
        f"{h}: {b.adapter.name} ({fmt_ns(b.ns(op))} ns)" if b else f"{h}: none"
        for (op, h), b in zip(ops, best.values(), strict=True)
    )
    out.append(
        f"\nTime ratios, *vs {REFERENCE_PEER}* / *vs the fastest in-memory peer of that column* "
        f"(below 1 is faster). Fastest in-memory peer: {best_names}.\n"
    )
    out.append(md_table(["library"] + [h for _, h in ops], rrows, ["l"] + ["r"] * len(ops)))
    own = [r for r in results.values() if r.adapter.is_own]
    if len(own) > 1:
        first = own[0]
        srows = [[r.adapter.name] + [fmt_ratio(ratio(r.ns(op), first.ns(op))) for op, _ in ops] for r in own]
        out.append(f"\nStrategies: time ratio vs {first.adapter.name} (below 1 is faster).\n")
        out.append(md_table(["strategy"] + [h for _, h in ops], srows, ["l"] + ["r"] * len(ops)))
    return "\n".join(out)


def mmapbloom_paths_table(results: dict[str, LibResult]) -> str:
    """ns per item of every measured mmapbloom path, one column per strategy, and the cost of
    taking the lock per call."""
    own = [r for r in results.values() if r.adapter.is_own]
    if not own:
        return ""
    rows = [
        [label] + [fmt_ns(r.ns(op)) for r in own]
        for op, label in MMAPBLOOM_PATHS
        if any(r.ns(op) is not None for r in own)
    ]
    notes = []
    for r in own:
        held, locked = r.ns("item_add_held"), r.ns("item_add")
        if held and locked:
            notes.append(
                f"{r.adapter.name}: a per-call lock costs {locked - held:,.0f} ns per add "
                f"({locked / held:.2f}x the held-lock add)."
            )
    header = ["mmapbloom path"] + [f"{r.adapter.name} ns per item" if len(own) > 1 else "ns per item" for r in own]
    return md_table(header, rows, ["l"] + ["r"] * len(own)) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def open_table(run: Run) -> str:
    """Open (or load) + one query in a fresh process; for the big filters, the ratio to
    rbloom's load of the same number of bits."""
    if not run.open_rows:
        return ""
    rbloom_giant = next((r["child"] for r in run.open_rows if r["giant"] and r["lib"] == "rbloom"), None)
    rows = [
        [
            r["lib"],
            r["what"],
            fmt_bytes(r["size"]),
            fmt_seconds(r["child"]),
            fmt_seconds(r["wall"]),
            fmt_ratio(ratio(r["child"], rbloom_giant)) if r["giant"] else "",
            "yes" if r["hit"] else "NO",
        ]
        for r in run.open_rows
    ]
    return md_table(
        ["library", "filter", "file", "open/load + 1 query (in child)", "child wall time", "vs rbloom load", "found"],
        rows,
        ["l", "l", "r", "r", "r", "r", "l"],
    )


def proc_table(run: Run) -> str:
    if not run.proc_rows:
        return ""
    rows = [
        [
            r["lib"],
            "batch API" if r["mode"] == "bulk" else "per-item add",
            f"{r['keys']:,}",
            str(r["procs"]),
            fmt_seconds(r["wall"]),
            fmt_ratio(r["vs_one"]),
            f"{r['lost']:,}",
            f"{r['false_negatives']:,}",
        ]
        for r in run.proc_rows
    ]
    return md_table(
        [
            "library",
            "writers use",
            "keys",
            "processes",
            "wall (median)",
            "vs 1 process",
            "lost bits (max)",
            "false neg. (max)",
        ],
        rows,
        ["l", "l", "r", "r", "r", "r", "r", "r"],
    )


def counting_table(run: Run) -> str:
    """ns per item of each filter kind and operation, with the ratio to ``BloomFilter``
    of the same strategy for the same operation (``remove``, which ``BloomFilter`` lacks:
    to its ``add``)."""
    if not run.counting:
        return ""
    names = list(dict.fromkeys(name for name, _ in run.counting))
    rows = []
    for name in names:
        base_name = "BloomFilter " + name.rsplit(" ", 1)[-1]
        cells = []
        for op in COUNTING_OPS:
            ns = run.counting.get((name, op))
            if ns is None:
                cells.append("-")
                continue
            base = run.counting.get((base_name, "add" if op == "remove" else op))
            cells.append(f"{ns:,.0f}" + (f" ({ns / base:.2f}x)" if base and name != base_name else ""))
        rows.append([name] + cells)
    heads = [f"{op} (ratio to plain add)" if op == "remove" else op for op in COUNTING_OPS]
    return md_table(["filter"] + heads, rows, ["l"] + ["r"] * len(COUNTING_OPS))


def locks_table(run: Run) -> str:
    """ns per op of the per-item add (lock per call, lock held) and of a bare ``flock`` pair,
    alone and next to a busy thread, one column per strategy; then the ratios."""
    if not run.locks:
        return ""
    own = [a.name for a in run.own if (a.name, "locked") in run.locks]
    bare, bare_busy = run.locks.get(("flock", "bare")), run.locks.get(("flock", "bare+busy"))
    rows = []
    for key, label in LOCK_ROWS + BUSY_ROWS:
        if key.startswith("bare"):
            value = fmt_ns(bare if key == "bare" else bare_busy)
            rows.append([label] + [value] * len(own))
        else:
            rows.append([label] + [fmt_ns(run.locks.get((n, key))) for n in own])
    header = ["ns per op"] + own
    out = [md_table(header, rows, ["l"] + ["r"] * len(own)), ""]
    ref = run.main.get(REFERENCE_PEER)
    ref_add = ref.ns("item_add") if ref else None
    for n in own:
        locked, held = run.locks.get((n, "locked")), run.locks.get((n, "held"))
        lb, hb = run.locks.get((n, "locked+busy")), run.locks.get((n, "held+busy"))
        if not (locked and held):
            continue
        parts = [
            f"per-call lock costs {locked - held:,.0f} ns = {fmt_ratio(ratio(locked - held, bare))} a bare "
            f"flock pair ({fmt_ns(bare)} ns)",
            f"locked add / held add {fmt_ratio(ratio(locked, held))}",
            f"locked add next to a busy thread / alone {fmt_ratio(ratio(lb, locked))} "
            f"(held add: {fmt_ratio(ratio(hb, held))}; bare flock pair: {fmt_ratio(ratio(bare_busy, bare))})",
        ]
        if ref_add:
            parts.append(
                f"held add / {REFERENCE_PEER} per-item add of the main table "
                f"({fmt_ns(ref_add)} ns) {fmt_ratio(ratio(held, ref_add))}"
            )
        out.append(f"* {n}: " + "; ".join(parts) + ".")
    return "\n".join(out) + "\n"


def threads_table(run: Run) -> str:
    """One thread querying all keys vs two threads each querying its half, one handle."""
    if not run.threads:
        return ""
    rows = [
        [
            r["lib"],
            f"{r['keys']:,}",
            f"{r['chunk']:,}",
            fmt_seconds(r["one"]),
            fmt_seconds(r["two"]),
            fmt_ratio(r["speedup"]),
            f"{r['cpu_per_wall']:.2f}",
            f"{r['load']:.2f}",
        ]
        for r in run.threads
    ]
    return md_table(
        [
            "library",
            "keys",
            "keys per call",
            "1 thread, all keys",
            "2 threads, a half each",
            "throughput 2 threads / 1",
            "CPU s / wall s, 2 threads",
            "load average after",
        ],
        rows,
        ["l", "r", "r", "r", "r", "r", "r", "r"],
    )


def pure_table(run: Run) -> str:
    """mmapbloom's paths on the native backend (this process) and on the pure path (child)."""
    if not run.pure:
        return ""
    rows = []
    for name, res in run.main.items():
        pure = run.pure.get(name)
        if not res.adapter.is_own or not pure:
            continue
        for op, label in MMAPBLOOM_PATHS:
            native, slow = res.ns(op), pure.get(op)
            if native is None and slow is None:
                continue
            rows.append([name, label, fmt_ns(native), fmt_ns(slow), fmt_ratio(ratio(slow, native))])
    return md_table(
        ["row", "path", f"{run.args.backend_label} ns per item", "pure ns per item", "pure / native"],
        rows,
        ["l", "l", "r", "r", "r"],
    )


# -- the whole report ------------------------------------------------------------------------


def render(run: Run, command: str, elapsed: float) -> str:
    """The markdown report of ``run`` (what ``--out`` writes)."""
    a = run.args
    parts = [
        "# Benchmarks\n",
        f"Produced by `{command}` (after `pip install -e '.[bench]'`), on "
        f"{time.strftime('%Y-%m-%d', time.localtime(run.started))}; the whole run took {elapsed / 60:.1f} min. "
        "The docstring of `tools/bench/__init__.py` describes the method.\n",
        f"Environment: {environment_line(run)}.\n",
    ]
    if run.load_at_start > 0.5 * (os.cpu_count() or 1):
        parts.append(
            f"**The machine was busy** (load average {run.load_at_start:.2f} on {os.cpu_count()} CPUs at the "
            "start): absolute times are inflated; the ratios, measured in interleaved rounds, hold better.\n"
        )
    if run.missing:
        parts.append(
            "Missing (not installed or not importable, so not measured): "
            + "; ".join(f"{k} ({v})" for k, v in run.missing.items())
            + ".\n"
        )
    if a.counting:
        parts.append(
            f"## Counting filters: {a.keys:,} keys, p = {a.fp_rate:g}\n\n"
            f"ns per item, median of {a.rounds} round(s) (ratio to BloomFilter's time for the same "
            "operation and strategy). Per-item `add`, `in`, `remove` loops; batch `update` and "
            "`contains_many`; file-backed, in a temporary directory.\n\n" + counting_table(run) + "\n"
        )
    else:
        parts.append(
            "Method in short: the same seeded URL-like keys (46-90 bytes) for every library; absent keys "
            "are disjoint from present ones. Bulk = the library's batch API, else a list comprehension; "
            "per-item = a plain `for` loop over the single-item call. Adds use a fresh filter each round. "
            "File-backed filters live in a temporary directory on the local disk (page cache warm). Rounds "
            "are interleaved across libraries, so background load hits all of them alike.\n"
        )
        parts.append(f"## {a.keys:,} keys, p = {a.fp_rate:g}\n")
        parts.append(
            main_tables(
                run,
                run.main,
                OPS if "items" not in a.skip else OPS[:3],
                a.keys,
                a.absent if a.absent is not None else a.keys,
            )
            + "\n"
        )
        paths = mmapbloom_paths_table(run.main)
        if paths:
            parts.append("### mmapbloom's paths\n\n" + paths)
    if run.open_rows:
        parts.append(
            "## Opening an existing filter in a fresh process and answering one query\n\n"
            "Inside the child: from before the open (or load) call to after the query; the wall time adds "
            "interpreter start and imports. In-memory libraries load their saved file.\n\n" + open_table(run) + "\n"
        )
    if run.proc_rows:
        parts.append(
            "## Processes writing one file at once\n\n"
            "The keys split into disjoint slices, one per process, all started behind a barrier; wall "
            "time from the first start to the last end (median of rounds). Lost bits: bits set in the file "
            "that one process built which are missing from the file the concurrent processes built (same "
            "template file, so the same hash seeds).\n\n" + proc_table(run) + "\n"
        )
    if run.locks:
        parts.append(
            f"## The write lock per item\n\nns per op, median of {a.rounds} round(s) of {run.lock_ops:,} "
            "per-item adds to a fresh file-backed filter (sized for them), or of as many bare `flock` "
            "pairs on a file; then the same next to a Python thread spinning `while not stop: x += 1` in "
            "the same process (wall time of the loop: the busy thread takes its share of the GIL, so "
            "even a lock-free loop slows down; the held-lock row shows that floor).\n\n" + locks_table(run)
        )
    if run.threads:
        parts.append(
            "## Two threads querying one handle\n\nOne filter built with the main run's keys; one "
            "thread queries all of them with the batch query, in calls of the given size, against two "
            "threads started together, each querying its own half in the same calls (median of "
            f"{a.rounds} round(s)). Throughput ratio = one thread's time / two threads' time. CPU s / wall s: "
            "the process's CPU time over the wall time of the two-thread rounds (near 2 when both threads "
            "run at once; near 1 when they take turns, for the GIL or because other work holds the second "
            "core: compare the load average).\n\n" + threads_table(run) + "\n"
        )
    if run.counting and not a.counting:
        n = min(a.counting_keys, a.keys)
        parts.append(
            f"## Counting filters: {n:,} keys, p = {a.fp_rate:g}\n\n"
            f"ns per item, median of {a.rounds} round(s) (ratio to BloomFilter's time for the same "
            "operation and strategy; `remove` to BloomFilter's `add`, as BloomFilter has no remove and "
            "the counting filter has no batch remove). Per-item `add`, `in`, `remove` loops; batch "
            "`update` and `contains_many`.\n\n" + counting_table(run) + "\n"
        )
    if run.pure:
        parts.append(
            f"## mmapbloom native vs pure Python\n\nThe mmapbloom rows of the main run measured again "
            f"in a child process with `MMAPBLOOM_PURE=1` (backend there: {run.pure_backend}), same keys "
            f"and rounds, right after the other parts.\n\n" + pure_table(run) + "\n"
        )
    if run.union:
        u = run.union
        parts.append(
            f"## Union\n\n`a.union(b)` of two {fmt_bytes(u['bytes'])} mmapbloom files (fresh handles, page "
            f"cache warm): {fmt_seconds(u['seconds'])}, {u['gbps']:.2f} GB/s of one filter's bits "
            f"(median of {u['rounds']}).\n"
        )
    if run.big:
        parts.append(f"## {a.big_keys:,} keys, p = {a.fp_rate:g} (bulk operations)\n\n{run.big_note}\n")
        parts.append(main_tables(run, run.big, OPS[:3], a.big_keys, run.big_absent) + "\n")
    elif run.big_note:
        parts.append(f"## {a.big_keys:,} keys\n\n{run.big_note}\n")
    if run.failures:
        parts.append("## mmapbloom failures\n\n" + "\n".join(f"* {f}" for f in run.failures) + "\n")
    if run.profile_text:
        parts.append("## Where mmapbloom spends its time (cProfile, top 10 by own time)\n\n" + run.profile_text)
    return "\n".join(parts)
