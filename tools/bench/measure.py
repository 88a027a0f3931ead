"""Timing: the keys, the per-library operations, opening in a fresh process, concurrent
writer processes, union, cProfile, and the counting-filter comparison.

Every time is the median over ``--rounds`` rounds. Rounds are interleaved library by
library (and strategy by strategy), so a burst of load on the machine hits each alike, and
ratios are always between results measured in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import glob
import io
import math
import multiprocessing as mp
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np  # a runtime dependency of mmapbloom

from .adapters import Adapter, MmapBloomAdapter

__all__ = [
    "ROOT",
    "LibResult",
    "Run",
    "add_each",
    "callgrind_parts",
    "child_env",
    "contains_each",
    "count_true",
    "log",
    "make_keys",
    "ns_per_key",
    "measure_counting",
    "measure_open",
    "measure_ops",
    "measure_processes",
    "measure_union",
    "profile_mmapbloom",
    "release_filters",
    "run_big",
    "time_update_writers",
    "timed",
    "update_writer",
    "wall_seconds",
]

#: The repository root: first on ``sys.path`` (set by ``__main__``) and on ``PYTHONPATH``
#: of child processes, so the working tree's mmapbloom is measured.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Operations that add to a fresh filter each round.
ADD_OPS = ("bulk_add", "add_many", "item_add", "item_add_held")

#: Shortest and longest key, in bytes (ASCII, so characters too).
KEY_MIN_BYTES = 46
KEY_MAX_BYTES = 90
#: Keys are drawn in blocks of this many ids, each block from its own seeded generator, so
#: key i is the same whatever the count asked for (the 1M keys are a prefix of the 50M).
KEY_BLOCK = 1 << 16
_PATH_WORDS = ("news", "blog", "shop", "docs", "wiki", "img", "api", "item", "post", "tag", "user", "feed")
_TLDS = ("com", "org", "net", "io", "de")

#: Bytes per key that the big run needs while it runs: the str key and its list slot
#: (about 130), plus the bytes copy that a batch call may make of it (about 120).
BIG_BYTES_PER_KEY = 260


# -- keys ---------------------------------------------------------------------------------


def make_keys(start: int, count: int, seed: int) -> list[str]:
    """Keys with ids ``start .. start + count - 1``: ``https://HOST/WORD/ID/FILLER``.

    Each key is 46 to 90 bytes long (uniform); HOST and WORD come from small fixed
    vocabularies; ID is the id in hex, so keys with different ids differ (HOST, WORD and
    ID contain no ``/``); FILLER is cut from a seeded random pool. Deterministic in
    ``(id, seed)``. Cost: about 1 us per key.
    """
    rng0 = np.random.default_rng([seed, 0xB10])
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    hosts = []
    for _ in range(512):  # www. + 4..9 letters + . + tld: at most 19 bytes
        name = letters[rng0.integers(0, 26, int(rng0.integers(4, 10)))].tobytes().decode()
        hosts.append(f"www.{name}.{_TLDS[int(rng0.integers(0, len(_TLDS)))]}")
    prefixes = [f"https://{h}/{w}/" for h in hosts for w in _PATH_WORDS]  # at most 33 bytes
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789-_.", dtype=np.uint8)
    pool = alphabet[np.random.default_rng([seed, 0xF11]).integers(0, len(alphabet), 1 << 20)].tobytes().decode()
    span = KEY_MAX_BYTES - KEY_MIN_BYTES + 1
    out: list[str] = []
    append = out.append
    if count <= 0:
        return out
    for block in range(start // KEY_BLOCK, (start + count - 1) // KEY_BLOCK + 1):
        base = block * KEY_BLOCK
        lo, hi = max(start, base), min(start + count, base + KEY_BLOCK)
        draw = np.random.default_rng([seed, block]).integers(0, 1 << 62, (3, KEY_BLOCK), dtype=np.int64)
        draw = draw[:, lo - base : hi - base]
        which = (draw[0] % len(prefixes)).tolist()
        length = (KEY_MIN_BYTES + draw[1] % span).tolist()
        offset = (draw[2] % (len(pool) - KEY_MAX_BYTES)).tolist()
        for i, p, n, o in zip(range(lo, hi), which, length, offset, strict=True):
            head = f"{prefixes[p]}{i:x}/"  # at most 33 + 8 + 1 bytes for ids below 2**32
            append(head + pool[o : o + n - len(head)])
    return out


# -- timing helpers -------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn`` once; return (seconds, result). Collects garbage first, so one
    measurement does not pay for the previous one's garbage."""
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def count_true(answers: Any) -> int:
    """Number of True answers in a list or a numpy array."""
    if isinstance(answers, list):
        return answers.count(True)
    return int(np.count_nonzero(np.asarray(answers)))


