"""Instructions and nanoseconds per key of mmapbloom's hot paths against abloom, in one run,
and the 4-writer figure (4 processes ``update()`` disjoint quarters of one file against
one process doing all of it).

Run from the repository root (valgrind on ``PATH``; abloom installed for its rows)::

    python -m tools.bench.instructions                      # 200k of 1M keys, p = 1%
    python -m tools.bench.instructions --keys 200000 --capacity 1000000 --writers-keys 1000000

Instructions: each configuration runs once in a child process under
``valgrind --tool=callgrind --dump-before=getppid``; the child calls ``os.getppid()``
right before and right after each measured operation, so callgrind dumps the user-space
instructions of exactly that operation (and the Python loop around it, for per-item rows)
into its own part; divided by the number of keys. Stable to about 0.01% between runs on
one machine (no timing involved); system calls (``flock``) are not counted.

Nanoseconds: the same operations without valgrind, median of ``--rounds`` rounds (fresh
filters for every write round), in one child per configuration, configurations
interleaved round by round. The 4-writer figure: wall time from a start barrier to the
last writer's exit, median of ``--rounds``; lost bits are bits of the one-process file
missing from the 4-process one (must be 0).

Rows (per key): ``update`` (batch add into a fresh file), ``contains_many`` of present and
of absent keys, ``add`` with the lock per call (a ``for`` loop over a fresh file),
``add`` inside one ``write_lock()``, ``x in f`` loops (present, absent), and a bare
``flock(LOCK_EX | LOCK_NB)`` / ``flock(LOCK_UN)`` pair per key from a Python loop
(``fcntl.flock`` on a file of its own; the peer for what the lock adds: the line under the
table gives ("add, lock per call" - "add inside write_lock()") / "bare flock pair" in ns),
``update int64`` (a numpy int64 array of distinct random ints into a fresh file), and
``with write_lock(): pass`` pairs next to ``with threading.Lock(): pass`` pairs (the
cheapest lock a ``with`` statement can take: the floor of the statement itself).
abloom (``serializable=True``, in memory, no lock) answers with ``update``, its ``in`` loop
for ``contains_many``, its ``add`` for both ``add`` rows, and ``update`` of the same ints
as a list (it takes no array) for ``update int64``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional, Sequence

if __package__ in (None, ""):  # run as a file path: make ``tools.bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tools.bench"

from tools.bench.measure import (
    ROOT,
    add_each,
    callgrind_parts,
    child_env,
    contains_each,
    lock_pairs,
    make_keys,
    time_update_writers,
)  # noqa: E402

if ROOT not in sys.path:  # the working tree's mmapbloom, not another install
    sys.path.insert(0, ROOT)

__all__ = ["main", "measure_instructions", "measure_times", "measure_writers", "section"]

ROWS = (
    "update",
    "contains_many present",
    "contains_many absent",
    "add, lock per call",
    "add inside write_lock()",
    "x in f present",
    "x in f absent",
    "bare flock pair",
    "update int64",
    "with write_lock(): pass",
    "with threading.Lock(): pass",
)
#: --strategies when not given: the default and a blocked one
DEFAULT_STRATEGIES = "default,M3B2"


def configs(strategies: str) -> list[tuple[str, str, Optional[str]]]:
    """(label, library, strategy name or None) of each measured configuration: mmapbloom
    once per strategy (``default``: the library default), then abloom."""
    out: list[tuple[str, str, Optional[str]]] = []
    for name in (x.strip() for x in strategies.split(",") if x.strip()):
        out.append((f"mmapbloom {name}", "mmapbloom", None if name == "default" else name))
    return out + [("abloom", "abloom", None)]


# -- the child: runs the operations, marking each one --------------------------------------
def _ops(
    lib: str, strategy: Optional[str], keys: list[str], absent: list[str], capacity: int, p: float, workdir: str
) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(row, setup, op) triples; ``setup()`` returns the state ``op`` works on (via closure)."""
    state: dict[str, Any] = {}
    import numpy as np

    ints = np.random.default_rng(len(keys)).choice(1 << 62, len(keys), replace=False).astype(np.int64)
    int_list = ints.tolist()
    # a C callable returning one threading.Lock, as f.write_lock returns f's lock
    same_lock = itertools.repeat(threading.Lock()).__next__

    if lib == "abloom":
        import abloom

        def fresh() -> Any:
            return abloom.BloomFilter(capacity, p, serializable=True)

        def setup_built() -> None:
            state["f"] = fresh()
            state["f"].update(keys)

        def per_item(name: str) -> None:
            state[name] = fresh()

        return [
            ("update", lambda: state.__setitem__("u", fresh()), lambda: state["u"].update(keys)),
            ("contains_many present", setup_built, lambda: contains_each(state["f"], keys)),
            ("contains_many absent", lambda: None, lambda: contains_each(state["f"], absent)),
            ("add, lock per call", lambda: per_item("a"), lambda: add_each(state["a"], keys)),
            ("add inside write_lock()", lambda: per_item("w"), lambda: add_each(state["w"], keys)),
            ("x in f present", lambda: None, lambda: contains_each(state["f"], keys)),
            ("x in f absent", lambda: None, lambda: contains_each(state["f"], absent)),
            ("update int64", lambda: state.__setitem__("i", fresh()), lambda: state["i"].update(int_list)),
        ]
    import mmapbloom
    from mmapbloom import BloomConfig, BloomFilter

    config = BloomConfig.for_items(capacity, p, strategy=mmapbloom.get_strategy(strategy) if strategy else None)
    counter = [0]

    def fresh_file() -> Any:
        counter[0] += 1
        return BloomFilter.create(os.path.join(workdir, f"f{counter[0]}.blm"), config)

    def replace(name: str) -> None:
        old = state.pop(name, None)
        if old is not None:
            old.close()
        state[name] = fresh_file()

    def setup_built() -> None:
        replace("f")
        state["f"].update(keys)

    def add_locked(f: Any) -> None:
        add = f.add
        with f.write_lock():
            for k in keys:
                add(k)

    def warm_ints() -> None:
        replace("i")
        state["i"].update(ints[:1])  # the array path's first-use imports go to setup, not to the row

    def flock_pairs() -> None:
        import fcntl

        flock, ex, un = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
        # A file of its own: a writer of f1.blm in mutex mode holds LOCK_SH on it until it closes.
        with open(os.path.join(workdir, "flock-peer.lock"), "wb") as fh:
            fd = fh.fileno()
            for _ in keys:
                flock(fd, ex)
                flock(fd, un)

    return [
        ("update", lambda: replace("u"), lambda: state["u"].update(keys)),
        ("contains_many present", setup_built, lambda: state["f"].contains_many(keys)),
        ("contains_many absent", lambda: None, lambda: state["f"].contains_many(absent)),
        ("add, lock per call", lambda: replace("a"), lambda: add_each(state["a"], keys)),
        ("add inside write_lock()", lambda: replace("w"), lambda: add_locked(state["w"])),
        ("x in f present", lambda: None, lambda: contains_each(state["f"], keys)),
        ("x in f absent", lambda: None, lambda: contains_each(state["f"], absent)),
        ("bare flock pair", lambda: None, flock_pairs),
        ("update int64", warm_ints, lambda: state["i"].update(ints)),
        ("with write_lock(): pass", lambda: None, lambda: lock_pairs(state["f"].write_lock, keys)),
        ("with threading.Lock(): pass", lambda: None, lambda: lock_pairs(same_lock, keys)),
    ]


