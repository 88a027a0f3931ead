"""The counting filter: :class:`CountingBloomFilter`, a Bloom filter that supports removal.

Each of the m cells is a small counter instead of a bit (Fan, Cao, Almeida and Broder
2000, "Summary cache: a scalable wide-area web cache sharing protocol"). Adding an item
increments the counters of its distinct cells, removing it decrements them; an item is
present while all its counters are non-zero.

Counters are 4 bits (two cells per byte; cell i is the low nibble of byte ``i >> 1`` for
even i and the high nibble for odd i) or 8 bits (one cell per byte); the width is stored
in the BLC1 header (see :mod:`mmapbloom.format`). Memory: 4 or 8 times a plain filter of
the same m. With the optimum k, a 4-bit counter overflows with probability about
1.37e-15 * m (Fan et al. 2000), so 4 bits is the classic choice.

Overflow never causes a false negative: a counter that reaches its maximum saturates and
is never decremented again (it may then cause extra positives after removals). The
filter counts saturated counters and warns (:class:`SaturationWarning`) the first time one
saturates on a handle.

Removing an item that was never added but is a false positive (all its counters happen to
be non-zero) decrements counters of other items and can cause false negatives for them:
this is inherent to every counting filter. Only remove items you added.

Same concurrency model as :class:`~mmapbloom.filter.BloomFilter`: writers (add, remove,
update, union) hold the thread lock and the file's exclusive flock, so add and remove are
atomic across threads and processes; readers take no lock.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any


from . import extents, scans
from ._warn import user_stacklevel
from . import format as fmt
from .base import CHUNK_BYTES, MappedFilter
from .locking import deferred_signals
from .errors import ConfigError, ConfigMismatchError, SaturationWarning
from .filter import BloomFilter
from .config import BloomConfig
from .keys import Item

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["CountingBloomFilter"]

_MAX_ITEMS = fmt.MAX_ITEMS


def _unpack_counters(chunk: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """Counter values of a byte chunk, in cell order (4-bit: low nibble first)."""
    if width == 8:
        return chunk
    return np.stack([chunk & 0x0F, chunk >> 4], axis=1).ravel()


class CountingBloomFilter(MappedFilter):
    """A counting Bloom filter in the BLC1 layout, in memory or in a shared file.

    Constructors as :class:`~mmapbloom.filter.BloomFilter` (``CountingBloomFilter(config)``,
    :meth:`create`, :meth:`open`, :meth:`open_or_create`, :meth:`from_bytes`), each taking
    ``counter_bits=4`` (default) or ``8`` where a filter is made.

    >>> f = CountingBloomFilter(BloomConfig.for_items(1000, 0.01))
    >>> f.add("session-abc"), "session-abc" in f
    (True, True)
    >>> f.remove("session-abc"); "session-abc" in f
    False
    """

    __slots__ = ("_max",)

    _magic = fmt.COUNTING_MAGIC

    # -- kind-specific header --------------------------------------------------------
    @classmethod
    def _new_header(cls, config: BloomConfig, counter_bits: int = 4, **options: Any) -> fmt.Header:
        if options:
            raise TypeError(f"unexpected options {sorted(options)}")
        if isinstance(counter_bits, bool) or counter_bits not in fmt.COUNTER_WIDTHS:
            raise ConfigError(f"counter_bits must be 4 or 8, got {counter_bits!r}")
        return fmt.Header(
            cls._magic, config.strategy, config.num_bits, config.num_hashes, 0, counter_bits, fmt.COUNTING_HEADER_SIZE
        )

    @classmethod
    def _pack(cls, header: fmt.Header) -> bytes:
        return fmt.pack_counting_header(header.strategy.name, header.num_bits, header.num_hashes, 0, header.cell_bits)

    @classmethod
    def _check_options(cls, header: fmt.Header, options: dict[str, Any], source: str) -> None:
        super()._check_options(header, options, source)  # TypeError on unknown options
        wanted = options.get("counter_bits", 4)
        if wanted != header.cell_bits:
            raise ConfigMismatchError(source, "counter_bits", wanted, header.cell_bits)

    def _after_attach(self) -> None:
        self._max = (1 << self._cell_bits) - 1

    def _saturation_hook(self) -> Any:
        message = (
            f"{self._describe()}: a {self._cell_bits}-bit counter saturated at {self._max}; it will never be "
            "decremented again (extra positives possible, never a false negative)"
        )
        warned: list[bool] = []

        def saturated() -> None:
            """The SaturationWarning, once per handle, at the user's frame."""
            if not warned:
                warned.append(True)
                warnings.warn(message, SaturationWarning, stacklevel=user_stacklevel())

        return saturated

    @property
    def counter_bits(self) -> int:
        """Width of each counter in bits: 4 or 8."""
        return self._cell_bits

    @property
    def max_count(self) -> int:
        """A counter's saturation value: 15 for 4-bit, 255 for 8-bit counters."""
        return self._max

    @property
    def items_added(self) -> int:
        """Adds that made some counter non-zero minus removes that returned some counter to
        zero (an estimate of the distinct items present); saturates at ``2**32 - 1`` and is
        then never decremented."""
        return super().items_added

    # -- per-item operations --------------------------------------------------------------
    # add, might_contain and ``in``: FilterBase (mmapbloom.handle), straight to the handle
    # (items: str, bytes-like or int, by hashing.encode_key's rule; for a counting filter:
    # increment the item's distinct counters; saturated counters stay at their maximum).

    def remove(self, item: Item) -> None:
        """Decrement the item's counters (saturated counters are left at their maximum).

        Only remove items that were added: removing a false positive (an item never added
        whose counters are all non-zero) corrupts other items, as in every counting filter.
        Probes lazily: an absent item is refused at its first zero counter.

        Raises:
            KeyError: the item is certainly absent (one of its counters is 0); nothing changes.
            TypeError, ReadOnlyFilterError, FilterClosedError.
            LengthMismatchError: the file was truncated under the open handle.
        """
        if self._h.remove(item) < 0:
            raise KeyError(item)

    def discard(self, item: Item) -> bool:
        """Remove the item if it might be present; return whether it was removed."""
        try:
            self.remove(item)
        except KeyError:
            return False
        return True

    def count(self, item: Item) -> int:
        """The minimum of the item's counters: an upper bound on how many times it was
        added (minus removed); 0 means certainly absent. Takes no lock; stops at the first
        zero counter. Raises TypeError, FilterClosedError, LengthMismatchError (the file was
        truncated under the open handle)."""
        return self._h.count(item)  # type: ignore[no-any-return]

    # add_many and update: MappedFilter's, through the counting handle (saturation warns
    # once the batch is done).

    # -- statistics -----------------------------------------------------------------------
    def _count_where(self, test: Any, progress: extents.Progress = False) -> int:
        self._check_open()
        # file-backed: allocated extents only
        found = extents.count_filter_cells(self._storage, self._cell_bits, progress, test)
        if found is not None:
            return found
        cells = self._cells()
        per_chunk = CHUNK_BYTES
        total = 0
        for start in range(0, cells.shape[0], per_chunk):
            values = _unpack_counters(cells[start : start + per_chunk], self._cell_bits)
            total += int(np.count_nonzero(test(values)))
        return total

    def nonzero_counters(self, progress: extents.Progress = False) -> int:
        """Number of non-zero counters X (O(m) cells read; a file-backed filter reads only
        its allocated extents, see ``BloomFilter.count_ones`` for ``progress``)."""
        return self._count_where(lambda v: v != 0, progress)

    def count_ones(self, progress: extents.Progress = False) -> int:
        """Non-zero counters: the number of ones of :meth:`to_bloom` (same as
        :meth:`nonzero_counters`; the name matches ``BloomFilter.count_ones``)."""
        return self.nonzero_counters(progress)

    def saturated_counters(self, progress: extents.Progress = False) -> int:
        """Number of counters at their maximum (they are never decremented again)."""
        return self._count_where(lambda v: v == self._max, progress)

    def _block_histogram(self, block_bits: int) -> list[int]:
        """``histogram[j]`` = number of ``block_bits``-cell blocks with j non-zero counters."""
        self._check_open()
        per_block = block_bits * self._cell_bits // 8
        step = scans.CACHE_STEP - scans.CACHE_STEP % per_block  # copies that stay in cache
        hist = np.zeros(block_bits + 1, dtype=np.int64)
        start, stop = self._storage.body_range()
        for chunk in scans.chunks(self._storage, start, stop, step):  # guarded copies: no SIGBUS
            values = _unpack_counters(chunk, self._cell_bits)
            nonzero = np.count_nonzero(values.reshape(-1, block_bits), axis=1)
            hist += np.bincount(nonzero, minlength=block_bits + 1)
        counts: list[int] = hist.tolist()
        return counts

    # -- combining and conversion -----------------------------------------------------------
    def union(self, other: "CountingBloomFilter") -> "CountingBloomFilter":
        """In place: add the other filter's counters, saturating at :attr:`max_count`;
        the item count becomes the saturating sum. Returns ``self``.

        Unlike a plain filter, a union with itself (or another handle on the same file)
        doubles every counter: it is a multiset sum, taken from a snapshot of ``other``.

        Raises:
            IncompatibleFiltersError: num_bits, num_hashes, strategy or counter_bits differ.
            LengthMismatchError: a file was truncated under its handle (``self`` may then be
                partly summed).
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        self._check_writable()
        self._check_open()
        self._check_compatible(other)
        same = self._same_image(other)
        start, stop = self._storage.body_range()
        with self._storage.lock, deferred_signals():  # wait interruptibly; hold signals while committing
            # The snapshot of a second handle of this file is taken under our lock (which
            # excludes every writer, so the snapshot takes no lock of its own, never waiting
            # for ourselves) and the sum is atomic.
            # Guarded (mmapbloom.scans): a file truncated before or during the sum raises
            # LengthMismatchError, never SIGBUS.
            op = scans.OP_ADD8 if self._cell_bits == 8 else scans.OP_ADD4
            if same:
                source = other.to_bytes()
                scans.combine(self._storage, start, source, other._hs, stop - start, op)
            else:
                ostart = other._storage.body_range()[0]
                scans.combine(
                    self._storage, start, other._storage.buf, ostart, stop - start, op, src_storage=other._storage
                )
            self._counter.set(self.items_added + other.items_added)
        self._counter.flush()
        return self

    def __ior__(self, other: "CountingBloomFilter") -> "CountingBloomFilter":
        return self.union(other)

    def __or__(self, other: "CountingBloomFilter") -> "CountingBloomFilter":
        """A new in-memory counting filter: the counter-wise saturating sum."""
        self._check_compatible(other)
        return self.copy().union(other)

    def to_bloom(self) -> BloomFilter:
        """The equivalent plain BLM1 filter, in memory: bit i is set where counter i is
        non-zero, and items added is this filter's item count. For an add-only history it
        equals, byte for byte, a ``BloomFilter`` built from the same adds. Taken under
        the write lock, so it is a consistent snapshot.
        Cost: O(m) cells read, ``m / 8`` bytes allocated."""
        self._check_open()
        with self._storage.lock.snapshot():  # no lock when this thread holds the file's lock elsewhere
            return self._to_bloom_locked()

    def _to_bloom_locked(self) -> BloomFilter:
        out = BloomFilter(self._config)
        bits = out._cells()  # BloomFilter._bits is this view (MappedFilter's)
        start, stop = self._storage.body_range()
        per_cell_chunk = CHUNK_BYTES * 8 // self._cell_bits  # cells per chunk, a multiple of 8
        bytes_per_chunk = per_cell_chunk * self._cell_bits // 8
        m = self.num_bits
        # Guarded chunk copies (mmapbloom.scans): a truncation raises, never SIGBUS.
        cells = scans.chunks(self._storage, start, stop, bytes_per_chunk)
        for c0, chunk in zip(range(0, m, per_cell_chunk), cells, strict=True):
            c1 = min(m, c0 + per_cell_chunk)
            values = _unpack_counters(chunk, self._cell_bits)[: c1 - c0]
            packed = np.packbits(values != 0, bitorder="little")
            bits[c0 // 8 : c0 // 8 + packed.shape[0]] = packed
        out._counter.set(self.items_added)
        # A copy of a count is no add: drop the warning set() may have recorded, so it is
        # not emitted by the result's first (unrelated) add. The result warns, once, on its
        # own first add that finds it past the design point (as a freshly opened file).
        out._counter.forget_warning()
        return out

    # -- the interface of every filter kind ------------------------------------------------
    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """As :meth:`MappedFilter.describe`, with ``counter_bits`` and (with ``scan``, one
        more O(m) read) ``saturated_counters``."""
        record = super().describe(scan=scan, progress=progress)
        record["counter_bits"] = self.counter_bits
        if scan:
            record["saturated_counters"] = self.saturated_counters(progress)
        return record
