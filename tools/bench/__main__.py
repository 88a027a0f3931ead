"""Command line of the benchmark: ``python -m tools.bench`` from the repository root (see
the package docstring for the method and the commands)."""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import shutil
import sys
import tempfile
import time
from typing import Optional, Sequence

if __package__ in (None, ""):  # run as a file path: make ``tools.bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tools.bench"

from tools.bench import __doc__ as PACKAGE_DOC  # noqa: E402
from tools.bench.adapters import LIB_NAMES, load_adapters  # noqa: E402
from tools.bench.chart import write_chart  # noqa: E402
from tools.bench.extras import emit_json, measure_locks, measure_pure, measure_threads  # noqa: E402
from tools.bench.measure import (  # noqa: E402
    ROOT,
    Run,
    log,
    make_keys,
    measure_counting,
    measure_open,
    measure_ops,
    measure_processes,
    measure_union,
    profile_mmapbloom,
    release_filters,
    run_big,
)
from tools.bench.report import render  # noqa: E402

if ROOT not in sys.path:  # the working tree's mmapbloom, not another install
    sys.path.insert(0, ROOT)

__all__ = ["main", "parse_args"]

#: Parts that ``--skip`` accepts.
SKIPPABLE = ("items", "open", "processes", "union", "locks", "threads", "counting", "pure", "big", "profile", "chart")
#: --keys when not given: the main run, and the --counting run (5 per-item loops per kind).
DEFAULT_KEYS = 1_000_000
DEFAULT_COUNTING_KEYS = 200_000


