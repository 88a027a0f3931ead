#!/usr/bin/env python3
"""Benchmark mmapbloom against its peers, all in one run on the same keys (issue 5).

The exact command that produced the committed ``BENCHMARKS.md`` and ``docs/benchmark.png``
(run from the repository root; the first two steps make a virtualenv with the ``bench``
extra, which lists the peers and matplotlib)::

    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install -e '.[bench]' && \\
        /tmp/bench/bin/python tools/benchmark.py --keys 1000000 --big-keys 50000000 \\
        --profile --out BENCHMARKS.md --chart docs/benchmark.png

It takes about 15 to 25 minutes on 2 cores (less with ``--big-keys 0``) and needs about
15 GB of free memory for the 50 million keys (the big run is skipped, with a note, when
``MemAvailable`` is short). Run it on an otherwise idle machine: the report records the
load average at start and end.

This script installs nothing. A peer that cannot be imported is reported as *missing*
(never as slow) and the run goes on; without matplotlib the chart is skipped with a
message. If one peer has no wheel for the platform, ``pip install -e '.[bench]'`` fails
as a whole: then install ``-e .`` and each peer of the extra by itself, and the one that
failed is reported missing. The smoke test (``tests/test_benchmark_smoke.py``) runs it
tiny::

    python tools/benchmark.py --keys 2000 --big-keys 0 --union-mb 1 --open-mb 1 --rounds 1

``--skip`` leaves out parts (``items,open,processes,union,big,chart``), ``--libs``
picks libraries, ``--profile`` adds a cProfile of each mmapbloom path.

What is measured (ns per item, median of ``--rounds`` rounds, rounds interleaved
library by library so that a burst of load on the machine hits every library alike):

* bulk add (a fresh filter every round), bulk query of present keys, bulk query of
  absent keys: the library's batch API where it has one, else a list comprehension;
* per-item add (a fresh filter every round) and per-item query of present keys: a plain
  ``for`` loop calling the library's single-item method (``add``, ``in``);
* the false-positive rate on the absent keys, false negatives on the present keys
  (must be 0), the file or memory size;
* for filters that can be persisted: open (or load) an existing filter in a fresh
  process and answer one query, timed inside the child and as the child's wall time;
  likewise a ``--open-mb`` filter (1 GiB by default) for mmapbloom and the mmap peers
  against ``rbloom.Bloom.load`` of the same number of bits;
* 1, 2 and 4 processes adding disjoint slices of the keys to one file at once, with the
  batch API and with per-item adds: wall time and lost bits (bits of the sequentially
  built file that are missing) and false negatives;
* union (bitwise OR) of two ``--union-mb`` mmapbloom files, in GB/s of one filter's bits;
* ``--big-keys`` keys (50 million: the 57 MB blocklist of the design) with the bulk
  operations of the fastest libraries, when the memory allows.

Keys are deterministic URL-like strings of 46 to 90 bytes (``--seed``); the absent keys
are disjoint from the present ones by construction (their id path segment differs).

The working tree's ``mmapbloom`` is benchmarked (the repository root is put first on
``sys.path``, and on ``PYTHONPATH`` for child processes), so the numbers follow the code
being changed even if the venv holds another install.

Exit status: 0, or 1 when mmapbloom itself failed (an error, a false negative, a lost
bit), so that the smoke test catches a broken library as well as a broken script.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import importlib
import importlib.metadata
import io
import math
import multiprocessing as mp
import os
import platform
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402  (a runtime dependency of mmapbloom)

# -- constants ------------------------------------------------------------------------------

#: The operations of the main table, in column order, with their headings.
OPS: tuple[tuple[str, str], ...] = (
    ("bulk_add", "bulk add"),
    ("bulk_present", "bulk query present"),
    ("bulk_absent", "bulk query absent"),
    ("item_add", "per-item add"),
    ("item_query", "per-item query"),
)
#: Operations that add to a fresh filter each round.
ADD_OPS = ("bulk_add", "add_many", "item_add", "item_add_held")

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

#: Shortest and longest key, in bytes (ASCII, so characters too).
KEY_MIN_BYTES = 46
KEY_MAX_BYTES = 90
#: Keys are drawn in blocks of this many ids, each block from its own seeded generator, so
#: key i is the same whatever the count asked for (the 1M keys are a prefix of the 50M).
KEY_BLOCK = 1 << 16
_PATH_WORDS = ("news", "blog", "shop", "docs", "wiki", "img", "api", "item", "post", "tag", "user", "feed")
_TLDS = ("com", "org", "net", "io", "de")

#: Parts that ``--skip`` accepts.
SKIPPABLE = ("items", "open", "processes", "union", "big", "profile", "chart")

#: Peers compared in the ratio columns.
REFERENCE_PEER = "pybloomfiltermmap3"
#: Libraries whose data lives only in process memory (the "fastest in-memory peer" is one).
IN_MEMORY = ("rbloom", "abloom", "fastbloom-rs")

#: Bytes per key that the big run needs while it runs: the str key and its list slot
#: (about 130), plus the bytes copy that a batch call may make of it (about 120).
BIG_BYTES_PER_KEY = 260

#: Targets of issue 5, as ratios measured in the same run.
TARGET_BULK_VS_REFERENCE = 0.6
TARGET_BULK_VS_ABLOOM = 2.5
TARGET_ITEM_QUERY_VS_REFERENCE = 3.0
TARGET_LOCKED_VS_HELD = 2.5
TARGET_FOUR_PROCS_VS_ONE = 1.3
TARGET_UNION_GBPS = 1.0
TARGET_OPEN_VS_RBLOOM = 0.01


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
        draw = draw[:, lo - base:hi - base]
        which = (draw[0] % len(prefixes)).tolist()
        length = (KEY_MIN_BYTES + draw[1] % span).tolist()
        offset = (draw[2] % (len(pool) - KEY_MAX_BYTES)).tolist()
        for i, p, n, o in zip(range(lo, hi), which, length, offset):
            head = f"{prefixes[p]}{i:x}/"  # at most 33 + 8 + 1 bytes for ids below 2**32
            append(head + pool[o:o + n - len(head)])
    return out


# -- timing helpers ---------------------------------------------------------------------------

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


def fmt_ns(value: Optional[float]) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def fmt_ratio(value: Optional[float]) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f}x"


def fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def fmt_seconds(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:,.0f} us"
    if s < 1:
        return f"{s * 1e3:,.1f} ms"
    return f"{s:,.2f} s"


_T0 = time.perf_counter()


def log(msg: str) -> None:
    """Progress on stderr, stamped with the seconds since the start."""
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# -- the libraries ------------------------------------------------------------------------------

class Adapter:
    """How the benchmark drives one library. Subclasses fill in the class attributes and the
    methods; ``load`` imports the library (ImportError means "missing")."""

    name: str = ""            # the table label and --libs name
    dist: str = ""            # distribution name, for its version
    label: str = ""           # table label with the mode used
    storage: str = ""         # what backs the bits
    file_backed: bool = False
    #: Leading bytes of the file that a writer may change other than bits (header counters);
    #: skipped when comparing bits.
    header_skip: int = 0
    #: Python for a fresh process: imports, then ``f = ...`` from ``path``; then the query.
    open_imports: str = ""
    open_stmt: str = ""
    query_stmt: str = "hit = key in f"

    def load(self) -> None:
        raise NotImplementedError

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        raise NotImplementedError

    def open_rw(self, path: str) -> Any:
        """Open an existing file for writing (file-backed libraries only)."""
        raise NotImplementedError

    def close(self, f: Any) -> None:
        close = getattr(f, "close", None)
        if close is not None:
            close()

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        raise NotImplementedError

    def bulk_query(self, f: Any, keys: list[str]) -> Any:
        return [k in f for k in keys]

    def item_add(self, f: Any, keys: list[str]) -> None:
        add = f.add
        for k in keys:
            add(k)

    def item_query(self, f: Any, keys: list[str]) -> int:
        hits = 0
        for k in keys:
            if k in f:
                hits += 1
        return hits

    def size_bytes(self, f: Any, path: str) -> int:
        return os.path.getsize(path)

    def persist(self, f: Any, path: str) -> str:
        """Make ``f`` readable by another process from a file; return that file."""
        raise NotImplementedError


class MmapBloomAdapter(Adapter):
    name = dist = "mmapbloom"
    label = "mmapbloom (mmap + flock)"
    storage = "mmap + flock"
    file_backed = True
    header_skip = 24  # the items-added counter at offset 20 depends on the order of adds
    open_imports = "from mmapbloom import BloomFilter"
    open_stmt = "f = BloomFilter.open(path)"

    def load(self) -> None:
        import mmapbloom

        self.mod = mmapbloom

    def version(self) -> str:
        return str(getattr(self.mod, "__version__", "?"))

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter.create(path, self.mod.BloomConfig.for_items(capacity, fp_rate))

    def open_rw(self, path: str) -> Any:
        return self.mod.BloomFilter.open(path)

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.update(keys)

    def bulk_query(self, f: Any, keys: list[str]) -> Any:
        return f.contains_many(keys)

    def add_many(self, f: Any, keys: list[str]) -> Any:
        return f.add_many(keys)

    def item_add_held(self, f: Any, keys: list[str]) -> None:
        add = f.add
        with f.write_lock():
            for k in keys:
                add(k)

    def might_contain(self, f: Any, keys: list[str]) -> int:
        contains = f.might_contain
        hits = 0
        for k in keys:
            if contains(k):
                hits += 1
        return hits

    def persist(self, f: Any, path: str) -> str:
        return path  # the bits are in the shared mapping already


class PyBloomFilterMmapAdapter(Adapter):
    name = dist = "pybloomfiltermmap3"
    label = "pybloomfiltermmap3 (mmap, no lock)"
    storage = "mmap, no lock"
    file_backed = True
    open_imports = "from pybloomfilter import BloomFilter"
    open_stmt = "f = BloomFilter.open(path, 'r')"

    def load(self) -> None:
        import pybloomfilter

        self.mod = pybloomfilter

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter(capacity, fp_rate, path)

    def open_rw(self, path: str) -> Any:
        return self.mod.BloomFilter.open(path, "rw")

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.update(keys)

    def persist(self, f: Any, path: str) -> str:
        f.sync()
        return path


class BloomsieveAdapter(Adapter):
    name = dist = "bloomsieve"
    label = "bloomsieve (mmap + flock)"
    storage = "mmap + flock"
    file_backed = True
    open_imports = "from bloomsieve import BloomFilter"
    open_stmt = "f = BloomFilter(1, 0.5, path)  # an existing file's m and k win"

    def load(self) -> None:
        import bloomsieve

        self.mod = bloomsieve

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter(capacity, fp_rate, path)

    def open_rw(self, path: str) -> Any:
        return self.mod.BloomFilter(1, 0.5, path)

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.add_many(keys)

    def persist(self, f: Any, path: str) -> str:
        f.flush()
        return path


def _mmh3_hash128_signed() -> Callable[[Any], int]:
    import mmh3

    # rbloom needs a hash in [-2**127, 2**127); mmh3's unsigned default overflows it.
    return functools.partial(mmh3.hash128, signed=True)


class RbloomAdapter(Adapter):
    name = dist = "rbloom"
    label = "rbloom (persistent mmh3 hash)"
    storage = "memory"
    open_imports = "import functools, mmh3\nfrom rbloom import Bloom"
    open_stmt = "f = Bloom.load(path, functools.partial(mmh3.hash128, signed=True))"

    def load(self) -> None:
        import rbloom

        self.mod = rbloom
        self.hash_func = _mmh3_hash128_signed()

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.Bloom(capacity, fp_rate, self.hash_func)

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.update(keys)

    def size_bytes(self, f: Any, path: str) -> int:
        return (int(f.size_in_bits) + 7) // 8

    def persist(self, f: Any, path: str) -> str:
        f.save(path)
        return path


class AbloomAdapter(Adapter):
    name = dist = "abloom"
    label = "abloom (serializable=True)"
    storage = "memory"
    open_imports = "from abloom import BloomFilter"
    open_stmt = "with open(path, 'rb') as fh:\n    f = BloomFilter.from_bytes(fh.read())"

    def load(self) -> None:
        import abloom

        self.mod = abloom

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter(capacity, fp_rate, serializable=True)

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.update(keys)

    def size_bytes(self, f: Any, path: str) -> int:
        return int(f.byte_count)

    def persist(self, f: Any, path: str) -> str:
        with open(path, "wb") as fh:
            fh.write(f.to_bytes())
        return path


class FastbloomAdapter(Adapter):
    name = dist = "fastbloom-rs"
    label = "fastbloom-rs (str API)"
    storage = "memory"
    open_imports = "from fastbloom_rs import BloomFilter"
    open_stmt = "f = BloomFilter.from_file_with_hashes(path)"
    query_stmt = "hit = f.contains_str(key)"

    def load(self) -> None:
        import fastbloom_rs

        self.mod = fastbloom_rs

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter(capacity, fp_rate)

    def bulk_add(self, f: Any, keys: list[str]) -> Any:
        return f.add_str_batch(keys)

    def bulk_query(self, f: Any, keys: list[str]) -> Any:
        return f.contains_str_batch(keys, check_type=False)  # its default re-checks in Python

    def item_add(self, f: Any, keys: list[str]) -> None:
        add = f.add_str
        for k in keys:
            add(k)

    def item_query(self, f: Any, keys: list[str]) -> int:
        contains = f.contains_str
        hits = 0
        for k in keys:
            if contains(k):
                hits += 1
        return hits

    def size_bytes(self, f: Any, path: str) -> int:
        return (int(f.config().size()) + 7) // 8

    def persist(self, f: Any, path: str) -> str:
        f.save_to_file_with_hashes(path)
        return path


ALL_ADAPTERS: tuple[type[Adapter], ...] = (
    MmapBloomAdapter, PyBloomFilterMmapAdapter, RbloomAdapter, AbloomAdapter, FastbloomAdapter, BloomsieveAdapter,
)
LIB_NAMES = tuple(a.name for a in ALL_ADAPTERS)


# -- results ---------------------------------------------------------------------------------------

@dataclass
class LibResult:
    """Everything measured for one library at one size."""

    adapter: Adapter
    seconds: dict[str, list[float]] = field(default_factory=dict)  # op -> per-round seconds
    items: dict[str, int] = field(default_factory=dict)             # op -> keys per round
    false_positives: Optional[int] = None
    absent_count: int = 0
    false_negatives: Optional[int] = None
    size: Optional[int] = None
    errors: list[str] = field(default_factory=list)
    #: The filter built by the last bulk-add round, kept open for the queries and the open test.
    query_filter: Any = None
    query_path: str = ""

    def ns(self, op: str) -> Optional[float]:
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
    profile_text: str = ""
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    load_at_start: float = float("nan")
    big_absent: int = 0


def record_error(run: Run, res: Optional[LibResult], lib: str, what: str, exc: BaseException) -> None:
    msg = f"{lib}: {what}: {type(exc).__name__}: {exc}"
    log(f"ERROR {msg}")
    if os.environ.get("MMAPBLOOM_BENCH_TRACEBACK"):
        traceback.print_exc()
    if res is not None:
        res.errors.append(f"{what}: {type(exc).__name__}: {exc}")
    if lib == "mmapbloom":
        run.failures.append(msg)


# -- the per-library measurements ------------------------------------------------------------------

def measure_ops(run: Run, adapters: list[Adapter], keys: list[str], absent: list[str], capacity: int,
                rounds: int, workdir: str, tag: str, with_items: bool, with_extras: bool) -> dict[str, LibResult]:
    """Time every operation of every library, interleaving rounds across libraries.

    ``with_items`` adds the per-item loops, ``with_extras`` mmapbloom's other paths."""
    fp_rate = run.args.fp_rate
    results = {a.name: LibResult(a) for a in adapters}
    query_filter: dict[str, tuple[Any, str]] = {}

    def fresh(a: Adapter, what: str, r: int) -> tuple[Any, str]:
        path = os.path.join(workdir, f"{tag}-{a.name}-{what}-{r}.bin")
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
            record_error(run, res, a.name, f"create for {op}", exc)
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
            record_error(run, res, a.name, op, exc)
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
            record_error(run, res, a.name, op, exc)
            return None

    # Each group is timed round by round, every library (and mmapbloom's variant of the same
    # operation) once per round, so a burst of background load hits all of them alike.
    mm = next((a for a in adapters if isinstance(a, MmapBloomAdapter)), None)
    groups: list[tuple[str, list[tuple[Adapter, str, Callable[[Any, list[str]], Any]]]]] = [
        ("bulk add", [(a, "bulk_add", a.bulk_add) for a in adapters]
         + ([(mm, "add_many", mm.add_many)] if mm is not None and with_extras else [])),
        ("bulk query present", [(a, "bulk_present", a.bulk_query) for a in adapters]),
        ("bulk query absent", [(a, "bulk_absent", a.bulk_query) for a in adapters]),
    ]
    if with_items:
        groups += [
            ("per-item add", [(a, "item_add", a.item_add) for a in adapters]
             + ([(mm, "item_add_held", mm.item_add_held)] if mm is not None and with_extras else [])),
            ("per-item query", [(a, "item_query", a.item_query) for a in adapters]
             + ([(mm, "might_contain", mm.might_contain)] if mm is not None and with_extras else [])),
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
                if misses and a.name == "mmapbloom":
                    run.failures.append(f"mmapbloom: {misses} false negatives in {op}")

    for a in adapters:
        if a.name in query_filter:
            f, path = query_filter.pop(a.name)
            results[a.name].query_filter, results[a.name].query_path = f, path
    return results


def release_filters(results: dict[str, LibResult]) -> None:
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


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def open_in_child(a: Adapter, path: str, key: str) -> tuple[float, float, bool]:
    """Spawn ``python -c`` that opens ``path`` with library ``a`` and queries ``key``.
    Returns (seconds inside the child around open + query, child wall seconds, answer)."""
    code = CHILD_TEMPLATE.format(imports=a.open_imports, open_stmt=a.open_stmt, query_stmt=a.query_stmt)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, path, key], capture_output=True, text=True,
                          env=child_env(), timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("OPEN ")][-1].split()
    return float(line[1]), wall, line[2] == "True"


