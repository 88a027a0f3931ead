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

On disk (the format and the growth rule live in :mod:`mmapbloom.scalable_format`,
documented exactly in docs/SCALABLE.md): a directory holding

* ``layer-0000.blm``, ``layer-0001.blm``, ...: one ordinary BLM1 file per layer, each
  openable with :meth:`BloomFilter.open <mmapbloom.BloomFilter.open>`;
* ``manifest.json``: the parameters and the shape of every layer, replaced atomically
  (temporary file, fsync, rename, directory fsync) each time a layer is added;
* ``lock``: 16 bytes; every writer holds an exclusive ``flock`` on it (the directory-wide
  write lock), and its word at offset 8 is the *committed* layer count. Every handle reads
  that word (one ``pread``) at each operation and compares it with its own layer count,
  so layers added by other processes are seen at O(1) cost, with no directory listing.
  The word is never read through a mapping: a lock file truncated by another program is
  reported (ManifestError), not a SIGBUS. The one exception is a single-item query that
  answers "no" while the handle's newest layer is below its limit: a writer adds a layer
  only after the newest is full, so no layer can have been added, and the query makes no
  system call (see :meth:`ScalableBloomFilter.might_contain`).

Growth is crash-safe: under the write lock the writer creates the whole layer file
(atomically), publishes the manifest that lists it, and only then stores the new count in
the lock word; a process killed before that store leaves an uncommitted layer that every
handle ignores and the next writer replaces. New layers and manifests take the permission
bits (and group) of the directory's existing files, not the growing process's umask, so a
directory shared by several users stays usable by all of them.

Merging scalable filters is not supported (layers of two filters hold different items at
different sizes; a merge would have to re-add items it does not have).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union


from .base import deferred_signals
from .handle import CHUNK_KEYS  # keys per write-lock hold in update
from .errors import (
    ConfigMismatchError,
    FilterClosedError,
    ManifestError,
    ReadOnlyFilterError,
)
from .config import StrategyChoice, resolve_strategy
from .filter import BloomFilter
from .batches import encoded_keys
from .hashing import HashStrategy, encode_key
from .lifecycle import Lifecycle
from .locking import WriteLock
from .scalable_format import (
    COUNT_OFFSET,
    DEFAULT_GROWTH,
    DEFAULT_TIGHTENING,
    LOCK_NAME,
    LOCK_SIZE,
    MANIFEST_NAME,
    GrowthRule,
    check_lock_image,
    check_params,
    layer_name,
    lock_image,
    read_manifest,
    write_manifest,
)
from .directory import build_directory, check_file_mode, strip_path
from .files import atomic_file
from .keys import Item, PathLike
from .scalable_growth import ScalableGrowth, count_word
from .scalable_stats import LayerInfo, ScalableStatistics

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

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

_LIVE: "weakref.WeakSet[ScalableBloomFilter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held a handle's reload lock at fork(): give every
    # handle a fresh one in the child (the write lock is reset by mmapbloom.locking).
    for handle in list(_LIVE):
        handle._reload_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_strip = strip_path


def is_scalable(path: PathLike) -> bool:
    """True if ``path`` is a directory holding a ``manifest.json`` (a scalable filter, as
    far as a cheap check can tell; :meth:`ScalableBloomFilter.open` validates it). For the
    CLI, to choose between a filter file and a scalable directory."""
    p = _strip(path)
    return os.path.isdir(p) and os.path.isfile(os.path.join(p, MANIFEST_NAME))


_file_mode = check_file_mode


def _no_count() -> int:
    return 0


#: The ``_tail`` of a handle not yet open or closed: limit 0, so a query goes to the pread.
_NO_TAIL: tuple[list[BloomFilter], Callable[[], int], int] = ([], _no_count, 0)


