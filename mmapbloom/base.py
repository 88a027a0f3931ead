"""The filter handle: lifecycle shared by every kind of filter (construction, locking,
pickling, closing) and the interface they share, independent of what a cell holds.

:class:`MappedFilter` owns a :class:`~mmapbloom.storage.Storage` (the header+cells image in
memory or in a shared mapping) and the handle's :class:`~mmapbloom.locking.WriteLock`.
Opening files (and adopting the mapped storage, checked against a config) is
:mod:`mmapbloom.opening`'s; creating them is :func:`mmapbloom.files.create_file`'s.
Subclasses (:class:`~mmapbloom.filter.BloomFilter`,
:class:`~mmapbloom.counting.CountingBloomFilter`) add the cell operations.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Callable, ClassVar, NoReturn, Optional, TypeVar, Union


from . import format as fmt
from . import kernels, opening, scans
from .errors import (
    BadHeaderError,
    FilterClosedError,
    IncompatibleFiltersError,
    ReadOnlyFilterError,
)
from .batches import as_batch
from .config import BloomConfig
from .handle import CHUNK_KEYS, FilterBase, Hooks, Layout, attach
from .hashing import HashStrategy
from .lifecycle import Lifecycle
from .items import OVERFILL_RATIO, ItemsCounter, design_limit, items_update
from .locking import TimedWriteLock, WriteLock, deferred_signals
from .sizing import (
    approx_items,
    approx_items_blocks,
    distinct_items,
    expected_fill_ratio,
    observed_fp_rate,
    observed_fp_rate_blocks,
)
from .files import DEFAULT_FILE_MODE, create_file
from .storage import FileStorage, MemoryStorage, Storage
from .keys import Key, Keys, PathLike

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_KEYS",
    "OVERFILL_RATIO",
    "MappedFilter",
    "PathLike",
    "deferred_signals",
    "design_limit",
    "items_update",
]

#: Bytes per step when combining or counting cell arrays (bounded temporary memory).
CHUNK_BYTES = 1 << 24

F = TypeVar("F", bound="MappedFilter")


class MappedFilter(FilterBase, Lifecycle):
    """Base of the filter kinds: an image (header + cells) in memory or in a shared file,
    and the interface both kinds share.

    Every kind answers ``add``, ``might_contain`` / ``in``, ``update``, ``add_many``,
    ``contains_many``, ``union``, ``copy``, ``to_bytes`` and the statistics
    ``count_ones`` (non-zero cells), ``fill_ratio``, ``expected_fp_rate``,
    ``observed_fp_rate`` and ``approx_items``, which are computed here once for every kind
    with the formulas of the filter's strategy. Subclasses set ``_magic`` and implement
    ``_new_header(config, **options)``; the hot operations go straight to the handle
    (``self._h``, :func:`mmapbloom.handle.attach`: the native C object or the pure one),
    which takes the write lock and keeps the items counter itself.

    One home per concern: files are opened and adopted by :mod:`mmapbloom.opening` (the
    class's ``_validate``, ``_check_options`` and ``_from_storage`` are its hooks), images
    are validated by :func:`mmapbloom.format.validate_image` (``_validate``; ``open``
    parses the header once, before mapping), shapes compared by
    :meth:`BloomConfig.check_compatible`, the items counter and its over-capacity warning
    are one :class:`~mmapbloom.items.ItemsCounter` (``self._counter``), the bytes and the
    lock belong to the :class:`~mmapbloom.storage.Storage` (``self._storage``). The
    package's other modules (merge, scalable) reach a filter through the functions at the
    end of this module (:func:`filter_storage`, :func:`add_items`, :func:`items_loader`,
    :func:`contains_flags`), never through its private attributes; from the storage they
    use its ``fd``, ``duplicate_fd``, ``check_size``, ``body_range`` and ``body``.
    """

    # _h (the handle) is a slot of the base, FilterBase, whose add, might_contain and
    # ``in`` call it directly.
    __slots__ = ("_storage", "_config", "_hs", "_cell_bits", "_counter", "__weakref__")

    _magic: ClassVar[bytes] = fmt.MAGIC
    _counter: ItemsCounter

    if TYPE_CHECKING:  # the hot three live in FilterBase (C, or handle.PyFilterBase): typed keys here

        def add(self, item: Key) -> bool: ...
        def might_contain(self, item: Key) -> bool: ...
        def __contains__(self, item: Key) -> bool: ...

    # -- subclass hooks ---------------------------------------------------------------
    @classmethod
    def _new_header(cls, config: BloomConfig, **options: Any) -> fmt.Header:
        if options:
            raise TypeError(f"{cls.__name__} takes no options {sorted(options)}")
        return fmt.Header(cls._magic, config.strategy, config.num_bits, config.num_hashes, 0)

    @classmethod
    def _pack(cls, header: fmt.Header) -> bytes:
        return fmt.pack_header(header.strategy.name, header.num_bits, header.num_hashes, 0, cls._magic)

    @classmethod
    def _check_options(cls, header: fmt.Header, options: dict[str, Any], source: str) -> None:
        """``open_or_create`` (:func:`mmapbloom.opening.adopt`): refuse an existing file
        whose kind-specific options differ."""
        cls._new_header(
            BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy), **options
        )  # TypeError on unknown options

    def _after_attach(self) -> None:
        """Called once the storage is attached (subclasses cache derived values)."""

    def _saturation_hook(self) -> Any:
        """``saturated()``, which the handle calls (after releasing the lock) when a
        counter saturated, or None for kinds without counters. It must not reference the
        filter (the C handle holds it: no reference cycle)."""
        return None

    # -- construction -------------------------------------------------------------
    def __init__(self, config: BloomConfig, **options: Any):
        """An empty in-memory filter for ``config``. Thread-safe; not shared between
        processes (pickling copies it)."""
        if not isinstance(config, BloomConfig):
            raise TypeError(f"config must be a BloomConfig, got {type(config).__name__}")
        header = self._new_header(config, **options)
        image = bytearray(header.total_size)
        image[: header.header_size] = self._pack(header)
        self._attach(MemoryStorage(image, header.header_size), config, header)

    def _attach(self, storage: Storage, config: BloomConfig, header: fmt.Header) -> None:
        self._storage = storage
        self._config = config
        self._hs = header.header_size
        self._cell_bits = header.cell_bits
        self._counter = ItemsCounter(
            fmt.items_word(storage.buf),
            config.num_bits,
            config.num_hashes,
            config.strategy,
            self._describe(),
            config.capacity,
        )
        self._after_attach()
        self._attach_handle()

    def _attach_handle(self, pure: bool = False) -> None:
        """Bind the handle (``self._h``) once: the hot loops, the lock and the counter."""
        storage = self._storage
        self._h = attach(
            storage.buf,
            Layout(self._config, self._cell_bits, self._hs),
            storage.lock,
            self._counter,
            _hooks(storage, self._counter, self._saturation_hook()),
            writable=not storage.readonly,
            pure=pure,
        )

    @classmethod
    def _from_storage(cls: type[F], storage: Storage, config: BloomConfig, header: fmt.Header) -> F:
        self = cls.__new__(cls)
        self._attach(storage, config, header)
        return self

    @classmethod
    def _validate(cls, read: fmt.Reader, size: int, source: str) -> fmt.Header:
        """Validate an image of this kind (header, length, padding): the one validator,
        :func:`mmapbloom.format.validate_image`, also the ``FileStorage`` callback."""
        return fmt.validate_image(read, size, source=source, magic=cls._magic)

    @classmethod
    def create(
        cls: type[F],
        path: PathLike,
        config: BloomConfig,
        *,
        sparse: bool = False,
        mode: int = DEFAULT_FILE_MODE,
        overwrite: bool = False,
        **options: Any,
    ) -> F:
        """Create a new, empty filter file and open it read-write.

        The file is built under a temporary name in the same directory and published with
        ``link``, so other processes never see a partial file and an existing file is never
        truncated or replaced.

        Args:
            path: where to create it; the file must not exist.
            config: the filter's shape.
            sparse: if False (default) the file's bytes are reserved now with
                ``posix_fallocate``, so a full disk fails here with ``OSError(ENOSPC)``. If
                True the file is sparse: creation is instant and takes no space, but a disk
                that fills up later makes a write through the mapping fail with SIGBUS,
                which kills the process. Use it only for filters larger than their disk.
            mode: permission bits, masked by the umask (default ``0o666``).
            overwrite: if True, an existing file at ``path`` is atomically replaced (renamed
                over: processes that have the old file mapped keep using the old file).

        Returns:
            The open filter (read-write). Close it, or use it as a context manager.

        Raises:
            FileExistsError: ``path`` exists and ``overwrite`` is False (it is left
                untouched, even if it is a symlink).
            OSError: the directory is missing or not writable, or the disk is full
                (ENOSPC; nothing is left at ``path``).
        """
        if not isinstance(config, BloomConfig):
            raise TypeError(f"config must be a BloomConfig, got {type(config).__name__}")
        header = cls._new_header(config, **options)
        fd, apath = create_file(path, cls._pack(header), header.total_size, sparse=sparse, replace=overwrite, mode=mode)
        # Map the descriptor we created, never the path again (someone may have replaced it,
        # and mode may deny the owner write permission).
        storage = FileStorage.from_fd(fd, apath, readonly=False, validate=cls._validate)
        return cls._from_storage(storage, config, header)

    @classmethod
    def open(cls: type[F], path: PathLike, readonly: bool = False) -> F:
        """Open an existing filter file; costs O(1) whatever its size (nothing is read
        beyond the header and the last byte until queried).

        Args:
            path: the file.
            readonly: map it read-only; writes then raise :class:`ReadOnlyFilterError`.
                Needed for files the process may not write.

        Raises:
            FileNotFoundError, PermissionError, IsADirectoryError, OSError: from the OS
                (also for a FIFO or device: only regular files are opened).
            BadMagicError, UnknownStrategyError, BadHeaderError, LengthMismatchError,
            PaddingError: the file is not a sound filter of this kind (all
            ``FormatError``, a ``ValueError``), with expected and actual values.
        """
        return opening.open_file(cls, path, readonly=readonly)

    @classmethod
    def open_or_create(
        cls: type[F],
        path: PathLike,
        config: BloomConfig,
        *,
        sparse: bool = False,
        mode: int = DEFAULT_FILE_MODE,
        **options: Any,
    ) -> F:
        """Open ``path`` if it exists, else create it for ``config``; safe when many
        processes race on the same new path (exactly one file is created, and every
        process opens that complete file).

        Raises:
            ConfigMismatchError (a ``ValueError``): the existing file's num_bits,
                num_hashes or strategy differ from ``config`` (the message names the field).
            And whatever :meth:`open` and :meth:`create` raise.
        """
        return opening.open_or_create(
            cls, path, config, options, lambda: cls.create(path, config, sparse=sparse, mode=mode, **options)
        )

    @classmethod
    def from_bytes(cls: type[F], data: Union[bytes, bytearray, memoryview]) -> F:
        """An in-memory filter from the bytes made by :meth:`to_bytes` (or a file's
        contents). Validates the header and length before allocating anything
        proportional to them.

        Raises:
            TypeError: ``data`` is not bytes-like.
            FormatError subclasses, as :meth:`open`.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        mv = memoryview(data).cast("B")
        header = cls._validate(lambda offset, count: bytes(mv[offset : offset + count]), mv.nbytes, "<bytes>")
        config = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
        return cls._from_storage(MemoryStorage(mv, header.header_size), config, header)

    # -- properties -----------------------------------------------------------------
    @property
    def config(self) -> BloomConfig:
        """The filter's :class:`BloomConfig` (m, k, strategy)."""
        return self._config

    @property
    def num_bits(self) -> int:
        """m, the number of cells (bits of a Bloom filter, counters of a counting one)."""
        return self._config.num_bits

    @property
    def num_hashes(self) -> int:
        """k, the number of positions per item."""
        return self._config.num_hashes

    @property
    def strategy(self) -> HashStrategy:
        """The hash strategy (its ``name`` is in the file header)."""
        return self._config.strategy

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
        """Bytes of the whole image (the file's length): header + cells."""
        return self._hs + fmt.body_size(self.num_bits, self._cell_bits)

    @property
    def items_added(self) -> int:
        """The header's item count (see the format docs for each kind); saturates at
        ``2**32 - 1``. Read from the header, so it includes other processes' adds."""
        self._check_open()
        self._storage.check_size()  # the header page of a truncated file raises SIGBUS
        try:
            return self._counter.load()
        except ValueError:  # closed by another thread since the check
            self._check_open()
            raise

    # -- guards ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._storage.closed:
            raise FilterClosedError(f"{self._describe()}: filter is closed")

    def _check_writable(self) -> None:
        """Raise ReadOnlyFilterError or FilterClosedError unless this handle may write."""
        if self._h.closed or self._storage.readonly:
            self._check_open()
            if not self._storage.readonly:
                # A writable handle refuses writes only while close() runs in another thread
                # (it closes the handle before it marks the storage closed): that is a close.
                raise FilterClosedError(f"{self._describe()}: filter is closed")
            raise ReadOnlyFilterError(f"{self._describe()}: filter was opened read-only; writes are refused")

    def _describe(self) -> str:
        return self._storage.path or "<memory>"

    def _cells(self) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of the cell array (no copy; read-only when the handle is),
        after a size check (``LengthMismatchError`` for a file truncated under the handle).
        For in-memory images; a scan of a mapped file goes through :mod:`mmapbloom.scans`
        (guarded), since a truncation during a numpy scan of this view would be SIGBUS."""
        return self._storage.body()

    def write_lock(self, timeout: Optional[float] = None) -> Union[WriteLock, TimedWriteLock]:
        """The handle's write lock, as a context manager, for loops that cannot batch::

            with f.write_lock():
                for url in urls:
                    if f.add(url): ...

        Inside the block writes re-enter the lock without another ``flock`` call. Other
        writers (threads, processes) wait until the block ends; readers are not blocked.
        Cost on the native backend without a timeout: one C call that returns the lock.

        A write through a *second* handle on the same file inside the block (same thread)
        cannot wait for the block it is in: it raises :class:`SelfDeadlockError` at once.
        Snapshot reads of a second handle (``copy``, ``to_bytes``, ``|``, ``to_bloom``,
        a counting ``union``) work inside the block: they see its writes.

        Args:
            timeout: ``None`` (default) waits as long as it takes. A number of seconds
                >= 0: entering the block waits at most that long (the thread lock and the
                file lock together) and raises :class:`LockTimeout` (a ``TimeoutError``)
                if the lock is still held elsewhere.

        Raises:
            ReadOnlyFilterError, FilterClosedError: on such a handle.
            ValueError: a negative or non-finite ``timeout``.
            On entering: LockTimeout, SelfDeadlockError, FilterClosedError.
        """
        self._check_writable()
        if timeout is None:
            return self._storage.lock
        return self._storage.lock.with_timeout(timeout)

    # The compiled FilterBase's write_lock returns the handle's lock in one C call (no Python
    # frame) when the handle is native, open and writable and no timeout is given (issue 28:
    # the ``with f.write_lock(): pass`` pair); it calls _write_lock_slow for everything else.
    _write_lock_slow = write_lock
    if not TYPE_CHECKING and hasattr(FilterBase, "write_lock"):
        write_lock = FilterBase.write_lock

    # -- the interface both kinds share (add, might_contain and ``in``: FilterBase) -------
    def add_many(self, items: Keys) -> npt.NDArray[np.bool_]:
        """Batch add: a ``bool`` array of shape ``(len(items),)``, True where the item was
        new, exactly as sequential :meth:`add` calls (a duplicate within the batch is new
        once); cells, item count and warnings too, except that warnings are emitted once
        the batch is done.

        Every item is validated before any cell changes, so a bad item leaves the filter
        unchanged. The write lock is taken once per chunk of ``CHUNK_KEYS`` keys, so other
        writers may interleave between chunks; each chunk is atomic, and its cells and the
        items counter agree when it ends. SIGINT, SIGTERM and SIGHUP arriving during a
        chunk's commit are delivered after it, and any exception leaving this method (a
        KeyboardInterrupt, say) carries ``committed_items``: how many leading items were
        committed.

        ``items``: any batch of :mod:`mmapbloom.batches`: an iterable of items, a numpy
        array or an Arrow column (read in place, GIL released; a null is never added and
        answers False).

        Raises:
            TypeError, KeyEncodingError, OverflowError: a bad item, an unsupported
                numpy dtype or Arrow type, or a str / bytes given as the batch (nothing
                changed).
            ReadOnlyFilterError, FilterClosedError, LengthMismatchError (file truncated).
        """
        batch = self._add_batch(items)
        out = np.zeros(len(batch), dtype=np.bool_)
        self._h.add_many(batch, out)
        return out

    def update(self, items: Keys) -> int:
        """Add many items; return how many were new (as :meth:`add_many`, summed; the same
        guarantees and errors)."""
        return self._h.add_many(self._add_batch(items))  # type: ignore[no-any-return]

    def _add_batch(self, items: Keys) -> Any:
        """The batch writers' first step: the handle's form of ``items`` (validated by
        :func:`~mmapbloom.batches.as_batch`), the file's size checked. Any exception
        leaving it (a bad item, a KeyboardInterrupt while a long list is validated)
        carries ``committed_items`` = 0, as every exception leaving a batch writer does."""
        try:
            self._check_writable()
            batch = as_batch(items, self._native())  # type: ignore[arg-type]  # as_batch checks at run time
            self._storage.check_size()  # a truncated file: LengthMismatchError, not SIGBUS
        except BaseException as exc:
            exc.committed_items = 0  # type: ignore[attr-defined]
            raise
        return batch

    def _native(self) -> Any:
        """The compiled module when this filter's handle is native, else None (the form
        :func:`~mmapbloom.batches.as_batch` gives a batch depends on it: a ``Column`` for
        the native handle, lists for the pure one)."""
        return kernels.native_module() if self._h.backend == "native" else None

    # -- package-internal seams (not public API) ----------------------------------------
    @property
    def kernel_handle(self) -> Any:
        """Package-internal, for the expiring filter (:mod:`mmapbloom.expiring`): the bound
        handle (``self._h``, the native or pure object of :func:`mmapbloom.handle.attach`),
        whose multi-period calls ``add_unless``, ``contains_any``, ``add_many_unless`` and
        ``contains_many_any`` take other handles of the same geometry. Valid until
        :meth:`close`; the handle refuses calls after it (FilterClosedError). Not public
        API: its methods may change in any release."""
        return self._h

    @property
    def kernel_module(self) -> Any:
        """Package-internal: the compiled module when this filter's handle is native, else
        None (the ``native`` argument of :func:`mmapbloom.batches.as_batch` for a batch
        handed to :attr:`kernel_handle`). Not public API."""
        return self._native()

    def contains_many(self, items: Keys) -> npt.NDArray[np.bool_]:
        """Batch :meth:`might_contain`: a ``bool`` array of shape ``(len(items),)`` with
        exactly the per-item answers. Takes no lock; on the native backend the GIL is
        released while keys are hashed and probed, so threads query in parallel.
        ``items``: any batch of :mod:`mmapbloom.batches` (an Arrow null answers False).

        Raises TypeError (bad item; every item is checked), FilterClosedError,
        LengthMismatchError (the file was truncated under the handle).
        """
        self._check_open()
        batch = as_batch(items, self._native(), query=True)  # type: ignore[arg-type]  # checked at run time
        out = np.zeros(len(batch), dtype=np.bool_)
        self._storage.check_size()  # a truncated file: LengthMismatchError, not SIGBUS; FilterClosedError
        self._h.contains_many(batch, out)
        return out

    # -- statistics (shared by every kind; the strategy brings its formulas) -------------
    def count_ones(self, progress: Any = False) -> int:
        """Number of non-zero cells X (set bits of a Bloom filter, non-zero counters of a
        counting filter); O(m) cells read, only the allocated extents of a sparse file.
        ``progress``: True shows a bar on a terminal for long scans (see
        :mod:`mmapbloom.extents`). Implemented by each kind."""
        raise NotImplementedError

    def _block_histogram(self, block_bits: int) -> list[int]:
        """``histogram[j]`` = number of aligned ``block_bits``-cell blocks with j non-zero
        cells (blocked strategies). Implemented by each kind."""
        raise NotImplementedError

    def expected_fp_rate(self) -> float:
        """Expected false-positive rate from :attr:`items_added`, in [0, 1), at the distinct
        adds that count implies (:func:`~mmapbloom.sizing.distinct_items`: the count skips
        the adds that were false positives, about 0.2% of them at p = 0.01, which would put
        the rate about 1% low), by the strategy's formula: ``(1 - e^(-k n / m))^k`` (Bloom
        1970) for M3M2, M3MX, M3KM and custom strategies; the blocked formula of Putze,
        Sanders and Singler 2007 (the exact block-occupancy mixture) for M3B2 and M3BL.
        O(1): no cell is read.

        Understates the rate of an overfilled filter or one built with unions of
        overlapping sets, because n counts adds, not distinct items; prefer
        ``observed_fp_rate()`` there. M3KM's floor (see :mod:`mmapbloom.hashing`) is not
        included.
        """
        m, k, rate = self.num_bits, self.num_hashes, self.strategy.expected_fp_rate
        return rate(distinct_items(self.items_added, lambda x: rate(x, m, k)), m, k)

    def fill_ratio(self) -> float:
        """Fraction of non-zero cells, X / m, in [0, 1]; O(m) cells read."""
        return self.count_ones() / self.num_bits

    def observed_fp_rate(self) -> float:
        """False-positive rate implied by the cells actually set, in [0, 1]: ``(X / m)^k``
        (Bloom 1970), or for a blocked strategy the mean over blocks of ``(X_b / 512)^k``
        (Putze et al. 2007). O(m) cells read."""
        block = self.strategy.block_bits
        if block:
            return observed_fp_rate_blocks(self._block_histogram(block), block, self.num_hashes)
        return observed_fp_rate(self.count_ones(), self.num_bits, self.num_hashes)

    def approx_items(self) -> float:
        """Estimated distinct items from the cells set: ``-(m / k) ln(1 - X / m)``
        (Swamidass and Baldi 2007), summed per block for a blocked strategy; ``math.inf``
        when every cell (of some block) is set, 0.0 (never -0.0) when empty. O(m) cells read."""
        block = self.strategy.block_bits
        if block:
            return approx_items_blocks(self._block_histogram(block), block, self.num_hashes)
        return approx_items(self.count_ones(), self.num_bits, self.num_hashes)

    def is_over_capacity(self) -> bool:
        """True when the expected fill ratio ``1 - e^(-kn/m)`` from the item count exceeds
        ``OVERFILL_RATIO`` (O(1): no cell is read)."""
        return self.items_added > self._counter.limit

    def check(self) -> None:
        """Verify the invariants of the open image: the header parses and agrees with the
        config, the file's real length (``os.fstat``, so a file truncated or extended by
        another program under the handle is reported, never read past its end) is right
        and the padding bits are 0.

        Raises:
            FormatError subclasses naming what is wrong (LengthMismatchError for a file
            truncated under the handle); FilterClosedError.
        """
        self._check_open()
        source = self._describe()
        self._storage.check_size()  # before reading anything: pages past the end raise SIGBUS
        buf = self._storage.buf
        size = os.fstat(self._storage.fd).st_size if isinstance(self._storage, FileStorage) else len(buf)
        # Reads from the mapping, never past it: the length is checked before the last byte.
        # Guarded reads (mmapbloom.scans): a truncation meanwhile raises, never SIGBUS.
        header = self._validate(lambda offset, count: scans.read(self._storage, offset, count), size, source)
        found = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
        if found != self._config or header.cell_bits != self._cell_bits:
            raise BadHeaderError(
                f"header changed under the handle: {found!r}", source=source, expected=self._config, actual=found
            )

    # -- combining --------------------------------------------------------------------
    def is_compatible(self, other: object) -> bool:
        """True if ``other`` is an open filter of the same kind whose cells line up with
        this one's (same num_bits, num_hashes, strategy and counter width), so that union,
        intersection and merge are defined (as Guava's ``isCompatible``)."""
        try:
            self._check_compatible(other)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return True

    def _check_compatible(self, other: "MappedFilter") -> None:
        if type(other) is not type(self) and not (isinstance(other, MappedFilter) and other._magic == self._magic):
            raise TypeError(f"cannot combine a {type(self).__name__} with {type(other).__name__}")
        other._check_open()
        self._config.check_compatible(other._config)
        if self._cell_bits != other._cell_bits:
            raise IncompatibleFiltersError("counter_bits", self._cell_bits, other._cell_bits)

    def _same_image(self, other: "MappedFilter") -> bool:
        if other is self:
            return True
        self._check_open()
        other._check_open()
        fa, fb = self._storage.fd, other._storage.fd
        if fa is not None and fb is not None:
            sa, sb = os.fstat(fa), os.fstat(fb)
            return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
        return False

    # -- serialisation and lifecycle ----------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The whole image (header and cells), as a consistent snapshot taken under the
        write lock (so no concurrent write of this or another process is half in it).
        When the calling thread holds the same file's lock through another handle (inside
        ``other.write_lock()``) no lock is taken: every writer is excluded already, and the
        snapshot includes the block's own writes. Memory: :attr:`size_bytes` bytes."""
        self._check_open()
        with self._storage.lock.snapshot():
            # Guarded (mmapbloom.scans): a truncation before or during the copy raises
            # LengthMismatchError, never SIGBUS (pure backend: see scans for its race).
            return scans.read(self._storage, 0, len(self._storage.buf))

    def copy(self: F) -> F:
        """An in-memory copy (a consistent snapshot, see :meth:`to_bytes`), independent of
        this filter and of its file. ``copy.copy(f)`` and ``copy.deepcopy(f)`` return the
        same (never a second handle on the file: use ``open(path)`` for that)."""
        return type(self).from_bytes(self.to_bytes())

    def _stdlib_copy(self: F, how: str) -> F:
        """``copy.copy`` / ``copy.deepcopy``: :meth:`copy`, an independent in-memory filter."""
        return self.copy()

    def flush(self) -> None:
        """``msync`` the mapping so that everything written so far survives power loss.
        (Without it, writes already survive the process being killed.) No-op in memory.
        Raises FilterClosedError after close."""
        self._check_open()
        self._storage.flush()

    def close(self) -> None:
        """Unmap and close the file (idempotent). Does not flush: call :meth:`flush` first
        if the data must survive power loss. Later use raises ``FilterClosedError``
        (a ``ValueError``).

        Waits for writes in flight on this handle in other threads (it takes the
        handle's thread lock, not the file lock), so a write is never cut off while it
        holds the file lock; queries in flight finish or raise ``FilterClosedError``.
        """
        if self._storage.closed:
            return
        with self._storage.lock.thread_lock:
            if self._storage.closed:
                return
            # The handle first: every later call raises FilterClosedError, and its export
            # of the image goes (at once, or when a call in flight in another thread ends).
            self._h.close()
            self._storage.close(before_unmap=self._counter.release)

    def __reduce__(self) -> tuple[Any, ...]:
        """A file-backed filter pickles as its absolute path and mode (the receiver opens
        the same file); an in-memory one pickles as its bytes."""
        self._check_open()
        if self._storage.path is not None:
            return (type(self).open, (self._storage.path, self._storage.readonly))
        return (type(self).from_bytes, (self.to_bytes(),))

    def __eq__(self, other: object) -> bool:
        """Same kind, same config, same item count and the same cells."""
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, MappedFilter)
        if self._config != other._config or self._cell_bits != other._cell_bits:
            return False
        if self.items_added != other.items_added:
            return False
        start, stop = self._storage.body_range()
        ostart = other._storage.body_range()[0]
        # Guarded (mmapbloom.scans): a truncation before or during the compare raises, never SIGBUS.
        return scans.equal(self._storage, start, other._storage, ostart, stop - start)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = self._storage.path or "memory"
        state = "closed" if self.closed else ("read-only" if self.readonly else "read-write")
        return (
            f"<{type(self).__name__} {where} m={self.num_bits} k={self.num_hashes} "
            f"strategy={self.strategy.name} {state}>"
        )

    # -- the interface of every filter kind (``verify.open_filter``, ``mmapbloom`` CLI) -------
    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """A JSON-ready record of the filter for ``mmapbloom info``: ``kind`` (the class
        name), ``path`` (None in memory), ``strategy``, ``num_bits``, ``num_hashes``,
        ``size_bytes``, ``items_added``, ``items_saturated``, ``expected_fill_ratio``,
        ``expected_fp_rate``, ``over_capacity``, ``counter_bits`` and
        ``saturated_counters`` (None for a ``BloomFilter``). With ``scan=True`` (the
        default) every cell is read, O(m), to add ``approx_items`` (None when every cell
        is set), ``fill_ratio`` and ``observed_fp_rate``; ``progress`` as for
        :meth:`count_ones`. Every kind (``ScalableBloomFilter`` too) has this method.

        Raises:
            FilterClosedError; LengthMismatchError (file truncated under the handle).
        """
        self._check_open()
        m, k, n = self.num_bits, self.num_hashes, self.items_added
        record: dict[str, Any] = {
            "path": self._storage.path,
            "strategy": self.strategy.name,
            "num_bits": m,
            "num_hashes": k,
            "size_bytes": self.size_bytes,
            "items_added": n,
        }
        if scan:
            ones = self.count_ones(progress)  # a bar on a terminal when asked and the scan is long
            blocked = self.strategy.block_bits != 0  # per-block statistics: their own scan
            approx = self.approx_items() if blocked else approx_items(ones, m, k)
            record.update(approx_items=None if math.isinf(approx) else approx, fill_ratio=ones / m)
        record.update(expected_fill_ratio=expected_fill_ratio(n, m, k), expected_fp_rate=self.expected_fp_rate())
        if scan:
            record["observed_fp_rate"] = self.observed_fp_rate() if blocked else observed_fp_rate(ones, m, k)
        record.update(
            items_saturated=n >= fmt.MAX_ITEMS,
            over_capacity=self.is_over_capacity(),
            kind=type(self).__name__,
            counter_bits=None,
            saturated_counters=None,
        )
        return record

    def verify(self) -> None:
        """:meth:`check` (header, length from ``fstat``, padding), under the name every
        filter kind shares: for a single file the handle's mapping is the file, so this is
        the whole check (a scalable filter's ``verify`` also re-opens each layer).

        Raises as :meth:`check`."""
        self.check()


