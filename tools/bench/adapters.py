"""How the benchmark drives each library: one :class:`Adapter` subclass per library.

mmapbloom and its peers pybloomfiltermmap3, rbloom, abloom, fastbloom-rs and bloomsieve.
An adapter imports its library in :meth:`Adapter.load` (an exception there means the
library is *missing*: reported, never timed), creates and opens filters, and maps the
benchmark's operations (bulk add, bulk query, per-item add and query, persist) onto the
library's own calls. mmapbloom gets one adapter per hash strategy of ``--strategies``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from typing import Any, Callable, Optional, Sequence

__all__ = [
    "ALL_ADAPTERS",
    "LIB_NAMES",
    "AbloomAdapter",
    "Adapter",
    "BloomsieveAdapter",
    "FastbloomAdapter",
    "MmapBloomAdapter",
    "PyBloomFilterMmapAdapter",
    "RbloomAdapter",
    "load_adapters",
    "make_adapter",
]


class Adapter:
    """How the benchmark drives one library. Subclasses fill in the class attributes and the
    methods; ``load`` imports the library (any exception means "missing").

    Not thread-safe; one instance per process (forked writer processes inherit a copy).
    """

    lib: str = ""  # the library, as --libs and --big-libs name it
    dist: str = ""  # distribution name, for its version
    label: str = ""  # table label with the mode used
    storage: str = ""  # what backs the bits
    file_backed: bool = False
    #: Leading bytes of the file that a writer may change other than bits (header counters);
    #: skipped when comparing the bits of two files.
    header_skip: int = 0
    #: Python for a fresh process: imports, then ``f = ...`` from ``path``; then the query.
    open_imports: str = ""
    open_stmt: str = ""
    query_stmt: str = "hit = key in f"

    @property
    def name(self) -> str:
        """The row name in the tables (unique within a run)."""
        return self.lib

    @property
    def is_own(self) -> bool:
        """True for mmapbloom itself: its errors make the run fail (exit status 1)."""
        return False

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

    def compare_bits(self, reference: str, other: str) -> tuple[int, int]:
        """``(lost, extra)``: bits set in file ``reference`` but not in ``other``, and the
        reverse. Raw bytes after ``header_skip``, counted with ``int.bit_count``."""
        with open(reference, "rb") as fh:
            a = int.from_bytes(fh.read()[self.header_skip :], "little")
        with open(other, "rb") as fh:
            b = int.from_bytes(fh.read()[self.header_skip :], "little")
        return (a & ~b).bit_count(), (b & ~a).bit_count()


class MmapBloomAdapter(Adapter):
    """mmapbloom with one hash strategy (``None``: the library default)."""

    lib = dist = "mmapbloom"
    storage = "mmap + flock"
    file_backed = True
    open_imports = "from mmapbloom import BloomFilter"
    open_stmt = "f = BloomFilter.open(path)"

    def __init__(self, strategy: Optional[str] = None, *, qualified: bool = False) -> None:
        self.strategy_name = strategy
        self.qualified = qualified  # several strategies in the run: rows are "mmapbloom:NAME"

    @property
    def name(self) -> str:
        return f"mmapbloom:{self.strategy.name}" if self.qualified else "mmapbloom"

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"{self.name} (mmap + flock, {self.strategy.name})"

    @property
    def is_own(self) -> bool:
        return True

    def load(self) -> None:
        import mmapbloom

        self.mod = mmapbloom
        # Resolved at run time, so strategies added to the library later need no change here.
        self.strategy = mmapbloom.get_strategy(self.strategy_name) if self.strategy_name else mmapbloom.DEFAULT_STRATEGY

    def version(self) -> str:
        return str(getattr(self.mod, "__version__", "?"))

    def config(self, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomConfig.for_items(capacity, fp_rate, strategy=self.strategy)

    def config_bits(self, num_bits: int, num_hashes: int) -> Any:
        return self.mod.BloomConfig(num_bits=num_bits, num_hashes=num_hashes, strategy=self.strategy)

    def create(self, path: str, capacity: int, fp_rate: float) -> Any:
        return self.mod.BloomFilter.create(path, self.config(capacity, fp_rate))

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

    def compare_bits(self, reference: str, other: str) -> tuple[int, int]:
        """Through the library: popcounts (``count_ones``) of both files and of their
        intersection (``a & b``, a new in-memory filter)."""
        a = self.mod.BloomFilter.open(reference, readonly=True)
        b = self.mod.BloomFilter.open(other, readonly=True)
        try:
            both = (a & b).count_ones()
            return a.count_ones() - both, b.count_ones() - both
        finally:
            a.close()
            b.close()


class PyBloomFilterMmapAdapter(Adapter):
    lib = dist = "pybloomfiltermmap3"
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
    lib = dist = "bloomsieve"
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
    lib = dist = "rbloom"
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
    lib = dist = "abloom"
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
    lib = dist = "fastbloom-rs"
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
    MmapBloomAdapter,
    PyBloomFilterMmapAdapter,
    RbloomAdapter,
    AbloomAdapter,
    FastbloomAdapter,
    BloomsieveAdapter,
)
LIB_NAMES = tuple(a.lib for a in ALL_ADAPTERS)


def make_adapter(lib: str) -> Adapter:
    """A new, not yet loaded adapter for library ``lib`` (mmapbloom: default strategy).

    Raises:
        ValueError: unknown library; the message lists the known ones.
    """
    for cls in ALL_ADAPTERS:
        if cls.lib == lib:
            return cls()
    raise ValueError(f"unknown library {lib!r}; known: {', '.join(LIB_NAMES)}")


def load_adapters(libs: Sequence[str], strategies: Sequence[str] = ()) -> tuple[list[Adapter], dict[str, str]]:
    """Load the adapters of ``libs``, mmapbloom once per name in ``strategies`` (none: the
    library default). Returns the loaded adapters and ``{name: reason}`` for the missing
    ones (an unknown strategy name is reported as missing too)."""
    adapters: list[Adapter] = []
    missing: dict[str, str] = {}
    for lib in libs:
        if lib == "mmapbloom":
            candidates: list[Adapter] = [MmapBloomAdapter(s, qualified=len(strategies) > 1) for s in strategies] or [
                MmapBloomAdapter()
            ]
        else:
            candidates = [make_adapter(lib)]
        for a in candidates:
            try:
                a.load()
            except Exception as exc:  # noqa: BLE001 - ImportError or a broken install: "missing"
                key = (
                    lib
                    if not isinstance(a, MmapBloomAdapter) or not a.strategy_name
                    else f"mmapbloom:{a.strategy_name}"
                )
                missing[key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
                continue
            adapters.append(a)
    return adapters, missing
