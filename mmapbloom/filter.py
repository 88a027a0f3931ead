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

from typing import TYPE_CHECKING, Any


from . import extents, scans
from . import format as fmt
from .base import CHUNK_BYTES, MappedFilter
from .items import OVERFILL_RATIO
from .locking import deferred_signals

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["BloomFilter", "OVERFILL_RATIO", "popcount"]


def popcount(view: npt.NDArray[np.uint8]) -> int:
    """Number of set bits in a ``uint8`` array, counted in chunks with ``numpy.bitwise_count``
    on 64-bit words where the length allows. Cost: O(len) at memory bandwidth."""
    return sum(
        extents.popcount_chunk(view[start : start + CHUNK_BYTES]) for start in range(0, view.shape[0], CHUNK_BYTES)
    )


class BloomFilter(MappedFilter):
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

    >>> from mmapbloom import BloomConfig
    >>> f = BloomFilter(BloomConfig.for_items(1000, 0.01))
    >>> f.add("https://example.org/"), f.add("https://example.org/")
    (True, False)
    >>> "https://example.org/" in f, f.items_added
    (True, 1)
    """

    __slots__ = ()

    _magic = fmt.MAGIC

    # add, might_contain and ``in``: FilterBase (mmapbloom.handle), straight to the handle.

    # -- batch operations ----------------------------------------------------------------
    def _bits(self) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of the bit array (no copy)."""
        return self._cells()

    # add_many and update: MappedFilter's batch writer over the bit kernels.

    # -- set algebra ------------------------------------------------------------------------
    def _combine(self, other: "BloomFilter", op: Any, union: bool) -> "BloomFilter":
        self._check_writable()
        self._check_open()
        self._check_compatible(other)
        if self._same_image(other):
            return self  # x | x == x & x == x: nothing changes, and no self-deadlock
        start, stop = self._storage.body_range()
        ostart = other._storage.body_range()[0]
        with self._storage.lock, deferred_signals():  # wait interruptibly; hold signals while committing
            # Guarded (mmapbloom.scans): a file truncated before or during the pass raises
            # LengthMismatchError, never SIGBUS.
            scans.combine(
                self._storage, start, other._storage.buf, ostart, stop - start, op, src_storage=other._storage
            )
            a, b = self.items_added, other.items_added
            self._counter.set(a + b if union else min(a, b))
        self._counter.flush()
        return self

    def union(self, other: "BloomFilter") -> "BloomFilter":
        """In-place union (bitwise OR) with a compatible filter; returns ``self``.

        Afterwards ``self`` contains every item of both. Items added becomes the saturating
        sum (and warns, OverCapacityWarning, past the design point). A union with itself
        or with another handle on the same file changes nothing. One pass under ``self``'s
        write lock (guarded on the native backend: see :mod:`mmapbloom.scans`).

        Raises:
            IncompatibleFiltersError (a ``ValueError``): num_bits, num_hashes or strategy
                differ; the message names the field and both values.
            LengthMismatchError: a file was truncated under its handle (``self`` may then be
                partly combined).
            TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        return self._combine(other, scans.OP_OR, union=True)

    def intersection(self, other: "BloomFilter") -> "BloomFilter":
        """In-place intersection (bitwise AND); returns ``self``. Contains at least every item
        added to both (it may answer True for more than the exact intersection, and its
        false-positive rate is not that of a filter built from the intersection).
        Items added becomes the smaller of the two. Raises as :meth:`union`."""
        return self._combine(other, scans.OP_AND, union=False)

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

    # -- statistics --------------------------------------------------------------------
    def count_ones(self, progress: extents.Progress = False) -> int:
        """Number of set bits X. A file-backed filter reads only the file's allocated
        extents, in bounded memory (:mod:`mmapbloom.extents`; bits being set meanwhile may
        be missed); in memory, a popcount over the array. ``progress``: see
        :func:`mmapbloom.extents.count_set_bits` (True: a bar on a terminal for long scans)."""
        self._check_open()
        found = extents.count_filter_cells(self._storage, 1, progress)
        return popcount(self._bits()) if found is None else found

    def _block_histogram(self, block_bits: int) -> list[int]:
        """``histogram[j]`` = number of ``block_bits``-bit blocks with j bits set."""
        self._check_open()
        per_block = block_bits // 8
        step = scans.CACHE_STEP - scans.CACHE_STEP % per_block  # copies that stay in cache
        hist = np.zeros(block_bits + 1, dtype=np.int64)
        start, stop = self._storage.body_range()
        for chunk in scans.chunks(self._storage, start, stop, step):  # guarded copies: no SIGBUS
            words = chunk.view(np.uint64)
            ones = np.bitwise_count(words).reshape(-1, per_block // 8).sum(axis=1, dtype=np.int64)
            hist += np.bincount(ones, minlength=block_bits + 1)
        counts: list[int] = hist.tolist()
        return counts