def _hooks(storage: Storage, counter: ItemsCounter, saturated: Any) -> Hooks:
    """The handle's :class:`~mmapbloom.handle.Hooks`: FilterClosedError, ReadOnlyFilterError
    for a write on a read-only handle, the pure handle's size check before each touch of the
    mapping (:meth:`~mmapbloom.storage.Storage.check_size`: LengthMismatchError for a file
    truncated under the handle), the native guard's fault (LengthMismatchError unless the
    storage was closed meanwhile), the counter's over-capacity warning and the saturation
    warning. Holds the storage and the counter, never the filter (no reference cycle
    through the C handle)."""
    source = storage.path or "<memory>"

    def closed() -> NoReturn:
        raise FilterClosedError(f"{source}: filter is closed")

    def readonly() -> NoReturn:
        if storage.readonly and not storage.closed:
            raise ReadOnlyFilterError(f"{source}: filter was opened read-only; writes are refused")
        closed()

    def faulted() -> NoReturn:
        scans.raise_faulted(storage)  # the same error as a faulted scan's

    return Hooks(closed, readonly, storage.check_size, faulted, counter.over, saturated)


# -- for the package's own modules: seams over a filter's state ----------------------------
# Package-internal (not in ``__all__``, not re-exported by ``mmapbloom``): the one way other
# modules (merge, scalable) reach a MappedFilter's storage and items counter, so that none of
# them reads the class's private attributes (issue 25; tests/test_private_names.py).