def csv_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: Optional[Sequence[str]], prog: Optional[str] = None) -> argparse.Namespace:
    """Parse the options; exits with status 2 (argparse) on a bad one."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=(PACKAGE_DOC or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--keys",
        type=int,
        default=None,
        help=f"present keys of the main run (default {DEFAULT_KEYS:,}; with --counting {DEFAULT_COUNTING_KEYS:,})",
    )
    p.add_argument("--absent", type=int, default=None, help="absent keys queried (default: as many as --keys)")
    p.add_argument("--fp-rate", type=float, default=0.01, help="target false-positive rate p (default 0.01)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per measurement; the median is reported (default 3)")
    p.add_argument(
        "--big-keys",
        type=int,
        default=50_000_000,
        help="keys of the big run, bulk operations only; 0 skips it (default 50,000,000)",
    )
    p.add_argument("--big-absent", type=int, default=5_000_000, help="absent keys of the big run (default 5,000,000)")
    p.add_argument("--big-rounds", type=int, default=1, help="rounds of the big run (default 1)")
    p.add_argument(
        "--big-libs",
        default="mmapbloom,pybloomfiltermmap3,abloom,fastbloom-rs",
        help="libraries of the big run (default: mmapbloom and the fast peers)",
    )
    p.add_argument("--union-mb", type=int, default=512, help="MiB of bits per union file; 0 skips (default 512)")
    p.add_argument(
        "--open-mb",
        type=int,
        default=1024,
        help="MiB of bits of the filter opened vs rbloom's load; 0 skips (default 1024)",
    )
    p.add_argument("--procs", default="2,4", help="concurrent writer counts, besides 1 (default 2,4)")
    p.add_argument(
        "--proc-keys",
        type=int,
        default=None,
        help="keys added by the writer processes with the batch API (default --keys)",
    )
    p.add_argument(
        "--proc-item-keys",
        type=int,
        default=250_000,
        help="keys added by the writer processes with per-item adds (default 250,000)",
    )
    p.add_argument(
        "--lock-keys", type=int, default=50_000, help="per-item adds and flock pairs of the lock part (default 50,000)"
    )
    p.add_argument(
        "--counting-keys",
        type=int,
        default=DEFAULT_COUNTING_KEYS,
        help=f"keys of the counting-filter part of a full run (default {DEFAULT_COUNTING_KEYS:,})",
    )
    p.add_argument("--libs", default=",".join(LIB_NAMES), help=f"libraries (default all: {','.join(LIB_NAMES)})")
    p.add_argument(
        "--strategies",
        default="",
        help="mmapbloom hash strategies to measure, each as its own row, e.g. M3M2,M3MX,M3B2,M3BL "
        "(names resolved with mmapbloom.get_strategy; default: the library default only)",
    )
    p.add_argument(
        "--backend-label",
        default=None,
        help="free text naming the mmapbloom build in the environment line "
        "(default: mmapbloom.BACKEND if the library defines it, else 'python')",
    )
    p.add_argument(
        "--counting",
        action="store_true",
        help="only compare BloomFilter with CountingBloomFilter (4- and 8-bit counters), per strategy",
    )
    p.add_argument("--skip", default="", help=f"comma list of parts to skip: {','.join(SKIPPABLE)}")
    p.add_argument("--profile", action="store_true", help="add a cProfile of each mmapbloom path")
    p.add_argument(
        "--instructions",
        action="store_true",
        help="add instructions per key (valgrind callgrind) and ns of the hot paths against abloom, "
        "200k of 1M keys, and the 4-writer figure (tools/bench/instructions.py; minutes)",
    )
    p.add_argument("--seed", type=int, default=5, help="key seed (default 5)")
    p.add_argument("--workdir", default=None, help="directory for filter files (default: a new temporary one)")
    p.add_argument("--emit-json", default=None, help=argparse.SUPPRESS)  # the pure-path child's results
    p.add_argument("--out", default=None, help="write the markdown report here (e.g. BENCHMARKS.md)")
    p.add_argument("--chart", default=None, help="write the PNG bar chart here (e.g. docs/benchmark.png)")
    args = p.parse_args(argv)
    if args.keys is None:
        args.keys = DEFAULT_COUNTING_KEYS if args.counting else DEFAULT_KEYS
    args.libs = csv_list(args.libs)
    for name in args.libs:
        if name not in LIB_NAMES:
            p.error(f"unknown library {name!r}; known: {', '.join(LIB_NAMES)}")
    args.strategies = list(dict.fromkeys(csv_list(args.strategies)))
    if args.strategies and "mmapbloom" not in args.libs:
        p.error("--strategies needs mmapbloom in --libs")
    args.big_libs = csv_list(args.big_libs)
    args.skip = set(csv_list(args.skip))
    unknown = args.skip - set(SKIPPABLE)
    if unknown:
        p.error(f"unknown --skip part(s) {sorted(unknown)}; known: {', '.join(SKIPPABLE)}")
    args.procs = [int(x) for x in csv_list(args.procs)]
    if args.keys < 1 or args.rounds < 1 or args.big_rounds < 1:
        p.error("--keys, --rounds and --big-rounds must be at least 1")
    if not 0 < args.fp_rate < 1:
        p.error("--fp-rate must be between 0 and 1")
    return args


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Run the benchmark; print the report (and write ``--out`` and ``--chart``).

    Returns:
        0, or 1 if mmapbloom failed (an error, a false negative, a lost bit) or cannot be
        imported. Bad options exit with status 2.
    """
    args = parse_args(argv, prog)
    started = time.perf_counter()
    run = Run(args)
    run.load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if run.load_at_start > 0.5 * (os.cpu_count() or 1):
        log(
            f"warning: load average {run.load_at_start:.2f} on {os.cpu_count()} CPUs: other work competes "
            "with the benchmark; ratios hold better than absolute numbers"
        )
    libs = ["mmapbloom"] if args.counting else args.libs
    run.adapters, run.missing = load_adapters(libs, args.strategies)
    for name, why in run.missing.items():
        log(f"missing: {name} ({why})")
    if not run.own:
        log("mmapbloom itself cannot be imported (or no --strategies name is registered)")
        return 1
    if args.backend_label is None:
        args.backend_label = str(getattr(run.own[0].mod, "BACKEND", "python"))
    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix="mmapbloom-bench-") if own_workdir else args.workdir
    os.makedirs(workdir, exist_ok=True)
    try:
        nabsent = args.absent if args.absent is not None else args.keys
        log(f"generating {args.keys:,} present and {nabsent:,} absent keys (seed {args.seed})")
        keys = make_keys(0, args.keys, args.seed)
        if args.counting:
            measure_counting(run, keys, workdir)
        else:
            absent = make_keys(args.keys, nabsent, args.seed)
            run.main = measure_ops(
                run,
                run.adapters,
                keys,
                absent,
                args.keys,
                args.rounds,
                workdir,
                "main",
                with_items="items" not in args.skip,
                with_extras=True,
            )
            if "open" not in args.skip:
                measure_open(run, run.main, keys, workdir)
            release_filters(run.main)
            if "processes" not in args.skip and args.procs:
                measure_processes(run, run.adapters, keys, workdir)
            if "union" not in args.skip and args.union_mb > 0:
                measure_union(run, run.own[0], workdir)
            if "locks" not in args.skip and args.lock_keys > 0:
                measure_locks(run, keys, workdir)
            if "threads" not in args.skip:
                measure_threads(run, keys, workdir)
            if "counting" not in args.skip and args.counting_keys > 0:
                measure_counting(run, keys[: args.counting_keys], workdir)
            if "pure" not in args.skip:
                measure_pure(run, workdir)
            if "profile" not in args.skip and args.profile:
                for mm in run.own:
                    profile_mmapbloom(run, mm, keys, absent, workdir)
            del absent
        del keys
        gc.collect()
        if not args.counting and "big" not in args.skip and args.big_keys > 0:
            run_big(run, workdir)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    if args.emit_json:
        emit_json(run, args.emit_json)
    command = "python -m tools.bench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    report = render(run, command.strip(), elapsed)
    if args.instructions:
        from tools.bench.instructions import section

        log("measuring instructions per key (valgrind callgrind) and the 4-writer figure")
        text, lost = section(200_000, 1_000_000, args.fp_rate, args.seed, args.rounds, 1_000_000)
        report += "\n\n## Instructions and ns per key against abloom (tools/bench/instructions.py)\n\n" + text + "\n"
        if lost:
            run.failures.append(f"{lost} bits lost by 4 concurrent writers")
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
        log(f"report written to {args.out}")
    if args.chart and "chart" not in args.skip and not args.counting:
        write_chart(run, args.chart)
    log(f"total time {elapsed:.1f} s")
    if run.failures:
        log("mmapbloom FAILED: " + "; ".join(run.failures))
        return 1
    return 0


if __name__ == "__main__":
    from mmapbloom.termination import run_main  # SIGTERM/SIGHUP clean up like Ctrl-C (exit 128 + signal)

    sys.exit(run_main(main, "bench"))
