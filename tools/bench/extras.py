"""The extra parts of a run: the cost of the write lock per item (against a bare ``flock``
pair, alone and next to a CPU-busy Python thread), two threads querying one handle, and
mmapbloom's pure-Python path measured in a child process (``MMAPBLOOM_PURE=1``).

Same rules as :mod:`.measure`: rounds interleaved across the variants, medians, and
ratios only between results of the same run.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

from .measure import ROOT, Run, child_env, log, record_error, timed

__all__ = [
    "BUSY_ROWS",
    "LOCK_ROWS",
    "THREAD_CHUNK",
    "busy_thread",
    "measure_locks",
    "measure_pure",
    "measure_threads",
    "pure_child_args",
    "emit_json",
]

#: Rows of the lock table, in order: (key, label). ``bare`` rows are per ``flock`` pair.
LOCK_ROWS: tuple[tuple[str, str], ...] = (
    ("locked", "`f.add(key)`, lock taken per call"),
    ("held", "`f.add(key)` inside `with f.write_lock():`"),
    ("bare", "bare `fcntl.flock(fd, LOCK_EX)` + `LOCK_UN` pair"),
)
#: The same rows measured next to a CPU-busy thread (key suffix ``+busy``).
BUSY_ROWS = tuple((key + "+busy", label + ", next to a busy thread") for key, label in LOCK_ROWS)
#: Keys per ``contains_many`` call in the thread comparison.
THREAD_CHUNK = 100_000
#: Peers also run through the thread comparison (their batch query, else a list comprehension).
THREAD_PEERS = ("pybloomfiltermmap3", "abloom")


class busy_thread:
    """Context manager: a daemon thread spinning ``while not stop: x += 1`` (pure Python,
    holding the GIL except when the interpreter hands it over) for the duration of the block."""

    def __init__(self) -> None:
        self.stop = False
        self.spins = 0
        self.thread = threading.Thread(target=self._spin, name="bench-busy", daemon=True)

    def _spin(self) -> None:
        x = 0
        while not self.stop:
            x += 1
        self.spins = x

    def __enter__(self) -> "busy_thread":
        self.thread.start()
        time.sleep(0.02)  # let it run, so the timed loop starts against a busy interpreter
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop = True
        self.thread.join()


def _flock_pairs(fd: int, n: int) -> None:
    flock, ex, un = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
    for _ in range(n):
        flock(fd, ex)
        flock(fd, un)


def measure_locks(run: Run, keys: list[str], workdir: str) -> None:
    """Per-item add with the lock taken per call, the same inside ``write_lock()``, and a bare
    ``flock`` pair on a file, each alone and next to a CPU-busy thread; per mmapbloom
    strategy (the bare pair once). Fills ``run.locks[(row, key)]`` with median ns per op."""
    n = min(len(keys), run.args.lock_keys)
    sample = keys[:n]
    times: dict[tuple[str, str], list[float]] = {}
    lock_file = os.path.join(workdir, "locks-bare.lock")
    open(lock_file, "wb").close()
    fd = os.open(lock_file, os.O_RDWR)
    log(f"[locks] {len(run.own)} strategies x {run.args.rounds} round(s), {n:,} adds, alone and next to a busy thread")
    try:
        for _ in range(run.args.rounds):
            for busy in (False, True):
                suffix = "+busy" if busy else ""
                for mm in run.own:
                    for key, method in (("locked", mm.item_add), ("held", mm.item_add_held)):
                        path = os.path.join(workdir, f"locks-{mm.name.replace(':', '-')}-{key}.bin")
                        if os.path.exists(path):
                            os.unlink(path)
                        try:
                            f = mm.create(path, n, run.args.fp_rate)
                        except Exception as exc:  # noqa: BLE001
                            record_error(run, None, mm, "create for locks", exc)
                            continue
                        try:
                            if busy:
                                with busy_thread():
                                    seconds = timed(lambda: method(f, sample))[0]
                            else:
                                seconds = timed(lambda: method(f, sample))[0]
                            times.setdefault((mm.name, key + suffix), []).append(seconds)
                        except Exception as exc:  # noqa: BLE001
                            record_error(run, None, mm, f"locks {key}{suffix}", exc)
                        finally:
                            f.close()
                            os.unlink(path)
                if busy:
                    with busy_thread():
                        seconds = timed(lambda: _flock_pairs(fd, n))[0]
                else:
                    seconds = timed(lambda: _flock_pairs(fd, n))[0]
                times.setdefault(("flock", "bare" + suffix), []).append(seconds)
    finally:
        os.close(fd)
        os.unlink(lock_file)
    run.lock_ops = n
    run.locks = {k: statistics.median(v) / n * 1e9 for k, v in times.items()}


def measure_threads(run: Run, keys: list[str], workdir: str) -> None:
    """One handle built with all keys; one thread querying them all with the batch query in
    chunks of :data:`THREAD_CHUNK` keys, against two threads each querying its own half in
    the same chunks, started together. Per mmapbloom strategy and the :data:`THREAD_PEERS`.
    Fills ``run.threads`` with rows: lib, keys, one-thread and two-thread seconds (medians)."""
    adapters = run.own + [a for a in run.adapters if a.lib in THREAD_PEERS]
    half = len(keys) // 2
    halves = [keys[:half], keys[half:]]
    chunk = max(1, min(THREAD_CHUNK, half or 1))

    def chunks(items: list[str]) -> list[list[str]]:
        return [items[i : i + chunk] for i in range(0, len(items), chunk)]

    parts = [chunks(h) for h in halves]
    everything = parts[0] + parts[1]
    log(f"[threads] {len(adapters)} libraries/strategies x {run.args.rounds} round(s), {len(keys):,} keys")
    for a in adapters:
        path = os.path.join(workdir, f"threads-{a.name.replace(':', '-')}.bin")
        if os.path.exists(path):
            os.unlink(path)
        try:
            f = a.create(path, len(keys), run.args.fp_rate)
            a.bulk_add(f, keys)
        except Exception as exc:  # noqa: BLE001
            record_error(run, None, a, "build for threads", exc)
            continue

        def one() -> None:
            for c in everything:
                a.bulk_query(f, c)

        def two() -> float:
            """Two threads, a half each; returns the process CPU seconds they took."""
            errors: list[BaseException] = []
            cpu0 = time.process_time()

            def work(mine: list[list[str]]) -> None:
                try:
                    for c in mine:
                        a.bulk_query(f, c)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(p,)) for p in parts]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu = time.process_time() - cpu0
            if errors:
                raise errors[0]
            return cpu

        walls: dict[str, list[float]] = {"one": [], "two": []}
        busy: list[float] = []  # process CPU seconds / wall seconds of the two-thread rounds
        try:
            for _ in range(run.args.rounds):
                walls["one"].append(timed(one)[0])
                seconds, cpu = timed(two)
                walls["two"].append(seconds)
                busy.append(cpu / seconds if seconds else float("nan"))
            t1, t2 = statistics.median(walls["one"]), statistics.median(walls["two"])
            run.threads.append(
                {
                    "lib": a.name,
                    "keys": len(keys),
                    "chunk": chunk,
                    "one": t1,
                    "two": t2,
                    "speedup": t1 / t2 if t2 else float("nan"),
                    "cpu_per_wall": statistics.median(busy),
                    "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"),
                }
            )
        except Exception as exc:  # noqa: BLE001
            record_error(run, None, a, "threads", exc)
        finally:
            a.close(f)
            if os.path.exists(path):
                os.unlink(path)


# -- the pure-Python path in a child ----------------------------------------------------------------


def pure_child_args(run: Run, out_json: str, workdir: str) -> list[str]:
    """Arguments of the child ``python -m tools.bench`` run: mmapbloom's rows of the main
    run only, same keys, rounds and strategies; results as JSON in ``out_json``."""
    a = run.args
    args = [
        "--libs",
        "mmapbloom",
        "--keys",
        str(a.keys),
        "--rounds",
        str(a.rounds),
        "--seed",
        str(a.seed),
        "--fp-rate",
        repr(a.fp_rate),
        "--big-keys",
        "0",
        "--procs",
        "",
        "--skip",
        "open,processes,union,big,profile,chart,locks,threads,counting,pure",
        "--workdir",
        workdir,
        "--emit-json",
        out_json,
    ]
    if a.absent is not None:
        args += ["--absent", str(a.absent)]
    if a.strategies:
        args += ["--strategies", ",".join(a.strategies)]
    if "items" in a.skip:
        args[args.index("--skip") + 1] += ",items"
    return args


def measure_pure(run: Run, workdir: str) -> None:
    """Run mmapbloom's rows of the main run again in a child with ``MMAPBLOOM_PURE=1``;
    fills ``run.pure`` (row name -> op -> ns per item) and ``run.pure_backend``."""
    out_json = os.path.join(workdir, "pure.json")
    child_dir = tempfile.mkdtemp(prefix="pure-", dir=workdir)
    env = child_env()
    env["MMAPBLOOM_PURE"] = "1"
    cmd = [sys.executable, "-m", "tools.bench"] + pure_child_args(run, out_json, child_dir)
    log("[pure] mmapbloom rows again in a child with MMAPBLOOM_PURE=1")
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=7200
    )
    if proc.returncode != 0 or not os.path.exists(out_json):
        run.failures.append(f"pure-path child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        log(f"ERROR pure-path child: {proc.stderr.strip()[-2000:]}")
        return
    with open(out_json) as fh:
        data = json.load(fh)
    os.unlink(out_json)
    run.pure_backend = str(data.get("backend"))
    run.pure = data.get("rows", {})


def emit_json(run: Run, path: str) -> None:
    """The child's side of :func:`measure_pure`: mmapbloom's ns per item by row and op."""
    rows: dict[str, dict[str, Optional[float]]] = {}
    for name, res in run.main.items():
        if res.adapter.is_own:
            rows[name] = {op: res.ns(op) for op in res.seconds}
    backend = str(getattr(run.own[0].mod, "BACKEND", "python")) if run.own else "?"
    with open(path, "w") as fh:
        json.dump({"backend": backend, "rows": rows}, fh)