_T0 = time.perf_counter()


def add_each(f: Any, keys: list[str]) -> None:
    """``f.add(k)`` for each key, from a Python loop (the per-item rows)."""
    add = f.add
    for k in keys:
        add(k)


def contains_each(f: Any, keys: list[str]) -> None:
    """``k in f`` for each key, from a Python loop (the per-item rows)."""
    for k in keys:
        k in f  # noqa: B015


def lock_pairs(lock: Callable[[], Any], keys: list[str]) -> None:
    """``with lock(): pass`` once per key, from a Python loop: ``lock`` is ``f.write_lock``
    (the lock+unlock pair rows) or a C callable returning one ``threading.Lock()``
    (``itertools.repeat(lock).__next__``: the statement's floor, at the same call cost)."""
    for _ in keys:
        with lock():
            pass


def ns_per_key(fn: Callable[[], Any], n: int) -> float:
    """Run ``fn`` once; return its wall time in nanoseconds divided by ``n`` (the keys it
    handled)."""
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / n


def wall_seconds(argv: list[str], env: dict[str, str], cwd: str, check: bool = False) -> float:
    """Wall time in seconds of one run of the command ``argv`` (its output discarded);
    with ``check``, a non-zero exit raises ``subprocess.CalledProcessError``."""
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=check, capture_output=True)
    return time.perf_counter() - t0


def callgrind_parts(out: str) -> dict[int, int]:
    """{part number: instructions} of the callgrind dumps ``out*`` (one file a part, as
    ``--dump-before=...`` writes them); a file without both lines is left out."""
    parts: dict[int, int] = {}
    for path in glob.glob(out + "*"):
        part = total = None
        with open(path) as fh:
            for line in fh:
                if line.startswith("part:"):
                    part = int(line.split()[1])
                elif line.startswith("totals:"):
                    total = int(line.split()[1])
        if part is not None and total is not None:
            parts[part] = total
    return parts


def log(msg: str) -> None:
    """Progress on stderr, stamped with the seconds since the start."""
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


def mem_available() -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where there is none."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# -- results ---------------------------------------------------------------------------------


@dataclass
class LibResult:
    """Everything measured for one library (one mmapbloom strategy) at one size."""

    adapter: Adapter
    seconds: dict[str, list[float]] = field(default_factory=dict)  # op -> per-round seconds
    items: dict[str, int] = field(default_factory=dict)  # op -> keys per round
    false_positives: Optional[int] = None
    absent_count: int = 0
    false_negatives: Optional[int] = None
    size: Optional[int] = None
    errors: list[str] = field(default_factory=list)
    #: The filter built by the last bulk-add round, kept open for the queries and the open test.
    query_filter: Any = None
    query_path: str = ""

    def ns(self, op: str) -> Optional[float]:
        """Median nanoseconds per item of ``op``, or None if it was not measured."""
        runs = self.seconds.get(op)
        if not runs:
            return None
        return statistics.median(runs) / self.items[op] * 1e9

    def fp_rate(self) -> Optional[float]:
        if self.false_positives is None or not self.absent_count:
            return None
        return self.false_positives / self.absent_count


@dataclass
class Run:
    """One benchmark run: the options, the environment, and every result."""

    args: argparse.Namespace
    adapters: list[Adapter] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    main: dict[str, LibResult] = field(default_factory=dict)
    big: dict[str, LibResult] = field(default_factory=dict)
    big_note: str = ""
    open_rows: list[dict[str, Any]] = field(default_factory=list)
    proc_rows: list[dict[str, Any]] = field(default_factory=list)
    union: Optional[dict[str, Any]] = None
    counting: dict[tuple[str, str], float] = field(default_factory=dict)  # (row, op) -> ns per item
    profile_text: str = ""
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    load_at_start: float = float("nan")
    big_absent: int = 0
    locks: dict[tuple[str, str], float] = field(default_factory=dict)  # (row, lock op) -> ns per op
    lock_ops: int = 0
    threads: list[dict[str, Any]] = field(default_factory=list)
    pure: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)  # row -> op -> ns (pure child)
    pure_backend: str = ""

    @property
    def own(self) -> list[MmapBloomAdapter]:
        """The mmapbloom adapters (one per strategy), in ``--strategies`` order."""
        return [a for a in self.adapters if isinstance(a, MmapBloomAdapter)]


