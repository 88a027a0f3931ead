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
from typing import Any, Iterable, Union

import numpy as np
import numpy.typing as npt

from . import extents
from . import format as fmt
from .base import CHUNK_BYTES, MappedFilter
from .errors import ConfigError, ConfigMismatchError, SaturationWarning
from .filter import BloomFilter
from .hashing import encode_key, encode_keys
from .sizing import BloomConfig, approx_items, observed_fp_rate

__all__ = ["CountingBloomFilter"]

Item = Union[str, bytes, bytearray, memoryview]

_MAX_ITEMS = fmt.MAX_ITEMS


def _unpack_counters(chunk: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """Counter values of a byte chunk, in cell order (4-bit: low nibble first)."""
    if width == 8:
        return chunk
    return np.stack([chunk & 0x0F, chunk >> 4], axis=1).ravel()


def _counters_at(cells: npt.NDArray[np.uint8], index: npt.NDArray[np.intp], width: int) -> npt.NDArray[np.uint8]:
    """Counter values at the cell indices ``index`` (any shape; the result has its shape)."""
    if width == 8:
        values: npt.NDArray[np.uint8] = cells[index]
    else:
        values = (cells[index >> 1] >> ((index & 1) << 2).astype(np.uint8)) & np.uint8(0x0F)
    return values


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

    __slots__ = ("_max", "_sat_warned")

    _magic = fmt.COUNTING_MAGIC

    # -- kind-specific header --------------------------------------------------------
    @classmethod
    def _new_header(cls, config: BloomConfig, counter_bits: int = 4, **options: Any) -> fmt.Header:
        if options:
            raise TypeError(f"unexpected options {sorted(options)}")
        if isinstance(counter_bits, bool) or counter_bits not in fmt.COUNTER_WIDTHS:
            raise ConfigError(f"counter_bits must be 4 or 8, got {counter_bits!r}")
        return fmt.Header(cls._magic, config.strategy, config.num_bits, config.num_hashes, 0,
                          counter_bits, fmt.COUNTING_HEADER_SIZE)

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
        self._sat_warned = False

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

    # -- cells ----------------------------------------------------------------------------
    def _cells_of(self, item: Item) -> list[int]:
        """The item's distinct cells (duplicate positions count once, for add and remove alike)."""
        key = item.encode() if type(item) is str else encode_key(item)
        return sorted(set(self._positions(key, self._probes, self._m)))

    def _get(self, cell: int) -> int:
        if self._cell_bits == 8:
            return self._buf[self._hs + cell]
        return (self._buf[self._hs + (cell >> 1)] >> ((cell & 1) << 2)) & 0x0F

    def _put(self, cell: int, value: int) -> None:
        if self._cell_bits == 8:
            self._buf[self._hs + cell] = value
            return
        i = self._hs + (cell >> 1)
        shift = (cell & 1) << 2
        self._buf[i] = (self._buf[i] & (0xF0 >> shift)) | (value << shift)

    # -- per-item operations --------------------------------------------------------------
    def add(self, item: Item) -> bool:
        """Increment the item's counters; return True if it was new (some counter was 0).

        Atomic across threads and processes. Saturated counters stay at their maximum.

        Raises:
            TypeError: an item that is not str or bytes-like.
            ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        cells = self._cells_of(item)
        with self._lock:
            new, saturated = self._add_cells(cells)
        self._flush_warnings(saturated, stacklevel=3)
        return new

    def _add_cells(self, cells: list[int]) -> tuple[bool, bool]:
        """Increment the cells; return (new, some counter saturated now). Caller holds the lock."""
        top = self._max
        new = saturated = False
        for c in cells:
            v = self._get(c)
            if v == 0:
                new = True
            if v < top:
                self._put(c, v + 1)
                saturated |= v + 1 == top
        if new:
            self._bump_items(1)
        return new, saturated

    def _flush_warnings(self, saturated: bool, stacklevel: int) -> None:
        """Emit pending warnings once the write is complete and the lock released."""
        self._flush_warning(stacklevel + 1)
        if saturated and not self._sat_warned:
            self._sat_warned = True
            warnings.warn(f"{self._describe()}: a {self._cell_bits}-bit counter saturated at {self._max}; it "
                          "will never be decremented again (extra positives possible, never a false negative)",
                          SaturationWarning, stacklevel=stacklevel)

    def remove(self, item: Item) -> None:
        """Decrement the item's counters (saturated counters are left at their maximum).

        Only remove items that were added: removing a false positive (an item never added
        whose counters are all non-zero) corrupts other items, as in every counting filter.

        Raises:
            KeyError: the item is certainly absent (one of its counters is 0); nothing changes.
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        cells = self._cells_of(item)
        top = self._max
        with self._lock:
            values = [self._get(c) for c in cells]
            if 0 in values:
                raise KeyError(item)
            emptied = False
            for c, v in zip(cells, values):
                if v < top:
                    self._put(c, v - 1)
                    emptied |= v == 1
            if emptied:
                count = fmt.load_items(self._items)
                if count < _MAX_ITEMS:
                    self._set_items(count - 1)

    def discard(self, item: Item) -> bool:
        """Remove the item if it might be present; return whether it was removed."""
        try:
            self.remove(item)
        except KeyError:
            return False
        return True

    def count(self, item: Item) -> int:
        """The minimum of the item's counters: an upper bound on how many times it was
        added (minus removed); 0 means certainly absent. Takes no lock."""
        self._check_open()
        return min(self._get(c) for c in self._cells_of(item))

    def might_contain(self, item: Item) -> bool:
        """True if the item may be present (all its counters non-zero); False only if it
        is certainly absent. Takes no lock; stops at the first zero counter."""
        key = item.encode() if type(item) is str else encode_key(item)
        buf, hs = self._buf, self._hs
        try:
            if self._cell_bits == 8:
                for c in self._positions(key, self._probes, self._m):
                    if not buf[hs + c]:
                        return False
            else:
                for c in self._positions(key, self._probes, self._m):
                    if not (buf[hs + (c >> 1)] >> ((c & 1) << 2)) & 0x0F:
                        return False
        except ValueError:
            self._check_open()
            raise
        return True

    __contains__ = might_contain

    # -- batch operations -------------------------------------------------------------------
    def update(self, items: Iterable[Item]) -> int:
        """Add many items, vectorised with numpy; return how many were new.

        The counters, the item count and the return value are exactly those of calling
        :meth:`add` once per item in order, duplicates in ``items`` included, and so are
        the warnings, except that they are emitted once the batch is done. The write lock
        is taken once per chunk of keys (``CHUNK_PAIRS`` positions, or one key when k
        exceeds that), so other writers interleave between chunks, never inside an item.
        Every item is validated before any counter changes. Raises as :meth:`add`."""
        if self._no_write:
            self._refuse_write()
        keys = encode_keys(items)
        new = 0
        saturated = False
        step = self._chunk_keys
        for start in range(0, len(keys), step):
            pos = self._strategy.positions_many(keys[start:start + step], self._probes, self._m)
            with self._lock:  # once per chunk of at most CHUNK_PAIRS positions
                n, s = self._add_rows(pos)
            new += n
            saturated |= s
        self._flush_warnings(saturated, stacklevel=3)
        return new

    def _add_rows(self, pos: npt.NDArray[np.uint64]) -> tuple[int, bool]:
        """Vectorised :meth:`_add_cells` over the rows of ``pos`` (shape ``(n, probes)``, one
        item per row, in order): the same counters, "new" count and saturation as adding
        the items one by one. Returns (items new, some counter saturated now). Caller
        holds the lock.

        Item j is new when one of its distinct cells was 0 before it, that is, the cell
        was 0 before the batch and j is the first item of the batch to touch it. Each cell
        ends at ``min(before + (items touching it), max)``.
        """
        n = pos.shape[0]
        if n == 0:
            return 0, False
        rows = np.sort(pos, axis=1)
        distinct = np.ones(rows.shape, dtype=np.bool_)  # an item counts each cell once
        distinct[:, 1:] = rows[:, 1:] != rows[:, :-1]
        cells = rows[distinct].astype(np.intp)  # row-major: item order is kept
        owner = np.nonzero(distinct)[0]  # the item of each cell occurrence
        touched, first, hits = np.unique(cells, return_index=True, return_counts=True)
        view = self._cells()
        before = _counters_at(view, touched, self._cell_bits)
        fresh = np.zeros(n, dtype=np.bool_)
        fresh[owner[first[before == 0]]] = True
        after = np.minimum(before.astype(np.int64) + hits, self._max).astype(np.uint8)
        saturated = bool(((after == self._max) & (before < self._max)).any())
        if self._cell_bits == 8:
            view[touched] = after
        else:
            # Both nibbles of a byte may change: clear every touched nibble of the
            # touched bytes, then OR the new values in.
            shift = ((touched & 1) << 2).astype(np.uint8)
            nbytes, slot = np.unique(touched >> 1, return_inverse=True)
            packed = view[nbytes].copy()
            keep = np.where(touched & 1, np.uint8(0x0F), np.uint8(0xF0))
            np.bitwise_and.at(packed, slot, keep)
            np.bitwise_or.at(packed, slot, (after << shift).astype(np.uint8))
            view[nbytes] = packed
        new = int(np.count_nonzero(fresh))
        if new:
            self._bump_items(new)
        return new, saturated

    def contains_many(self, items: Iterable[Item]) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`might_contain`: a ``bool`` array of shape ``(len(items),)``."""
        self._check_open()
        keys = encode_keys(items)
        out = np.empty(len(keys), dtype=np.bool_)
        cells = self._cells()
        step = self._chunk_keys
        for start in range(0, len(keys), step):
            chunk = keys[start:start + step]
            pos = self._strategy.positions_many(chunk, self._probes, self._m)
            values = _counters_at(cells, pos.astype(np.intp), self._cell_bits)
            out[start:start + len(chunk)] = (values != 0).all(axis=1)
        return out

    # -- statistics -----------------------------------------------------------------------
    def _count_where(self, test: Any, progress: extents.Progress = False) -> int:
        self._check_open()
        found = extents.count_filter_cells(self, progress, test)  # file-backed: allocated extents only
        if found is not None:
            return found
        cells = self._cells()
        per_chunk = CHUNK_BYTES
        total = 0
        for start in range(0, cells.shape[0], per_chunk):
            values = _unpack_counters(cells[start:start + per_chunk], self._cell_bits)
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

    def fill_ratio(self) -> float:
        """Fraction of non-zero counters, X / m."""
        return self.nonzero_counters() / self._m

    def observed_fp_rate(self) -> float:
        """``(X / m)^k`` from the non-zero counters (Bloom 1970)."""
        return observed_fp_rate(self.nonzero_counters(), self._m, self._k)

    def approx_items(self) -> float:
        """Estimated distinct items ``-(m / k) ln(1 - X / m)`` (Swamidass and Baldi 2007)."""
        return approx_items(self.nonzero_counters(), self._m, self._k)

    # -- combining and conversion -----------------------------------------------------------
    def union(self, other: "CountingBloomFilter") -> "CountingBloomFilter":
        """In place: add the other filter's counters, saturating at :attr:`max_count`;
        the item count becomes the saturating sum. Returns ``self``.

        Unlike a plain filter, a union with itself (or another handle on the same file)
        doubles every counter: it is a multiset sum, taken from a snapshot of ``other``.

        Raises:
            IncompatibleFiltersError: num_bits, num_hashes, scheme or counter_bits differ.
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        self._check_compatible(other)
        source = other.to_bytes()[other._hs:] if self._same_image(other) else None
        mine = self._cells()
        theirs = np.frombuffer(source, dtype=np.uint8) if source is not None else other._cells()
        with self._lock:
            for start in range(0, mine.shape[0], CHUNK_BYTES):
                a, b = mine[start:start + CHUNK_BYTES], theirs[start:start + CHUNK_BYTES]
                if self._cell_bits == 8:
                    a[:] = np.minimum(a.astype(np.uint16) + b, 255).astype(np.uint8)
                else:
                    lo = np.minimum((a & 0x0F) + (b & 0x0F), 15)
                    hi = np.minimum((a >> 4) + (b >> 4), 15)
                    a[:] = lo | (hi << 4)
            self._set_items(min(self.items_added + other.items_added, _MAX_ITEMS))
        self._flush_warning()
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
        with self._lock:
            return self._to_bloom_locked()

    def _to_bloom_locked(self) -> BloomFilter:
        out = BloomFilter(self._config)
        bits = out._bits()
        cells = self._cells()
        per_cell_chunk = CHUNK_BYTES * 8 // self._cell_bits  # cells per chunk, a multiple of 8
        bytes_per_chunk = per_cell_chunk * self._cell_bits // 8
        for c0 in range(0, self._m, per_cell_chunk):
            c1 = min(self._m, c0 + per_cell_chunk)
            b0 = c0 * self._cell_bits // 8
            values = _unpack_counters(cells[b0:b0 + bytes_per_chunk], self._cell_bits)[:c1 - c0]
            packed = np.packbits(values != 0, bitorder="little")
            bits[c0 // 8:c0 // 8 + packed.shape[0]] = packed
        fmt.store_items(out._items, self.items_added)
        return out