def _child(argv: Sequence[str]) -> None:
    mode, lib, strategy, n, capacity, p, seed, rounds, workdir = argv
    strat = None if strategy == "-" else strategy
    keys = make_keys(0, int(n), int(seed))
    absent = make_keys(int(capacity), int(n), int(seed))
    ops = _ops(lib, strat, keys, absent, int(capacity), float(p), workdir)
    if mode == "callgrind":
        print(json.dumps([row for row, _, _ in ops]), flush=True)
        for _, setup, op in ops:
            setup()
            os.getppid()  # callgrind dumps here: the part that ends is setup
            op()
            os.getppid()  # ... and here: the part that ends is the operation
        return
    out: dict[str, list[float]] = {row: [] for row, _, _ in ops}
    for _ in range(int(rounds)):
        for row, setup, op in ops:
            setup()
            t0 = time.perf_counter_ns()
            op()
            out[row].append((time.perf_counter_ns() - t0) / len(keys))
    print(json.dumps({row: statistics.median(v) for row, v in out.items()}), flush=True)


def _child_cmd(mode: str, lib: str, strategy: Optional[str], a: argparse.Namespace, workdir: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tools.bench.instructions",
        "--child",
        mode,
        lib,
        strategy or "-",
        str(a.keys),
        str(a.capacity),
        str(a.fp_rate),
        str(a.seed),
        str(a.rounds),
        workdir,
    ]