def filter_storage(f: MappedFilter) -> Storage:
    """The :class:`~mmapbloom.storage.Storage` of filter ``f`` (memory or file; its write
    lock is ``.lock``), for the package's whole-file tools (``merge_into``). Callers use its
    interface (``fd``, ``duplicate_fd``, ``check_size``, ``body_range``, ``body``), never
    its buffer. Raises nothing; a closed filter's storage reports ``closed``."""
    return f._storage


def add_items(f: MappedFilter, delta: int) -> int:
    """Add ``delta`` (an int >= 0) to ``f``'s items counter under its write lock, by the one
    rule (:meth:`ItemsCounter.bump`: saturating, the over-capacity check), then emit the
    OverCapacityWarning (once per handle, at the user's frame) after releasing the lock.
    Returns the stored count. For writers outside the class (``merge_into``). Thread and
    process safe as any write (the handle's write lock).

    Raises:
        ReadOnlyFilterError, FilterClosedError: ``f`` may not write.
        LengthMismatchError: the file was truncated under the handle.
    """
    f._check_writable()
    with f._storage.lock, deferred_signals():  # wait interruptibly; hold signals while committing
        f._storage.check_size()
        f._counter.bump(delta)
        count = f._counter.load()
    f._counter.flush()
    return count


def items_loader(f: MappedFilter) -> Callable[[], int]:
    """A function that loads ``f``'s header item count through the mapping: one 4-byte
    load, no system call and no size check (unlike :attr:`MappedFilter.items_added`), for a
    caller that has just read this mapping anyway (a scalable filter's query, asking
    whether its newest layer is full). The function raises ValueError once the handle is
    closed. Lock-free; a concurrent writer's count may be seen before or after its add."""
    return f._counter.load


def contains_flags(f: MappedFilter, items: list[Any]) -> bytearray:
    """:meth:`MappedFilter.contains_many` of a list, as a ``bytearray`` of 0 / 1 (one per
    item), for the package's own list paths (a scalable filter's older layers): on the
    native backend numpy is not imported for it. Same checks, errors and thread safety as
    ``contains_many`` (no lock taken)."""
    native = f._native()
    if native is None:  # the pure kernels answer in numpy arrays
        return bytearray(f.contains_many(items).tobytes())
    f._check_open()
    batch = as_batch(items, native, query=True)
    out = bytearray(len(batch))
    f._storage.check_size()
    f._h.contains_many(batch, out)
    return out
