"""The cuckoo filter: :class:`CuckooFilter`, a filter that supports deletion at near-Bloom
memory (Fan, Andersen, Kaminsky and Mitzenmacher, "Cuckoo Filter: Practically Better Than
Bloom", CoNEXT 2014), in the CKF1 layout (docs/FORMAT.md), in memory or in a shared file.

Each key is a short fingerprint stored in one of its two buckets; the other bucket is a
function of the bucket and the fingerprint alone, so fingerprints move between their two
buckets (kicks) without the key. The exact hashing, the alternate index (which works for
any bucket count) and the kick path are defined in :mod:`mmapbloom.cuckoo_kernels`.

Concurrency: writers (add, remove, batches, union, check(repair=True)) take the file's
write lock, the same :class:`~mmapbloom.locking.WriteLock` as every kind, so ``add`` is an
atomic test-and-set across threads and processes. Readers take no lock and never miss a
present key: a kick path is applied from its end, copying each fingerprint into its new
slot before the old slot is overwritten. A writer SIGKILLed mid-path leaves at worst a
fingerprint twice in its own pair of buckets and the items counter behind;
``check(repair=True)`` clears the copies and restores the counter.

The hot operations run in C (``mmapbloom._kernels.CuckooHandle`` over ``_cuckoo.c``:
:class:`~mmapbloom.cuckoo_kernels.CuckooNativeHandle`) when the compiled module is in use,
else on the pure reference (:class:`~mmapbloom.cuckoo_kernels.CuckooPyHandle`,
``MMAPBLOOM_PURE=1``); both write byte-identical files.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, ClassVar, Optional, TypeVar, Union


from .keys import Key, Keys, PathLike
from . import format as fmt
from . import opening, scans
from .cuckoo_kernels import CuckooCells, CuckooPyHandle, Geometry, alt_index
from .errors import (
    BadHeaderError,
    ConfigError,
    ConfigMismatchError,
    FilterClosedError,
    FilterFullError,
    IncompatibleFiltersError,
    ReadOnlyFilterError,
)
from .lifecycle import Lifecycle
from .locking import WriteLock
from .files import DEFAULT_FILE_MODE, create_file
from .storage import FileStorage, MemoryStorage, Storage

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["DEFAULT_MAX_KICKS", "LOAD_FACTORS", "CuckooFilter", "expected_fp_rate", "plan"]

C = TypeVar("C", bound="CuckooFilter")

#: The load each bucket size reaches reliably, used for sizing (Fan et al. 2014, section
#: 5.1 and Figure 5: about 50%, 84%, 95% and 98% for b = 1, 2, 4, 8).
LOAD_FACTORS = {1: 0.5, 2: 0.84, 4: 0.95, 8: 0.98}
DEFAULT_MAX_KICKS = 500


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__}")
    return value


def plan(
    capacity: int,
    fp_rate: float,
    *,
    fingerprint_bits: Optional[int] = None,
    bucket_size: int = 4,
    max_kicks: int = DEFAULT_MAX_KICKS,
) -> Geometry:
    """The table for ``capacity`` keys at false-positive rate ``fp_rate``.

    * ``fingerprint_bits`` f (default): the smallest width in 4..32 whose bound
      ``2 b / 2^f <= fp_rate`` (Fan et al. 2014, eq. 6: a lookup compares 2b slots, each a
      false match with probability about 1 / 2^f);
    * ``num_buckets`` n: ``ceil(capacity / (b * LOAD_FACTORS[b]))`` (any n: the alternate
      index works for every bucket count, so nothing is rounded to a power of two).

    Args:
        capacity: keys, >= 1. fp_rate: in (0, 1). fingerprint_bits: None or 4..32 (an
        explicit width overrides the bound). bucket_size: 1, 2, 4 or 8. max_kicks: 1..65536.

    Raises:
        ConfigError (a ``ValueError``): any value out of range, or a rate that 32-bit
        fingerprints cannot reach (``fp_rate < 2 b / 2^32``).
    """
    capacity = _int("capacity", capacity)
    if capacity < 1:
        raise ConfigError(f"capacity must be >= 1, got {capacity}")
    if isinstance(fp_rate, bool) or not isinstance(fp_rate, (int, float)) or not 0.0 < fp_rate < 1.0:
        raise ConfigError(f"fp_rate must be a float in (0, 1), got {fp_rate!r}")
    b = _int("bucket_size", bucket_size)
    if b not in fmt.CUCKOO_BUCKET_SIZES:
        raise ConfigError(f"bucket_size must be one of {fmt.CUCKOO_BUCKET_SIZES}, got {b}")
    kicks = _int("max_kicks", max_kicks)
    if not 1 <= kicks <= fmt.CUCKOO_MAX_KICKS:
        raise ConfigError(f"max_kicks must be in 1 .. {fmt.CUCKOO_MAX_KICKS}, got {kicks}")
    if fingerprint_bits is None:
        f = max(fmt.CUCKOO_MIN_FP_BITS, math.ceil(math.log2(2 * b / fp_rate)))
        if 2 * b / 2**f > fp_rate:  # rounding of log2
            f += 1
        if f > fmt.CUCKOO_MAX_FP_BITS:
            raise ConfigError(
                f"fp_rate {fp_rate} needs {f}-bit fingerprints with bucket_size {b}; at most 32 are supported"
            )
    else:
        f = _int("fingerprint_bits", fingerprint_bits)
        if not fmt.CUCKOO_MIN_FP_BITS <= f <= fmt.CUCKOO_MAX_FP_BITS:
            raise ConfigError(f"fingerprint_bits must be in 4 .. 32, got {f}")
    n = max(1, math.ceil(capacity / (b * LOAD_FACTORS[b])))
    if n > fmt.CUCKOO_MAX_BUCKETS:
        raise ConfigError(f"capacity {capacity} needs {n} buckets; at most 2**53 fit the header")
    return Geometry(n, b, f, kicks)


class CuckooFilter(Lifecycle):
    """A cuckoo filter (Fan et al., CoNEXT 2014) in the CKF1 layout, in memory or in a
    shared memory-mapped file: ``add`` (test-and-set), ``in``, ``remove`` / ``discard``,
    ``count``, batches (``update``, ``add_many``, ``contains_many``, ``remove_many``).

    ``CuckooFilter(capacity, fp_rate, *, fingerprint_bits=None, bucket_size=4,
    max_kicks=500)`` is an empty in-memory filter sized by :func:`plan` (ConfigError for
    invalid values); see also :meth:`create`, :meth:`open`, :meth:`open_or_create`,
    :meth:`from_bytes`.

    Promise: no false negatives for a key added and not removed. Only remove keys that
    were added: removing a false positive removes another key's fingerprint.

    Thread- and process-safe (see the module docstring); fork-safe as every kind (the
    lock is the shared WriteLock; the mapping is ``MAP_SHARED``). Pickles as its path (a
    file) or its bytes (in memory).

    >>> f = CuckooFilter(1000, 0.01)
    >>> f.add("session-abc"), f.add("session-abc"), "session-abc" in f
    (True, False, True)
    >>> f.remove("session-abc"); "session-abc" in f
    False
    """

    __slots__ = ("_storage", "_geometry", "_h", "_capacity", "_fp_rate", "__weakref__")

    _magic: ClassVar[bytes] = fmt.CUCKOO_MAGIC
    _storage: Storage
    _geometry: Geometry
    _h: CuckooPyHandle

    # -- construction ---------------------------------------------------------------------
    def __init__(
        self,
        capacity: int,
        fp_rate: float,
        *,
        fingerprint_bits: Optional[int] = None,
        bucket_size: int = 4,
        max_kicks: int = DEFAULT_MAX_KICKS,
    ):
        geometry = plan(
            capacity, fp_rate, fingerprint_bits=fingerprint_bits, bucket_size=bucket_size, max_kicks=max_kicks
        )
        header = _header(geometry, capacity, fp_rate)
        image = bytearray(header.total_size)
        image[: header.header_size] = fmt.pack_cuckoo_header(header)
        self._attach(MemoryStorage(image, header.header_size), geometry, header)

    def _attach(self, storage: Storage, geometry: Geometry, header: fmt.CuckooHeader) -> None:
        self._storage = storage
        self._geometry = geometry
        n, b, f, _ = geometry
        # the header's recorded design values; a file written before they were recorded
        # (both 0), or a capacity of 2**32 - 1 or more, derives them from the geometry
        recorded = header.capacity and header.capacity != fmt.CUCKOO_MAX_RECORDED_CAPACITY
        self._capacity = header.capacity if recorded else int(n * b * LOAD_FACTORS[b])
        self._fp_rate = header.fp_rate if header.fp_rate else 2 * b / 2**f
        self._h = CuckooPyHandle.attach(storage, geometry)

    @classmethod
    def _from_storage(cls: type[C], storage: Storage, geometry: Geometry, header: fmt.CuckooHeader) -> C:
        self = cls.__new__(cls)
        try:
            self._attach(storage, geometry, header)
        except BaseException:
            storage.close()
            raise
        return self

    @classmethod
    def _validate(cls, read: fmt.Reader, size: int, source: str) -> Any:
        """The CKF1 validator (:func:`mmapbloom.format.validate_cuckoo_image`)."""
        return fmt.validate_cuckoo_image(read, size, source=source)

    @classmethod
    def _check_options(cls, header: Any, options: dict[str, Any], source: str) -> None:
        """Opening's hook; the geometry is compared in :meth:`_adopt`."""

    @classmethod
    def _adopt(cls: type[C], storage: FileStorage, config: Any, options: Any) -> C:
        """:func:`mmapbloom.opening.adopt`'s hook for this kind: the filter over a validated
        storage; with ``config`` (a ``(Geometry, capacity, fp_rate)`` triple, from
        :meth:`open_or_create`) the file's geometry must equal it (ConfigMismatchError
        naming the first field that differs)."""
        header = storage.header
        assert isinstance(header, fmt.CuckooHeader)
        geometry = Geometry(header.num_buckets, header.bucket_size, header.fingerprint_bits, header.max_kicks)
        if config is not None:
            wanted, _, _ = config
            for field in Geometry._fields:
                if getattr(wanted, field) != getattr(geometry, field):
                    raise ConfigMismatchError(
                        storage.path or "", field, getattr(wanted, field), getattr(geometry, field)
                    )
        return cls._from_storage(storage, geometry, header)

    @classmethod
    def create(
        cls: type[C],
        path: PathLike,
        capacity: int,
        fp_rate: float,
        *,
        fingerprint_bits: Optional[int] = None,
        bucket_size: int = 4,
        max_kicks: int = DEFAULT_MAX_KICKS,
        mode: Optional[int] = None,
        sparse: bool = False,
        overwrite: bool = False,
    ) -> C:
        """Create a new, empty filter file (published atomically with ``link``, as every
        kind: other processes never see a partial file) and open it read-write.

        Args: as the constructor; ``mode`` permission bits (default 0o666, masked by the
        umask); ``sparse`` and ``overwrite`` as ``BloomFilter.create``.

        Raises:
            FileExistsError: ``path`` exists (unless ``overwrite``); it is left untouched.
            ConfigError: invalid sizing. OSError: as ``BloomFilter.create`` (ENOSPC ...).
        """
        geometry = plan(
            capacity, fp_rate, fingerprint_bits=fingerprint_bits, bucket_size=bucket_size, max_kicks=max_kicks
        )
        header = _header(geometry, capacity, fp_rate)
        fd, apath = create_file(
            path,
            fmt.pack_cuckoo_header(header),
            header.total_size,
            sparse=sparse,
            replace=overwrite,
            mode=DEFAULT_FILE_MODE if mode is None else mode,
        )
        storage = FileStorage.from_fd(fd, apath, readonly=False, validate=cls._validate)
        return cls._from_storage(storage, geometry, header)

    @classmethod
    def open(cls: type[C], path: PathLike, readonly: bool = False) -> C:
        """Open an existing CKF1 file in O(1) (header, length and last byte validated
        before mapping). ``capacity`` and ``fp_rate`` are the ones the file was created
        with (recorded in its header; ``fp_rate`` as the shortest decimal of its float32,
        so 0.01 reads back as 0.01); a file written before they were recorded derives
        them from its geometry (``n b LOAD_FACTORS[b]`` and ``2 b / 2^f``).

        Raises:
            OSError (FileNotFoundError, PermissionError, ...); BadMagicError (naming both
            kinds for a BLM1 / BLC1 file), UnknownStrategyError, BadHeaderError,
            LengthMismatchError, PaddingError (all ``FormatError``, a ``ValueError``).
        """
        return opening.open_file(cls, path, readonly=readonly)  # type: ignore[type-var]

    @classmethod
    def open_or_create(
        cls: type[C],
        path: PathLike,
        capacity: int,
        fp_rate: float,
        *,
        fingerprint_bits: Optional[int] = None,
        bucket_size: int = 4,
        max_kicks: int = DEFAULT_MAX_KICKS,
        mode: Optional[int] = None,
        sparse: bool = False,
    ) -> C:
        """Open ``path`` if it exists (its geometry must be :func:`plan`'s for these
        arguments: ConfigMismatchError names the field), else create it; safe when many
        processes race on the same new path."""
        geometry = plan(
            capacity, fp_rate, fingerprint_bits=fingerprint_bits, bucket_size=bucket_size, max_kicks=max_kicks
        )

        def make() -> C:
            return cls.create(
                path,
                capacity,
                fp_rate,
                fingerprint_bits=geometry.fingerprint_bits,
                bucket_size=bucket_size,
                max_kicks=max_kicks,
                mode=mode,
                sparse=sparse,
            )

        return opening.open_or_create(cls, path, (geometry, capacity, fp_rate), {}, make)  # type: ignore[type-var, arg-type]

    @classmethod
    def from_bytes(cls: type[C], data: Union[bytes, bytearray, memoryview]) -> C:
        """An in-memory filter from :meth:`to_bytes`' bytes (or a file's), validated first.

        Raises TypeError (not bytes-like) and the FormatErrors of :meth:`open`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        mv = memoryview(data).cast("B")
        header = cls._validate(lambda offset, count: bytes(mv[offset : offset + count]), mv.nbytes, "<bytes>")
        geometry = Geometry(header.num_buckets, header.bucket_size, header.fingerprint_bits, header.max_kicks)
        return cls._from_storage(MemoryStorage(mv, header.header_size), geometry, header)

    # -- lifecycle (Lifecycle's hooks) ---------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._storage.closed

    def _describe(self) -> str:
        return self._storage.path or "<memory>"

    def _close_lock(self) -> Any:
        return self._storage.lock.thread_lock

    def _release(self) -> None:
        self._h.close()
        self._storage.close()

    def close(self) -> None:
        """Unmap and close the file (idempotent; does not flush). Waits for this handle's
        writes in flight in other threads; later use raises FilterClosedError."""
        super().close()

    def flush(self) -> None:
        """``msync`` the mapping (survive power loss); no-op in memory. FilterClosedError after close."""
        self._check_open()
        self._storage.flush()

    def __reduce__(self) -> tuple[Any, ...]:
        """A file-backed filter pickles as its path and mode; an in-memory one as its bytes."""
        self._check_open()
        if self._storage.path is not None:
            return (type(self).open, (self._storage.path, self._storage.readonly))
        return (type(self).from_bytes, (self.to_bytes(),))

    def to_bytes(self) -> bytes:
        """The whole image, a consistent snapshot taken under the write lock."""
        self._check_open()
        with self._storage.lock.snapshot():
            return scans.read(self._storage, 0, len(self._storage.buf))

    def copy(self: C) -> C:
        """An in-memory copy (a snapshot, see :meth:`to_bytes`), independent of this filter
        and of its file. ``copy.copy(f)`` and ``copy.deepcopy(f)`` return the same (never a
        second handle on the file: use :meth:`open` for that)."""
        return type(self).from_bytes(self.to_bytes())

    def _stdlib_copy(self: C, how: str) -> C:
        """``copy.copy`` / ``copy.deepcopy``: :meth:`copy`, an independent in-memory filter."""
        return self.copy()

    def write_lock(self) -> WriteLock:
        """The write lock as a context manager (writes inside re-enter it). Raises
        ReadOnlyFilterError / FilterClosedError on such a handle."""
        self._check_writable()
        return self._storage.lock

    def _check_writable(self) -> None:
        self._check_open()
        if self._storage.readonly:
            raise ReadOnlyFilterError(f"{self._describe()}: filter was opened read-only; writes are refused")

    def __eq__(self, other: object) -> bool:
        """Same geometry, item count and slots (byte-equal images)."""
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, CuckooFilter)
        return self._geometry == other._geometry and self.to_bytes()[20:] == other.to_bytes()[20:]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = self._storage.path or "memory"
        state = "closed" if self.closed else ("read-only" if self.readonly else "read-write")
        n, b, f, _ = self._geometry
        return f"<{type(self).__name__} {where} buckets={n} b={b} f={f} {state}>"

    # -- per-item operations ---------------------------------------------------------------
    def add(self, item: Key) -> bool:
        """Insert ``item`` (str, bytes-like or int, by :func:`~mmapbloom.hashing.encode_key`)
        unless its fingerprint is already in one of its two buckets: an atomic test-and-set
        across threads and processes (of several adding the same key at once, exactly one
        gets True). Returns True if inserted, False if present (nothing changed).

        Raises:
            FilterFullError: no place within ``max_kicks`` and the victim slot taken
                (nothing changed: every key present before is still found).
            TypeError, OverflowError, KeyEncodingError (a bad item), ReadOnlyFilterError,
            FilterClosedError, LengthMismatchError (file truncated under the handle).
        """
        return self._h.add(item)

    def might_contain(self, item: Key) -> bool:
        """True if ``item`` may be present; False only if it certainly is not (never a
        false negative for a key added and not removed). No lock: at most 2b slot reads
        and the victim. Raises TypeError, FilterClosedError, LengthMismatchError."""
        return self._h.contains(item)

    __contains__ = might_contain

    def remove(self, item: Key) -> None:
        """Remove one matching fingerprint from the item's buckets (or the victim slot).

        Raises:
            KeyError: no matching fingerprint (the item is certainly absent); nothing changes.
            TypeError, ReadOnlyFilterError, FilterClosedError, LengthMismatchError.
        """
        if not self._h.remove(item):
            raise KeyError(item)

    def discard(self, item: Key) -> bool:
        """Remove the item if a matching fingerprint is present; True if one was removed."""
        return self._h.remove(item)

    def count(self, item: Key) -> int:
        """Matching fingerprints in the item's two buckets (and the victim): 0 means
        certainly absent. No lock. Raises TypeError, FilterClosedError."""
        return self._h.count(item)

    # -- batches --------------------------------------------------------------------------------
    def update(self, items: Keys) -> int:
        """Insert many keys (a list, any iterable, a numpy array or an Arrow column; nulls
        never added), as sequential :meth:`add` calls; returns how many were inserted.
        The write lock is taken once per chunk of keys; every key is validated first.

        Raises:
            FilterFullError at the first key that finds no place: the keys before it are
            committed, and the exception's ``committed_items`` says how many (every
            exception leaving a batch carries it). TypeError etc. as :meth:`add`.
        """
        return self._h.add_many(items)  # type: ignore[arg-type]  # checked at run time

    def add_many(self, items: Keys) -> npt.NDArray[np.bool_]:
        """As :meth:`update`, returning a ``bool`` array: True where the key was inserted."""
        try:
            batch = (
                list(items)
                if not isinstance(items, (np.ndarray, list))
                and not hasattr(items, "__arrow_c_stream__")
                and not hasattr(items, "__arrow_c_array__")
                else items
            )
            n = len(batch)  # type: ignore[arg-type]
        except TypeError:
            batch, n = items, None
        out = np.zeros(n or 0, dtype=np.bool_)
        self._h.add_many(batch, out if n is not None else None)  # type: ignore[arg-type]  # checked at run time
        return out

    def contains_many(self, items: Keys) -> npt.NDArray[np.bool_]:
        """Batch :meth:`might_contain`: a ``bool`` array (a null answers False). No lock."""
        return self._h.contains_many(items)  # type: ignore[arg-type]  # checked at run time

    def remove_many(self, items: Keys) -> int:
        """Remove one matching fingerprint of every key that has one (absent keys are
        skipped, nulls ignored); returns how many were removed. Exceptions carry
        ``committed_items``. Raises as :meth:`remove`, never KeyError."""
        return self._h.remove_many(items)  # type: ignore[arg-type]  # checked at run time

    # -- statistics -------------------------------------------------------------------------------
    @property
    def path(self) -> Optional[str]:
        """Absolute path of the file, or None in memory."""
        return self._storage.path

    @property
    def readonly(self) -> bool:
        """True if opened read-only."""
        return self._storage.readonly

    @property
    def items_added(self) -> int:
        """Fingerprints stored (inserts minus removes), from the header: other processes'
        writes included. Saturates at 2**32 - 1."""
        self._check_open()
        self._storage.check_size()
        return self._h.items()

    @property
    def capacity(self) -> int:
        """The design capacity (keys), as recorded in the header at creation; ``n b
        LOAD_FACTORS[b]`` for a file written before it was recorded or a capacity of
        2**32 - 1 or more (the field is a u32)."""
        return self._capacity

    @property
    def fp_rate(self) -> float:
        """The design false-positive rate as recorded in the header at creation: the shortest
        decimal that round-trips to its float32 (0.01 is 0.01; 0.0123456789 is 0.012345679);
        the bound ``2 b / 2^f`` for a file written before it was recorded."""
        return self._fp_rate

    @property
    def fingerprint_bits(self) -> int:
        """f, bits per fingerprint (4..32)."""
        return self._geometry.fingerprint_bits

    @property
    def bucket_size(self) -> int:
        """b, slots per bucket (1, 2, 4 or 8)."""
        return self._geometry.bucket_size

    @property
    def num_buckets(self) -> int:
        """n, the number of buckets (any n >= 1)."""
        return self._geometry.num_buckets

    @property
    def max_kicks(self) -> int:
        """The longest kick path an insert tries before the victim slot / FilterFullError."""
        return self._geometry.max_kicks

    @property
    def num_slots(self) -> int:
        """``n * b``."""
        return self._geometry.num_buckets * self._geometry.bucket_size

    @property
    def load_factor(self) -> float:
        """``items_added / (n * b)``, in [0, 1] (the victim may add 1 item)."""
        return self.items_added / self.num_slots

    @property
    def size_bytes(self) -> int:
        """Bytes of the image: 48 + ``ceil(n b f / 8)``."""
        return fmt.CUCKOO_HEADER_SIZE + fmt.body_size(self.num_slots, self.fingerprint_bits)

    def bits_per_item(self) -> float:
        """Bits of the image per key of design capacity, ``8 size_bytes / capacity``."""
        return 8 * self.size_bytes / self._capacity

    def expected_fp_rate(self) -> float:
        """Expected false-positive rate at the current load, in [0, 1):
        ``1 - (1 - 1/(2^f - 1))^(2 N / n)`` for N items in n buckets: a lookup compares the
        about ``2 N / n`` fingerprints of its two buckets, each equal with probability
        ``1/(2^f - 1)`` (Fan et al. 2014, section 4, eq. 6 at load ``N / (n b)``)."""
        return expected_fp_rate(self._geometry, self.items_added)

    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """A JSON-ready record (``mmapbloom info``): kind, path, size_bytes, items_added,
        capacity, fp_rate, fingerprint_bits, bucket_size, num_buckets, max_kicks,
        load_factor, expected_fp_rate, bits_per_item, victim; with ``scan`` (O(slots)) also
        ``occupied_slots``."""
        self._check_open()
        record: dict[str, Any] = {
            "kind": type(self).__name__,
            "path": self.path,
            "strategy": fmt.CUCKOO_STRATEGY,
            "size_bytes": self.size_bytes,
            "items_added": self.items_added,
            "capacity": self.capacity,
            "fp_rate": self.fp_rate,
            "fingerprint_bits": self.fingerprint_bits,
            "bucket_size": self.bucket_size,
            "num_buckets": self.num_buckets,
            "max_kicks": self.max_kicks,
            "load_factor": self.load_factor,
            "expected_fp_rate": self.expected_fp_rate(),
            "bits_per_item": self.bits_per_item(),
            "victim": self._h.cells.victim()[0] != 0,
        }
        if scan:
            record["occupied_slots"] = self._h.cells.occupied()
        return record

    info = describe

    # -- checks -------------------------------------------------------------------------------------
    def check(self, repair: bool = False) -> None:
        """Verify the open image: the header parses and agrees with the handle, the real
        length (``fstat``) is right, the padding bits are 0, and the items counter equals
        the occupied slots (plus the victim), counted under the write lock.

        Args:
            repair: on a counter mismatch (a writer killed between its slot writes and its
                counter store, or mid kick path), clear fingerprints stored twice in their
                own bucket pair and store the real count, and make an odd kick counter
                (header bytes 18..19, left by a writer killed mid path) even, instead of
                raising.

        Raises:
            FormatError subclasses naming what is wrong; BadHeaderError (``expected`` the
            occupied count, ``actual`` the counter) for a counter mismatch without repair,
            and for an odd kick counter;
            FilterClosedError; ReadOnlyFilterError (repair on a read-only handle).
        """
        self._check_open()
        source = self._describe()
        self._storage.check_size()
        buf = self._storage.buf
        size = os.fstat(self._storage.fd).st_size if isinstance(self._storage, FileStorage) else len(buf)
        header = self._validate(lambda offset, count: scans.read(self._storage, offset, count), size, source)
        found = Geometry(header.num_buckets, header.bucket_size, header.fingerprint_bits, header.max_kicks)
        if found != self._geometry:
            raise BadHeaderError(
                f"header changed under the handle: {found!r}", source=source, expected=self._geometry, actual=found
            )
        if repair:
            self._check_writable()
            with self._storage.lock:
                self._h.cells.repair_seq()
                self._h.cells.dedupe()
                self._h.set_items(self._h.cells.occupied())
            return
        with self._storage.lock.snapshot():
            occupied = self._h.cells.occupied()
            items = self._h.items()
            seq = self._h.cells.seq()
        if seq & 1:
            raise BadHeaderError(
                f"kick counter {seq} is odd under the write lock: a writer died applying a kick "
                "path (check(repair=True) or the next write fixes it)",
                source=source,
                expected="even",
                actual=seq,
            )
        if items != min(occupied, fmt.MAX_ITEMS):
            raise BadHeaderError(
                f"items counter {items} disagrees with {occupied} occupied slots (check(repair=True) fixes it)",
                source=source,
                expected=occupied,
                actual=items,
            )

    def verify(self) -> None:
        """:meth:`check`, under the name every kind shares."""
        self.check()

    # -- combining -------------------------------------------------------------------------------------
    def union(self, other: "CuckooFilter") -> "CuckooFilter":
        """In place: insert every fingerprint of ``other`` (same geometry) that is not
        already in its bucket pair, as :meth:`add` would, under this filter's write lock
        (``other`` is read from a snapshot). Kick choices are seeded by
        ``fmix64(bucket * 2^32 + fp)``. Returns ``self``.

        Raises:
            IncompatibleFiltersError: the geometries differ (the field is named).
            FilterFullError: ``self`` filled up; ``committed_items`` says how many of
                ``other``'s fingerprints (in slot order) were merged.
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        if not isinstance(other, CuckooFilter):
            raise TypeError(f"cannot combine a {type(self).__name__} with {type(other).__name__}")
        self._check_writable()
        other._check_open()
        for field in Geometry._fields:
            mine, theirs = getattr(self._geometry, field), getattr(other._geometry, field)
            if mine != theirs and field != "max_kicks":
                raise IncompatibleFiltersError(field, mine, theirs)
        from .hashing import fmix64

        snapshot = CuckooFilter.from_bytes(other.to_bytes()) if other is not self else self.copy()
        pairs = list(snapshot._h.cells.fingerprints())
        snapshot.close()
        committed = 0
        try:
            with self._storage.lock:
                self._storage.check_size()
                cells = self._h.cells
                added = 0
                for bucket, fp in pairs:
                    got = cells.insert(bucket, fp, fmix64((bucket << 32) + fp))
                    if got < 0:
                        self._h.bump_items(added)
                        added = 0
                        raise self._h.full_error()
                    added += got
                    committed += 1
                self._h.bump_items(added)
        except BaseException as exc:
            exc.committed_items = committed  # type: ignore[attr-defined]
            raise
        return self

    def __ior__(self, other: "CuckooFilter") -> "CuckooFilter":
        return self.union(other)

    def _check_open(self) -> None:
        if self._storage.closed:
            raise FilterClosedError(f"{self._describe()}: filter is closed")


def expected_fp_rate(geometry: Geometry, items: int) -> float:
    """The expected false-positive rate of a table of ``geometry`` holding ``items`` keys,
    in [0, 1): ``1 - (1 - 1/(2^f - 1))^(2 N / n)`` (see
    :meth:`CuckooFilter.expected_fp_rate`; ``mmapbloom plan --cuckoo`` prints it at N = n)."""
    f = geometry.fingerprint_bits
    return float(-math.expm1(2 * items / geometry.num_buckets * math.log1p(-1 / (2**f - 1))))


def _header(geometry: Geometry, capacity: int, fp_rate: float) -> fmt.CuckooHeader:
    """A new table's header, recording the design ``capacity`` (saturating at 2**32 - 1)
    and ``fp_rate`` (as its float32, :func:`mmapbloom.format.cuckoo_f32`)."""
    n, b, f, kicks = geometry
    cap = min(capacity, fmt.CUCKOO_MAX_RECORDED_CAPACITY)
    return fmt.CuckooHeader(n, f, b, kicks, capacity=cap, fp_rate=fmt.cuckoo_f32(fp_rate))


_unused = (CuckooCells, alt_index, FilterFullError)
