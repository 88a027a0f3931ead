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

import sys
from typing import Any, Iterable, Sequence, Union

import numpy as np
import numpy.typing as npt

from . import extents
from . import format as fmt
from .base import CHUNK_BYTES, CHUNK_PAIRS, OVERFILL_RATIO, MappedFilter
from .hashing import M3KM, encode_key, encode_keys
from .sizing import approx_items as _approx_items
from .sizing import observed_fp_rate

__all__ = ["BloomFilter", "OVERFILL_RATIO", "popcount"]

_MAX_ITEMS = fmt.MAX_ITEMS
_NATIVE_LITTLE = sys.byteorder == "little"


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


def _test_and_set(bits: npt.NDArray[np.uint8], pos: npt.NDArray[np.uint64], idx: npt.NDArray[np.intp],
                  masks: npt.NDArray[np.uint8], n: int, k: int) -> "npt.NDArray[np.bool_] | None":
    """Set the bits of n items (k flattened pairs each, in item order) and return which
    items were new under sequential semantics, or None if no bit was 0.

    Item j is new exactly when it is the first item (lowest index) of the chunk to hold some
    bit that was 0 before the chunk: that bit is still 0 at j's turn, and conversely a bit
    that is 0 at j's turn was 0 before and held by no earlier item.

    Without a full sort: the initially-0 pairs are counted per slot of a hash table on their
    *byte* index (``np.bincount``, slot = byte mod S, S >= 2 x pairs). A pair alone in its
    slot is the only 0-pair on its byte, so it is the first holder of its bit (its item is
    new) and its byte can be written by a plain fancy assignment (no other pair writes it).
    The remaining pairs are set with ``np.bitwise_or.at``; items that have 0-pairs but none
    alone are resolved exactly with ``np.unique`` over the pairs in the slots they touch
    (every pair sharing a bit with them shares their slot). The caller holds the write lock.
    """
    zero = np.flatnonzero((bits[idx] & masks) == 0)
    if zero.size == 0:
        return None
    zidx = idx[zero]
    zmask = masks[zero]
    zitem = zero // k
    size = 1 << max(10, int(2 * zero.size - 1).bit_length())
    slot = zidx & (size - 1)
    alone = np.bincount(slot, minlength=size)[slot] == 1
    new = np.zeros(n, dtype=np.bool_)
    new[zitem[alone]] = True
    bits[zidx[alone]] |= zmask[alone]
    shared = np.flatnonzero(~alone)
    if shared.size:
        undecided = np.zeros(n, dtype=np.bool_)
        undecided[zitem[shared]] = True
        undecided &= ~new
        if undecided.any():
            touched = np.zeros(size, dtype=np.bool_)
            touched[slot[shared[undecided[zitem[shared]]]]] = True
            sub = shared[touched[slot[shared]]]  # ascending, so item order is kept
            _, first = np.unique(pos[zero[sub]], return_index=True)
            new[zitem[sub[first]]] = True
        np.bitwise_or.at(bits, zidx[shared], zmask[shared])
    return new


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

    __slots__ = ("_bv", "_pair", "_m1", "_krange")

    _magic = fmt.MAGIC

    def _after_attach(self) -> None:
        # The per-item paths index a memoryview of the bit array directly (no header offset
        # to add) and, for the default strategy, inline M3KM's double hashing: p0 = h1 mod m,
        # step = 1 + h2 mod (m - 1), then p += step modulo m (p and step are < m, so one
        # subtraction reduces). For m = 1 the step is 1 here instead of 0, which gives the
        # same positions (all 0). tests/test_properties.py checks the per-item and batch
        # paths against each other and tests/test_hashing.py pins the positions.
        self._bv = memoryview(self._buf)[self._hs:]
        self._pair = self._strategy.hash_pair if type(self._strategy) is M3KM else None
        self._m1 = max(self._m - 1, 1)
        self._krange = range(self._probes)

    def _release_views(self) -> None:
        self._bv.release()

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
        key = item.encode() if type(item) is str else encode_key(item)
        bv = self._bv
        lock = self._lock
        new = False
        try:
            if self._pair is None:
                return self._add_positions(self._positions(key, self._probes, self._m))
            h1, h2 = self._pair(key)
            m = self._m
            p = h1 % m
            step = h2 % self._m1 + 1
            lock.acquire()
            try:
                for _ in self._krange:
                    i = p >> 3
                    b = 1 << (p & 7)
                    v = bv[i]
                    if not v & b:
                        bv[i] = v | b
                        new = True
                    p += step
                    if p >= m:
                        p -= m
                if new:  # items added += 1, saturating (inlined _bump_items: hot path)
                    if _NATIVE_LITTLE:  # one 4-byte load and store (format.items_word)
                        word = self._items
                        count = word[0]
                        if count < _MAX_ITEMS:
                            word[0] = count + 1
                            if count >= self._warn_at and not self._warned:
                                self._set_items(count + 1)  # records the OverCapacityWarning
                    else:
                        self._bump_items(1)
            finally:
                lock.release()
        except ValueError:  # e.g. closed by another thread meanwhile
            self._check_open()
            raise
        if self._warn_msg is not None:
            self._flush_warning()
        return new

    def _add_positions(self, positions: Iterable[int]) -> bool:
        """``add`` for a custom strategy: test-and-set the given positions under the lock."""
        bv = self._bv
        new = False
        with self._lock:
            for p in positions:
                i = p >> 3
                b = 1 << (p & 7)
                v = bv[i]
                if not v & b:
                    bv[i] = v | b
                    new = True
            if new:
                self._bump_items(1)
        if self._warn_msg is not None:
            self._flush_warning(stacklevel=4)
        return new

    def might_contain(self, item: Union[str, bytes, bytearray, memoryview]) -> bool:
        """True if ``item`` may have been added; False only if it certainly was not.

        Takes no lock. Cost: one hash and at most k byte reads (fewer for most absent
        items). Raises TypeError for an item that is not str or bytes-like,
        FilterClosedError after close.
        """
        key = item.encode() if type(item) is str else encode_key(item)
        bv = self._bv
        try:
            if self._pair is not None:
                h1, h2 = self._pair(key)
                m = self._m
                p = h1 % m
                step = h2 % self._m1 + 1
                for _ in self._krange:
                    if not bv[p >> 3] & (1 << (p & 7)):
                        return False
                    p += step
                    if p >= m:
                        p -= m
                return True
            for p in self._positions(key, self._probes, self._m):
                if not bv[p >> 3] & (1 << (p & 7)):
                    return False
            return True
        except ValueError:
            self._check_open()
            raise

    __contains__ = might_contain

    # -- batch operations ----------------------------------------------------------------
    def _byte_masks(self, keys: Iterable[bytes]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp], npt.NDArray[np.uint8]]:
        """Positions (n, k), their byte indices and bit masks, flattened item by item.
        ``keys`` may be a lazy iterable (a ``map``) for the default strategy."""
        if self._pair is not None:  # exactly M3KM (a subclass may redefine positions)
            assert isinstance(self._strategy, M3KM)
            h1, h2 = self._strategy.hash_pairs(keys)
            pos = self._strategy.positions_from_pairs(h1, h2, self._probes, self._m).ravel()
        else:
            pos = self._strategy.positions_many(list(keys), self._probes, self._m).ravel()
        idx = (pos >> np.uint64(3)).astype(np.intp)
        masks = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
        return pos, idx, masks

    def _bits(self) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of the bit array (no copy)."""
        return self._cells()

    def contains_many(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`might_contain`: a ``bool`` array of shape ``(len(items),)``
        with exactly the per-item answers. Takes no lock. Hashes in chunks of
        ``CHUNK_KEYS`` keys, fewer when k is large (about ``CHUNK_PAIRS`` positions per
        chunk, so temporary memory is bounded).

        Raises TypeError (bad item; checked for every item first), FilterClosedError.
        """
        self._check_open()
        seq = items if isinstance(items, (list, tuple)) else list(items)
        # All-str batches are encoded lazily, chunk by chunk, inside the hashing map (no
        # list of encoded keys); anything else is validated and encoded up front.
        lazy = self._pair is not None and set(map(type, seq)) == {str}
        keys: Sequence[Any] = seq if lazy else encode_keys(seq)
        out = np.empty(len(keys), dtype=np.bool_)
        bits = self._bits()
        k = self._probes
        step = self._chunk_keys
        for start in range(0, len(keys), step):
            chunk = keys[start:start + step]
            if self._pair is not None:
                out[start:start + len(chunk)] = self._contains_m3km(
                    bits, map(str.encode, chunk) if lazy else chunk, len(chunk))
                continue
            _, idx, masks = self._byte_masks(chunk)
            out[start:start + len(chunk)] = (bits[idx] & masks).reshape(-1, k).all(axis=1)
        return out

    def _contains_m3km(self, bits: npt.NDArray[np.uint8], keys: Iterable[bytes], n: int) -> npt.NDArray[np.bool_]:
        """M3KM membership probe by probe, keeping only the keys still possibly present
        (the vector form of the per-item early exit): an absent key usually drops out after
        one or two probes, so absent-heavy batches do about 2 probes per key instead of k.
        Positions follow the M3KM definition exactly (p += step modulo m, overflow-free)."""
        assert isinstance(self._strategy, M3KM)
        h1, h2 = self._strategy.hash_pairs(keys)
        m = np.uint64(self._m)
        p = h1 % m
        step = h2 % np.uint64(self._m1) + np.uint64(1)
        alive = np.arange(n)
        out = np.zeros(n, dtype=np.bool_)
        for i in range(self._probes):
            hit = (bits[(p >> np.uint64(3)).astype(np.intp)] >> (p & np.uint64(7)).astype(np.uint8)) & np.uint8(1)
            if not hit.all():
                keep = hit.astype(np.bool_)
                alive, p, step = alive[keep], p[keep], step[keep]
                if alive.size == 0:
                    return out
            if i + 1 < self._probes:
                gap = m - step  # p + step >= m  <=>  p >= m - step (no 64-bit overflow)
                p = np.where(p >= gap, p - gap, p + step)
        out[alive] = True
        return out

    def add_many(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> npt.NDArray[np.bool_]:
        """Batch test-and-set: a ``bool`` array, True where the item was new, equal to the
        answers of sequential :meth:`add` calls (a duplicate within the batch is new once).

        Every item is validated before any bit is set, so a bad item leaves the filter
        unchanged. The write lock is taken once per chunk of keys (as in :meth:`contains_many`), so
        another writer may interleave between chunks (each chunk is atomic).

        Raises TypeError, ReadOnlyFilterError, FilterClosedError.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        seq = items if isinstance(items, (list, tuple)) else list(items)
        # All-ASCII str batches cannot fail to encode, so they are encoded lazily inside the
        # hashing map; anything else is validated and encoded before any bit is set.
        lazy = self._pair is not None and set(map(type, seq)) == {str} and all(map(str.isascii, seq))
        keys: Sequence[Any] = seq if lazy else encode_keys(seq)
        out = self._add_many(keys, lazy)
        self._flush_warning()
        return out

    def _add_many(self, keys: Sequence[Any], lazy: bool) -> npt.NDArray[np.bool_]:
        out = np.zeros(len(keys), dtype=np.bool_)
        if self._probes > CHUNK_PAIRS:
            # A (forged) huge k: position arrays would not fit; add one by one, each in O(1)
            # memory (min(k, m) probes per key).
            with self._lock:
                for i, key in enumerate(keys):
                    out[i] = self.add(key)
            return out
        bits = self._bits()
        step = self._chunk_keys
        for start in range(0, len(keys), step):
            chunk = keys[start:start + step]
            pos, idx, masks = self._byte_masks(map(str.encode, chunk) if lazy else chunk)
            with self._lock:
                new = _test_and_set(bits, pos, idx, masks, len(chunk), self._probes)
                if new is not None:
                    out[start:start + len(chunk)] = new
                    self._bump_items(int(np.count_nonzero(new)))
        return out

    def update(self, items: Iterable[Union[str, bytes, bytearray, memoryview]]) -> int:
        """Add many items; return how many were new (as :meth:`add_many`, summed).

        Raises as :meth:`add_many`.
        """
        if self._no_write:
            self._refuse_write()
        self._check_open()
        seq = items if isinstance(items, (list, tuple)) else list(items)
        lazy = self._pair is not None and set(map(type, seq)) == {str} and all(map(str.isascii, seq))
        new = int(np.count_nonzero(self._add_many(seq if lazy else encode_keys(seq), lazy)))
        self._flush_warning()
        return new

    # -- set algebra ------------------------------------------------------------------------
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
            fmt.store_items(self._items, count)
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

    # -- statistics --------------------------------------------------------------------
    def count_ones(self, progress: extents.Progress = False) -> int:
        """Number of set bits X. A file-backed filter reads only the file's allocated
        extents, in bounded memory (:mod:`mmapbloom.extents`; bits being set meanwhile may
        be missed); in memory, a popcount over the array. ``progress``: see
        :func:`mmapbloom.extents.count_set_bits` (True: a bar on a terminal for long scans)."""
        self._check_open()
        found = extents.count_filter_cells(self, progress)
        return popcount(self._bits()) if found is None else found

    def fill_ratio(self) -> float:
        """Fraction of bits set, X / m, in [0, 1]."""
        return self.count_ones() / self._m

    def observed_fp_rate(self) -> float:
        """``(X / m)^k`` from the bits actually set (Bloom 1970); O(m / 8) bytes read."""
        return observed_fp_rate(self.count_ones(), self._m, self._k)

    def approx_items(self) -> float:
        """Estimated distinct items ``-(m / k) ln(1 - X / m)`` (Swamidass and Baldi 2007);
        ``math.inf`` when every bit is set."""
        return _approx_items(self.count_ones(), self._m, self._k)