# -- the filter -------------------------------------------------------------------------------
class ScalableBloomFilter(ScalableGrowth, ScalableStatistics, Lifecycle):
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
    operation first compares the committed layer count (a ``pread`` of the ``lock``
    file's count word) with the handle's; when another process added a layer the handle
    opens it then. (A single-item query skips the ``pread`` while the newest layer it
    knows is below its limit: no layer can have been added after it then.) Fork-safe: a child that inherits a handle locks through its own open
    file description of the lock file (the parent's flock never admits it). Not safe on
    file systems whose ``flock`` is not coherent (NFS).

    Sharing between users: layers older than the newest are opened read-only (they are
    never written again), and a layer this user may not write is opened read-only too, so
    a handle that only queries never needs write access to any layer.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with ScalableBloomFilter.create(os.path.join(d, "urls"), 1000, 0.01) as f:
    ...     f.add("a"), f.add("a"), "a" in f, "b" in f
    (True, False, True, False)
    """

    __slots__ = (
        "_path",
        "_lock_path",
        "_params",
        "_strategy",
        "_readonly",
        "_no_write",
        "_closed",
        "_lock",
        "_lock_fd",
        "_seen",
        "_layers",
        "_tail",
        "_inodes",
        "_retired",
        "_reload_lock",
        "__weakref__",
    )

    _path: str
    _lock_path: str
    _params: GrowthRule
    _strategy: HashStrategy
    _readonly: bool
    _no_write: bool
    _closed: bool
    _lock: WriteLock
    _lock_fd: int
    _seen: bytes  # the count word's bytes for len(_layers)
    _layers: list[BloomFilter]
    _tail: tuple[list[BloomFilter], Callable[[], int], int]  # see _watch
    _inodes: list[tuple[int, int]]
    _retired: list[BloomFilter]  # read-only layer handles replaced by writable ones
    _reload_lock: threading.Lock

    # -- construction ------------------------------------------------------------------------
    def __init__(self) -> None:
        raise TypeError("use ScalableBloomFilter.create(), open() or open_or_create()")

    @classmethod
    def create(
        cls,
        path: PathLike,
        capacity: int,
        fp_rate: float,
        *,
        growth: Union[int, float] = DEFAULT_GROWTH,
        tightening: float = DEFAULT_TIGHTENING,
        strategy: StrategyChoice = None,
        mode: Optional[int] = None,
    ) -> "ScalableBloomFilter":
        """Create a new scalable filter directory with its first layer, and open it read-write.

        The whole directory (layer 0, manifest, lock file) is built under a temporary name
        ``.mmapbloom-<pid>-<random>.tmp`` next to ``path`` and renamed into place, so other
        processes never see a partial filter; of several processes creating the same path,
        one wins and the others get FileExistsError. A creator killed midway (SIGKILL)
        leaves that temporary behind; the next create or merge in the same directory
        removes it once the creator's pid is gone (as for plain filter files).

        Args:
            path: the directory to create; it must not exist.
            capacity: n0, items of the first layer (a positive integer).
            fp_rate: p, the bound on the compound false-positive rate, in (0, 1).
            growth: s > 1, each layer holds s times the items of the previous (default 2).
            tightening: r in (0, 1), each layer's error target is r times the previous
                (default 0.5).
            strategy: hash strategy of every layer: a registered strategy or its name
                (``"M3B2"``), default the package default; the blocked strategies work too.
                An unknown name raises UnknownSchemeError. Stored by name in the manifest and in every
                layer header.
            mode: exact permission bits (e.g. ``0o664``) for every file of the directory,
                not masked by the umask; the directory gets them plus ``x`` where ``r``
                is set. Layers added later copy the bits of the existing layer 0, so a
                directory shared by a group stays writable by the group whoever grows
                it. None (default): the umask's, as ``open()``.

        Raises:
            ConfigError: a parameter out of range, or a growth rule that cannot grow (a
                tightening so small that a later layer's error target underflows, or a
                layer beyond BLM1's limits): the message names the layer and the item
                count where the filter would stop.
            FileExistsError: ``path`` exists.
            NoSpaceError: the disk is full.
            OSError: the parent directory is missing or not writable. Errors name
                ``path``, never the temporary.
        """
        n0, p, s, r = check_params(capacity, fp_rate, growth, tightening)
        file_mode = _file_mode(mode)
        strat = resolve_strategy(strategy)
        params = GrowthRule(n0, p, s, r, strat.name)
        params.check_growth(strat)  # ConfigError (also an unregistered strategy) before any file

        def fill(tmp: str) -> None:
            layer0 = os.path.join(tmp, layer_name(0))
            BloomFilter.create(layer0, params.layer_config(0, strat)).close()
            if file_mode is not None:
                os.chmod(layer0, file_mode)
            write_manifest(tmp, params, 1, strat, mode=file_mode)
            with atomic_file(os.path.join(tmp, LOCK_NAME), replace=False) as fd:
                if file_mode is not None:
                    os.fchmod(fd, file_mode)
                os.write(fd, lock_image(1))

        dest = build_directory(path, fill, file_mode)
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
        self._tail = _NO_TAIL
        self._seen = count_word(0)
        self._inodes = []
        self._retired = []
        self._reload_lock = threading.Lock()
        lock_path = self._lock_path = os.path.join(dest, LOCK_NAME)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(lock_path, flags)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        try:
            lst = os.fstat(fd)
            if not stat.S_ISREG(lst.st_mode):
                raise ManifestError(
                    "the lock file is not a regular file",
                    source=lock_path,
                    expected="regular file",
                    actual=stat.filemode(lst.st_mode),
                )
            count = check_lock_image(os.pread(fd, LOCK_SIZE, 0), lst.st_size, lock_path)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        self._lock = WriteLock(fd, lock_path)
        try:
            # The count first, the manifest second (see _reload).
            self._params, self._strategy, _ = read_manifest(dest)
            self._reload(count)
        except BaseException:
            self._close_files()
            raise
        _LIVE.add(self)
        return self

    @classmethod
    def open_or_create(
        cls,
        path: PathLike,
        capacity: int,
        fp_rate: float,
        *,
        growth: Union[int, float] = DEFAULT_GROWTH,
        tightening: float = DEFAULT_TIGHTENING,
        strategy: StrategyChoice = None,
        mode: Optional[int] = None,
    ) -> "ScalableBloomFilter":
        """Open ``path`` if it exists, else create it with these parameters (``mode`` as in
        :meth:`create`); safe when many processes race on the same new path (one
        directory is created, all open it).

        Raises:
            ConfigMismatchError: the existing filter's capacity, fp_rate, growth,
                tightening or strategy differ (the message names the field and both values).
            And whatever :meth:`open` and :meth:`create` raise.
        """
        n0, p, s, r = check_params(capacity, fp_rate, growth, tightening)
        strategy_name = resolve_strategy(strategy).name
        for _ in range(100):
            try:
                f = cls.open(path)
            except FileNotFoundError:
                try:
                    return cls.create(path, n0, p, growth=s, tightening=r, strategy=strategy, mode=mode)
                except FileExistsError:
                    continue
            try:
                have = f._params
                for field, want, got in (
                    ("capacity", n0, have.capacity),
                    ("fp_rate", p, have.fp_rate),
                    ("growth", s, have.growth),
                    ("tightening", r, have.tightening),
                    ("strategy", strategy_name, have.strategy),
                ):
                    if want != got:
                        raise ConfigMismatchError(f._path, field, want, got)
            except BaseException:
                f.close()
                raise
            return f
        raise FileExistsError(f"{path}: directory keeps appearing and disappearing")  # pragma: no cover

    # -- guards -------------------------------------------------------------------------------
    def _refuse_write(self) -> None:
        self._check_open()
        if not self._readonly:  # a writable handle refuses writes only while close() runs
            raise FilterClosedError(f"{self._path}: filter is closed")
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
        for layer in reversed(seen):  # duplicates: no lock, no system call (bits are never cleared)
            if layer.might_contain(key):
                return False
        with self._lock:
            layers = self._current()  # layers committed by others since: one pread
            last = len(layers) - 1
            # Layers older than the newest one seen above were already frozen (only the
            # newest layer is ever written) and said no: ask only the ones since.
            for layer in layers[len(seen) - 1 : last]:
                if layer.might_contain(key):
                    return False
            newest = layers[last]
            if self._full(last, newest):
                if newest.might_contain(key):
                    return False
                layers = self._grow(layers)
            return self._writable_newest(layers)[-1].add(key)

    def update(self, items: Iterable[Item]) -> int:
        """Add many items; return how many were new. Equivalent to calling :meth:`add` on
        each in order (a duplicate within the batch is new once; a layer boundary inside
        the batch is handled as sequential adds would: each layer gets exactly its
        capacity).

        Every item is validated before anything is written. The write lock is taken once
        per chunk of 65,536 items, so other writers may interleave between chunks (each
        chunk is atomic unless a growth inside it fails). SIGINT, SIGTERM and SIGHUP
        arriving during a chunk's commit are delivered after it. The same contract as
        :meth:`BloomFilter.update <mmapbloom.BloomFilter.update>`: any exception leaving
        this method (a failed growth: disk full, a layer beyond BLM1's limits; a
        KeyboardInterrupt) carries ``committed_items``, how many leading items were
        committed (each of them added or already present; the rest were not added).

        Raises:
            TypeError, KeyEncodingError: a bad item (nothing changed).
            ReadOnlyFilterError, FilterClosedError.
            ConfigError: the next layer would not fit BLM1.
            NoSpaceError: the disk is full at a growth. OSError: other OS errors.
        """
        start = 0
        progress = [0]  # index, in the chunk at ``start``, of the first item not yet committed
        try:
            if self._no_write:  # a refusal carries committed_items = 0 too (issue 29)
                self._refuse_write()
            self._check_open()
            keys = encoded_keys(items)[0]  # nulls of a column are never added
            total = 0
            for start in range(0, len(keys), CHUNK_KEYS):
                progress[0] = 0
                with self._lock, deferred_signals():
                    total += self._update_locked(keys[start : start + CHUNK_KEYS], progress)
        except BaseException as exc:
            exc.committed_items = start + progress[0]  # type: ignore[attr-defined]
            raise
        return total

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

        Cost: a hash and a few reads per layer asked, and no system call, except for a
        negative answer while the newest layer this handle knows is full (then one
        ``pread`` of the lock file's count word, to find the layers added since).

        Raises TypeError, FilterClosedError, ManifestError (the lock file was truncated
        or damaged under the handle, found when the count word is read),
        LengthMismatchError (a layer file was truncated under the handle)."""
        key = encode_key(item)
        layers, newest_count, limit = self._tail
        for layer in reversed(layers):
            if layer.might_contain(key):
                return True  # bits are never cleared: the layers already open suffice for yes
        # "No" must include every layer another process committed before this call began
        # (an add that returned before it went to one of them). A writer adds layer i + 1
        # only after it saw layer i's items word reach the layer's limit (add and
        # _update_locked grow only when _full; the word only grows, and a growth publishes
        # the layer, the manifest and the count word after that observation). So while our
        # newest layer's word, read now through the shared mapping, is below its limit, no
        # process had committed a newer layer at this moment, let alone before the call
        # began: the layers asked above are all there are. So a miss makes no system call,
        # where a pread of the count word per miss used to cost more than the rest. (The word is
        # in page 0 of a layer just probed: page 0 can fault only for a layer truncated to 0
        # bytes, and then the probe above, which touched at least one cell, raised
        # LengthMismatchError first: guarded on the native handle, size-checked on the pure one.)
        try:
            if newest_count() < limit:
                return False
        except ValueError:  # the layer's mapping was released: closed by another thread
            self._check_open()
            raise
        # The newest layer is full: a growth may have been committed. One pread of the
        # count word: a count equal to ours means no growth yet.
        try:
            same = os.pread(self._lock_fd, 4, COUNT_OFFSET) == self._seen and self._layers is layers
        except OSError:  # EBADF: closed
            self._check_open()
            raise
        if same:
            return False
        for layer in reversed(self._current()[len(layers) :]):
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

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> None:
        """``msync`` every layer and the lock file, so that everything written so far
        survives power loss (writes already survive the process being killed)."""
        self._check_open()
        for layer in self._current():
            if not layer.readonly:
                layer.flush()
        if not self._readonly:
            os.fsync(self._lock_fd)

    def close(self) -> None:
        """Close every layer and the lock file (idempotent). Waits for this handle's writes
        in flight in other threads; later use raises FilterClosedError. Does not flush."""
        Lifecycle.close(self)

    def _describe(self) -> str:
        return self._path

    def _close_lock(self) -> Any:
        return self._lock.thread_lock

    def _release(self) -> None:
        self._no_write = True  # writes then report FilterClosedError before touching the lock
        self._closed = True
        self._close_files()

    def _close_files(self) -> None:
        _LIVE.discard(self)
        self._closed = True
        if hasattr(self, "_lock"):
            self._lock.close()
        self._tail = _NO_TAIL  # its limit 0 sends a query to the pread, which fails (EBADF)
        for layer in self._layers + self._retired:
            layer.close()
        self._layers = []
        self._retired = []
        fd, self._lock_fd = self._lock_fd, -1  # a later pread fails (EBADF), never reads a reused fd
        os.close(fd)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the directory path and mode: the receiver opens the same directory
        (its own lock description, its own mappings)."""
        self._check_open()
        return (type(self).open, (self._path, self._readonly))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self._readonly else "read-write")
        n = len(self._layers)
        return (
            f"<ScalableBloomFilter {self._path} n0={self._params.capacity} p={self._params.fp_rate} "
            f"s={self._params.growth} r={self._params.tightening} layers={n} {state}>"
        )


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