def record_error(run: Run, res: Optional[LibResult], a: Adapter, what: str, exc: BaseException) -> None:
    """Log an exception of library ``a``; an mmapbloom one also fails the run."""
    msg = f"{a.name}: {what}: {type(exc).__name__}: {exc}"
    log(f"ERROR {msg}")
    if os.environ.get("MMAPBLOOM_BENCH_TRACEBACK"):
        traceback.print_exc()
    if res is not None:
        res.errors.append(f"{what}: {type(exc).__name__}: {exc}")
    if a.is_own:
        run.failures.append(msg)


# -- the per-library operations ----------------------------------------------------------------


def measure_ops(
    run: Run,
    adapters: list[Adapter],
    keys: list[str],
    absent: list[str],
    capacity: int,
    rounds: int,
    workdir: str,
    tag: str,
    with_items: bool,
    with_extras: bool,
) -> dict[str, LibResult]:
    """Time every operation of every library, interleaving rounds across libraries.

    ``with_items`` adds the per-item loops, ``with_extras`` mmapbloom's other paths."""
    fp_rate = run.args.fp_rate
    results = {a.name: LibResult(a) for a in adapters}
    query_filter: dict[str, tuple[Any, str]] = {}

    def fresh(a: Adapter, what: str, r: int) -> tuple[Any, str]:
        path = os.path.join(workdir, f"{tag}-{a.name.replace(':', '-')}-{what}-{r}.bin")
        if os.path.exists(path):
            os.unlink(path)
        return a.create(path, capacity, fp_rate), path

    def discard(a: Adapter, f: Any, path: str) -> None:
        a.close(f)
        if os.path.exists(path):
            os.unlink(path)

    def add_round(a: Adapter, op: str, r: int, method: Callable[[Any, list[str]], Any]) -> None:
        res = results[a.name]
        try:
            f, path = fresh(a, op, r)
        except Exception as exc:  # noqa: BLE001 - a peer's failure is reported, not fatal
            record_error(run, res, a, f"create for {op}", exc)
            return
        keep = False
        try:
            seconds, _ = timed(lambda: method(f, keys))
            res.seconds.setdefault(op, []).append(seconds)
            res.items[op] = len(keys)
            if op == "bulk_add":
                res.size = a.size_bytes(f, path)
                if r == rounds - 1:
                    old = query_filter.pop(a.name, None)
                    if old is not None:
                        discard(a, *old)
                    query_filter[a.name] = (f, path)
                    keep = True
        except Exception as exc:  # noqa: BLE001
            record_error(run, res, a, op, exc)
        finally:
            if not keep:
                discard(a, f, path)

    def query_round(a: Adapter, op: str, method: Callable[[Any, list[str]], Any], items: list[str]) -> Any:
        res = results[a.name]
        if a.name not in query_filter:
            return None
        f, _ = query_filter[a.name]
        try:
            seconds, answers = timed(lambda: method(f, items))
            res.seconds.setdefault(op, []).append(seconds)
            res.items[op] = len(items)
            return answers
        except Exception as exc:  # noqa: BLE001
            record_error(run, res, a, op, exc)
            return None

    # Each group is timed round by round, every library (and mmapbloom's variants of the
    # same operation) once per round, so a burst of background load hits all of them alike.
    own = [a for a in adapters if isinstance(a, MmapBloomAdapter)] if with_extras else []
    Job = tuple[Adapter, str, Callable[[Any, list[str]], Any]]
    groups: list[tuple[str, list[Job]]] = [
        ("bulk add", [(a, "bulk_add", a.bulk_add) for a in adapters] + [(m, "add_many", m.add_many) for m in own]),
        ("bulk query present", [(a, "bulk_present", a.bulk_query) for a in adapters]),
        ("bulk query absent", [(a, "bulk_absent", a.bulk_query) for a in adapters]),
    ]
    if with_items:
        groups += [
            (
                "per-item add",
                [(a, "item_add", a.item_add) for a in adapters] + [(m, "item_add_held", m.item_add_held) for m in own],
            ),
            (
                "per-item query",
                [(a, "item_query", a.item_query) for a in adapters]
                + [(m, "might_contain", m.might_contain) for m in own],
            ),
        ]
    for title, jobs in groups:
        log(f"[{tag}] {title}: {rounds} round(s) x {len(jobs)} libraries/paths")
        for r in range(rounds):
            for a, op, method in jobs:
                if op in ADD_OPS:
                    add_round(a, op, r, method)
                    continue
                items = absent if op == "bulk_absent" else keys
                answers = query_round(a, op, method, items)
                if answers is None:
                    continue
                res = results[a.name]
                hits = answers if isinstance(answers, int) else count_true(answers)
                if op == "bulk_absent":
                    res.false_positives = hits
                    res.absent_count = len(items)
                    continue
                misses = len(items) - hits
                if op != "might_contain":
                    res.false_negatives = max(res.false_negatives or 0, misses)
                if misses and a.is_own:
                    run.failures.append(f"{a.name}: {misses} false negatives in {op}")

    for a in adapters:
        if a.name in query_filter:
            f, path = query_filter.pop(a.name)
            results[a.name].query_filter, results[a.name].query_path = f, path
    return results


