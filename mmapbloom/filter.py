"""The filter: :class:`BloomFilter`, a Bloom filter over an in-memory or memory-mapped image.

Concurrency model (see also the README's guarantees):

* Writers (``add``, ``update``, ``add_many``, ``union``, ``intersection``) hold the handle's
  :class:`~mmapbloom.locking.WriteLock`: a thread lock plus an exclusive ``flock`` on the
  file. A test-and-set ``add`` is therefore atomic across threads and processes.
* Readers (``might_contain``, ``contains_many``, statistics) take no lock. While a writer
  works a reader may see some but not all bits of an item whose ``add`` has not returned
  yet (it may answer False for it); it never sees a bit cleared, so an item whose ``add``
  has returned is always found.
* Bits live in a ``MAP_SHARED`` mapping: a returned ``add`` is in the kernel's page cache
  and survives the writer being SIGKILLed; ``flush()`` (msync) makes it survive power loss.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Iterable, Optional, Union

import numpy as np
import numpy.typing as npt

from . import format as fmt
from .errors import (
    ConfigMismatchError,
    FilterClosedError,
    IncompatibleFiltersError,
    OverCapacityWarning,
    ReadOnlyFilterError,
)
from .hashing import HashStrategy, encode_key, encode_keys
from .locking import WriteLock
from .sizing import BloomConfig
from .sizing import approx_items as _approx_items
from .sizing import expected_fill_ratio, expected_fp_rate
from .storage import DEFAULT_FILE_MODE, FileStorage, MemoryStorage, Storage, atomic_file, reserve_space

__all__ = ["BloomFilter", "OVERFILL_RATIO", "popcount"]

#: ``add`` warns (OverCapacityWarning, once per handle) past this expected fill ratio.
#: A filter sized by ``for_items`` with p <= 0.5 is at most about 0.55 full at capacity.
OVERFILL_RATIO = 0.6

#: Keys hashed per chunk by the batch methods: bounds temporary memory to about
#: ``CHUNK_KEYS * k * 20`` bytes (positions, byte indices, masks) per call.
CHUNK_KEYS = 1 << 16

#: Bytes per step when OR/AND-ing or counting bit arrays (bounded temporary memory).
CHUNK_BYTES = 1 << 24

_HS = fmt.HEADER_SIZE
_ITEMS = fmt.ITEMS_FIELD
_ITEMS_OFFSET = fmt.ITEMS_OFFSET
_MAX_ITEMS = fmt.MAX_ITEMS

PathLike = Union[str, "os.PathLike[str]"]


def popcount(view: npt.NDArray[np.uint8]) -> int:
    """Number of set bits in a ``uint8`` array, counted in chunks with ``numpy.bitwise_count``
    on 64-bit words where the length allows. Cost: O(len) at memory bandwidth."""
    total = 0
    n = view.shape[0]
    for start in range(0, n, CHUNK_BYTES):
        chunk = view[start:start + CHUNK_BYTES]
        whole = chunk.shape[0] & ~7
        if whole:
            total += int(np.bitwise_count(chunk[:whole].view(np.uint64)).sum(dtype=np.uint64))
        if whole != chunk.shape[0]:
            total += int(np.bitwise_count(chunk[whole:]).sum(dtype=np.uint64))
    return total


class BloomFilter:
    """A Bloom filter (Bloom 1970) stored in the BLM1 layout, in memory or in a shared file.

    Construct with ``BloomFilter(config)`` (in memory), :meth:`create`, :meth:`open`,
    :meth:`open_or_create` or :meth:`from_bytes`.

    Promise: no false negatives. ``might_contain(x)`` is False only if ``x`` was never
    added to this filter (or to a filter unioned into it). It may be True for items never
    added, with probability about :meth:`expected_fp_rate`.

    Removal is not supported: clearing a bit could erase other items. Use
    :class:`~mmapbloom.counting.CountingBloomFilter` where items must be removed.

    Thread-safe and process-safe as described in the module docstring; fork-safe (a
    handle opened before ``fork()`` may be used in the children). Not safe on network file
    systems whose ``flock`` is not coherent (NFS), nor against another program truncating
    the file.

    >>> f = BloomFilter(BloomConfig.for_items(1000, 0.01))
    >>> f.add("https://example.org/"), f.add("https://example.org/")
    (True, False)
    >>> "https://example.org/" in f, f.items_added
    (True, 1)
    """

    __slots__ = (
        "_storage", "_buf", "_config", "_m", "_k", "_positions", "_strategy",
        "_lock", "_no_write", "_warn_at", "_warned", "__weakref__",
    )

    _magic = fmt.MAGIC
    _kind = "Bloom filter"

    # -- construction -------------------------------------------------------------
    def __init__(self, config: BloomConfig):
        """An empty in-memory filter for ``config``. Thread-safe; not shared between
        processes (pickling copies it). Memory: ``24 + ceil(m / 8)`` bytes."""
        if not isinstance(config, BloomConfig):
            raise TypeError(f"config must be a BloomConfig, got {type(config).__name__}")
        image = bytearray(_HS + fmt.body_size(config.num_bits))
        image[:_HS] = fmt.pack_header(config.strategy.name, config.num_bits, config.num_hashes, 0, self._magic)
        self._attach(MemoryStorage(image, _HS), config)

    def _attach(self, storage: Storage, config: BloomConfig) -> None:
        self._storage = storage
        self._buf = storage.buf
        self._config = config
        self._m = config.num_bits
        self._k = config.num_hashes
        self._strategy = config.strategy
        self._positions = config.strategy.positions
        self._lock: WriteLock = storage.lock
        self._no_write = storage.readonly
        # Expected fill 1 - e^(-kn/m) > OVERFILL_RATIO  <=>  n > -(m / k) ln(1 - OVERFILL_RATIO).
        self._warn_at = -(self._m / self._k) * math.log1p(-OVERFILL_RATIO)
        self._warned = False

    @classmethod
    def _from_storage(cls, storage: Storage, config: BloomConfig) -> "BloomFilter":
        self = cls.__new__(cls)
        self._attach(storage, config)
        return self

    @classmethod
    def _validator(cls):  # type: ignore[no-untyped-def]
        """A ``validate(head, size, source) -> total`` callback for :class:`FileStorage`."""

        def validate(head: bytes, size: int, source: str) -> int:
            header = cls._parse(head, source)
            fmt.check_length(header.total_size, size, source=source)
            return header.total_size

        return validate

    @classmethod
    def _parse(cls, head: bytes, source: str) -> fmt.Header:
        return fmt.parse_header(head, source=source, magic=cls._magic, kind=cls._kind, other_kinds=_KINDS)

    @classmethod
    def create(cls, path: PathLike, config: BloomConfig, *, sparse: bool = False,
               mode: int = DEFAULT_FILE_MODE) -> "BloomFilter":
        """Create a new, empty filter file and open it read-write.

        The file is built under a temporary name in the same directory and published with
        ``link``, so other processes never see a partial file and an existing file is never
        truncated or replaced.

        Args:
            path: where to create it; the file must not exist.
            config: the filter's shape.
            sparse: if False (default) the ``24 + ceil(m / 8)`` bytes are reserved now with
                ``posix_fallocate``, so a full disk fails here with ``OSError(ENOSPC)``. If
                True the file is sparse: creation is instant and takes no space, but a disk
                that fills up later makes a write through the mapping fail with SIGBUS,
                which kills the process. Use it only for filters larger than their disk.
            mode: permission bits, masked by the umask (default ``0o666``).

        Returns:
            The open filter (read-write). Close it, or use it as a context manager.

        Raises:
            FileExistsError: ``path`` exists (it is left untouched).
            OSError: the directory is missing or not writable, or the disk is full
                (ENOSPC; nothing is left at ``path``).
        """
        if not isinstance(config, BloomConfig):
            raise TypeError(f"config must be a BloomConfig, got {type(config).__name__}")
        total = _HS + fmt.body_size(config.num_bits)
        header = fmt.pack_header(config.strategy.name, config.num_bits, config.num_hashes, 0, cls._magic)
        with atomic_file(path, replace=False, mode=mode) as fd:
            reserve_space(fd, total, sparse=sparse)
            os.pwrite(fd, header, 0)
        return cls._open_checked(path, readonly=False, config=config)

    @classmethod
    def open(cls, path: PathLike, readonly: bool = False) -> "BloomFilter":
        """Open an existing filter file; costs O(1) whatever its size (nothing is read
        beyond the 24-byte header and the last byte until queried).

        Args:
            path: the file.
            readonly: map it read-only; writes then raise :class:`ReadOnlyFilterError`.
                Needed for files the process may not write.

        Raises:
            FileNotFoundError, PermissionError, IsADirectoryError, OSError: from the OS.
            BadMagicError, UnknownSchemeError, BadHeaderError, LengthMismatchError,
            PaddingError: the file is not a sound filter (all ``FormatError``, a
            ``ValueError``), with expected and actual values in the message.
        """
        return cls._open_checked(path, readonly=readonly, config=None)

    @classmethod
    def _open_checked(cls, path: PathLike, *, readonly: bool, config: Optional[BloomConfig]) -> "BloomFilter":
        storage = FileStorage.open(path, readonly=readonly, header_size=_HS, validate=cls._validator())
        try:
            header = cls._parse(bytes(storage.buf[:_HS]), storage.path or "")
            fmt.check_padding(storage.buf[len(storage.buf) - 1], header.num_bits, source=storage.path or "")
            found = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
            if config is not None:
                _check_same(config, found, storage.path or "")
                found = config
            return cls._from_storage(storage, found)
        except BaseException:
            storage.close()
            raise

    @classmethod
    def open_or_create(cls, path: PathLike, config: BloomConfig, *, sparse: bool = False,
                       mode: int = DEFAULT_FILE_MODE) -> "BloomFilter":
        """Open ``path`` if it exists, else create it for ``config``; safe when many
        processes race on the same new path (exactly one file is created, and every
        process opens that complete file).

        Raises:
            ConfigMismatchError (a ``ValueError``): the existing file's num_bits,
                num_hashes or scheme differ from ``config`` (the message names the field).
            And whatever :meth:`open` and :meth:`create` raise.
        """
        for _ in range(100):
            try:
                return cls._open_checked(path, readonly=False, config=config)
            except FileNotFoundError:
                pass
            try:
                return cls.create(path, config, sparse=sparse, mode=mode)
            except FileExistsError:
                continue  # another process published it first: open theirs
        raise FileExistsError(f"{path}: file keeps appearing and disappearing")  # pragma: no cover

    @classmethod
    def from_bytes(cls, data: Union[bytes, bytearray, memoryview]) -> "BloomFilter":
        """An in-memory filter from the BLM1 bytes made by :meth:`to_bytes` (or a file's
        contents). Validates the header before allocating anything proportional to it.

        Raises:
            TypeError: ``data`` is not bytes-like.
            FormatError subclasses, as :meth:`open`.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        mv = memoryview(data).cast("B")
        header = cls._parse(bytes(mv[:_HS]), "<bytes>")
        fmt.check_length(header.total_size, mv.nbytes, source="<bytes>")
        fmt.check_padding(mv[mv.nbytes - 1], header.num_bits, source="<bytes>")
        config = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
        return cls._from_storage(MemoryStorage(mv, _HS), config)

    # -- properties -----------------------------------------------------------------
    @property
    def config(self) -> BloomConfig:
        """The filter's :class:`BloomConfig` (m, k, strategy)."""
        return self._config

    @property
    def num_bits(self) -> int:
        """m, the number of bits."""
        return self._m

    @property
    def num_hashes(self) -> int:
        """k, the number of positions per item."""
        return self._k

    @property
    def strategy(self) -> HashStrategy:
        """The hash strategy (its ``name`` is in the file header)."""
        return self._strategy

    @property
    def path(self) -> Optional[str]:
        """Absolute path of the file, or ``None`` in memory."""
        return self._storage.path

    @property
    def readonly(self) -> bool:
        """True if the filter was opened read-only."""
        return self._storage.readonly

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._storage.closed

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole image (file length): ``24 + ceil(m / 8)``."""
        return _HS + fmt.body_size(self._m)

    @property
    def items_added(self) -> int:
        """Number of ``add`` calls that set at least one new bit (re-adds do not count),
        summed over unions; saturates at ``2**32 - 1``. Read from the header, so it
        includes other processes' adds."""
        self._check_open()
        return int(_ITEMS.unpack_from(self._buf, _ITEMS_OFFSET)[0])

    # -- guards ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._storage.closed:
            raise FilterClosedError(f"{self._describe()}: filter is closed")

    def _refuse_write(self) -> None:
        self._check_open()
        raise ReadOnlyFilterError(f"{self._describe()}: filter was opened read-only; writes are refused")

    def _describe(self) -> str:
        return self._storage.path or "<memory>"

    def _bump_items(self, new: int) -> None:
        """Add ``new`` to items added (saturating); the caller holds the write lock."""
        count = _ITEMS.unpack_from(self._buf, _ITEMS_OFFSET)[0] + new
        if count > _MAX_ITEMS:
            count = _MAX_ITEMS
        _ITEMS.pack_into(self._buf, _ITEMS_OFFSET, count)
        if count > self._warn_at and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self._describe()}: filter is past its design point: {count} items in {self._m} bits "
                f"with k={self._k} gives an expected fill ratio of "
                f"{expected_fill_ratio(count, self._m, self._k):.3f} > {OVERFILL_RATIO}; "
                f"false-positive rate about {expected_fp_rate(count, self._m, self._k):.3g}",
                OverCapacityWarning,
                stacklevel=3,
            )

    # -- per-item operations ----------------------------------------------------------
    def add(self, item: Union[str, bytes, bytearray, memoryview]) -> bool:
        """Add one item; return True if it was new (at least one of its bits was 0).

        An atomic test-and-set across threads and processes: when several add the same new
        item at once, exactly one gets True. Cost: one hash and k byte operations under
        the write lock (one ``flock`` pair unless the caller holds :meth:`write_lock`).

        Args:
            item: ``str`` (hashed as UTF-8) or bytes-like.

        Raises:
            TypeError: another item type. ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        key = item.encode() if type(item) is str else encode_key(item)  # type: ignore[union-attr]
        positions = self._positions(key, self._k, self._m)
        buf = self._buf
        new = False
        lock = self._lock
        lock.acquire()
        try:
            for p in positions:
                i = _HS + (p >> 3)
                b = 1 << (p & 7)
                v = buf[i]
                if not v & b:
                    buf[i] = v | b
                    new = True
            if new:
                self._bump_items(1)
        finally:
            lock.release()
        return new

    def might_contain(self, item: Union[str, bytes, bytearray, memoryview]) -> bool:
        """True if ``item`` may have been added; False only if it certainly was not.

        Takes no lock. Cost: one hash and at most k byte reads. Raises TypeError for an
        item that is not str or bytes-like, FilterClosedError after close.
        """
        key = item.encode() if type(item) is str else encode_key(item)  # type: ignore[union-attr]
        buf = self._buf
        try:
            for p in self._positions(key, self._k, self._m):
                if not buf[_HS + (p >> 3)] & (1 << (p & 7)):
                    return False
        except ValueError:
            self._check_open()
            raise
        return True

    __contains__ = might_contain

    def write_lock(self) -> WriteLock:
        """The handle's write lock, as a context manager, for loops that cannot batch::

            with f.write_lock():
                for url in urls:
                    if f.add(url): ...

        Inside the block ``add`` re-enters the lock without another ``flock`` call. Other
        writers (threads, processes) wait until the block ends; readers are not blocked.
        Raises ReadOnlyFilterError or FilterClosedError when entered on such a handle.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        return self._lock

    # -- batch operations ----------------------------------------------------------------
    def _byte_masks(self, keys: list[bytes]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp], npt.NDArray[np.uint8]]:
        pos = self._strategy.positions_many(keys, self._k, self._m)
        idx = (pos >> np.uint64(3)).astype(np.intp)
        masks = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
        return pos, idx, masks

    def _bits(self) -> npt.NDArray[np.uint8]:
        return self._storage.view(_HS, fmt.body_size(self._m))

    def contains_many(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`might_contain`: a ``bool`` array of shape ``(len(items),)``
        with exactly the per-item answers. Takes no lock. Hashes in chunks of
        ``CHUNK_KEYS`` keys (bounded temporary memory).

        Raises TypeError (bad item; checked for every item first), FilterClosedError.
        """
        self._check_open()
        keys = encode_keys(items)
        out = np.empty(len(keys), dtype=np.bool_)
        bits = self._bits()
        for start in range(0, len(keys), CHUNK_KEYS):
            chunk = keys[start:start + CHUNK_KEYS]
            _, idx, masks = self._byte_masks(chunk)
            out[start:start + len(chunk)] = (bits[idx] & masks).all(axis=1)
        return out

    def add_many(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> npt.NDArray[np.bool_]:
        """Batch test-and-set: a ``bool`` array, True where the item was new, equal to the
        answers of sequential :meth:`add` calls (a duplicate within the batch is new once).

        Every item is validated before any bit is set, so a bad item leaves the filter
        unchanged. The write lock is taken once per chunk of ``CHUNK_KEYS`` keys, so
        another writer may interleave between chunks (each chunk is atomic).

        Raises TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        keys = encode_keys(items)
        out = np.zeros(len(keys), dtype=np.bool_)
        bits = self._bits()
        k = self._k
        for start in range(0, len(keys), CHUNK_KEYS):
            chunk = keys[start:start + CHUNK_KEYS]
            pos, idx, masks = self._byte_masks(chunk)
            flat_pos = pos.ravel()
            flat_idx = idx.ravel()
            flat_masks = masks.ravel()
            with self._lock:
                unset = np.flatnonzero((bits[flat_idx] & flat_masks) == 0)
                if unset.size == 0:
                    continue
                # The first pair (in item order) that touches each unset bit is the one
                # that sets it; its item is new. np.unique returns first occurrences and
                # sorted positions, hence bytes in order for the OR-reduction below.
                uniq, first = np.unique(flat_pos[unset], return_index=True)
                new_items = np.unique(unset[first] // k)
                out[start + new_items] = True
                byte_idx = (uniq >> np.uint64(3)).astype(np.intp)
                bit_masks = np.left_shift(np.uint8(1), (uniq & np.uint64(7)).astype(np.uint8))
                starts = np.flatnonzero(np.r_[True, byte_idx[1:] != byte_idx[:-1]])
                targets = byte_idx[starts]
                bits[targets] |= np.bitwise_or.reduceat(bit_masks, starts)
                self._bump_items(int(new_items.size))
        return out

    def update(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> int:
        """Add many items; return how many were new (as :meth:`add_many`, summed).

        Raises as :meth:`add_many`.
        """
        return int(np.count_nonzero(self.add_many(items)))

    # -- set algebra ------------------------------------------------------------------------
    def _check_compatible(self, other: "BloomFilter") -> None:
        if not isinstance(other, BloomFilter) or type(other)._magic != self._magic:
            raise TypeError(f"cannot combine a {type(self).__name__} with {type(other).__name__}")
        other._check_open()
        _check_compatible_configs(self._config, other._config)

    def _same_image(self, other: "BloomFilter") -> bool:
        if other is self:
            return True
        a, b = self._storage, other._storage
        if isinstance(a, FileStorage) and isinstance(b, FileStorage):
            sa, sb = os.fstat(a.fd), os.fstat(b.fd)
            return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
        return False

    def _combine(self, other: "BloomFilter", op: Any, union: bool) -> "BloomFilter":
        if self._no_write:
            self._refuse_write()
        self._check_open()
        self._check_compatible(other)
        if self._same_image(other):
            return self  # x | x == x & x == x: nothing changes, and no self-deadlock
        mine, theirs = self._bits(), other._bits()
        with self._lock:
            for start in range(0, mine.shape[0], CHUNK_BYTES):
                stop = start + CHUNK_BYTES
                op(mine[start:stop], theirs[start:stop], out=mine[start:stop])
            a, b = self.items_added, other.items_added
            count = min(a + b, _MAX_ITEMS) if union else min(a, b)
            _ITEMS.pack_into(self._buf, _ITEMS_OFFSET, count)
        return self

    def union(self, other: "BloomFilter") -> "BloomFilter":
        """In-place union (bitwise OR) with a compatible filter; returns ``self``.

        Afterwards ``self`` contains every item of both. Items added becomes the saturating
        sum. A union with itself or with another handle on the same file changes nothing.
        Runs over numpy views in chunks of ``CHUNK_BYTES`` under ``self``'s write lock.

        Raises:
            IncompatibleFiltersError (a ``ValueError``): num_bits, num_hashes or scheme
                differ; the message names the field and both values.
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        return self._combine(other, np.bitwise_or, union=True)

    def intersection(self, other: "BloomFilter") -> "BloomFilter":
        """In-place intersection (bitwise AND); returns ``self``. Contains at least every item
        added to both (it may answer True for more than the exact intersection, and its
        false-positive rate is not that of a filter built from the intersection).
        Items added becomes the smaller of the two. Raises as :meth:`union`."""
        return self._combine(other, np.bitwise_and, union=False)

    def __ior__(self, other: "BloomFilter") -> "BloomFilter":
        return self.union(other)

    def __iand__(self, other: "BloomFilter") -> "BloomFilter":
        return self.intersection(other)

    def __or__(self, other: "BloomFilter") -> "BloomFilter":
        """A new in-memory filter: the union of ``self`` and ``other``."""
        self._check_compatible(other)
        return self.copy().union(other)

    def __and__(self, other: "BloomFilter") -> "BloomFilter":
        """A new in-memory filter: the intersection of ``self`` and ``other``."""
        self._check_compatible(other)
        return self.copy().intersection(other)

    def copy(self) -> "BloomFilter":
        """An in-memory copy (a consistent snapshot, see :meth:`to_bytes`)."""
        return type(self).from_bytes(self.to_bytes())

    # -- statistics --------------------------------------------------------------------
    def count_ones(self) -> int:
        """Number of set bits X (popcount over the whole array; O(m / 8) bytes read)."""
        self._check_open()
        return popcount(self._bits())

    def fill_ratio(self) -> float:
        """Fraction of bits set, X / m, in [0, 1]."""
        return self.count_ones() / self._m

    def expected_fp_rate(self) -> float:
        """``(1 - e^(-k n / m))^k`` with n = items added (Bloom 1970).

        Understates the rate of an overfilled filter or one built with unions of
        overlapping sets, because n counts adds, not distinct items; prefer
        :meth:`observed_fp_rate` there.
        """
        return expected_fp_rate(self.items_added, self._m, self._k)

    def observed_fp_rate(self) -> float:
        """``(X / m)^k`` from the bits actually set (Bloom 1970); O(m / 8) bytes read."""
        return (self.count_ones() / self._m) ** self._k

    def approx_items(self) -> float:
        """Estimated distinct items ``-(m / k) ln(1 - X / m)`` (Swamidass and Baldi 2007);
        ``math.inf`` when every bit is set."""
        return _approx_items(self.count_ones(), self._m, self._k)

    def is_over_capacity(self) -> bool:
        """True when the expected fill ratio from items added exceeds ``OVERFILL_RATIO``."""
        return self.items_added > self._warn_at

    def check(self) -> None:
        """Verify the invariants of the open image: header fields agree with the config
        and the padding bits are 0. Raises a ``FormatError`` subclass if not."""
        self._check_open()
        source = self._describe()
        header = self._parse(bytes(self._buf[:_HS]), source)
        found = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
        if found != self._config:  # pragma: no cover - the header is never rewritten
            raise fmt.BadHeaderError(f"header changed under the handle: {found!r}", source=source,
                                     expected=self._config, actual=found)
        fmt.check_length(header.total_size, len(self._buf), source=source)
        fmt.check_padding(self._buf[len(self._buf) - 1], self._m, source=source)

    # -- serialisation and lifecycle ----------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The BLM1 image (header and bits), as a consistent snapshot taken under the write
        lock (so no concurrent add of this or another process is half in it).
        Memory: ``24 + ceil(m / 8)`` bytes."""
        self._check_open()
        with self._lock:
            return bytes(self._buf[:])

    def flush(self) -> None:
        """``msync`` the mapping so that everything added so far survives power loss.
        (Without it, added bits already survive the process being killed.) No-op in memory.
        Raises FilterClosedError after close."""
        self._check_open()
        self._storage.flush()

    def close(self) -> None:
        """Unmap and close the file (idempotent). Does not flush: call :meth:`flush` first
        if the data must survive power loss. Later use raises ``FilterClosedError``
        (a ``ValueError``)."""
        if self._storage.closed:
            return
        self._no_write = True  # add() then reports FilterClosedError before touching the lock
        self._storage.close()
        self._buf = self._storage.buf

    def __enter__(self) -> "BloomFilter":
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self) -> tuple[Any, ...]:
        """A file-backed filter pickles as its absolute path and mode (the receiver opens
        the same file); an in-memory one pickles as its bytes."""
        self._check_open()
        if self._storage.path is not None:
            return (type(self).open, (self._storage.path, self._storage.readonly))
        return (type(self).from_bytes, (self.to_bytes(),))

    def __eq__(self, other: object) -> bool:
        """Same kind, same config, same items added and the same bits."""
        if not isinstance(other, BloomFilter) or type(other)._magic != self._magic:
            return NotImplemented
        if self._config != other._config or self.items_added != other.items_added:
            return False
        a, b = self._bits(), other._bits()
        return all(np.array_equal(a[s:s + CHUNK_BYTES], b[s:s + CHUNK_BYTES]) for s in range(0, a.shape[0], CHUNK_BYTES))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = self._storage.path or "memory"
        state = "closed" if self.closed else ("read-only" if self.readonly else "read-write")
        return (f"<{type(self).__name__} {where} m={self._m} k={self._k} "
                f"scheme={self._strategy.name} {state}>")


def _check_compatible_configs(a: BloomConfig, b: BloomConfig, where: str = "") -> None:
    if a.num_bits != b.num_bits:
        raise IncompatibleFiltersError("num_bits", a.num_bits, b.num_bits, where=where)
    if a.num_hashes != b.num_hashes:
        raise IncompatibleFiltersError("num_hashes", a.num_hashes, b.num_hashes, where=where)
    if a.strategy.name != b.strategy.name:
        raise IncompatibleFiltersError("scheme", a.strategy.name, b.strategy.name, where=where)


def _check_same(expected: BloomConfig, found: BloomConfig, path: str) -> None:
    if expected.num_bits != found.num_bits:
        raise ConfigMismatchError(path, "num_bits", expected.num_bits, found.num_bits)
    if expected.num_hashes != found.num_hashes:
        raise ConfigMismatchError(path, "num_hashes", expected.num_hashes, found.num_hashes)
    if expected.strategy.name != found.strategy.name:
        raise ConfigMismatchError(path, "scheme", expected.strategy.name, found.strategy.name)


#: Magic -> kind, for "wrong kind of filter" messages; the counting module adds itself.
_KINDS: dict[bytes, str] = {fmt.MAGIC: "Bloom filter"}
