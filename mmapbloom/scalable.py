"""Scalable Bloom filters: a directory of BLM1 layers that grows without losing its bound.

Almeida, Baquero, Preguica and Hutchison 2007, "Scalable Bloom Filters" (Information
Processing Letters 101(6)): a scalable filter is a list of plain Bloom filters (layers).
Layer i is sized for ``n_i = n0 * s**i`` items at error target ``p_i = p0 * r**i`` with
``p0 = p * (1 - r)``. New items go to the newest layer; when it holds ``n_i`` items a new
layer is added. A query asks every layer, so the compound (expected) false-positive rate
is::

    P = 1 - prod_i (1 - p_i)  <=  sum_i p_i  =  p0 / (1 - r)  =  p

at any size (the sum of a geometric series with ratio r < 1). Defaults: growth s = 2 and
tightening r = 0.5 (the paper suggests s = 2 for slow and s = 4 for fast growth, and r
around 0.8 to 0.9 for better average space use over a wide range of growth; r = 0.5 keeps
the first layers small). Each layer's m is the smallest that keeps its expected rate at
capacity at or below p_i (rounding k alone can leave it slightly above).

On disk (documented exactly in docs/SCALABLE.md): a directory holding

* ``layer-0000.blm``, ``layer-0001.blm``, ...: one ordinary BLM1 file per layer, each
  openable with :meth:`BloomFilter.open <mmapbloom.BloomFilter.open>`;
* ``manifest.json``: the parameters and the shape of every layer, replaced atomically
  (temporary file, fsync, rename, directory fsync) each time a layer is added;
* ``lock``: 16 bytes; every writer holds an exclusive ``flock`` on it (the directory-wide
  write lock), and its word at offset 8 is the *committed* layer count. Every handle maps
  it and compares the word with its own layer count at each operation (one memory load),
  so layers added by other processes are seen at O(1) cost, with no directory listing.

Growth is crash-safe: under the write lock the writer creates the whole layer file
(atomically), publishes the manifest that lists it, and only then stores the new count in
the lock word; a process killed before that store leaves an uncommitted layer that every
handle ignores and the next writer replaces.

Merging scalable filters is not supported (layers of two filters hold different items at
different sizes; a merge would have to re-add items it does not have).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import math
import mmap
import numbers
import os
import secrets
import shutil
import stat
import struct
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np
import numpy.typing as npt

from . import format as fmt
from .errors import (
    ConfigError,
    ConfigMismatchError,
    FilterClosedError,
    LayerMismatchError,
    ManifestError,
    MissingLayerError,
    ReadOnlyFilterError,
)
from .filter import BloomFilter
from .batches import encoded_keys
from .hashing import DEFAULT_STRATEGY, HashStrategy, encode_key, get_strategy
from .locking import WriteLock
from .config import BloomConfig
from .storage import absolute_path, atomic_file, fsync_directory

__all__ = [
    "DEFAULT_GROWTH",
    "DEFAULT_TIGHTENING",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "LayerInfo",
    "ScalableBloomFilter",
    "is_scalable",
    "layer_name",
    "scalable_info",
    "verify_scalable",
]

#: Default growth factor s: layer i holds ``n0 * s**i`` items.
DEFAULT_GROWTH = 2
#: Default tightening ratio r: layer i's error target is ``p * (1 - r) * r**i``.
DEFAULT_TIGHTENING = 0.5

MANIFEST_NAME = "manifest.json"
LOCK_NAME = "lock"
MANIFEST_FORMAT = "mmapbloom-scalable"
MANIFEST_VERSION = 1

#: The lock file: magic, version, committed layer count, reserved (all u32 little-endian
#: after the magic).
LOCK_MAGIC = b"BLSL"
LOCK_VERSION = 1
_LOCK = struct.Struct("<4sIII")
LOCK_SIZE = _LOCK.size  # 16
_COUNT_OFFSET = 8

#: A layer's items-added field saturates here (BLM1 header, u32).
_MAX_ITEMS = fmt.MAX_ITEMS
#: A manifest larger than this is refused before it is read (it lists a few hundred bytes
#: per layer).
_MAX_MANIFEST_BYTES = 1 << 24
#: Keys per write-lock hold in :meth:`ScalableBloomFilter.update`.
_CHUNK = 1 << 16

_NATIVE_LITTLE = sys.byteorder == "little"

PathLike = Union[str, "os.PathLike[str]"]
Item = Union[str, bytes, bytearray, memoryview]

# Test hook: called as ``_GROW_HOOK(stage, index)`` while a layer is being added, with
# stage ``"layer-created"`` (layer file published, manifest not yet) and
# ``"manifest-published"`` (manifest lists the layer, the count not yet committed). The
# crash tests set it in a child process to SIGKILL it at those exact points.
_GROW_HOOK: Optional[Callable[[str, int], None]] = None

_LIVE: "weakref.WeakSet[ScalableBloomFilter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held a handle's reload lock at fork(): give every
    # handle a fresh one in the child (the write lock is reset by mmapbloom.locking).
    for handle in list(_LIVE):
        handle._reload_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def layer_name(index: int) -> str:
    """The file name of layer ``index`` (0-based): ``layer-0000.blm``, ``layer-0001.blm``,
    ... (at least four digits; ``layer-10000.blm`` after ``layer-9999.blm``)."""
    return f"layer-{index:04d}.blm"


def _swap32(value: int) -> int:
    return int.from_bytes(value.to_bytes(4, "little"), "big")


# -- parameters and the growth rule ---------------------------------------------------------
@dataclass(frozen=True)
class _Params:
    capacity: int
    fp_rate: float
    growth: Union[int, float]
    tightening: float
    strategy: str

    def layer_capacity(self, i: int) -> int:
        """``n0 * s**i``, exact for an integer s, else rounded up."""
        if isinstance(self.growth, int):
            return int(self.capacity * self.growth ** i)
        return math.ceil(self.capacity * self.growth ** i)

    @functools.lru_cache(maxsize=256)  # noqa: B019  (frozen, hashable, few instances)
    def layer_limit(self, i: int) -> int:
        """The item count at which layer i is full: ``min(n_i, 2**32 - 1)`` (the BLM1
        items field saturates at 2**32 - 1)."""
        return min(self.layer_capacity(i), _MAX_ITEMS)

    def layer_fp_rate(self, i: int) -> float:
        """``p0 * r**i`` with ``p0 = p * (1 - r)``."""
        return self.fp_rate * (1.0 - self.tightening) * self.tightening ** i

    @functools.lru_cache(maxsize=1024)  # noqa: B019  (frozen, hashable, few instances)
    def layer_config(self, i: int, strategy: HashStrategy) -> BloomConfig:
        """Layer i's shape: k from :meth:`BloomConfig.for_items` (``round((m/n) ln 2)``),
        and m the smallest number of bits, at least for_items' m, whose expected rate at
        capacity ``(1 - e^(-k n / m))^k`` is <= p_i, i.e. ``m >= -k n / ln(1 - p_i^(1/k))``.
        (Rounding k alone leaves the rate up to 0.3% above p_i, which would let the sum
        of the layers' rates pass p.) A blocked strategy (``block_bits`` set) keeps
        for_items' shape: its own sizing already meets p_i in whole blocks. Cached, so the
        shape and any sizing warning of the strategy come once per process and layer.
        Raises ConfigError when it does not fit BLM1 (m >= 2**64) or p_i underflows to 0
        (not cached: raised again on every call)."""
        p_i = self.layer_fp_rate(i)
        if not p_i > 0.0:
            raise ConfigError(f"layer {i}: error target p0 * r**i underflowed to {p_i!r}; the filter cannot grow further")
        n = self.layer_capacity(i)
        base = BloomConfig.for_items(n, p_i, strategy)
        k = base.num_hashes
        if strategy.block_bits or strategy.expected_fp_rate(n, base.num_bits, k) <= p_i:
            return base  # a blocked strategy's own sizing already meets p_i (whole blocks)
        m = max(base.num_bits, math.ceil(-k * n / math.log1p(-p_i ** (1.0 / k))))
        while strategy.expected_fp_rate(n, m, k) > p_i:  # float rounding at the boundary
            m += 1
        return BloomConfig(num_bits=m, num_hashes=k, strategy=strategy, capacity=n, fp_rate=p_i)

    def layer_entry(self, i: int, strategy: HashStrategy) -> dict[str, Any]:
        cfg = self.layer_config(i, strategy)
        return {"index": i, "file": layer_name(i), "capacity": self.layer_capacity(i),
                "fp_rate": self.layer_fp_rate(i), "num_bits": cfg.num_bits, "num_hashes": cfg.num_hashes}


def _check_params(capacity: object, fp_rate: object, growth: object, tightening: object) -> tuple[int, float, Union[int, float], float]:
    # Capacity and fp_rate are checked exactly as BloomConfig.for_items checks them.
    probe = BloomConfig.for_items(capacity, fp_rate)  # type: ignore[arg-type]
    assert probe.capacity is not None and probe.fp_rate is not None
    try:
        gf = float(growth) if isinstance(growth, numbers.Real) and not isinstance(growth, bool) else math.nan
    except OverflowError:
        gf = math.inf
    if not (math.isfinite(gf) and gf > 1.0):
        raise ConfigError(f"growth must be a finite number greater than 1, got {growth!r}")
    g: Union[int, float] = int(gf) if gf.is_integer() else gf
    tf = float(tightening) if isinstance(tightening, numbers.Real) and not isinstance(tightening, bool) else math.nan
    if not 0.0 < tf < 1.0:
        raise ConfigError(f"tightening must be strictly between 0 and 1, got {tightening!r}")
    return probe.capacity, probe.fp_rate, g, tf


# -- the per-layer record ---------------------------------------------------------------------
@dataclass(frozen=True)
class LayerInfo:
    """The shape and fill of one layer (a snapshot; :attr:`ScalableBloomFilter.layers`).

    Attributes:
        index: 0 for the first layer.
        path: absolute path of the layer's BLM1 file.
        capacity: n_i = n0 * s**i, the items the layer takes before the next is added.
        fp_rate: p_i = p * (1 - r) * r**i, the layer's error target at its capacity.
        num_bits: m of the layer file.
        num_hashes: k of the layer file.
        items_added: the layer header's item count at the time of the snapshot.
        expected_fp_rate: ``(1 - e^(-k n / m))^k`` at that count (Bloom 1970).
        size_bytes: the layer file's length, ``24 + ceil(m / 8)``.
    """

    index: int
    path: str
    capacity: int
    fp_rate: float
    num_bits: int
    num_hashes: int
    items_added: int
    expected_fp_rate: float
    size_bytes: int


# -- manifest and lock file -------------------------------------------------------------------
def _manifest_bytes(params: _Params, count: int, strategy: HashStrategy) -> bytes:
    doc = {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "strategy": params.strategy,
        "capacity": params.capacity,
        "fp_rate": params.fp_rate,
        "growth": params.growth,
        "tightening": params.tightening,
        "layers": [params.layer_entry(i, strategy) for i in range(count)],
    }
    return (json.dumps(doc, indent=1) + "\n").encode("ascii")


def _write_manifest(directory: str, params: _Params, count: int, strategy: HashStrategy) -> None:
    """Replace ``manifest.json`` atomically: temporary file, fsync, rename, directory fsync."""
    data = _manifest_bytes(params, count, strategy)
    with atomic_file(os.path.join(directory, MANIFEST_NAME), replace=True) as fd:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]


def _manifest_field(doc: dict[str, Any], name: str, kind: Any, source: str) -> Any:
    if name not in doc:
        raise ManifestError(f"manifest has no field {name!r}", source=source, expected=name, actual=sorted(doc))
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ManifestError(f"manifest field {name!r} has type {type(value).__name__}, expected {kind}",
                            source=source, expected=kind, actual=value)
    return value


def _read_manifest(directory: str) -> tuple[_Params, HashStrategy, list[dict[str, Any]]]:
    """Read and validate ``manifest.json``: every field present and typed, the parameters
    valid, and every listed layer entry equal to the shape the growth rule gives.

    Raises ManifestError (also for a missing manifest), UnknownStrategyError."""
    source = os.path.join(directory, MANIFEST_NAME)
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ManifestError("the manifest is missing (not a scalable filter directory, or damaged)",
                            source=source, expected=MANIFEST_NAME, actual=None) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError("the manifest is not a regular file", source=source, expected="regular file",
                                actual=stat.filemode(st.st_mode))
        if st.st_size > _MAX_MANIFEST_BYTES:
            raise ManifestError(f"the manifest is {st.st_size} bytes, more than {_MAX_MANIFEST_BYTES}",
                                source=source, expected=_MAX_MANIFEST_BYTES, actual=st.st_size)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(f"the manifest is not valid JSON ({exc})", source=source, expected="JSON object",
                            actual=raw[:40]) from None
    if not isinstance(doc, dict):
        raise ManifestError("the manifest is not a JSON object", source=source, expected="object",
                            actual=type(doc).__name__)
    fmt_name = _manifest_field(doc, "format", str, source)
    if fmt_name != MANIFEST_FORMAT:
        raise ManifestError(f"manifest format is {fmt_name!r}, expected {MANIFEST_FORMAT!r}", source=source,
                            expected=MANIFEST_FORMAT, actual=fmt_name)
    version = _manifest_field(doc, "version", int, source)
    if version != MANIFEST_VERSION:
        raise ManifestError(f"manifest version is {version}, expected {MANIFEST_VERSION}", source=source,
                            expected=MANIFEST_VERSION, actual=version)
    strategy_name = _manifest_field(doc, "strategy", str, source)
    strategy = get_strategy(strategy_name, source=source)
    try:
        capacity, fp_rate, growth, tightening = _check_params(
            _manifest_field(doc, "capacity", int, source), _manifest_field(doc, "fp_rate", (int, float), source),
            _manifest_field(doc, "growth", (int, float), source),
            _manifest_field(doc, "tightening", (int, float), source))
    except ConfigError as exc:
        raise ManifestError(f"invalid parameters: {exc}", source=source, expected="valid parameters",
                            actual=str(exc)) from None
    params = _Params(capacity, fp_rate, growth, tightening, strategy_name)
    layers = _manifest_field(doc, "layers", list, source)
    for i, entry in enumerate(layers):
        if not isinstance(entry, dict):
            raise ManifestError(f"layer entry {i} is not an object", source=source, expected="object",
                                actual=entry)
        try:
            want = params.layer_entry(i, strategy)
        except ConfigError as exc:
            raise ManifestError(f"layer {i} cannot exist: {exc}", source=source, expected=None, actual=entry) from None
        for key, value in want.items():
            got = entry.get(key)
            same = (isinstance(got, (int, float)) and not isinstance(got, bool)
                    and math.isclose(got, value, rel_tol=1e-12)) if key == "fp_rate" else got == value
            if not same:
                raise ManifestError(f"layer {i}: {key} is {got!r}, expected {value!r} from the growth rule",
                                    source=source, expected=value, actual=got)
    return params, strategy, layers


def _lock_image(count: int) -> bytes:
    return _LOCK.pack(LOCK_MAGIC, LOCK_VERSION, count, 0)


def _check_lock_image(head: bytes, size: int, source: str) -> int:
    """Validate the lock file's 16 bytes; return the committed layer count."""
    if size != LOCK_SIZE or len(head) != LOCK_SIZE:
        raise ManifestError(f"lock file is {size} bytes, expected {LOCK_SIZE}", source=source,
                            expected=LOCK_SIZE, actual=size)
    magic, version, count, reserved = _LOCK.unpack(head)
    if magic != LOCK_MAGIC:
        raise ManifestError(f"lock file magic is {magic!r}, expected {LOCK_MAGIC!r}", source=source,
                            expected=LOCK_MAGIC, actual=magic)
    if version != LOCK_VERSION:
        raise ManifestError(f"lock file version is {version}, expected {LOCK_VERSION}", source=source,
                            expected=LOCK_VERSION, actual=version)
    if reserved != 0:
        raise ManifestError(f"lock file reserved word is {reserved}, expected 0", source=source, expected=0,
                            actual=reserved)
    if count < 1:
        raise ManifestError(f"committed layer count is {count}, expected at least 1", source=source,
                            expected=">= 1", actual=count)
    return int(count)


def _strip(path: PathLike) -> str:
    p = absolute_path(path)
    stripped = p.rstrip("/")
    return stripped or p


def is_scalable(path: PathLike) -> bool:
    """True if ``path`` is a directory holding a ``manifest.json`` (a scalable filter, as
    far as a cheap check can tell; :meth:`ScalableBloomFilter.open` validates it). For the
    CLI, to choose between a filter file and a scalable directory."""
    p = _strip(path)
    return os.path.isdir(p) and os.path.isfile(os.path.join(p, MANIFEST_NAME))


# -- the filter -------------------------------------------------------------------------------
class ScalableBloomFilter:
    """A scalable Bloom filter (Almeida et al. 2007) stored in a directory of BLM1 layers.

    Construct with :meth:`create`, :meth:`open` or :meth:`open_or_create`. Layer i holds
    ``capacity * growth**i`` items at error target ``fp_rate * (1 - tightening) *
    tightening**i``; the compound expected false-positive rate stays below ``fp_rate`` at
    any number of items (see the module docstring; docs/SCALABLE.md shows measured rates,
    which follow the bits actually set and so scatter a few percent around it).

    Promise: no false negatives. ``might_contain(x)`` is False only if ``x`` was never
    added. :meth:`add` returns True only if the item was absent from every layer, atomically
    across threads and processes (of several racing adders of a new item exactly one gets
    True).

    Concurrency: writers (``add``, ``update``) hold one directory-wide write lock: a
    re-entrant thread lock plus an exclusive ``flock`` on the directory's ``lock`` file
    (the package's :class:`~mmapbloom.locking.WriteLock`). Readers take no lock. Each
    operation first compares the committed layer count (a word of the mapped ``lock``
    file) with the handle's; when another process added a layer the handle opens it then.
    Fork-safe: a child that inherits a handle locks through its own open file description
    of the lock file (the parent's flock never admits it). Not safe on file systems whose
    ``flock`` is not coherent (NFS).

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with ScalableBloomFilter.create(os.path.join(d, "urls"), 1000, 0.01) as f:
    ...     f.add("a"), f.add("a"), "a" in f, "b" in f
    (True, False, True, False)
    """

    __slots__ = ("_path", "_params", "_strategy", "_readonly", "_no_write", "_closed", "_lock", "_lock_fd",
                 "_lock_mm", "_word", "_layers", "_inodes", "_reload_lock", "__weakref__")

    _path: str
    _params: _Params
    _strategy: HashStrategy
    _readonly: bool
    _no_write: bool
    _closed: bool
    _lock: WriteLock
    _lock_fd: int
    _lock_mm: mmap.mmap
    _word: memoryview
    _layers: list[BloomFilter]
    _inodes: list[tuple[int, int]]
    _reload_lock: threading.Lock

    # -- construction ------------------------------------------------------------------------
    def __init__(self) -> None:
        raise TypeError("use ScalableBloomFilter.create(), open() or open_or_create()")

    @classmethod
    def create(cls, path: PathLike, capacity: int, fp_rate: float, *, growth: Union[int, float] = DEFAULT_GROWTH,
               tightening: float = DEFAULT_TIGHTENING, strategy: Optional[HashStrategy] = None) -> "ScalableBloomFilter":
        """Create a new scalable filter directory with its first layer, and open it read-write.

        The whole directory (layer 0, manifest, lock file) is built under a temporary name
        next to ``path`` and renamed into place, so other processes never see a partial
        filter; of several processes creating the same path, one wins and the others get
        FileExistsError.

        Args:
            path: the directory to create; it must not exist.
            capacity: n0, items of the first layer (a positive integer).
            fp_rate: p, the bound on the compound false-positive rate, in (0, 1).
            growth: s > 1, each layer holds s times the items of the previous (default 2).
            tightening: r in (0, 1), each layer's error target is r times the previous
                (default 0.5).
            strategy: hash strategy of every layer (default: the package default). Stored
                by name in the manifest and in every layer header.

        Raises:
            ConfigError: a parameter out of range.
            FileExistsError: ``path`` exists.
            OSError: the parent directory is missing or not writable, the disk is full.
        """
        n0, p, s, r = _check_params(capacity, fp_rate, growth, tightening)
        strat = DEFAULT_STRATEGY if strategy is None else strategy
        # ConfigError for an unregistered strategy (one whole block: blocked strategies refuse m = 1)
        strat = BloomConfig(num_bits=max(1, strat.block_bits), num_hashes=1, strategy=strat).strategy
        params = _Params(n0, p, s, r, strat.name)
        dest = _strip(path)
        parent = os.path.dirname(dest)
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "file exists", dest)
        tmp = os.path.join(parent, f".mmapbloom-{secrets.token_hex(8)}.tmp")
        os.mkdir(tmp, 0o777)
        try:
            BloomFilter.create(os.path.join(tmp, layer_name(0)), params.layer_config(0, strat)).close()
            _write_manifest(tmp, params, 1, strat)
            with atomic_file(os.path.join(tmp, LOCK_NAME), replace=False) as fd:
                os.write(fd, _lock_image(1))
            fsync_directory(tmp)
            try:
                os.rename(tmp, dest)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise FileExistsError(errno.EEXIST, "file exists", dest) from None
                raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_directory(parent or ".")
        return cls.open(dest)

    @classmethod
    def open(cls, path: PathLike, readonly: bool = False) -> "ScalableBloomFilter":
        """Open an existing scalable filter directory. Costs O(number of layers): the lock
        file, the manifest and each layer's header are read and checked.

        Args:
            path: the directory.
            readonly: open every file read-only; writes then raise ReadOnlyFilterError.

        Raises:
            FileNotFoundError, NotADirectoryError, PermissionError: from the OS.
            ManifestError: damaged or missing manifest or lock file.
            MissingLayerError: a committed layer file is missing.
            LayerMismatchError: a layer's m, k or strategy differ from the manifest.
            BadMagicError, BadHeaderError, LengthMismatchError, PaddingError,
            UnknownStrategyError: a layer file is damaged (as :meth:`BloomFilter.open`).
        """
        dest = _strip(path)
        st = os.stat(dest)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "a scalable filter is a directory; this is not one", dest)
        self = cls.__new__(cls)
        self._path = dest
        self._readonly = bool(readonly)
        self._no_write = self._readonly
        self._closed = False
        self._layers = []
        self._inodes = []
        self._reload_lock = threading.Lock()
        lock_path = os.path.join(dest, LOCK_NAME)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(lock_path, flags)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        try:
            lst = os.fstat(fd)
            if not stat.S_ISREG(lst.st_mode):
                raise ManifestError("the lock file is not a regular file", source=lock_path,
                                    expected="regular file", actual=stat.filemode(lst.st_mode))
            _check_lock_image(os.pread(fd, LOCK_SIZE, 0), lst.st_size, lock_path)
            mm = mmap.mmap(fd, LOCK_SIZE, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        self._lock_mm = mm
        word = memoryview(mm)[_COUNT_OFFSET:_COUNT_OFFSET + 4].cast("I")
        assert word.itemsize == 4
        self._word = word
        self._lock = WriteLock(fd, lock_path)
        try:
            count = self._load_count()  # the count first, the manifest second (see _reload)
            self._params, self._strategy, _ = _read_manifest(dest)
            self._reload(count)
        except BaseException:
            self._close_files()
            raise
        _LIVE.add(self)
        return self

    @classmethod
    def open_or_create(cls, path: PathLike, capacity: int, fp_rate: float, *,
                       growth: Union[int, float] = DEFAULT_GROWTH, tightening: float = DEFAULT_TIGHTENING,
                       strategy: Optional[HashStrategy] = None) -> "ScalableBloomFilter":
        """Open ``path`` if it exists, else create it with these parameters; safe when many
        processes race on the same new path (one directory is created, all open it).

        Raises:
            ConfigMismatchError: the existing filter's capacity, fp_rate, growth,
                tightening or strategy differ (the message names the field and both values).
            And whatever :meth:`open` and :meth:`create` raise.
        """
        n0, p, s, r = _check_params(capacity, fp_rate, growth, tightening)
        strategy_name = (DEFAULT_STRATEGY if strategy is None else strategy).name
        for _ in range(100):
            try:
                f = cls.open(path)
            except FileNotFoundError:
                try:
                    return cls.create(path, n0, p, growth=s, tightening=r, strategy=strategy)
                except FileExistsError:
                    continue
            try:
                have = f._params
                for field, want, got in (("capacity", n0, have.capacity), ("fp_rate", p, have.fp_rate),
                                         ("growth", s, have.growth), ("tightening", r, have.tightening),
                                         ("strategy", strategy_name, have.strategy)):
                    if want != got:
                        raise ConfigMismatchError(f._path, field, want, got)
            except BaseException:
                f.close()
                raise
            return f
        raise FileExistsError(f"{path}: directory keeps appearing and disappearing")  # pragma: no cover

    # -- layer bookkeeping ------------------------------------------------------------------
    def _load_count(self) -> int:
        value: int = self._word[0]
        return value if _NATIVE_LITTLE else _swap32(value)

    def _store_count(self, count: int) -> None:
        self._word[0] = count if _NATIVE_LITTLE else _swap32(count)

    def _current(self) -> list[BloomFilter]:
        """The layer handles, after opening any layer another process committed. O(1)
        when nothing changed: one load of the mapped count word."""
        layers = self._layers
        try:
            count = self._load_count()
        except ValueError:  # the word view was released: closed
            self._check_open()
            raise
        if count == len(layers):
            return layers
        return self._reload(count)

    def _reload(self, count: int) -> list[BloomFilter]:
        """Open layers up to ``count`` (the committed count, read *before* the manifest:
        the manifest is published before the count is stored, so it lists at least
        ``count`` layers unless it is damaged)."""
        with self._reload_lock:
            layers = self._layers
            if count == len(layers):
                return layers
            lock_path = os.path.join(self._path, LOCK_NAME)
            if count < len(layers):
                raise ManifestError(f"the committed layer count went back from {len(layers)} to {count}",
                                    source=lock_path, expected=f">= {len(layers)}", actual=count)
            params, _, entries = _read_manifest(self._path)
            if params != self._params:
                raise ManifestError(f"the manifest's parameters changed under the handle: {params} != {self._params}",
                                    source=os.path.join(self._path, MANIFEST_NAME), expected=self._params,
                                    actual=params)
            if len(entries) < count:
                raise ManifestError(f"the manifest lists {len(entries)} layers, the lock file commits {count}",
                                    source=os.path.join(self._path, MANIFEST_NAME), expected=count,
                                    actual=len(entries))
            new = list(layers)
            inodes = list(self._inodes)
            try:
                for i in range(len(layers), count):
                    layer, ino = self._open_layer(i, entries[i], count)
                    new.append(layer)
                    inodes.append(ino)
            except BaseException:
                for layer in new[len(layers):]:
                    layer.close()
                raise
            self._inodes = inodes
            self._layers = new
            return new

    def _layer_path(self, i: int) -> str:
        return os.path.join(self._path, layer_name(i))

    def _open_layer(self, i: int, entry: dict[str, Any], count: int) -> tuple[BloomFilter, tuple[int, int]]:
        path = self._layer_path(i)
        try:
            layer = BloomFilter.open(path, readonly=self._readonly)
        except FileNotFoundError:
            raise MissingLayerError(f"layer {i} of {count} committed layers is missing", source=path,
                                    expected=count, actual=i) from None
        try:
            self._check_shape(i, layer, entry)
            st = os.stat(path)
        except BaseException:
            layer.close()
            raise
        return layer, (st.st_dev, st.st_ino)

    def _check_shape(self, i: int, layer: BloomFilter, entry: dict[str, Any]) -> None:
        # The manifest's entries were checked against the growth rule when it was read, so
        # the rule's config is the manifest's; compared by the one shape comparison.
        diff = self._params.layer_config(i, self._strategy).difference(layer.config)
        if diff is not None:
            field, want, got = diff
            raise LayerMismatchError(f"layer {i} has {field} {got!r}, the manifest says {want!r}",
                                     source=self._layer_path(i), expected=want, actual=got)

    def _full(self, i: int, layer: BloomFilter) -> bool:
        return layer.items_added >= self._params.layer_limit(i)

    def _grow(self, layers: list[BloomFilter]) -> list[BloomFilter]:
        """Add layer ``len(layers)``; the caller holds the write lock and ``layers`` is
        current. Order: layer file (complete, atomically published; an uncommitted
        leftover of a killed writer is replaced), manifest (atomic replace), count word
        (the commit point), msync of the lock file."""
        i = len(layers)
        cfg = self._params.layer_config(i, self._strategy)  # ConfigError before any change
        layer = BloomFilter.create(self._layer_path(i), cfg, overwrite=True)
        try:
            if _GROW_HOOK is not None:
                _GROW_HOOK("layer-created", i)
            _write_manifest(self._path, self._params, i + 1, self._strategy)
            if _GROW_HOOK is not None:
                _GROW_HOOK("manifest-published", i)
            st = os.stat(self._layer_path(i))
            with self._reload_lock:
                self._store_count(i + 1)
                self._lock_mm.flush()
                self._inodes = self._inodes + [(st.st_dev, st.st_ino)]
                self._layers = new = layers + [layer]
        except BaseException:
            layer.close()
            raise
        return new

    # -- guards -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise FilterClosedError(f"{self._path}: filter is closed")

    def _refuse_write(self) -> None:
        self._check_open()
        raise ReadOnlyFilterError(f"{self._path}: filter was opened read-only; writes are refused")

    # -- writes -------------------------------------------------------------------------------
    def add(self, item: Item) -> bool:
        """Add one item; return True if it was absent from every layer (then it is added to
        the newest layer), False if some layer may already hold it (nothing is written).

        Atomic across threads and processes: of several racing adders of a new item exactly
        one gets True. An item that some layer already reports present is answered False
        without taking the lock. A write that finds the newest layer full (its items added
        reached its capacity) first adds the next layer, under the same lock.

        Cost: a hash per layer, one directory lock (a ``flock`` pair unless the caller holds
        :meth:`write_lock`) and the newest layer's own lock.

        Raises:
            TypeError: an item that is not str, bytes-like or int.
            ReadOnlyFilterError, FilterClosedError.
            ConfigError: the next layer would not fit BLM1 (m >= 2**64).
            OSError: creating the next layer failed (e.g. ENOSPC); nothing was added.
        """
        if self._no_write:
            self._refuse_write()
        key = encode_key(item)
        seen = self._layers
        try:
            if not _NATIVE_LITTLE or self._word[0] != len(seen):  # inlined _current()
                seen = self._current()
        except ValueError:  # the word view was released: closed
            self._check_open()
            raise
        for layer in reversed(seen):  # duplicates: no lock (bits are never cleared)
            if layer.might_contain(key):
                return False
        with self._lock:
            layers = self._current()
            last = len(layers) - 1
            # Layers older than the newest one seen above were already frozen (only the
            # newest layer is ever written) and said no: ask only the ones since.
            for layer in layers[len(seen) - 1:last]:
                if layer.might_contain(key):
                    return False
            newest = layers[last]
            if self._full(last, newest):
                if newest.might_contain(key):
                    return False
                layers = self._grow(layers)
                newest = layers[-1]
            return newest.add(key)

    def update(self, items: Iterable[Item]) -> int:
        """Add many items; return how many were new. Equivalent to calling :meth:`add` on
        each in order (a duplicate within the batch is new once; a layer boundary inside
        the batch is handled as sequential adds would: each layer gets exactly its
        capacity).

        Every item is validated before anything is written. The write lock is taken once
        per chunk of 65,536 items, so other writers may interleave between chunks (each
        chunk is atomic).

        Raises:
            TypeError, ReadOnlyFilterError, FilterClosedError, ConfigError, OSError: as
                :meth:`add`.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        keys = encoded_keys(items)[0]  # nulls of a column are never added
        total = 0
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start:start + _CHUNK]
            with self._lock:
                total += self._update_locked(chunk)
        return total

    def _update_locked(self, keys: list[Any]) -> int:
        layers = self._current()
        cand = self._absent(keys, layers[:-1])
        new = 0
        while cand:
            last = len(layers) - 1
            newest = layers[last]
            if self._full(last, newest):
                cand = self._absent(cand, [newest])  # it becomes an older layer
                if not cand:
                    break
                layers = self._grow(layers)
                continue
            # At most `room` of them can be new, so the layer never passes its capacity and
            # items fill it in order, exactly as sequential adds would.
            room = self._params.layer_limit(last) - newest.items_added
            part, cand = cand[:room], cand[room:]
            new += int(np.count_nonzero(newest.add_many(part)))
        return new

    @staticmethod
    def _absent(keys: list[Any], layers: list[BloomFilter]) -> list[Any]:
        for layer in layers:
            if not keys:
                break
            hit = layer.contains_many(keys)
            keys = [k for k, h in zip(keys, hit.tolist()) if not h]
        return keys

    def write_lock(self) -> WriteLock:
        """The directory-wide write lock, as a context manager, for loops of :meth:`add`
        that cannot batch (inside the block adds re-enter it without another ``flock``).
        Other writers wait until the block ends; readers are not blocked. Do not write
        through a second handle on the same directory inside the block (it would wait for
        this one forever).

        Raises ReadOnlyFilterError, FilterClosedError."""
        if self._no_write:
            self._refuse_write()
        return self._lock

    # -- queries ------------------------------------------------------------------------------
    def might_contain(self, item: Item) -> bool:
        """True if ``item`` may have been added; False only if it certainly was not. Asks
        the layers newest first (the newest holds about half of the items for s = 2) and
        stops at the first that reports it. Takes no lock.

        Raises TypeError, FilterClosedError."""
        key = encode_key(item)
        layers = self._layers
        try:
            if not _NATIVE_LITTLE or self._word[0] != len(layers):  # inlined _current()
                layers = self._current()
        except ValueError:  # the word view was released: closed
            self._check_open()
            raise
        for layer in reversed(layers):
            if layer.might_contain(key):
                return True
        return False

    __contains__ = might_contain

    def contains_many(self, items: Iterable[Item]) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`might_contain`: a ``bool`` array of shape ``(len(items),)``.
        Each layer is asked only about the items not yet found. Takes no lock.

        Raises TypeError (every item is checked first), FilterClosedError."""
        self._check_open()
        keys, where, n = encoded_keys(items)
        if where is not None:  # a column with nulls: they are never found
            out = np.zeros(n, dtype=np.bool_)
            out[where] = self.contains_many(keys)
            return out
        out = np.zeros(len(keys), dtype=np.bool_)
        todo = np.arange(len(keys))
        for layer in reversed(self._current()):
            if todo.size == 0:
                break
            hit = layer.contains_many([keys[i] for i in todo.tolist()] if todo.size != len(keys) else keys)
            out[todo[hit]] = True
            todo = todo[~hit]
        return out

    # -- statistics ---------------------------------------------------------------------------
    @property
    def items_added(self) -> int:
        """Items added over all layers (the sum of the layer headers' counts: adds that
        returned True). Each layer's count saturates at 2**32 - 1."""
        return sum(layer.items_added for layer in self._current())

    def expected_fp_rate(self) -> float:
        """The compound expected false-positive rate ``1 - prod_i (1 - P_i)`` where
        ``P_i = (1 - e^(-k_i n_i / m_i))^(k_i)`` is layer i's expected rate at its item
        count (Bloom 1970; Almeida et al. 2007, section 4). Stays below :attr:`fp_rate`
        while layers fill to their capacity (up to the rounding of k per layer)."""
        keep = 1.0
        for layer in self._current():
            keep *= 1.0 - layer.expected_fp_rate()
        return 1.0 - keep

    def approx_items(self) -> float:
        """Estimated distinct items: the sum over layers of ``-(m / k) ln(1 - X / m)``
        (Swamidass and Baldi 2007). Reads every bit (O(total size)). ``math.inf`` if some
        layer has every bit set."""
        return float(sum(layer.approx_items() for layer in self._current()))

    @property
    def layers(self) -> list[LayerInfo]:
        """A snapshot of every committed layer's shape and fill, oldest first."""
        out = []
        for i, layer in enumerate(self._current()):
            out.append(LayerInfo(index=i, path=self._layer_path(i), capacity=self._params.layer_capacity(i),
                                 fp_rate=self._params.layer_fp_rate(i), num_bits=layer.num_bits,
                                 num_hashes=layer.num_hashes, items_added=layer.items_added,
                                 expected_fp_rate=layer.expected_fp_rate(), size_bytes=layer.size_bytes))
        return out

    @property
    def num_layers(self) -> int:
        """The committed number of layers (at least 1)."""
        return len(self._current())

    @property
    def size_bytes(self) -> int:
        """Bytes of all layer files together (manifest and lock file excluded)."""
        return sum(layer.size_bytes for layer in self._current())

    def info(self, *, scan: bool = False) -> dict[str, Any]:
        """A JSON-ready description for ``mmapbloom info``: the parameters, totals and one
        entry per layer (the fields of :class:`LayerInfo`). With ``scan=True`` every bit is
        read (O(total size)) to add per-layer ``count_ones``, ``fill_ratio``,
        ``observed_fp_rate`` and ``approx_items`` and the total ``approx_items``."""
        layers = self._current()
        entries = []
        for info, layer in zip(self.layers, layers):
            entry = dataclasses.asdict(info)
            if scan:
                ones = layer.count_ones()
                entry.update(count_ones=ones, fill_ratio=ones / layer.num_bits,
                             observed_fp_rate=layer.observed_fp_rate(), approx_items=layer.approx_items())
            entries.append(entry)
        out: dict[str, Any] = {
            "kind": "scalable",
            "path": self._path,
            "strategy": self._params.strategy,
            "capacity": self._params.capacity,
            "fp_rate": self._params.fp_rate,
            "growth": self._params.growth,
            "tightening": self._params.tightening,
            "num_layers": len(entries),
            "items_added": sum(e["items_added"] for e in entries),
            "expected_fp_rate": self.expected_fp_rate(),
            "size_bytes": sum(e["size_bytes"] for e in entries),
            "readonly": self._readonly,
            "layers": entries,
        }
        if scan:
            out["approx_items"] = float(sum(e["approx_items"] for e in entries))
        return out

    # -- properties ---------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Absolute path of the directory (no trailing slash)."""
        return self._path

    @property
    def capacity(self) -> int:
        """n0, the first layer's capacity."""
        return self._params.capacity

    @property
    def fp_rate(self) -> float:
        """p, the bound on the compound false-positive rate."""
        return self._params.fp_rate

    @property
    def growth(self) -> Union[int, float]:
        """s, the capacity ratio between consecutive layers."""
        return self._params.growth

    @property
    def tightening(self) -> float:
        """r, the error-target ratio between consecutive layers."""
        return self._params.tightening

    @property
    def strategy(self) -> HashStrategy:
        """The hash strategy of every layer."""
        return self._strategy

    @property
    def readonly(self) -> bool:
        """True if opened read-only."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    # -- verification -------------------------------------------------------------------------
    def check(self) -> None:
        """Check the directory against the handle: the lock file (size, magic, version,
        count), the manifest (fields, parameters, growth rule, at least the committed
        number of layers), and every committed layer: present, the same file the handle
        opened, the manifest's shape, a sound header, length and padding.

        Raises:
            ManifestError, MissingLayerError, LayerMismatchError, and the layer
            ``FormatError`` subclasses; FilterClosedError.
        """
        self._check_open()
        layers = self._current()
        lock_path = os.path.join(self._path, LOCK_NAME)
        try:
            lst = os.stat(lock_path)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        count = _check_lock_image(bytes(self._lock_mm[:LOCK_SIZE]), lst.st_size, lock_path)
        mine = os.fstat(self._lock_fd)
        if (lst.st_dev, lst.st_ino) != (mine.st_dev, mine.st_ino):
            raise ManifestError("the lock file was replaced since the handle opened it", source=lock_path,
                                expected=(mine.st_dev, mine.st_ino), actual=(lst.st_dev, lst.st_ino))
        params, _, entries = _read_manifest(self._path)
        manifest = os.path.join(self._path, MANIFEST_NAME)
        if params != self._params:
            raise ManifestError(f"the manifest's parameters changed under the handle: {params} != {self._params}",
                                source=manifest, expected=self._params, actual=params)
        if len(entries) < count:
            raise ManifestError(f"the manifest lists {len(entries)} layers, the lock file commits {count}",
                                source=manifest, expected=count, actual=len(entries))
        for i, layer in enumerate(layers):
            path = self._layer_path(i)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise MissingLayerError(f"layer {i} of {count} committed layers is missing", source=path,
                                        expected=count, actual=i) from None
            if (st.st_dev, st.st_ino) != self._inodes[i]:
                raise LayerMismatchError(f"layer {i} was replaced since the handle opened it", source=path,
                                         expected=self._inodes[i], actual=(st.st_dev, st.st_ino))
            self._check_shape(i, layer, entries[i])
            layer.check()

    def verify(self) -> None:
        """:meth:`check`, then every committed layer file is opened afresh, read-only, and
        checked from its own header (as ``mmapbloom.verify_file``), so damage to the files
        on disk is found even where this handle's mappings would hide it.

        Raises as :meth:`check`."""
        self.check()
        params, _, entries = _read_manifest(self._path)
        for i in range(len(self._current())):
            fresh, _ = self._open_layer_readonly(i, entries[i])
            try:
                fresh.check()
            finally:
                fresh.close()

    def _open_layer_readonly(self, i: int, entry: dict[str, Any]) -> tuple[BloomFilter, None]:
        path = self._layer_path(i)
        try:
            layer = BloomFilter.open(path, readonly=True)
        except FileNotFoundError:
            raise MissingLayerError(f"layer {i} is missing", source=path, expected=i + 1, actual=i) from None
        try:
            self._check_shape(i, layer, entry)
        except BaseException:
            layer.close()
            raise
        return layer, None

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> None:
        """``msync`` every layer and the lock file, so that everything written so far
        survives power loss (writes already survive the process being killed)."""
        self._check_open()
        for layer in self._current():
            layer.flush()
        if not self._readonly:
            self._lock_mm.flush()

    def close(self) -> None:
        """Close every layer and the lock file (idempotent). Waits for this handle's writes
        in flight in other threads; later use raises FilterClosedError. Does not flush."""
        if self._closed:
            return
        with self._lock.thread_lock:
            if self._closed:
                return
            self._closed = True
            self._no_write = True
            self._close_files()

    def _close_files(self) -> None:
        _LIVE.discard(self)
        self._closed = True
        if hasattr(self, "_lock"):
            self._lock.close()
        for layer in self._layers:
            layer.close()
        self._layers = []
        with contextlib.suppress(Exception):
            self._word.release()
        with contextlib.suppress(BufferError):
            self._lock_mm.close()
        os.close(self._lock_fd)

    def __enter__(self) -> "ScalableBloomFilter":
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the directory path and mode: the receiver opens the same directory
        (its own lock description, its own mappings)."""
        self._check_open()
        return (type(self).open, (self._path, self._readonly))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self._readonly else "read-write")
        n = len(self._layers)
        return (f"<ScalableBloomFilter {self._path} n0={self._params.capacity} p={self._params.fp_rate} "
                f"s={self._params.growth} r={self._params.tightening} layers={n} {state}>")

    # -- the interface of every filter kind (``verify.open_filter``, ``mmapbloom`` CLI) -------
    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """:meth:`info` under the name every filter kind shares (``BloomFilter.describe``):
        ``kind`` is ``"scalable"``, with one record per layer in ``layers``. ``progress``
        is accepted for the common signature and not used (layers are scanned whole).

        Raises:
            FilterClosedError, and as :meth:`check` for a damaged directory.
        """
        record = self.info(scan=scan)
        # JSON has no infinity: an estimate from a layer with every bit set is unknown (None),
        # as in BloomFilter.describe.
        for entry in [record, *record["layers"]]:
            if entry.get("approx_items") == float("inf"):
                entry["approx_items"] = None
        return record


# -- helpers for the CLI ----------------------------------------------------------------------
def scalable_info(path: PathLike, *, scan: bool = False) -> dict[str, Any]:
    """Open ``path`` read-only and return :meth:`ScalableBloomFilter.info` (for
    ``mmapbloom info`` on a directory). Raises as :meth:`ScalableBloomFilter.open`."""
    with ScalableBloomFilter.open(path, readonly=True) as f:
        return f.info(scan=scan)


def verify_scalable(path: PathLike) -> ScalableBloomFilter:
    """Open ``path`` read-only and run :meth:`ScalableBloomFilter.verify`; return the open
    handle (the caller closes it), like :func:`mmapbloom.verify_file`.

    Raises ManifestError, MissingLayerError, LayerMismatchError, the layer FormatError
    subclasses, OSError."""
    f = ScalableBloomFilter.open(path, readonly=True)
    try:
        f.verify()
    except BaseException:
        f.close()
        raise
    return f