def release_filters(results: dict[str, LibResult]) -> None:
    """Close the filters that :func:`measure_ops` kept for the queries."""
    for res in results.values():
        if res.query_filter is not None:
            try:
                res.adapter.close(res.query_filter)
            except Exception:  # noqa: BLE001
                pass
            res.query_filter = None


# -- opening in a fresh process ------------------------------------------------------------------

CHILD_TEMPLATE = """\
import sys, time
path, key = sys.argv[1], sys.argv[2]
{imports}
t0 = time.perf_counter()
{open_stmt}
{query_stmt}
t1 = time.perf_counter()
print("OPEN", t1 - t0, bool(hit))
"""


def child_env(root: str = ROOT) -> dict[str, str]:
    """The environment of a child process: this one's, with ``root`` (a checkout) first on
    ``PYTHONPATH`` so that the child imports that checkout's mmapbloom."""
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def open_in_child(a: Adapter, path: str, key: str) -> tuple[float, float, bool]:
    """Spawn ``python -c`` that opens ``path`` with library ``a`` and queries ``key``.
    Returns (seconds inside the child around open + query, child wall seconds, answer)."""
    code = CHILD_TEMPLATE.format(imports=a.open_imports, open_stmt=a.open_stmt, query_stmt=a.query_stmt)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, path, key], capture_output=True, text=True, env=child_env(), timeout=600
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("OPEN ")][-1].split()
    return float(line[1]), wall, line[2] == "True"


