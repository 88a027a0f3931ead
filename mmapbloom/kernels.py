"""Kernels: the choice of backend, and the pure-Python reference of the hot loops (hash,
probe, test-and-set, counters).

The filters never compute positions or touch cells themselves: each open filter has one
handle (:mod:`mmapbloom.handle`) that does, bound once. Two backends implement it, answer
for answer and byte for byte:

* ``"native"``: the compiled extension ``mmapbloom._kernels`` (MurmurHash3, the built-in
  strategies M3KM, M3MX, M3BL, M3M2 and M3B2, and ``Handle``: the per-filter C object with the lock and the items counter
  included; batch queries and batch hashing release the GIL). Used for strategies that
  carry a ``kernel_id`` when the extension imported and the environment variable
  ``MMAPBLOOM_PURE`` is not set to a non-empty value other than ``0``.
* ``"python"``: the reference below (:func:`bind_pure`), in plain Python and numpy over
  the strategy's own ``positions`` / ``positions_many`` (:mod:`mmapbloom.hashing` holds
  the definitions), wrapped by :class:`mmapbloom.handle.PyHandle`. Custom strategies
  always run here.

:data:`BACKEND` says which backend the built-in strategies use in this process.

The pure functions take no lock and keep no counter: the caller (``PyHandle``) holds the
write lock around every write kernel, keeps the items counter, and validates every item
of a batch before calling a batch write kernel, so a bad item leaves the filter
unchanged. Kernels raise what :func:`mmapbloom.hashing.encode_key` raises for an item it
refuses: ``TypeError`` (bool, float, None, another type), ``OverflowError`` (an int outside
[-2**63, 2**64)) and ``KeyEncodingError`` (a ``ValueError``) for a ``str`` with lone surrogates. Batch
semantics: ``add_many`` answers exactly as sequential ``add`` calls in order (a duplicate
inside the batch is new once); counting kernels act on the *distinct* cells of an item (a
position repeated by the strategy counts once).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple


from .batches import KeysWithNulls
from .hashing import HashStrategy, encode_key, encode_keys

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["BACKEND", "Kernels", "bind_pure", "native_module"]

_native: Optional[ModuleType]
try:  # the compiled twin; optional (a machine without a compiler installs without it)
    from . import _kernels as _native
except ImportError:  # pragma: no cover - exercised by the MMAPBLOOM_PURE=1 CI run instead
    _native = None

if os.environ.get("MMAPBLOOM_PURE", "") not in ("", "0"):
    _native = None

#: ``"native"`` when the compiled kernels serve the built-in strategies, else ``"python"``.
BACKEND = "native" if _native is not None else "python"

#: Keys per numpy batch on the pure path (bounds temporary memory to about
#: ``PURE_CHUNK_PAIRS * 20`` bytes: positions, byte indices, masks).
PURE_CHUNK_PAIRS = 1 << 19


def native_module() -> Any:
    """The compiled module in use, or None on the pure path (for tests and tools)."""
    return _native


class Kernels:
    """The hot-loop functions of one handle (see the module docstring for the contract).

    Bloom filters (cell width 1) use ``add``, ``contains``, ``add_many``,
    ``contains_many``; counting filters (width 4 or 8) use ``add`` (returns
    ``(new, saturated)``), ``remove`` (-1: certainly absent, nothing changed; 1: some
    counter returned to 0; 0 otherwise), ``count`` (minimum counter), ``add_many``
    (returns ``(flags, new, saturated)``) and ``contains_many``. Every function is a plain
    attribute (a Python closure over the cells), so a call costs one call. Not
    thread-safe for writes: the caller holds the write lock.
    """

    __slots__ = ("backend", "add", "contains", "add_many", "contains_many", "remove", "count")

    backend: str
    add: Callable[[Any], Any]
    contains: Callable[[Any], bool]
    add_many: Callable[[Sequence[Any]], Any]
    contains_many: Callable[[Sequence[Any]], npt.NDArray[np.bool_]]
    remove: Callable[[Any], int]
    count: Callable[[Any], int]


def bind_pure(body: memoryview, strategy: HashStrategy, m: int, k: int, width: int) -> Kernels:
    """The pure-Python kernels bound to a cell array.

    Args:
        body: the cells (a memoryview of the mapped body; writable unless the handle is
            read-only). Released by the caller at close; later calls raise ValueError.
        strategy: a registered strategy (built-in or custom).
        m: number of cells >= 1 (validated by the caller). k: 1 <= k <= MAX_NUM_HASHES.
        width: 1 (Bloom filter), 4 or 8 (counting filter).
    """
    out = Kernels()
    out.backend = "python"
    if width == 1:
        _bind_pure_bits(out, body, strategy, m, k)
    else:
        _bind_pure_counters(out, body, strategy, m, k, width)
    _skip_nulls(out)
    return out


def _skip_nulls(out: Kernels) -> None:
    """Wrap the batch kernels so that a pure-path column (:class:`~mmapbloom.batches.KeysWithNulls`)
    has its null keys answered False and left out: never added, never found."""
    add_many, contains_many = out.add_many, out.contains_many

    def live(items: Sequence[Any]) -> Optional[list[int]]:
        if type(items) is not KeysWithNulls:
            return None
        where = [i for i, key in enumerate(items) if key is not None]
        return where if len(where) != len(items) else None

    def add_many_live(items: Sequence[Any]) -> Any:
        where = live(items)
        if where is None:
            return add_many(items)
        flags, *rest = add_many([items[i] for i in where])
        full = np.zeros(len(items), dtype=np.bool_)
        full[where] = flags
        return (full, *rest)

    def contains_many_live(items: Sequence[Any]) -> npt.NDArray[np.bool_]:
        where = live(items)
        if where is None:
            return contains_many(items)
        full = np.zeros(len(items), dtype=np.bool_)
        full[where] = contains_many([items[i] for i in where])
        return full

    out.add_many, out.contains_many = add_many_live, contains_many_live


def _positions_many(strategy: HashStrategy, keys: Sequence[bytes], probes: int, m: int) -> npt.NDArray[np.uint64]:
    """``strategy.positions_many`` as a ``uint64`` array of shape ``(len(keys), probes)``
    (a custom override may return any array-like of that shape)."""
    return np.asarray(strategy.positions_many(keys, probes, m), dtype=np.uint64).reshape(len(keys), probes)


def _bind_pure_bits(out: Kernels, body: memoryview, strategy: HashStrategy, m: int, probes: int) -> None:
    positions = strategy.positions

    def add(item: Any) -> bool:
        new = False
        for p in positions(encode_key(item), probes, m):
            i = p >> 3
            b = 1 << (p & 7)
            v = body[i]
            if not v & b:
                body[i] = v | b
                new = True
        return new

    def contains(item: Any) -> bool:
        for p in positions(encode_key(item), probes, m):
            if not body[p >> 3] & (1 << (p & 7)):
                return False
        return True

    def byte_masks(keys: Sequence[bytes]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp], npt.NDArray[np.uint8]]:
        pos = _positions_many(strategy, keys, probes, m).ravel()
        idx = (pos >> np.uint64(3)).astype(np.intp)
        masks = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
        return pos, idx, masks

    def add_many(items: Sequence[Any]) -> tuple[npt.NDArray[np.bool_], int]:
        keys = encode_keys(items)
        flags = np.zeros(len(keys), dtype=np.bool_)
        bits = np.frombuffer(body, dtype=np.uint8)
        step = max(1, PURE_CHUNK_PAIRS // probes)
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            pos, idx, masks = byte_masks(chunk)
            new = _test_and_set(bits, pos, idx, masks, len(chunk), probes)
            if new is not None:
                flags[start : start + len(chunk)] = new
        return flags, int(np.count_nonzero(flags))

    def contains_many(items: Sequence[Any]) -> npt.NDArray[np.bool_]:
        keys = encode_keys(items)
        flags = np.empty(len(keys), dtype=np.bool_)
        bits = np.frombuffer(body, dtype=np.uint8)
        step = max(1, PURE_CHUNK_PAIRS // probes)
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            _, idx, masks = byte_masks(chunk)
            flags[start : start + len(chunk)] = (bits[idx] & masks).reshape(-1, probes).all(axis=1)
        return flags

    out.add, out.contains, out.add_many, out.contains_many = add, contains, add_many, contains_many


def _test_and_set(
    bits: npt.NDArray[np.uint8],
    pos: npt.NDArray[np.uint64],
    idx: npt.NDArray[np.intp],
    masks: npt.NDArray[np.uint8],
    n: int,
    k: int,
) -> Optional[npt.NDArray[np.bool_]]:
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


def _bind_pure_counters(
    out: Kernels, body: memoryview, strategy: HashStrategy, m: int, probes: int, width: int
) -> None:
    positions = strategy.positions
    top = (1 << width) - 1

    if width == 8:

        def get(c: int) -> int:
            return body[c]

        def put(c: int, v: int) -> None:
            body[c] = v
    else:

        def get(c: int) -> int:
            return (body[c >> 1] >> ((c & 1) << 2)) & 0x0F

        def put(c: int, v: int) -> None:
            i = c >> 1
            shift = (c & 1) << 2
            body[i] = (body[i] & (0xF0 >> shift)) | (v << shift)

    def cells_of(item: Any) -> list[int]:
        return sorted(set(positions(encode_key(item), probes, m)))

    def add(item: Any) -> Tuple[bool, bool]:
        new = saturated = False
        for c in cells_of(item):
            v = get(c)
            if v == 0:
                new = True
            if v < top:
                put(c, v + 1)
                saturated |= v + 1 == top
        return new, saturated

    def remove(item: Any) -> int:
        cells = cells_of(item)
        values = []
        for c in cells:  # early exit: an absent item usually fails at its first cell
            v = get(c)
            if v == 0:
                return -1
            values.append(v)
        emptied = 0
        for c, v in zip(cells, values, strict=True):
            if v < top:
                put(c, v - 1)
                if v == 1:
                    emptied = 1
        return emptied

    def count(item: Any) -> int:
        low = top
        for c in positions(encode_key(item), probes, m):
            v = get(c)
            if v == 0:
                return 0
            if v < low:
                low = v
        return low

    def contains(item: Any) -> bool:
        for c in positions(encode_key(item), probes, m):
            if not get(c):
                return False
        return True

    def add_many(items: Sequence[Any]) -> tuple[npt.NDArray[np.bool_], int, bool]:
        keys = encode_keys(items)
        flags = np.zeros(len(keys), dtype=np.bool_)
        cells = np.frombuffer(body, dtype=np.uint8)
        saturated = False
        step = max(1, PURE_CHUNK_PAIRS // probes)
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            fresh, sat = _add_rows(cells, _positions_many(strategy, chunk, probes, m), width, top)
            flags[start : start + len(chunk)] = fresh
            saturated |= sat
        return flags, int(np.count_nonzero(flags)), saturated

    def contains_many(items: Sequence[Any]) -> npt.NDArray[np.bool_]:
        keys = encode_keys(items)
        flags = np.empty(len(keys), dtype=np.bool_)
        cells = np.frombuffer(body, dtype=np.uint8)
        step = max(1, PURE_CHUNK_PAIRS // probes)
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            pos = _positions_many(strategy, chunk, probes, m)
            flags[start : start + len(chunk)] = (counters_at(cells, pos.astype(np.intp), width) != 0).all(axis=1)
        return flags

    out.add, out.remove, out.count, out.contains = add, remove, count, contains
    out.add_many, out.contains_many = add_many, contains_many


def counters_at(cells: npt.NDArray[np.uint8], index: npt.NDArray[np.intp], width: int) -> npt.NDArray[np.uint8]:
    """Counter values at the cell indices ``index`` (any shape; the result has its shape)."""
    if width == 8:
        values: npt.NDArray[np.uint8] = cells[index]
    else:
        values = (cells[index >> 1] >> ((index & 1) << 2).astype(np.uint8)) & np.uint8(0x0F)
    return values


def _add_rows(
    view: npt.NDArray[np.uint8], pos: npt.NDArray[np.uint64], width: int, top: int
) -> tuple[npt.NDArray[np.bool_], bool]:
    """Vectorised counting add over the rows of ``pos`` (shape ``(n, probes)``, one item per
    row, in order): the same counters, "new" flags and saturation as adding the items one
    by one. Returns (new flags, some counter saturated now). Caller holds the lock.

    Item j is new when one of its distinct cells was 0 before it, that is, the cell was 0
    before the batch and j is the first item of the batch to touch it. Each cell ends at
    ``min(before + (items touching it), max)``.
    """
    n = pos.shape[0]
    fresh = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return fresh, False
    rows = np.sort(pos, axis=1)
    distinct = np.ones(rows.shape, dtype=np.bool_)  # an item counts each cell once
    distinct[:, 1:] = rows[:, 1:] != rows[:, :-1]
    cells = rows[distinct].astype(np.intp)  # row-major: item order is kept
    owner = np.nonzero(distinct)[0]  # the item of each cell occurrence
    touched, first, hits = np.unique(cells, return_index=True, return_counts=True)
    before = counters_at(view, touched, width)
    fresh[owner[first[before == 0]]] = True
    after = np.minimum(before.astype(np.int64) + hits, top).astype(np.uint8)
    saturated = bool(((after == top) & (before < top)).any())
    if width == 8:
        view[touched] = after
    else:
        # Both nibbles of a byte may change: clear every touched nibble of the touched
        # bytes, then OR the new values in.
        shift = ((touched & 1) << 2).astype(np.uint8)
        nbytes, slot = np.unique(touched >> 1, return_inverse=True)
        packed = view[nbytes].copy()
        keep = np.where(touched & 1, np.uint8(0x0F), np.uint8(0xF0))
        np.bitwise_and.at(packed, slot, keep)
        np.bitwise_or.at(packed, slot, (after << shift).astype(np.uint8))
        view[nbytes] = packed
    return fresh, saturated