# -- the parent ---------------------------------------------------------------------------
def measure_instructions(a: argparse.Namespace) -> dict[str, dict[str, float]]:
    """{config label: {row: instructions per key}} (valgrind callgrind, one child each)."""
    result: dict[str, dict[str, float]] = {}
    for label, lib, strategy in configs(a.strategies):
        work = tempfile.mkdtemp(prefix="mmapbloom-cg.")
        try:
            out = os.path.join(work, "cg.out")
            cmd = [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getppid",
                f"--callgrind-out-file={out}",
                "--dump-instr=no",
                *_child_cmd("callgrind", lib, strategy, a, work),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env())
            if proc.returncode != 0:
                print(f"{label}: failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                continue
            rows = json.loads(proc.stdout.strip().splitlines()[-1])
            parts = callgrind_parts(out)
            # part 1: start-up and the first setup; then op i is part 2 + 2 i (setup i + 1
            # is part 3 + 2 i); the last part is the exit
            result[label] = {row: parts[2 + 2 * i] / a.keys for i, row in enumerate(rows)}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return result


def measure_times(a: argparse.Namespace) -> dict[str, dict[str, float]]:
    """{config label: {row: ns per key}} (median of rounds, one child each)."""
    result: dict[str, dict[str, float]] = {}
    for label, lib, strategy in configs(a.strategies):
        work = tempfile.mkdtemp(prefix="mmapbloom-ns.")
        try:
            proc = subprocess.run(
                _child_cmd("time", lib, strategy, a, work), capture_output=True, text=True, cwd=ROOT, env=child_env()
            )
            if proc.returncode != 0:
                print(f"{label}: failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                continue
            result[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return result


def measure_writers(n: int, capacity: int, p: float, seed: int, rounds: int, writers: int = 4) -> dict[str, Any]:
    """Wall time of ``writers`` processes ``update()``-ing disjoint contiguous slices of
    ``n`` keys into one file against one process doing all of it; lost bits (must be 0).
    Contiguous, not interleaved: a forked child that touches every 4th key's refcount
    copies every page of the parent's keys (copy-on-write), 4 times the single writer's
    page copies, which measured the fork and not the filter."""
    from mmapbloom import BloomConfig, BloomFilter

    keys = make_keys(0, n, seed)
    config = BloomConfig.for_items(capacity, p)
    ctx = mp.get_context("fork")
    times: dict[int, list[float]] = {1: [], writers: []}
    lost = 0
    work = tempfile.mkdtemp(prefix="mmapbloom-writers.")
    try:
        for r in range(rounds):
            for procs in (1, writers):
                path = os.path.join(work, f"w{r}-{procs}.blm")
                BloomFilter.create(path, config).close()
                parts = [keys[i * n // procs : (i + 1) * n // procs] for i in range(procs)]  # disjoint quarters
                times[procs].append(time_update_writers(ctx, path, parts))
            with (
                BloomFilter.open(os.path.join(work, f"w{r}-1.blm"), readonly=True) as one,
                BloomFilter.open(os.path.join(work, f"w{r}-{writers}.blm"), readonly=True) as many,
            ):
                a, b = one._cells(), many._cells()
                import numpy as np

                lost = max(lost, int(np.bitwise_count(a & ~b).sum()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    one_s, many_s = statistics.median(times[1]), statistics.median(times[writers])
    return {"keys": n, "writers": writers, "one_s": one_s, "many_s": many_s, "ratio": many_s / one_s, "lost_bits": lost}


def render(instr: dict[str, dict[str, float]], ns: dict[str, dict[str, float]], a: argparse.Namespace) -> str:
    lines = [
        f"{a.keys:,} of {a.capacity:,} URL-like str keys (46-90 bytes), p = {a.fp_rate}; "
        f"Python {sys.version.split()[0]}; instructions: valgrind callgrind (user space); ns: median of "
        f"{a.rounds} rounds",
        "",
    ]
    labels = [label for label, _, _ in configs(a.strategies)]
    head = "| op | " + " | ".join(f"{lab} instr | {lab} ns" for lab in labels) + " | default / abloom (instr, ns) |"
    lines += [head, "|---|" + "---:|" * (2 * len(labels) + 1)]
    for row in ROWS:
        cells = []
        for lab in labels:
            i = instr.get(lab, {}).get(row)
            t = ns.get(lab, {}).get(row)
            cells += [f"{i:,.0f}" if i is not None else "-", f"{t:,.0f}" if t is not None else "-"]
        d_i, a_i = instr.get(labels[0], {}).get(row), instr.get("abloom", {}).get(row)
        d_t, a_t = ns.get(labels[0], {}).get(row), ns.get("abloom", {}).get(row)
        ratio = f"{d_i / a_i:.2f}x, {d_t / a_t:.2f}x" if d_i and a_i and d_t and a_t else "-"
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {ratio} |")
    for lab in labels:
        t = ns.get(lab, {})
        if lab != "abloom" and all(
            t.get(r) for r in ("add, lock per call", "add inside write_lock()", "bare flock pair")
        ):
            extra = (t["add, lock per call"] - t["add inside write_lock()"]) / t["bare flock pair"]
            lines.append(f"\n{lab}: what the lock adds to an add costs {extra:.2f} bare flock pairs (ns)")
    return "\n".join(lines)


def section(keys: int, capacity: int, fp_rate: float, seed: int, rounds: int, writers_keys: int) -> tuple[str, int]:
    """The markdown section of ``python -m tools.bench --instructions``: the table and the
    4-writer line; with the number of lost bits (0 unless mmapbloom lost a write)."""
    a = argparse.Namespace(
        keys=keys, capacity=capacity, fp_rate=fp_rate, seed=seed, rounds=rounds, strategies=DEFAULT_STRATEGIES
    )
    instr = measure_instructions(a) if shutil.which("valgrind") else {}
    text = render(instr, measure_times(a), a)
    if not instr:
        text += "\n\n(valgrind is not on PATH: no instruction counts)"
    lost = 0
    if writers_keys:
        w = measure_writers(writers_keys, writers_keys, fp_rate, seed, rounds)
        lost = int(w["lost_bits"])
        text += (
            f"\n\n{w['writers']} writer processes, update() of disjoint slices of {w['keys']:,} keys: "
            f"{w['many_s']:.3f} s against {w['one_s']:.3f} s for one process ({w['ratio']:.2f}x), "
            f"lost bits {w['lost_bits']}"
        )
    return text, lost


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        _child(argv[1:])
        return 0
    ap = argparse.ArgumentParser(prog="python -m tools.bench.instructions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--capacity", type=int, default=1_000_000)
    ap.add_argument("--fp-rate", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--writers-keys", type=int, default=1_000_000, help="0 skips the 4-writer figure")
    ap.add_argument(
        "--strategies",
        default=DEFAULT_STRATEGIES,
        help=f"mmapbloom strategies, each its own configuration (default {DEFAULT_STRATEGIES})",
    )
    ap.add_argument("--skip-instructions", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args(argv)
    instr = {} if a.skip_instructions or shutil.which("valgrind") is None else measure_instructions(a)
    ns = measure_times(a)
    print(render(instr, ns, a))
    writers = None
    if a.writers_keys:
        writers = measure_writers(a.writers_keys, a.writers_keys, a.fp_rate, a.seed, a.rounds)
        print(
            f"\n{writers['writers']} writer processes, update() of disjoint slices of {writers['keys']:,} keys: "
            f"{writers['many_s']:.3f} s against {writers['one_s']:.3f} s for one process "
            f"({writers['ratio']:.2f}x), lost bits {writers['lost_bits']}"
        )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"instructions": instr, "ns": ns, "writers": writers}, fh, indent=1)
    return 1 if writers is not None and writers["lost_bits"] else 0


if __name__ == "__main__":
    sys.exit(main())
