"""The speed targets of issue 28 in one run, each peer measured in the same run: for every
target the measured ratio, the target and pass/fail.

Run from the repository root (peers from the ``bench`` extra: abloom, pybloomfiltermmap3)::

    python -m tools.bench.targets                       # 1M keys, p = 1%
    python -m tools.bench.targets --installed           # the mmapbloom the Python imports
    python -m tools.bench.targets --keys 2000 --rounds 1 --fresh-runs 1   # smoke size

Without ``--installed`` the working tree's mmapbloom is measured (the repository root goes
first on ``sys.path`` and on ``PYTHONPATH`` of the child processes); with it, whatever
mmapbloom the running Python imports (e.g. a venv with an older release installed, for
"before" figures). Only public API that existed before issue 28 is used (``BloomConfig``,
``BloomFilter.create/open``, ``update``, ``contains_many``, ``add``, ``write_lock``,
``get_strategy``, ``python -m mmapbloom check F --key K``), except the rows on the file lock
forced (``MMAPBLOOM_LOCK=flock``, ``WriteLock.mode``), which say "missing" before it.

The lock pair is given twice against a ``flock`` pair: through ``with f.write_lock(): pass``
from a Python loop (against ``fcntl.flock`` twice, from the same loop), and inside an add,
as the write path takes it: ("add, lock per call" - "add inside write_lock()") on the
default lock over the same difference with ``MMAPBLOOM_LOCK=flock``, all four in one run.

Times are medians of ``--rounds`` rounds (ns per key), peers interleaved round by round;
fresh-process rows are medians of ``--fresh-runs`` interleaved runs of each script, after
the measured package is byte-compiled (as a wheel install leaves it). A peer
that cannot be imported leaves its rows "missing". Instruction targets are measured by
``python -m tools.bench.instructions``. Exit status 0 (targets are reported, not enforced).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
from typing import Any, Iterator, Optional, Sequence

if __package__ in (None, ""):  # run as a file path: make ``tools.bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tools.bench"

from tools.bench.measure import (  # noqa: E402
    ROOT,
    add_each,
    contains_each,
    lock_pairs,
    make_keys,
    ns_per_key,
    time_update_writers,
    wall_seconds,
)


@contextlib.contextmanager
def forced_lock(mode: str) -> Iterator[None]:
    """``MMAPBLOOM_LOCK=mode`` while the block runs (read at each lock's first acquire), then
    what it was before."""
    from mmapbloom.locking import LOCK_ENV

    before = os.environ.get(LOCK_ENV)
    os.environ[LOCK_ENV] = mode
    try:
        yield
    finally:
        if before is None:
            del os.environ[LOCK_ENV]
        else:
            os.environ[LOCK_ENV] = before


def measure(a: argparse.Namespace) -> list[tuple[str, Optional[float], str, float]]:
    """(target, measured ratio or None, target text, bound) rows; ratio <= bound passes."""
    import mmapbloom
    from mmapbloom import BloomConfig, BloomFilter

    n, p = a.keys, a.fp_rate
    keys, absent = make_keys(0, n, a.seed), make_keys(n, n, a.seed)
    work = tempfile.mkdtemp(prefix="mmapbloom-targets.")
    count = [0]

    def fresh(strategy: Optional[str] = None) -> Any:
        count[0] += 1
        cfg = BloomConfig.for_items(n, p, strategy=mmapbloom.get_strategy(strategy) if strategy else None)
        return BloomFilter.create(os.path.join(work, f"f{count[0]}.blm"), cfg)

    abloom: Any = None
    pybloomfilter: Any = None
    try:
        abloom = importlib.import_module("abloom")
    except ImportError:  # a missing peer: its rows say "missing"
        pass
    try:
        pybloomfilter = importlib.import_module("pybloomfilter")
    except ImportError:
        pass
    t: dict[str, list[float]] = {}
    modes: set[Optional[str]] = set()

    def rec(name: str, v: float) -> None:
        t.setdefault(name, []).append(v)

    built = fresh()
    built.update(keys)
    for _ in range(a.rounds):
        for s in ("M3B2", "M3M2"):
            f = fresh(s)
            rec(f"update {s}", ns_per_key(functools.partial(f.update, keys), n))
            f.close()
        rec("cm present", ns_per_key(lambda: built.contains_many(keys), n))
        rec("cm absent", ns_per_key(lambda: built.contains_many(absent), n))
        f = fresh()
        rec("add locked", ns_per_key(functools.partial(add_each, f, keys), n))
        f.close()
        f = fresh()
        with f.write_lock():
            rec("add held", ns_per_key(functools.partial(add_each, f, keys), n))
        f.close()
        # the same two rows with the file lock forced: the flock pair as the write path takes it
        with forced_lock("flock"):
            f = fresh()
            rec("add locked flock", ns_per_key(functools.partial(add_each, f, keys), n))
            modes.add(getattr(f.write_lock(), "mode", None))  # None before issue 28
            f.close()
            f = fresh()
            with f.write_lock():
                rec("add held flock", ns_per_key(functools.partial(add_each, f, keys), n))
            f.close()

        rec("lock pair", ns_per_key(functools.partial(lock_pairs, built.write_lock, keys), n))

        def flocks() -> None:
            import fcntl

            with open(os.path.join(work, "flock"), "wb") as fh:
                fd = fh.fileno()
                for _ in keys:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    fcntl.flock(fd, fcntl.LOCK_UN)

        rec("flock pair", ns_per_key(flocks, n))
        if abloom is not None:
            ab = abloom.BloomFilter(n, p, serializable=True)
            rec("abloom update", ns_per_key(functools.partial(ab.update, keys), n))
            rec("abloom in present", ns_per_key(functools.partial(contains_each, ab, keys), n))
            rec("abloom in absent", ns_per_key(functools.partial(contains_each, ab, absent), n))
            ab2 = abloom.BloomFilter(n, p, serializable=True)
            rec("abloom add", ns_per_key(functools.partial(add_each, ab2, keys), n))
        if pybloomfilter is not None:
            pb = pybloomfilter.BloomFilter(n, p, os.path.join(work, f"pb{len(t.get('flock pair', []))}.bf"))
            rec("pybloom add", ns_per_key(functools.partial(add_each, pb, keys), n))
            pb.close()
    med = {k: statistics.median(v) for k, v in t.items()}

    # fresh processes: open + one query, interleaved; check --key vs python -c pass
    env = dict(os.environ)
    if not a.installed:
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        # as an installed wheel (pip compiles its modules at install): without this, a stale
        # or missing __pycache__ (PYTHONDONTWRITEBYTECODE=1, a fresh clone) makes every
        # fresh process compile the package from source, which no user pays
        import compileall

        compileall.compile_dir(os.path.dirname(mmapbloom.__file__), quiet=1)
    built.close()
    mm_path = os.path.join(work, "open.blm")
    f = BloomFilter.create(mm_path, BloomConfig.for_items(n, p))
    f.update(keys)
    f.close()
    mm_cmd = [sys.executable, "-c", f"from mmapbloom import BloomFilter\nf = BloomFilter.open({mm_path!r})\n'k' in f"]
    wall: dict[str, list[float]] = {}
    cmds = {"open mmapbloom": mm_cmd, "check": [sys.executable, "-m", "mmapbloom", "check", mm_path, "--key", "k"]}
    cmds["pass"] = [sys.executable, "-c", "pass"]
    if pybloomfilter is not None:
        pb_path = os.path.join(work, "open.bf")
        pb = pybloomfilter.BloomFilter(n, p, pb_path)
        pb.update(keys)
        pb.close()
        cmds["open pybloom"] = [
            sys.executable,
            "-c",
            f"import pybloomfilter\nf = pybloomfilter.BloomFilter.open({pb_path!r})\n'k' in f",
        ]
    for _ in range(a.fresh_runs):
        for name, cmd in cmds.items():
            wall.setdefault(name, []).append(wall_seconds(cmd, env, ROOT if not a.installed else work))
    wmed = {k: statistics.median(v) for k, v in wall.items()}

    # 4 writers vs 1 (fork; disjoint contiguous slices)
    ctx = mp.get_context("fork")
    wt: dict[int, list[float]] = {1: [], 4: []}
    for r in range(a.rounds):
        for procs in (1, 4):
            path = os.path.join(work, f"w{r}-{procs}.blm")
            BloomFilter.create(path, BloomConfig.for_items(n, p)).close()
            parts = [keys[i * n // procs : (i + 1) * n // procs] for i in range(procs)]
            wt[procs].append(time_update_writers(ctx, path, parts))
    with BloomFilter.open(os.path.join(work, "w0-1.blm"), readonly=True) as one:
        with BloomFilter.open(os.path.join(work, "w0-4.blm"), readonly=True) as four:
            lost_ok = bool(four.contains_many(keys).all()) and one.count_ones() == four.count_ones()

    def ratio(x: str, y: str, src: Optional[dict[str, float]] = None) -> Optional[float]:
        d = med if src is None else src
        return d[x] / d[y] if x in d and y in d else None

    w4 = statistics.median(wt[4]) / statistics.median(wt[1])
    in_add: Optional[float] = None  # (locked - held) on the default lock / the same on flock
    peer_flock = modes == {"flock"}  # the forced mode took effect (a row label says so)
    if peer_flock and med["add locked flock"] > med["add held flock"]:  # else noise: "missing"
        in_add = (med["add locked"] - med["add held"]) / (med["add locked flock"] - med["add held flock"])
    return [
        ("add, lock per call / abloom add", ratio("add locked", "abloom add"), "<= 3.0x", 3.0),
        ("add, lock per call / pybloomfiltermmap3 add", ratio("add locked", "pybloom add"), "<= 0.6x", 0.6),
        ("lock+unlock pair / flock pair (`with` statements)", ratio("lock pair", "flock pair"), "<= 0.1x", 0.1),
        (f"lock+unlock pair / flock pair (inside add; peer on flock: {peer_flock})", in_add, "<= 0.1x", 0.1),
        (f"4 writers / 1 writer wall (no lost bit: {lost_ok})", w4 if lost_ok else None, "<= 0.8x", 0.8),
        ("update M3B2 / abloom update", ratio("update M3B2", "abloom update"), "<= 1.5x", 1.5),
        ("update M3M2 / abloom update", ratio("update M3M2", "abloom update"), "<= 2.5x", 2.5),
        ("contains_many absent / abloom in loop", ratio("cm absent", "abloom in absent"), "<= 1.0x", 1.0),
        ("contains_many present / abloom in loop", ratio("cm present", "abloom in present"), "<= 1.2x", 1.2),
        ("fresh open+query / pybloomfiltermmap3", ratio("open mmapbloom", "open pybloom", wmed), "<= 2.0x", 2.0),
        ("check F --key k / python -c pass", ratio("check", "pass", wmed), "<= 3.0x", 3.0),
    ] + [(f"(ns) {k}", v, "-", float("inf")) for k, v in sorted(med.items())]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.targets", description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--fp-rate", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fresh-runs", type=int, default=9)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--installed", action="store_true", help="measure the mmapbloom the running Python imports")
    a = ap.parse_args(argv)
    import tools.bench.measure  # noqa: F401  (imported before sys.path loses the checkout)

    if a.installed:  # the checkout (cwd, "" or ROOT on sys.path) must not shadow the install
        sys.path[:] = [x for x in sys.path if os.path.abspath(x or os.curdir) != ROOT]
        sys.modules.pop("mmapbloom", None)
    elif ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import mmapbloom

    print(
        f"mmapbloom {getattr(mmapbloom, '__version__', '?')} from {os.path.dirname(mmapbloom.__file__)}, "
        f"backend {getattr(mmapbloom, 'BACKEND', '?')}; {a.keys:,} keys, p = {a.fp_rate}; Python {sys.version.split()[0]}"
    )
    print("| target | measured | target | result |\n|---|---:|---:|---|")
    for name, value, text, bound in measure(a):
        if text == "-":
            print(f"| {name} | {value:,.1f} | - | - |")
        elif value is None:
            print(f"| {name} | missing | {text} | - |")
        else:
            print(f"| {name} | {value:.2f}x | {text} | {'pass' if value <= bound else 'FAIL'} |")
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, ROOT)
    sys.exit(main())