def measure_open(run: Run, results: dict[str, LibResult], keys: list[str], workdir: str) -> None:
    """Open the 1M filters in fresh processes, then the --open-mb ones."""
    rounds = run.args.rounds
    key = keys[len(keys) // 2]
    targets: list[tuple[Adapter, str, str, bool]] = []  # (library, file, description, giant)
    for res in results.values():
        a = res.adapter
        f = res.query_filter
        if f is None:
            continue
        try:
            path = a.persist(f, res.query_path if a.file_backed else os.path.join(workdir, f"open-{a.name}.saved"))
            targets.append((a, path, f"{len(keys):,} keys", False))
        except Exception as exc:  # noqa: BLE001
            record_error(run, res, a.name, "save for open", exc)
    if run.args.open_mb > 0:
        targets += build_open_giants(run, [r.adapter for r in results.values()], keys[:1000] + [key], workdir)
    log(f"[open] {len(targets)} filters x {rounds} round(s) in fresh processes")
    samples: dict[int, list[tuple[float, float, bool]]] = {i: [] for i in range(len(targets))}
    for _ in range(rounds):
        for i, (a, path, _, _) in enumerate(targets):
            try:
                samples[i].append(open_in_child(a, path, key))
            except Exception as exc:  # noqa: BLE001
                record_error(run, results.get(a.name), a.name, f"open {os.path.basename(path)}", exc)
    for i, (a, path, what, giant) in enumerate(targets):
        got = samples[i]
        if not got:
            continue
        row = {
            "lib": a.name, "what": what, "size": os.path.getsize(path),
            "child": statistics.median(s[0] for s in got), "wall": statistics.median(s[1] for s in got),
            "hit": all(s[2] for s in got), "giant": giant,
        }
        run.open_rows.append(row)
        if not row["hit"] and a.name == "mmapbloom":
            run.failures.append(f"mmapbloom: fresh process did not find an added key in {path}")
    for a, path, _, giant in targets:
        if giant and os.path.exists(path):
            os.unlink(path)


def build_open_giants(run: Run, adapters: list[Adapter], sample: list[str],
                      workdir: str) -> list[tuple[Adapter, str, str, bool]]:
    """Filters of --open-mb MiB of bits for mmapbloom, the mmap peers and rbloom, each holding
    the keys of ``sample`` (the queried key among them)."""
    num_bits = run.args.open_mb * (1 << 20) * 8
    p = run.args.fp_rate
    capacity = max(1, int(num_bits * math.log(2) ** 2 / -math.log(p)))  # n whose optimal m is num_bits
    out: list[tuple[Adapter, str, str, bool]] = []
    for a in adapters:
        if a.name not in ("mmapbloom", "pybloomfiltermmap3", "bloomsieve", "rbloom"):
            continue
        path = os.path.join(workdir, f"giant-{a.name}.bin")
        log(f"[open] building a {run.args.open_mb} MiB {a.name} filter")
        try:
            if isinstance(a, MmapBloomAdapter):
                cfg = a.mod.BloomConfig(num_bits=num_bits, num_hashes=max(1, round(-math.log(p) / math.log(2))))
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
            record_error(run, None, a.name, f"build {run.args.open_mb} MiB filter", exc)
    return out


# -- processes writing one file ---------------------------------------------------------------------

_PROC_KEYS: list[str] = []


def _proc_worker(lib: str, path: str, lo: int, hi: int, mode: str, barrier: Any, queue: Any) -> None:
    """Child: open ``path``, wait for the others, add keys[lo:hi], report (start, end)."""
    try:
        a = make_adapter(lib)
        a.load()
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


def run_writers(lib: str, path: str, nkeys: int, procs: int, mode: str) -> float:
    """``procs`` forked processes add disjoint slices of the first ``nkeys`` keys to ``path``
    at once; returns the wall time from the first start to the last end."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    bounds = [(nkeys * i // procs, nkeys * (i + 1) // procs) for i in range(procs)]
    workers = [ctx.Process(target=_proc_worker, args=(lib, path, lo, hi, mode, barrier, queue)) for lo, hi in bounds]
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


def file_bits(path: str, skip: int) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8)[skip:]


def popcount(a: np.ndarray) -> int:
    return int(np.bitwise_count(a).sum(dtype=np.uint64))


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
        for mode in ("bulk", "item"):
            nkeys = bulk_keys if mode == "bulk" else item_keys
            template = os.path.join(workdir, f"proc-{a.name}-template.bin")
            try:
                f = a.create(template, nkeys, run.args.fp_rate)  # one template: pybloomfiltermmap3 seeds randomly
                a.close(f)
            except Exception as exc:  # noqa: BLE001
                record_error(run, None, a.name, "create process template", exc)
                continue
            walls: dict[int, list[float]] = {p: [] for p in counts}
            lost: dict[int, int] = {p: 0 for p in counts}
            extra: dict[int, int] = {p: 0 for p in counts}
            misses: dict[int, int] = {p: 0 for p in counts}
            log(f"[processes] {a.name} {mode}: {counts} processes x {rounds} round(s), {nkeys:,} keys")
            for r in range(rounds):
                ref: Optional[np.ndarray] = None
                for p in counts:
                    path = os.path.join(workdir, f"proc-{a.name}-{mode}-{p}.bin")
                    shutil.copyfile(template, path)
                    try:
                        walls[p].append(run_writers(a.name, path, nkeys, p, mode))
                        bits = file_bits(path, a.header_skip)
                        if ref is None:
                            ref = bits
                        else:
                            lost[p] = max(lost[p], popcount(ref & ~bits))
                            extra[p] = max(extra[p], popcount(bits & ~ref))
                        g = a.open_rw(path)
                        try:
                            misses[p] = max(misses[p], nkeys - count_true(a.bulk_query(g, _PROC_KEYS[:nkeys])))
                        finally:
                            a.close(g)
                    except Exception as exc:  # noqa: BLE001
                        record_error(run, None, a.name, f"{p} writer processes ({mode})", exc)
                    finally:
                        if os.path.exists(path):
                            os.unlink(path)
            os.unlink(template)
            if not walls[1]:
                continue
            one = statistics.median(walls[1])
            for p in counts:
                if not walls[p]:
                    continue
                wall = statistics.median(walls[p])
                run.proc_rows.append({
                    "lib": a.name, "mode": mode, "procs": p, "keys": nkeys, "wall": wall, "vs_one": wall / one,
                    "lost": lost[p], "extra": extra[p], "false_negatives": misses[p], "rounds": len(walls[p]),
                })
                if a.name == "mmapbloom" and (lost[p] or misses[p]):
                    run.failures.append(f"mmapbloom: {p} processes ({mode}) lost {lost[p]} bits, "
                                        f"{misses[p]} false negatives")
    gc.unfreeze()
    _PROC_KEYS = []


# -- union ------------------------------------------------------------------------------------------

def measure_union(run: Run, mm: MmapBloomAdapter, workdir: str) -> None:
    """OR one --union-mb mmapbloom file into another, fresh handles each round (page cache warm)."""
    size = run.args.union_mb * (1 << 20)
    cfg = mm.mod.BloomConfig(num_bits=size * 8, num_hashes=7)
    paths = [os.path.join(workdir, f"union-{x}.bin") for x in "ab"]
    log(f"[union] two {run.args.union_mb} MiB filters")
    try:
        block_bytes = min(size, 1 << 24)
        for i, path in enumerate(paths):
            mm.mod.BloomFilter.create(path, cfg).close()
            block = np.random.default_rng([run.args.seed, 0x0A, i]).integers(0, 256, block_bytes, dtype=np.uint8)
            block &= np.uint8(0x11 << i)  # sparse-ish, different bits in a and b
            raw = block.tobytes()
            with open(path, "r+b") as fh:
                for start in range(0, size, block_bytes):
                    fh.seek(24 + start)
                    fh.write(raw[:min(block_bytes, size - start)])
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
        record_error(run, None, "mmapbloom", "union", exc)
    finally:
        for path in paths:
            if os.path.exists(path):
                os.unlink(path)


# -- profile ----------------------------------------------------------------------------------------

def profile_mmapbloom(run: Run, mm: MmapBloomAdapter, keys: list[str], absent: list[str], workdir: str) -> None:
    """cProfile each mmapbloom path once; keep the top functions by own time."""
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
    log("[profile] mmapbloom paths")
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
            out.write(f"### {title}: {wall:.3f} s under the profiler\n\n```\n{body[start:].rstrip()}\n```\n\n")
    finally:
        full.close()
        os.unlink(built)
    run.profile_text = out.getvalue()


# -- environment ------------------------------------------------------------------------------------

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
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"{rev}{' + uncommitted changes' if dirty else ''}" if rev else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def mem_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def environment_line(run: Run) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    libs = ", ".join(f"{a.name} {a.version()}" for a in run.adapters)
    return (f"CPU {cpu_model()} ({os.cpu_count()} logical CPUs), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}, mmh3 {dist_version('mmh3')}, "
            f"portalocker {dist_version('portalocker')}; {libs}; mmapbloom at git {git_revision()}; "
            f"load average {run.load_at_start:.2f} at start, {load:.2f} at end")


# -- report ----------------------------------------------------------------------------------------

def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fastest_in_memory(results: dict[str, LibResult], op: str) -> Optional[LibResult]:
    best = [r for name, r in results.items() if name in IN_MEMORY and r.ns(op) is not None]
    return min(best, key=lambda r: r.ns(op)) if best else None  # type: ignore[arg-type,return-value]


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b == 0:
        return None
    return a / b


def main_tables(run: Run, results: dict[str, LibResult], ops: Sequence[tuple[str, str]], nkeys: int, nabsent: int) -> str:
    rows = []
    for res in results.values():
        fp = res.fp_rate()
        note = " (errors: " + "; ".join(res.errors) + ")" if res.errors else ""
        rows.append([res.adapter.label + note] + [fmt_ns(res.ns(op)) for op, _ in ops] + [
            "-" if fp is None else f"{fp:.3%}",
            "-" if res.false_negatives is None else str(res.false_negatives),
            fmt_bytes(res.size),
        ])
    for name, why in run.missing.items():
        rows.append([f"{name}: missing ({why})"] + ["-"] * (len(ops) + 3))
    out = [f"ns per item, median of {run_rounds(results)} round(s); {nkeys:,} present and {nabsent:,} absent keys, "
           f"p = {run.args.fp_rate:g}.\n",
           md_table(["library"] + [h for _, h in ops] + ["FP rate", "false neg.", "file / memory"], rows,
                    ["l"] + ["r"] * (len(ops) + 3))]
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
    best_names = ", ".join(f"{h}: {b.adapter.name} ({fmt_ns(b.ns(op))} ns)" if b else f"{h}: none"
                           for (op, h), b in zip(ops, best.values()))
    out.append(f"\nTime ratios, *vs {REFERENCE_PEER}* / *vs the fastest in-memory peer of that column* "
               f"(below 1 is faster). Fastest in-memory peer: {best_names}.\n")
    out.append(md_table(["library"] + [h for _, h in ops], rrows, ["l"] + ["r"] * len(ops)))
    return "\n".join(out)


def run_rounds(results: dict[str, LibResult]) -> int:
    counts = [len(v) for r in results.values() for v in r.seconds.values()]
    return max(counts) if counts else 0


def mmapbloom_paths_table(results: dict[str, LibResult]) -> str:
    res = results.get("mmapbloom")
    if res is None:
        return ""
    rows = [[label, fmt_ns(res.ns(op))] for op, label in MMAPBLOOM_PATHS if res.ns(op) is not None]
    held, locked = res.ns("item_add_held"), res.ns("item_add")
    note = ""
    if held and locked:
        note = f"\nA per-call lock costs {locked - held:,.0f} ns per add ({locked / held:.2f}x the held-lock add).\n"
    return md_table(["mmapbloom path", "ns per item"], rows, ["l", "r"]) + "\n" + note


def open_table(run: Run) -> str:
    if not run.open_rows:
        return ""
    rows = [[r["lib"], r["what"], fmt_bytes(r["size"]), fmt_seconds(r["child"]), fmt_seconds(r["wall"]),
             "yes" if r["hit"] else "NO"] for r in run.open_rows]
    return md_table(["library", "filter", "file", "open/load + 1 query (in child)", "child wall time", "found"],
                    rows, ["l", "l", "r", "r", "r", "l"])


def proc_table(run: Run) -> str:
    if not run.proc_rows:
        return ""
    rows = [[r["lib"], "batch API" if r["mode"] == "bulk" else "per-item add", f"{r['keys']:,}", str(r["procs"]),
             fmt_seconds(r["wall"]), fmt_ratio(r["vs_one"]), f"{r['lost']:,}", f"{r['false_negatives']:,}"]
            for r in run.proc_rows]
    return md_table(["library", "writers use", "keys", "processes", "wall (median)", "vs 1 process",
                     "lost bits (max)", "false neg. (max)"], rows, ["l", "l", "r", "r", "r", "r", "r", "r"])


def targets(run: Run) -> list[str]:
    """The PASS/MISS lines for issue 5's targets."""
    lines: list[str] = []
    res = run.main
    mm = res.get("mmapbloom")
    ref = res.get(REFERENCE_PEER)
    ab = res.get("abloom")

    def line(ok: Optional[bool], text: str) -> None:
        lines.append(f"{'PASS' if ok else ('MISS' if ok is not None else 'n/a ')}  {text}")

    def missing(name: str) -> str:
        return f"{name} missing" if name in run.missing else f"{name} not measured"

    for op, heading in OPS[:3]:
        for peer, name, limit in ((ref, REFERENCE_PEER, TARGET_BULK_VS_REFERENCE), (ab, "abloom", TARGET_BULK_VS_ABLOOM)):
            r = ratio(mm.ns(op) if mm else None, peer.ns(op) if peer else None)
            if r is None:
                line(None, f"{heading}: at most {limit}x {name} ({missing(name) if peer is None else 'no data'})")
            else:
                line(r <= limit, f"{heading}: {r:.2f}x {name} (target <= {limit}x)")
    r = ratio(mm.ns("item_query") if mm else None, ref.ns("item_query") if ref else None)
    if r is None:
        line(None, f"per-item query: at most {TARGET_ITEM_QUERY_VS_REFERENCE}x {REFERENCE_PEER} "
                   f"({missing(REFERENCE_PEER) if ref is None else 'no data'})")
    else:
        line(r <= TARGET_ITEM_QUERY_VS_REFERENCE,
             f"per-item query: {r:.2f}x {REFERENCE_PEER} (target <= {TARGET_ITEM_QUERY_VS_REFERENCE}x)")
    r = ratio(mm.ns("item_add") if mm else None, mm.ns("item_add_held") if mm else None)
    line(None if r is None else r <= TARGET_LOCKED_VS_HELD,
         f"per-item locked add: {fmt_ratio(r)} the add inside write_lock() (target <= {TARGET_LOCKED_VS_HELD}x)")
    for mode, what in (("bulk", "batch API"), ("item", "per-item add")):
        rows = [p for p in run.proc_rows if p["lib"] == "mmapbloom" and p["mode"] == mode]
        four = next((p for p in rows if p["procs"] == 4), None)
        if four is None:
            line(None, f"4 processes, {what}: not measured")
        else:
            ok = four["lost"] == 0 and four["false_negatives"] == 0 and four["vs_one"] <= TARGET_FOUR_PROCS_VS_ONE
            line(ok, f"4 processes, {what}: {four['lost']} lost bits, wall {four['vs_one']:.2f}x one process "
                     f"(target 0 lost, <= {TARGET_FOUR_PROCS_VS_ONE}x)")
    if run.union:
        small = "" if run.union["bytes"] >= 500_000_000 else " (files below the 500 MB of the target)"
        line(run.union["gbps"] >= TARGET_UNION_GBPS,
             f"union of two {fmt_bytes(run.union['bytes'])} files: {run.union['gbps']:.2f} GB/s "
             f"(target >= {TARGET_UNION_GBPS} GB/s){small}")
    else:
        line(None, "union: not measured")
    giant = {r["lib"]: r for r in run.open_rows if r["giant"]}
    r = ratio(giant["mmapbloom"]["child"] if "mmapbloom" in giant else None,
              giant["rbloom"]["child"] if "rbloom" in giant else None)
    if r is None:
        why = missing("rbloom") if "rbloom" in run.missing else "not measured"
        line(None, f"open a {run.args.open_mb} MiB filter + 1 query vs rbloom load: {why}")
    else:
        small = "" if run.args.open_mb >= 1000 else " (filter below the 1 GB of the target)"
        line(r < TARGET_OPEN_VS_RBLOOM,
             f"open a {run.args.open_mb} MiB filter + 1 query in a fresh process: "
             f"{fmt_seconds(giant['mmapbloom']['child'])} = {r:.2%} of rbloom's load of the same bits "
             f"({fmt_seconds(giant['rbloom']['child'])}) (target < {TARGET_OPEN_VS_RBLOOM:.0%}){small}")
    return lines


def render(run: Run, command: str, elapsed: float) -> str:
    a = run.args
    parts = [
        "# Benchmarks\n",
        f"Produced by `{command}` (after `pip install -e '.[bench]'`), on "
        f"{time.strftime('%Y-%m-%d', time.localtime(run.started))}; the whole run took {elapsed / 60:.1f} min. "
        "The script's docstring (`tools/benchmark.py`) describes the method.\n",
        f"Environment: {environment_line(run)}.\n",
    ]
    if run.load_at_start > 0.5 * (os.cpu_count() or 1):
        parts.append(f"**The machine was busy** (load average {run.load_at_start:.2f} on {os.cpu_count()} CPUs at the "
                     "start): absolute times are inflated; the ratios, measured in interleaved rounds, hold better.\n")
    if run.missing:
        parts.append("Missing (not installed or not importable, so not measured): "
                     + "; ".join(f"{k} ({v})" for k, v in run.missing.items()) + ".\n")
    parts.append("Method in short: the same seeded URL-like keys (46-90 bytes) for every library; absent keys are "
                 "disjoint from present ones. Bulk = the library's batch API, else a list comprehension; per-item "
                 "= a plain `for` loop over the single-item call. Adds use a fresh filter each round. File-backed "
                 "filters live in a temporary directory on the local disk (page cache warm). Rounds are interleaved "
                 "across libraries, so background load hits all of them alike.\n")
    parts.append(f"## {a.keys:,} keys, p = {a.fp_rate:g}\n")
    parts.append(main_tables(run, run.main, OPS if "items" not in a.skip else OPS[:3], a.keys,
                             a.absent if a.absent is not None else a.keys) + "\n")
    mp_table = mmapbloom_paths_table(run.main)
    if mp_table:
        parts.append("### mmapbloom's paths\n\n" + mp_table)
    if run.open_rows:
        parts.append("## Opening an existing filter in a fresh process and answering one query\n\n"
                     "Inside the child: from before the open (or load) call to after the query; the wall time adds "
                     "interpreter start and imports. In-memory libraries load their saved file.\n\n"
                     + open_table(run) + "\n")
    if run.proc_rows:
        parts.append("## Processes writing one file at once\n\n"
                     "The keys split into disjoint slices, one per process, all started behind a barrier; wall "
                     "time from the first start to the last end (median of rounds). Lost bits: bits set in the file "
                     "that one process built which are missing from the file the concurrent processes built (same "
                     "template file, so the same hash seeds).\n\n" + proc_table(run) + "\n")
    if run.union:
        u = run.union
        parts.append(f"## Union\n\n`a.union(b)` of two {fmt_bytes(u['bytes'])} mmapbloom files (fresh handles, page "
                     f"cache warm): {fmt_seconds(u['seconds'])}, {u['gbps']:.2f} GB/s of one filter's bits "
                     f"(median of {u['rounds']}).\n")
    if run.big:
        parts.append(f"## {a.big_keys:,} keys, p = {a.fp_rate:g} (bulk operations)\n\n{run.big_note}\n")
        parts.append(main_tables(run, run.big, OPS[:3], a.big_keys, run.big_absent) + "\n")
    elif run.big_note:
        parts.append(f"## {a.big_keys:,} keys\n\n{run.big_note}\n")
    parts.append("## Targets of issue 5 (same run)\n\n```\n" + "\n".join(targets(run)) + "\n```\n")
    if run.failures:
        parts.append("## mmapbloom failures\n\n" + "\n".join(f"* {f}" for f in run.failures) + "\n")
    if run.profile_text:
        parts.append("## Where mmapbloom spends its time (cProfile, top 10 by own time)\n\n" + run.profile_text)
    return "\n".join(parts)


def write_chart(run: Run, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("chart skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return
    ops = [(op, h) for op, h in OPS if any(r.ns(op) is not None for r in run.main.values())]
    libs = [r for r in run.main.values() if any(r.ns(op) is not None for op, _ in ops)]
    if not libs:
        log("chart skipped: nothing measured")
        return
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / len(libs)
    for i, res in enumerate(libs):
        values = [res.ns(op) or 0.0 for op, _ in ops]
        xs = [j + (i - (len(libs) - 1) / 2) * width for j in range(len(ops))]
        bars = ax.bar(xs, values, width, label=res.adapter.label)
        for bar, v in zip(bars, values):
            if v:
                ax.annotate(fmt_ns(v), (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom",
                            fontsize=6, rotation=90, xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    top = max(res.ns(op) or 0.0 for res in libs for op, _ in ops)
    ax.set_ylim(top=top * 3)  # room for the value labels
    ax.set_xticks(range(len(ops)), [h for _, h in ops])
    ax.set_ylabel("ns per item (log scale, lower is faster)")
    ax.set_title(f"{run.args.keys:,} URL-like keys, p = {run.args.fp_rate:g}, median of {run_rounds(run.main)} "
                 f"round(s); {cpu_model()}, Python {platform.python_version()}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"chart written to {path}")


# -- driver -----------------------------------------------------------------------------------------

def make_adapter(name: str) -> Adapter:
    for cls in ALL_ADAPTERS:
        if cls.name == name:
            return cls()
    raise ValueError(f"unknown library {name!r}; known: {', '.join(LIB_NAMES)}")


def load_adapters(names: Sequence[str]) -> tuple[list[Adapter], dict[str, str]]:
    adapters, missing = [], {}
    for name in names:
        a = make_adapter(name)
        try:
            a.load()
        except Exception as exc:  # noqa: BLE001 - ImportError or a broken install: "missing"
            missing[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
            continue
        adapters.append(a)
    return adapters, missing


def csv_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000, help="present keys of the main run (default 1,000,000)")
    p.add_argument("--absent", type=int, default=None, help="absent keys queried (default: as many as --keys)")
    p.add_argument("--fp-rate", type=float, default=0.01, help="target false-positive rate p (default 0.01)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per measurement; the median is reported (default 3)")
    p.add_argument("--big-keys", type=int, default=50_000_000,
                   help="keys of the big run, bulk operations only; 0 skips it (default 50,000,000)")
    p.add_argument("--big-absent", type=int, default=5_000_000, help="absent keys of the big run (default 5,000,000)")
    p.add_argument("--big-rounds", type=int, default=1, help="rounds of the big run (default 1)")
    p.add_argument("--big-libs", default="mmapbloom,pybloomfiltermmap3,abloom,fastbloom-rs",
                   help="libraries of the big run (default: mmapbloom and the fast peers)")
    p.add_argument("--union-mb", type=int, default=512, help="MiB of bits per union file; 0 skips (default 512)")
    p.add_argument("--open-mb", type=int, default=1024,
                   help="MiB of bits of the filter opened vs rbloom's load; 0 skips (default 1024)")
    p.add_argument("--procs", default="2,4", help="concurrent writer counts, besides 1 (default 2,4)")
    p.add_argument("--proc-keys", type=int, default=None,
                   help="keys added by the writer processes with the batch API (default --keys)")
    p.add_argument("--proc-item-keys", type=int, default=250_000,
                   help="keys added by the writer processes with per-item adds (default 250,000)")
    p.add_argument("--libs", default=",".join(LIB_NAMES), help=f"libraries (default all: {','.join(LIB_NAMES)})")
    p.add_argument("--skip", default="", help=f"comma list of parts to skip: {','.join(SKIPPABLE)}")
    p.add_argument("--profile", action="store_true", help="add a cProfile of each mmapbloom path")
    p.add_argument("--seed", type=int, default=5, help="key seed (default 5)")
    p.add_argument("--workdir", default=None, help="directory for filter files (default: a new temporary one)")
    p.add_argument("--out", default=None, help="write the markdown report here (e.g. BENCHMARKS.md)")
    p.add_argument("--chart", default=None, help="write the PNG bar chart here (e.g. docs/benchmark.png)")
    args = p.parse_args(argv)
    args.libs = csv_list(args.libs)
    for name in args.libs:
        if name not in LIB_NAMES:
            p.error(f"unknown library {name!r}; known: {', '.join(LIB_NAMES)}")
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


def run_big(run: Run, workdir: str) -> None:
    a = run.args
    nabsent = min(a.big_absent, a.big_keys)
    need = (a.big_keys + nabsent) * BIG_BYTES_PER_KEY
    avail = mem_available()
    if avail is not None and need > 0.8 * avail:
        run.big_note = (f"Skipped: {a.big_keys:,} keys need about {need / 1e9:.1f} GB of memory, "
                        f"{avail / 1e9:.1f} GB are available.")
        log(run.big_note)
        return
    adapters = [x for x in run.adapters if x.name in a.big_libs]
    if not adapters:
        run.big_note = "Skipped: none of --big-libs is installed."
        return
    log(f"[big] generating {a.big_keys:,} + {nabsent:,} keys")
    t0 = time.perf_counter()
    keys = make_keys(0, a.big_keys, a.seed)
    absent = make_keys(a.big_keys, nabsent, a.seed)
    log(f"[big] keys ready in {time.perf_counter() - t0:.1f} s")
    run.big_absent = nabsent
    run.big = measure_ops(run, adapters, keys, absent, a.big_keys, a.big_rounds, workdir, "big", with_items=False,
                          with_extras=False)
    release_filters(run.big)
    others = [x.name for x in run.adapters if x.name not in a.big_libs]
    run.big_note = (f"Bulk operations of {', '.join(x.name for x in adapters)}; "
                    f"median of {a.big_rounds} round(s); {nabsent:,} absent keys."
                    + (f" Not run at this size (too slow for the time budget): {', '.join(others)}." if others else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    run = Run(args)
    run.load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if run.load_at_start > 0.5 * (os.cpu_count() or 1):
        log(f"warning: load average {run.load_at_start:.2f} on {os.cpu_count()} CPUs: other work competes "
            "with the benchmark; ratios hold better than absolute numbers")
    run.adapters, run.missing = load_adapters(args.libs)
    for name, why in run.missing.items():
        log(f"missing: {name} ({why})")
    if not any(isinstance(x, MmapBloomAdapter) for x in run.adapters):
        log("mmapbloom itself cannot be imported")
        return 1
    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix="mmapbloom-bench-") if own_workdir else args.workdir
    os.makedirs(workdir, exist_ok=True)
    try:
        nabsent = args.absent if args.absent is not None else args.keys
        log(f"generating {args.keys:,} present and {nabsent:,} absent keys (seed {args.seed})")
        keys = make_keys(0, args.keys, args.seed)
        absent = make_keys(args.keys, nabsent, args.seed)
        run.main = measure_ops(run, run.adapters, keys, absent, args.keys, args.rounds, workdir, "main",
                               with_items="items" not in args.skip, with_extras=True)
        mm = next(x for x in run.adapters if isinstance(x, MmapBloomAdapter))
        if "open" not in args.skip:
            measure_open(run, run.main, keys, workdir)
        release_filters(run.main)
        if "processes" not in args.skip and args.procs:
            measure_processes(run, run.adapters, keys, workdir)
        if "union" not in args.skip and args.union_mb > 0:
            measure_union(run, mm, workdir)
        if "profile" not in args.skip and args.profile:
            profile_mmapbloom(run, mm, keys, absent, workdir)
        del keys, absent
        gc.collect()
        if "big" not in args.skip and args.big_keys > 0:
            run_big(run, workdir)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    command = "python tools/benchmark.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    report = render(run, command.strip(), elapsed)
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
        log(f"report written to {args.out}")
    if args.chart and "chart" not in args.skip:
        write_chart(run, args.chart)
    log(f"total time {elapsed:.1f} s")
    if run.failures:
        log("mmapbloom FAILED: " + "; ".join(run.failures))
        return 1
    return 0


if __name__ == "__main__":
    from mmapbloom.termination import run_main  # SIGTERM/SIGHUP clean up like Ctrl-C (exit 128 + signal)

    sys.exit(run_main(main, "benchmark.py"))