def measure_open(run: Run, results: dict[str, LibResult], keys: list[str], workdir: str) -> None:
    """Open the main-run filters in fresh processes, then the ``--open-mb`` ones."""
    rounds = run.args.rounds
    key = keys[len(keys) // 2]
    targets: list[tuple[Adapter, str, str, bool]] = []  # (library, file, description, giant)
    for res in results.values():
        a = res.adapter
        f = res.query_filter
        if f is None:
            continue
        try:
            saved = os.path.join(workdir, f"open-{a.name.replace(':', '-')}.saved")
            path = a.persist(f, res.query_path if a.file_backed else saved)
            targets.append((a, path, f"{len(keys):,} keys", False))
        except Exception as exc:  # noqa: BLE001
            record_error(run, res, a, "save for open", exc)
    if run.args.open_mb > 0:
        targets += build_open_giants(run, [r.adapter for r in results.values()], keys[:1000] + [key], workdir)
    log(f"[open] {len(targets)} filters x {rounds} round(s) in fresh processes")
    samples: dict[int, list[tuple[float, float, bool]]] = {i: [] for i in range(len(targets))}
    for _ in range(rounds):
        for i, (a, path, _, _) in enumerate(targets):
            try:
                samples[i].append(open_in_child(a, path, key))
            except Exception as exc:  # noqa: BLE001
                record_error(run, results.get(a.name), a, f"open {os.path.basename(path)}", exc)
    for i, (a, path, what, giant) in enumerate(targets):
        got = samples[i]
        if not got:
            continue
        row = {
            "lib": a.name,
            "what": what,
            "size": os.path.getsize(path),
            "child": statistics.median(s[0] for s in got),
            "wall": statistics.median(s[1] for s in got),
            "hit": all(s[2] for s in got),
            "giant": giant,
        }
        run.open_rows.append(row)
        if not row["hit"] and a.is_own:
            run.failures.append(f"{a.name}: fresh process did not find an added key in {path}")
    for _a, path, _, giant in targets:
        if giant and os.path.exists(path):
            os.unlink(path)


def build_open_giants(
    run: Run, adapters: list[Adapter], sample: list[str], workdir: str
) -> list[tuple[Adapter, str, str, bool]]:
    """Filters of ``--open-mb`` MiB of bits for mmapbloom, the mmap peers and rbloom, each
    holding the keys of ``sample`` (the queried key among them)."""
    num_bits = run.args.open_mb * (1 << 20) * 8
    p = run.args.fp_rate
    capacity = max(1, int(num_bits * math.log(2) ** 2 / -math.log(p)))  # n whose optimal m is num_bits
    out: list[tuple[Adapter, str, str, bool]] = []
    for a in adapters:
        if a.lib not in ("mmapbloom", "pybloomfiltermmap3", "bloomsieve", "rbloom"):
            continue
        path = os.path.join(workdir, f"giant-{a.name.replace(':', '-')}.bin")
        log(f"[open] building a {run.args.open_mb} MiB {a.name} filter")
        try:
            if isinstance(a, MmapBloomAdapter):
                cfg = a.config_bits(num_bits, max(1, round(-math.log(p) / math.log(2))))
                f = a.mod.BloomFilter.create(path, cfg)
            else:
                f = a.create(path, capacity, p)
            a.bulk_add(f, sample)
            a.persist(f, path)
            a.close(f)
            del f
            gc.collect()
            out.append((a, path, f"{run.args.open_mb:,} MiB of bits, {len(sample):,} keys", True))
        except Exception as exc:  # noqa: BLE001
            record_error(run, None, a, f"build {run.args.open_mb} MiB filter", exc)
    return out


# -- processes writing one file ---------------------------------------------------------------------

_PROC_KEYS: list[str] = []


def update_writer(path: str, keys: list[str], barrier: Any) -> None:
    """Forked child: open the filter at ``path``, wait at ``barrier``, ``update(keys)``."""
    from mmapbloom import BloomFilter

    with BloomFilter.open(path) as f:
        barrier.wait()
        f.update(keys)


def time_update_writers(ctx: Any, path: str, parts: list[list[str]]) -> float:
    """Seconds from a start barrier until the last of ``len(parts)`` processes of the
    multiprocessing context ``ctx`` has ``update()``-d its part into the file at ``path``
    (see ``update_writer``); a writer's non-zero exit raises ``RuntimeError``."""
    barrier = ctx.Barrier(len(parts) + 1)
    children = [ctx.Process(target=update_writer, args=(path, part, barrier)) for part in parts]
    for c in children:
        c.start()
    barrier.wait()
    t0 = time.perf_counter()
    for c in children:
        c.join()
    seconds = time.perf_counter() - t0
    if any(c.exitcode != 0 for c in children):
        raise RuntimeError(f"a writer failed: {[c.exitcode for c in children]}")
    return seconds


def _proc_worker(a: Adapter, path: str, lo: int, hi: int, mode: str, barrier: Any, queue: Any) -> None:
    """Forked child: open ``path``, wait for the others, add keys[lo:hi], report (start, end)."""
    try:
        mine = _PROC_KEYS[lo:hi]  # touches the keys' refcounts (copy-on-write) before timing
        f = a.open_rw(path)
        barrier.wait(timeout=120)
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
        if mode == "bulk":
            a.bulk_add(f, mine)
        else:
            a.item_add(f, mine)
        t1 = time.perf_counter()
        a.close(f)
        queue.put((lo, t0, t1, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put((lo, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))
        try:
            barrier.abort()
        except Exception:  # noqa: BLE001
            pass


def run_writers(a: Adapter, path: str, nkeys: int, procs: int, mode: str) -> float:
    """``procs`` forked processes add disjoint slices of the first ``nkeys`` keys to ``path``
    at once; returns the wall time from the first start to the last end."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    bounds = [(nkeys * i // procs, nkeys * (i + 1) // procs) for i in range(procs)]
    workers = [ctx.Process(target=_proc_worker, args=(a, path, lo, hi, mode, barrier, queue)) for lo, hi in bounds]
    for w in workers:
        w.start()
    reports = []
    try:
        for _ in workers:
            reports.append(queue.get(timeout=900))
    finally:
        for w in workers:
            w.join(60)
            if w.is_alive():
                w.kill()
    errors = [r[3] for r in reports if r[3]]
    if errors:
        raise RuntimeError("; ".join(errors))
    bad = [w.exitcode for w in workers if w.exitcode != 0]
    if bad:
        raise RuntimeError(f"writer exit codes {bad}")
    return float(max(r[2] for r in reports) - min(r[1] for r in reports))


def measure_processes(run: Run, adapters: list[Adapter], keys: list[str], workdir: str) -> None:
    """1 process adding all keys versus 2 and 4 adding disjoint slices at once, per library and
    mode; lost bits are bits of the 1-process file missing from the concurrent one."""
    global _PROC_KEYS
    bulk_keys = min(run.args.proc_keys or len(keys), len(keys))
    item_keys = min(run.args.proc_item_keys or bulk_keys, bulk_keys)
    _PROC_KEYS = keys[:bulk_keys]
    counts = [1] + [p for p in run.args.procs if p > 1]
    rounds = run.args.rounds
    gc.collect()
    gc.freeze()  # forked children then do not dirty the parent's objects by collecting them
    for a in adapters:
        if not a.file_backed:
            continue
        stem = os.path.join(workdir, f"proc-{a.name.replace(':', '-')}")
        for mode in ("bulk", "item"):
            nkeys = bulk_keys if mode == "bulk" else item_keys
            template = f"{stem}-template.bin"
            try:
                f = a.create(template, nkeys, run.args.fp_rate)  # one template: pybloomfiltermmap3 seeds randomly
                a.close(f)
            except Exception as exc:  # noqa: BLE001
                record_error(run, None, a, "create process template", exc)
                continue
            walls: dict[int, list[float]] = {p: [] for p in counts}
            lost: dict[int, int] = {p: 0 for p in counts}
            extra: dict[int, int] = {p: 0 for p in counts}
            misses: dict[int, int] = {p: 0 for p in counts}
            log(f"[processes] {a.name} {mode}: {counts} processes x {rounds} round(s), {nkeys:,} keys")
            reference = f"{stem}-{mode}-reference.bin"
            for _ in range(rounds):
                for p in counts:
                    path = f"{stem}-{mode}-{p}.bin"
                    shutil.copyfile(template, path)
                    try:
                        walls[p].append(run_writers(a, path, nkeys, p, mode))
                        if p == 1:
                            os.replace(path, reference)
                            path = reference
                        else:
                            lo, ex = a.compare_bits(reference, path)
                            lost[p], extra[p] = max(lost[p], lo), max(extra[p], ex)
                        g = a.open_rw(path)
                        try:
                            misses[p] = max(misses[p], nkeys - count_true(a.bulk_query(g, _PROC_KEYS[:nkeys])))
                        finally:
                            a.close(g)
                    except Exception as exc:  # noqa: BLE001
                        record_error(run, None, a, f"{p} writer processes ({mode})", exc)
                    finally:
                        if path != reference and os.path.exists(path):
                            os.unlink(path)
            for leftover in (template, reference):
                if os.path.exists(leftover):
                    os.unlink(leftover)
            if not walls[1]:
                continue
            one = statistics.median(walls[1])
            for p in counts:
                if not walls[p]:
                    continue
                wall = statistics.median(walls[p])
                run.proc_rows.append(
                    {
                        "lib": a.name,
                        "mode": mode,
                        "procs": p,
                        "keys": nkeys,
                        "wall": wall,
                        "vs_one": wall / one,
                        "lost": lost[p],
                        "extra": extra[p],
                        "false_negatives": misses[p],
                        "rounds": len(walls[p]),
                    }
                )
                if a.is_own and (lost[p] or misses[p]):
                    run.failures.append(
                        f"{a.name}: {p} processes ({mode}) lost {lost[p]} bits, {misses[p]} false negatives"
                    )
    gc.unfreeze()
    _PROC_KEYS = []


# -- union ------------------------------------------------------------------------------------------


def measure_union(run: Run, mm: MmapBloomAdapter, workdir: str) -> None:
    """OR one ``--union-mb`` mmapbloom file into another, fresh handles each round (page
    cache warm). Both bit arrays are filled with seeded random bytes, so every page is
    written and in the page cache before the timing (the bit array is the file's tail)."""
    size = run.args.union_mb * (1 << 20)
    cfg = mm.config_bits(size * 8, 7)
    paths = [os.path.join(workdir, f"union-{x}.bin") for x in "ab"]
    log(f"[union] two {run.args.union_mb} MiB filters")
    try:
        block_bytes = min(size, 1 << 24)
        for i, path in enumerate(paths):
            mm.mod.BloomFilter.create(path, cfg).close()
            bits_at = os.path.getsize(path) - size
            block = np.random.default_rng([run.args.seed, 0x0A, i]).integers(0, 256, block_bytes, dtype=np.uint8)
            block &= np.uint8(0x11 << i)  # sparse-ish, different bits in a and b
            raw = block.tobytes()
            with open(path, "r+b") as fh:
                for start in range(0, size, block_bytes):
                    fh.seek(bits_at + start)
                    fh.write(raw[: min(block_bytes, size - start)])
        runs = []
        for _ in range(run.args.rounds):
            a = mm.mod.BloomFilter.open(paths[0])
            b = mm.mod.BloomFilter.open(paths[1], readonly=True)
            try:
                seconds, _ = timed(lambda: a.union(b))
            finally:
                a.close()
                b.close()
            runs.append(seconds)
        median = statistics.median(runs)
        run.union = {"bytes": size, "seconds": median, "gbps": size / median / 1e9, "rounds": len(runs)}
    except Exception as exc:  # noqa: BLE001
        record_error(run, None, mm, "union", exc)
    finally:
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)


# -- profile ----------------------------------------------------------------------------------------


def profile_mmapbloom(run: Run, mm: MmapBloomAdapter, keys: list[str], absent: list[str], workdir: str) -> None:
    """cProfile each path of one mmapbloom adapter once; keep the top functions by own time."""
    per_item = keys[: min(len(keys), 200_000)]
    out = io.StringIO()
    capacity = len(keys)
    paths: list[tuple[str, Callable[[Any], Any], bool]] = [
        ("update(keys)", lambda f: f.update(keys), True),
        ("contains_many(present)", lambda f: f.contains_many(keys), False),
        ("contains_many(absent)", lambda f: f.contains_many(absent), False),
        (f"add(key) x {len(per_item):,}", lambda f: mm.item_add(f, per_item), True),
        (f"add(key) in write_lock x {len(per_item):,}", lambda f: mm.item_add_held(f, per_item), True),
        (f"might_contain(key) x {len(per_item):,}", lambda f: mm.might_contain(f, per_item), False),
    ]
    built = os.path.join(workdir, "profile-built.bin")
    if os.path.exists(built):
        os.unlink(built)
    full = mm.create(built, capacity, run.args.fp_rate)
    full.update(keys)
    log(f"[profile] {mm.name} paths")
    try:
        for title, fn, fresh in paths:
            path = os.path.join(workdir, "profile-fresh.bin")
            f = full
            if fresh:
                if os.path.exists(path):
                    os.unlink(path)
                f = mm.create(path, capacity, run.args.fp_rate)
            prof = cProfile.Profile()
            gc.collect()
            t0 = time.perf_counter()
            prof.enable()
            fn(f)
            prof.disable()
            wall = time.perf_counter() - t0
            if fresh:
                f.close()
                os.unlink(path)
            text = io.StringIO()
            pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(10)
            body = text.getvalue()
            start = body.find("   ncalls")
            out.write(
                f"### {mm.name}, {title}: {wall:.3f} s under the profiler\n\n```\n{body[start:].rstrip()}\n```\n\n"
            )
    finally:
        full.close()
        os.unlink(built)
    run.profile_text += out.getvalue()


# -- counting filters --------------------------------------------------------------------------------

#: Operations of the counting comparison, in column order.
COUNTING_OPS = ("add", "in", "remove", "update", "contains_many")


def measure_counting(run: Run, keys: list[str], workdir: str) -> None:
    """``BloomFilter`` against ``CountingBloomFilter`` with 4-bit and 8-bit counters, per
    strategy: per-item add, ``in`` and remove, batch ``update`` and ``contains_many`` on
    the same keys, files sized for them at ``--fp-rate``. Fills ``run.counting`` with the
    median ns per item; rounds interleaved across kinds."""
    rounds = run.args.rounds
    kinds: list[tuple[str, Callable[[str], Any]]] = []
    for mm in run.own:
        cfg = mm.config(len(keys), run.args.fp_rate)
        suffix = f" {mm.strategy.name}"
        kinds += [
            ("BloomFilter" + suffix, functools.partial(mm.mod.BloomFilter.create, config=cfg)),
            (
                "Counting 4-bit" + suffix,
                functools.partial(mm.mod.CountingBloomFilter.create, config=cfg, counter_bits=4),
            ),
            (
                "Counting 8-bit" + suffix,
                functools.partial(mm.mod.CountingBloomFilter.create, config=cfg, counter_bits=8),
            ),
        ]
    times: dict[tuple[str, str], list[float]] = {}

    def measure(name: str, op: str, fn: Callable[[], Any]) -> None:
        times.setdefault((name, op), []).append(timed(fn)[0])

    log(f"[counting] {len(kinds)} kinds x {rounds} round(s), {len(keys):,} keys")
    for r in range(rounds):  # rounds interleaved across kinds: background load hits all alike
        for name, make in kinds:
            stem = os.path.join(workdir, f"counting-{name.replace(' ', '_')}-{r}")
            f = make(stem + ".f")
            try:
                measure(name, "add", lambda: [f.add(x) for x in keys])
                measure(name, "in", lambda: [x in f for x in keys])
                if hasattr(f, "remove"):
                    measure(name, "remove", lambda: [f.remove(x) for x in keys])
            finally:
                f.close()
                os.unlink(stem + ".f")
            g = make(stem + ".g")
            try:
                measure(name, "update", lambda: g.update(keys))
                seconds, answers = timed(lambda: g.contains_many(keys))
                times.setdefault((name, "contains_many"), []).append(seconds)
                hits = count_true(answers)
                if hits != len(keys):
                    run.failures.append(f"{name}: {len(keys) - hits} false negatives after update")
            finally:
                g.close()
                os.unlink(stem + ".g")
    run.counting = {key: statistics.median(v) / len(keys) * 1e9 for key, v in times.items()}


# -- the big run ---------------------------------------------------------------------------------------


def run_big(run: Run, workdir: str) -> None:
    """``--big-keys`` keys with the bulk operations of ``--big-libs``, when the memory allows."""
    a = run.args
    nabsent = min(a.big_absent, a.big_keys)
    need = (a.big_keys + nabsent) * BIG_BYTES_PER_KEY
    avail = mem_available()
    if avail is not None and need > 0.8 * avail:
        run.big_note = (
            f"Skipped: {a.big_keys:,} keys need about {need / 1e9:.1f} GB of memory, "
            f"{avail / 1e9:.1f} GB are available."
        )
        log(run.big_note)
        return
    adapters = [x for x in run.adapters if x.lib in a.big_libs]
    if not adapters:
        run.big_note = "Skipped: none of --big-libs is installed."
        return
    log(f"[big] generating {a.big_keys:,} + {nabsent:,} keys")
    t0 = time.perf_counter()
    keys = make_keys(0, a.big_keys, a.seed)
    absent = make_keys(a.big_keys, nabsent, a.seed)
    log(f"[big] keys ready in {time.perf_counter() - t0:.1f} s")
    run.big_absent = nabsent
    run.big = measure_ops(
        run, adapters, keys, absent, a.big_keys, a.big_rounds, workdir, "big", with_items=False, with_extras=False
    )
    release_filters(run.big)
    others = [x.name for x in run.adapters if x.lib not in a.big_libs]
    run.big_note = (
        f"Bulk operations of {', '.join(x.name for x in adapters)}; "
        f"median of {a.big_rounds} round(s); {nabsent:,} absent keys."
        + (f" Not run at this size (too slow for the time budget): {', '.join(others)}." if others else "")
    )
