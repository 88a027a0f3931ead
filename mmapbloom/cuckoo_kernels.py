"""The cuckoo filter's hashing and cell operations: the pure-Python reference (M3C1) and
the pure handle that runs them under the write lock.

Everything here is part of the CKF1 file format (docs/FORMAT.md); ``mmapbloom/_cuckoo.c``
is the C twin and must give the same bytes. In every definition ``h =
mmh3.hash128(encode_key(item), seed=0, x64arch=True, signed=False)``, ``lo = h mod 2^64``,
``hi = h >> 64``, ``n`` the bucket count, ``b`` the bucket size, ``f`` the fingerprint
width, and all arithmetic is on exact integers (mod 2^64 where said)::

    i1  = (lo * n) >> 64                                   the first bucket (multiply-shift)
    fp  = (((hi >> 32) * (2^f - 1)) >> 32) + 1             in [1, 2^f - 1]; 0 = empty slot
    H   = (fmix64(fp) * n) >> 64                           fmix64: MurmurHash3's finalizer
    alt(i, fp) = (n - 1 - i + H) mod n                     the other bucket
    i2  = alt(i1, fp)

``alt`` is an involution for every n >= 1: with ``x = (n - 1 - i + H) mod n``,
``(n - 1 - x + H) mod n = i``. So a fingerprint in bucket j always finds its other bucket
as ``alt(j, fp)`` without the key (partial-key cuckoo hashing, Fan, Andersen, Kaminsky,
Mitzenmacher, CoNEXT 2014), and n need not be a power of two (the XOR form
``i ^ hash(fp)`` needs one). Index and fingerprint come from different halves of h.

Slots: slot ``s`` of bucket ``i`` is slot number ``j = i * b + s``, the f bits at bit
offset ``j * f`` of the body, little-endian (bit ``j * f`` is bit ``(j * f) & 7`` of byte
``(j * f) >> 3``). Widths 8, 16 and 32 are one aligned store per slot; other widths are a
read-modify-write of the 2..5 bytes holding the slot, which rewrites its neighbours with
the values they have (writers hold the lock), so only the slot being written can be read
torn, and its old value is never needed by a reader (see the insert below).

Insert (``add``), under the write lock; ``r = lo ^ hi`` seeds the kick choices,
``next(r) = (r * 6364136223846793005 + 1442695040888963407) mod 2^64`` (Knuth's MMIX LCG)::

    1. fp in bucket i1 or i2, or the victim is (fp, i1 or i2): present, change nothing.
    2. the lowest empty slot of i1, else of i2: store fp there. Inserted.
    3. the victim slot is taken: FilterFullError (nothing changed).
    4. a kick path, found before anything is written: r = next(r); cur = i1 if r >> 63 == 0
       else i2; path = []; repeat at most max_kicks times:
           r = next(r); s0 = ((r >> 32) * b) >> 32
           s = the first of s0, s0+1, ..., s0+b-1 (mod b) whose slot cur*b+s is not in path
               (none: the path fails);
           path.append(cur*b+s); cur = alt(cur, fingerprint in that slot)
           if bucket cur has an empty slot (the lowest, e): apply the path and stop.
    5. apply (from the end, so that every fingerprint is always in at least one slot of
       its buckets): e = the fingerprint of path[-1]; path[-1] = that of path[-2]; ...;
       path[0] = fp. Each step copies a fingerprint into its other bucket before the slot
       it leaves is overwritten. Inserted.
    6. the path failed: the victim slot gets (fp, i1), index stored before fingerprint.
       Inserted (no fingerprint was moved or dropped); the next insert that finds both of
       its buckets full raises FilterFullError.

Remove: clear the first slot holding fp in i1 (lowest slot), else i2, else the victim
(fingerprint cleared before index); then a victim, if any, moves to the lowest empty slot
of its two buckets (slot written first, victim cleared after). Count: the matching slots
of i1 and i2 (each bucket once when i1 == i2), plus the victim if it matches.
Lookup: present if fp is in a slot of i1 or i2 or is the victim of i1 or i2. A lock-free
reader reads i1, then i2, then the victim, so a move made between two of its reads (a kick
copying fp from i2 into i1, a remove re-homing the victim into a bucket) can hide fp from
that pass even though fp was in one of its places at every moment. Every such move happens
while the kick counter (header bytes 18..19, u16, one aligned store) is odd: a writer
(holding the lock) makes it even if a killed writer left it odd, adds 1 before the first
move of a kick path or a victim re-homing and 1 after the last. A reader reads the counter
before and after each pass and accepts a miss only from a pass bracketed by one even value;
otherwise it reads again (a live writer's path is at most max_kicks + 1 stores). A value odd
and unchanged for STALE_WAIT seconds is taken for a writer killed mid path: that handle
accepts passes bracketed by it from then on (the next writer, or check(repair=True), makes
it even). So a miss is never caused by moves, however many, unless 32768 kick paths (the
u16 wrapping to the same value) run during one pass or a writer stalls STALE_WAIT seconds
mid path. Count follows the same rule for every answer (a move between two of its reads
can hide fp or show it in both buckets): a pass is believed only when bracketed by one even
value. Writes are unaffected.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Optional

import mmh3

from . import format as fmt
from .batches import KeysWithNulls, as_batch
from .errors import FilterClosedError, FilterFullError, ReadOnlyFilterError
from .hashing import encode_key, fmix64, mmh3_key
from .locking import WriteLock, deferred_signals

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = [
    "CHUNK_KEYS",
    "LCG_ADD",
    "LCG_MUL",
    "STALE_WAIT",
    "CuckooCells",
    "CuckooNativeHandle",
    "CuckooPyHandle",
    "Geometry",
    "alt_index",
    "fingerprint",
    "first_index",
    "key_hash",
    "lcg_next",
]

_M64 = (1 << 64) - 1
LCG_MUL = 6364136223846793005
LCG_ADD = 1442695040888963407
#: Seconds a lock-free reader waits on an odd, unchanged kick counter before taking it for a
#: writer killed mid path (then it is not waited on again by that handle).
STALE_WAIT = 0.5
#: Keys per write-lock acquisition in the batch writers.
CHUNK_KEYS = 1 << 14
_LITTLE = sys.byteorder == "little"


class Geometry(NamedTuple):
    """The shape of a cuckoo table: ``num_buckets`` n >= 1, ``bucket_size`` b (1, 2, 4, 8),
    ``fingerprint_bits`` f (4..32), ``max_kicks`` (1..65536)."""

    num_buckets: int
    bucket_size: int
    fingerprint_bits: int
    max_kicks: int


def key_hash(key: Any) -> tuple[int, int]:
    """``(lo, hi)``: the two 64-bit halves of MurmurHash3 x64-128 (seed 0) of the key's
    bytes (``key``: bytes, or a str hashed as UTF-8; see :func:`encode_key`)."""
    h = mmh3.hash128(mmh3_key(key), seed=0, x64arch=True, signed=False)
    return h & _M64, h >> 64


def first_index(lo: int, n: int) -> int:
    """i1 = ``(lo * n) >> 64``, in [0, n)."""
    return (lo * n) >> 64


def fingerprint(hi: int, f: int) -> int:
    """fp = ``(((hi >> 32) * (2^f - 1)) >> 32) + 1``, in [1, 2^f - 1] (0 marks an empty slot)."""
    return (((hi >> 32) * ((1 << f) - 1)) >> 32) + 1


def alt_index(i: int, fp: int, n: int) -> int:
    """The other bucket of fingerprint ``fp`` in bucket ``i``: ``(n - 1 - i + H) mod n``
    with ``H = (fmix64(fp) * n) >> 64``; an involution in ``i`` for every n >= 1."""
    t = n - 1 - i + ((fmix64(fp) * n) >> 64)
    return t - n if t >= n else t


def lcg_next(r: int) -> int:
    """The kick chooser's next state: ``(r * 6364136223846793005 + 1442695040888963407) mod 2^64``."""
    return (r * LCG_MUL + LCG_ADD) & _M64


class CuckooCells:
    """The slot array and victim slot of one image, and the reference operations on them.
    Not thread-safe for writes: the caller holds the write lock; lookups take none.

    Args:
        image: the whole image (header + body), a bytearray or mmap (writable unless only
            lookups are made).
        geometry: the table's shape.
    """

    __slots__ = ("n", "b", "f", "kicks", "_mask", "_body", "_words", "_vfp", "_vidx", "_seq", "_stale", "get", "set")

    def __init__(self, image: Any, geometry: Geometry):
        self.n, self.b, self.f, self.kicks = geometry
        self._mask = (1 << self.f) - 1
        view = memoryview(image)  # read-only for a read-only mapping: lookups only
        self._body = view[fmt.CUCKOO_HEADER_SIZE :]
        self._vfp = view[fmt.CUCKOO_VICTIM_FP_OFFSET : fmt.CUCKOO_VICTIM_FP_OFFSET + 4].cast("I")
        self._vidx = view[fmt.CUCKOO_VICTIM_INDEX_OFFSET : fmt.CUCKOO_VICTIM_INDEX_OFFSET + 8].cast("Q")
        self._seq = view[fmt.CUCKOO_KICK_SEQ_OFFSET : fmt.CUCKOO_KICK_SEQ_OFFSET + 2].cast("H")
        #: An odd kick counter this reader waited out (a writer killed mid path): later
        #: passes bracketed by it are accepted without waiting again (-1: none).
        self._stale = -1
        self._words: Optional[memoryview] = None
        if _LITTLE and self.f in (8, 16, 32):
            code: Any = {8: "B", 16: "H", 32: "I"}[self.f]
            self._words = self._body.cast(code)
            words = self._words

            def get(j: int) -> int:
                return int(words[j])

            def set_(j: int, v: int) -> None:
                words[j] = v  # one aligned store

        else:
            body, f, mask = self._body, self.f, self._mask

            def get(j: int) -> int:
                o = j * f
                start = o >> 3
                stop = (o + f + 7) >> 3
                return (int.from_bytes(body[start:stop], "little") >> (o & 7)) & mask

            def set_(j: int, v: int) -> None:
                o = j * f
                start = o >> 3
                stop = (o + f + 7) >> 3
                shift = o & 7
                old = int.from_bytes(body[start:stop], "little")
                new = (old & ~(mask << shift)) | (v << shift)
                body[start:stop] = new.to_bytes(stop - start, "little")

        self.get: Callable[[int], int] = get
        self.set: Callable[[int, int], None] = set_

    def release(self) -> None:
        """Drop the views of the image (before it is unmapped)."""
        for view in (self._words, self._vfp, self._vidx, self._seq, self._body):
            if view is not None:
                try:
                    view.release()
                except BufferError:  # pragma: no cover - a view in use by another thread
                    pass

    # -- the victim slot (one aligned 4-byte and one aligned 8-byte word of the header) -----
    def victim(self) -> tuple[int, int]:
        """``(fingerprint, bucket index)`` of the victim slot; fingerprint 0: empty."""
        vfp = self._vfp[0]
        if not _LITTLE:  # pragma: no cover - big-endian hosts
            vfp = int.from_bytes(vfp.to_bytes(4, "big"), "little")
        if vfp == 0:
            return 0, 0
        vidx = self._vidx[0]
        if not _LITTLE:  # pragma: no cover
            vidx = int.from_bytes(vidx.to_bytes(8, "big"), "little")
        return vfp, vidx

    def _set_victim(self, fp: int, index: int) -> None:
        if not _LITTLE:  # pragma: no cover
            fp = int.from_bytes(fp.to_bytes(4, "big"), "little")
            index = int.from_bytes(index.to_bytes(8, "big"), "little")
        if fp:  # index first: a reader that sees the fingerprint sees its index
            self._vidx[0] = index
            self._vfp[0] = fp
        else:
            self._vfp[0] = 0
            self._vidx[0] = 0

    # -- the kick counter (header bytes 18..19, one aligned 2-byte store) -----------------
    def seq(self) -> int:
        """The kick sequence counter: odd while a kick path (or a victim re-homing) moves
        fingerprints, even otherwise."""
        v = int(self._seq[0])
        return v if _LITTLE else int.from_bytes(v.to_bytes(2, "big"), "little")  # pragma: no branch

    def _store_seq(self, v: int) -> None:
        v &= 0xFFFF
        self._seq[0] = v if _LITTLE else int.from_bytes(v.to_bytes(2, "big"), "little")

    def repair_seq(self) -> bool:
        """Make an odd counter (left by a writer killed mid path) even; True if it was odd.
        The caller holds the write lock (every insert and remove starts with it)."""
        v = self.seq()
        if v & 1:
            self._store_seq(v + 1)
            return True
        return False

    def _moves_begin(self) -> None:
        self._store_seq(self.seq() + 1)  # even (repaired on entry) -> odd, before any move

    def _moves_end(self) -> None:
        self._store_seq(self.seq() + 1)  # odd -> even, after the last move

    # -- the operations --------------------------------------------------------------------
    def _find(self, i: int, fp: int) -> int:
        get, base = self.get, i * self.b
        for j in range(base, base + self.b):
            if get(j) == fp:
                return j
        return -1

    def _empty(self, i: int) -> int:
        return self._find(i, 0)

    def hash(self, key: Any) -> tuple[int, int, int]:
        """``(i1, fp, r)`` of a key (bytes or str): its first bucket, its fingerprint and the
        seed of its kick choices."""
        lo, hi = key_hash(key)
        return first_index(lo, self.n), fingerprint(hi, self.f), lo ^ hi

    def lookup(self, i1: int, fp: int) -> bool:
        """True if ``fp`` is in bucket i1, in bucket ``alt(i1, fp)`` or is their victim. A
        miss is accepted only from a pass bracketed by one even kick counter (see the module
        docstring, "Lookup"); a counter odd and unchanged for :data:`STALE_WAIT` seconds (a
        writer killed mid path) is waited out once per handle."""
        s1 = self.seq()
        if self._lookup_once(i1, fp):
            return True
        wait = [0.0]
        while True:
            settled, s1 = self._settled(s1, wait)
            if settled:
                return False  # nothing moved during that pass: the miss is real
            if self._lookup_once(i1, fp):
                return True

    def _settled(self, s1: int, wait: list[float]) -> tuple[bool, int]:
        """The kick counter's verdict on a lock-free pass that began when it read ``s1``:
        ``(True, s1)`` if the pass is to be believed (the counter is the same even value,
        or the odd value this handle waited out), else ``(False, s2)``, the pass to be
        read again from the counter's new value ``s2``. ``wait[0]``: the deadline of an
        odd, unchanged value (0: none yet); after :data:`STALE_WAIT` seconds the value is
        recorded as stale and the pass believed."""
        s2 = self.seq()
        if s2 == s1 and (not s2 & 1 or s2 == self._stale):
            return True, s1
        if s2 == s1:  # odd and unchanged: a writer is applying a path (or died doing so)
            now = time.monotonic()
            if not wait[0]:
                wait[0] = now + STALE_WAIT
            elif now > wait[0]:
                self._stale = s2
                return True, s1
            time.sleep(0)
        return False, s2

    def _lookup_once(self, i1: int, fp: int) -> bool:
        if self._find(i1, fp) >= 0:
            return True
        i2 = alt_index(i1, fp, self.n)
        if i2 != i1 and self._find(i2, fp) >= 0:
            return True
        vfp, vidx = self.victim()
        return vfp == fp and (vidx == i1 or vidx == i2)

    def count(self, i1: int, fp: int) -> int:
        """Matching slots of i1 and i2 (each bucket once), plus 1 for a matching victim.
        No lock: a pass is believed only when bracketed by one even kick counter, as a
        miss of :meth:`lookup` (a move between two reads can hide fp from a pass or show it
        twice, once in each bucket), else it is read again."""
        s1 = self.seq()
        wait = [0.0]
        while True:
            total = self._count_once(i1, fp)
            settled, s1 = self._settled(s1, wait)
            if settled:
                return total

    def _count_once(self, i1: int, fp: int) -> int:
        get, b = self.get, self.b
        i2 = alt_index(i1, fp, self.n)
        total = sum(1 for j in range(i1 * b, i1 * b + b) if get(j) == fp)
        if i2 != i1:
            total += sum(1 for j in range(i2 * b, i2 * b + b) if get(j) == fp)
        vfp, vidx = self.victim()
        return total + (vfp == fp and (vidx == i1 or vidx == i2))

    def insert(self, i1: int, fp: int, r: int) -> int:
        """Test-and-set (the module docstring's steps 1..6): 0 present (nothing changed),
        1 inserted, -1 full (nothing changed). The caller holds the write lock."""
        n, b, get, set_ = self.n, self.b, self.get, self.set
        self.repair_seq()
        i2 = alt_index(i1, fp, n)
        if self._lookup_once(i1, fp):  # under the lock: nothing moves, one pass
            return 0
        e = self._empty(i1)
        if e < 0 and i2 != i1:
            e = self._empty(i2)
        if e >= 0:
            set_(e, fp)
            return 1
        if self.victim()[0]:
            return -1
        r = lcg_next(r)
        cur = i1 if (r >> 63) == 0 else i2
        path: list[int] = []
        on_path: set[int] = set()
        for _ in range(self.kicks):
            r = lcg_next(r)
            s0 = ((r >> 32) * b) >> 32
            base = cur * b
            for d in range(b):
                j = base + (s0 + d) % b
                if j not in on_path:
                    break
            else:
                break  # every slot of this bucket is on the path: the path fails
            path.append(j)
            on_path.add(j)
            cur = alt_index(cur, get(j), n)
            e = self._empty(cur)
            if e >= 0:
                dst = e
                self._moves_begin()
                for j in reversed(path):  # copy into the new slot, then overwrite the old
                    set_(dst, get(j))
                    dst = j
                set_(dst, fp)
                self._moves_end()
                return 1
        self._set_victim(fp, i1)
        return 1

    def remove(self, i1: int, fp: int) -> bool:
        """Clear one matching fingerprint (i1's lowest slot, else i2's, else the victim),
        then re-home the victim if it now fits; False (nothing changed) when none matches."""
        self.repair_seq()
        j = self._find(i1, fp)
        i2 = alt_index(i1, fp, self.n)
        if j < 0 and i2 != i1:
            j = self._find(i2, fp)
        vfp, vidx = self.victim()
        if j < 0:
            if vfp == fp and (vidx == i1 or vidx == i2):
                self._set_victim(0, 0)
                return True
            return False
        self.set(j, 0)
        if vfp:
            e = self._empty(vidx)
            if e < 0:
                e = self._empty(alt_index(vidx, vfp, self.n))
            if e >= 0:
                self._moves_begin()
                self.set(e, vfp)  # the slot first, then the victim is cleared
                self._set_victim(0, 0)
                self._moves_end()
        return True

    def occupied(self) -> int:
        """Non-empty slots, plus 1 for a victim (O(slots))."""
        if self._words is not None:
            used = int(np.count_nonzero(np.frombuffer(self._words, dtype=self._words.format)))
        else:
            used = sum(1 for j in range(self.n * self.b) if self.get(j))
        return used + (self.victim()[0] != 0)

    def fingerprints(self) -> Iterable[tuple[int, int]]:
        """``(bucket, fingerprint)`` of every occupied slot, in slot order, then the victim's."""
        get, b = self.get, self.b
        for j in range(self.n * b):
            v = get(j)
            if v:
                yield j // b, v
        vfp, vidx = self.victim()
        if vfp:
            yield vidx, vfp

    def dedupe(self) -> int:
        """Clear the second copy of any fingerprint that is twice in its own bucket pair (a
        writer killed between a kick path's copy and its overwrite leaves one; ``add`` is a
        test-and-set, so no two keys ever store the same fingerprint in the same pair).
        Returns how many copies were cleared. The caller holds the write lock."""
        seen: set[tuple[int, int]] = set()
        cleared = 0
        get, b, n = self.get, self.b, self.n
        for j in range(n * b):
            v = get(j)
            if not v:
                continue
            i = j // b
            other = alt_index(i, v, n)
            pair = (min(i, other), v)
            if pair in seen:
                self.set(j, 0)
                cleared += 1
            else:
                seen.add(pair)
        vfp, vidx = self.victim()
        if vfp:
            other = alt_index(vidx, vfp, n)
            if (min(vidx, other), vfp) in seen:
                self._set_victim(0, 0)
                cleared += 1
        return cleared


class CuckooPyHandle:
    """The pure handle of a cuckoo filter: the reference operations of :class:`CuckooCells`
    with the write lock (the storage's :class:`~mmapbloom.locking.WriteLock`, the same
    lock as every kind) and the items counter (the header's u32 at offset 20, one aligned
    store) included. Writes are atomic across threads and processes; lookups take no lock.

    Args:
        storage: the filter's :class:`~mmapbloom.storage.Storage` (its ``buf``, ``lock``,
            ``check_size``, ``readonly``, ``path``).
        geometry: the table's shape.
    """

    __slots__ = ("_storage", "_cells", "_items", "_lock", "_writable", "closed")

    backend = "python"

    def __init__(self, storage: Any, geometry: Geometry):
        self._storage = storage
        self._cells = CuckooCells(storage.buf, geometry)
        self._items = fmt.items_word(storage.buf)
        self._lock: WriteLock = storage.lock
        self._writable = not storage.readonly
        self.closed = False

    @staticmethod
    def attach(storage: Any, geometry: Geometry, *, pure: bool = False) -> "CuckooPyHandle":
        """The handle of a cuckoo filter over ``storage``: :class:`CuckooNativeHandle` when
        the compiled module is in use (``mmapbloom.kernels.native_module()``: built, and
        ``MMAPBLOOM_PURE`` unset) and the image is 8-byte aligned, else this pure handle.
        ``pure``: the pure handle even where the native one is available (tests). Both write
        byte-identical images (tests/test_cuckoo_native.py)."""
        from .kernels import native_module  # here, not at import: kernels' import order

        native = None if pure else native_module()
        if native is not None and hasattr(native, "CuckooHandle"):
            try:
                return CuckooNativeHandle(storage, geometry, native)
            except _Unaligned:  # pragma: no cover - buffers from mmap / bytearray are aligned
                pass
        return CuckooPyHandle(storage, geometry)

    @property
    def cells(self) -> CuckooCells:
        """The reference operations over this handle's image (for statistics and checks)."""
        return self._cells

    # -- guards -------------------------------------------------------------------------
    def _where(self) -> str:
        return self._storage.path or "<memory>"

    def _check(self, write: bool) -> None:
        if self.closed:
            raise FilterClosedError(f"{self._where()}: filter is closed")
        if write and not self._writable:
            raise ReadOnlyFilterError(f"{self._where()}: filter was opened read-only; writes are refused")
        self._storage.check_size()  # a truncated file raises, never SIGBUS

    def items(self) -> int:
        """The header's item count (one 4-byte load)."""
        return fmt.load_items(self._items)

    def set_items(self, count: int) -> None:
        """Store the item count (the caller holds the write lock), saturating at 2**32 - 1."""
        fmt.store_items(self._items, max(0, min(count, fmt.MAX_ITEMS)))

    def bump_items(self, delta: int) -> None:
        """Add ``delta`` to the item count (the caller holds the write lock); a saturated
        count (2**32 - 1) stays as it is. Used by :meth:`CuckooFilter.union`."""
        count = fmt.load_items(self._items)
        if count != fmt.MAX_ITEMS:  # saturated: never changed again
            self.set_items(count + delta)

    def _locked(self, op: Callable[[], Any]) -> Any:
        """Run ``op()`` under the write lock (re-entered inside ``write_lock()``)."""
        lock = self._lock
        held = lock.owned()
        if held and lock.depth:
            return op()
        try:
            with lock, deferred_signals():
                if self.closed:
                    raise FilterClosedError(f"{self._where()}: filter is closed")
                self._storage.check_size()
                return op()
        except BaseException:
            lock.recover(held)
            raise

    def full_error(self) -> FilterFullError:
        """The :class:`FilterFullError` for this table (slots, kicks, items named)."""
        return FilterFullError(
            f"{self._where()}: cuckoo filter is full: no slot for a new fingerprint "
            f"within {self._cells.kicks} kicks and the victim slot is taken "
            f"({self.items()} items in {self._cells.n * self._cells.b} slots)",
            path=self._storage.path,
            items=self.items(),
        )

    # -- per-item operations -------------------------------------------------------------
    def add(self, item: Any) -> bool:
        """Test-and-set one item: True if inserted, False if its fingerprint was present.
        Raises FilterFullError (nothing changed)."""
        self._check(True)
        i1, fp, r = self._cells.hash(encode_key(item))

        def op() -> int:
            got = self._cells.insert(i1, fp, r)
            if got > 0:
                self.bump_items(1)
            return got

        got: int = self._locked(op)
        if got < 0:
            raise self.full_error()
        return got > 0

    def contains(self, item: Any) -> bool:
        """True if the item's fingerprint is in one of its buckets (no lock)."""
        self._check(False)
        i1, fp, _ = self._cells.hash(encode_key(item))
        return self._cells.lookup(i1, fp)

    def count(self, item: Any) -> int:
        """Matching fingerprints in the item's two buckets (and the victim). No lock."""
        self._check(False)
        i1, fp, _ = self._cells.hash(encode_key(item))
        return self._cells.count(i1, fp)

    def remove(self, item: Any) -> bool:
        """Remove one matching fingerprint; False (nothing changed) if there is none."""
        self._check(True)
        i1, fp, _ = self._cells.hash(encode_key(item))

        def op() -> bool:
            done = self._cells.remove(i1, fp)
            if done:
                self.bump_items(-1)
            return done

        return bool(self._locked(op))

    # -- batches ---------------------------------------------------------------------------
    def _batch(self, items: Iterable[Any], query: bool) -> list[Any]:
        batch = as_batch(items, None, query=query)
        return batch if isinstance(batch, list) else list(batch)

    def _write_many(self, items: Iterable[Any], insert: bool, out: Optional[npt.NDArray[np.bool_]]) -> int:
        committed = 0
        total = 0
        try:
            self._check(True)
            keys = self._batch(items, query=False)  # every key validated before any slot changes
            if out is not None and len(out) != len(keys):
                raise ValueError(f"out has {len(out)} entries, expected {len(keys)}")
            cells = self._cells
            for start in range(0, len(keys), CHUNK_KEYS):
                # each chunk hashed outside the lock, then tested-and-set under it
                chunk = [None if k is None else cells.hash(k) for k in keys[start : start + CHUNK_KEYS]]
                flags: list[bool] = []

                def op(chunk: list[Any] = chunk, flags: list[bool] = flags) -> bool:
                    done = 0
                    full = False
                    for h in chunk:
                        if h is None:  # a null is never added nor removed
                            flags.append(False)
                            continue
                        if insert:
                            got = cells.insert(*h)
                            if got < 0:
                                full = True
                                break
                            flags.append(got > 0)
                            done += got
                        else:
                            ok = cells.remove(h[0], h[1])
                            flags.append(ok)
                            done += ok
                    if done:
                        self.bump_items(done if insert else -done)
                    return full

                full = self._locked(op)
                if out is not None:
                    out[start : start + len(flags)] = flags
                committed = start + len(flags)
                total += sum(flags)
                if full:
                    raise self.full_error()
        except BaseException as exc:
            exc.committed_items = committed  # type: ignore[attr-defined]
            raise
        return total

    def add_many(self, items: Iterable[Any], out: Optional[npt.NDArray[np.bool_]] = None) -> int:
        """Insert every key in order (as sequential :meth:`add`); returns how many were
        inserted, sets ``out[i]`` where key i was. FilterFullError at the first key that
        finds no place (the keys before it stay committed: ``committed_items``)."""
        return self._write_many(items, True, out)

    def remove_many(self, items: Iterable[Any]) -> int:
        """Remove one fingerprint of every key that has one (as sequential :meth:`remove`,
        absent keys skipped); returns how many were removed."""
        return self._write_many(items, False, None)

    def contains_many(self, items: Iterable[Any]) -> npt.NDArray[np.bool_]:
        """``out[i]`` = key i may be present (nulls: False). No lock."""
        self._check(False)
        keys = self._batch(items, query=True)
        cells = self._cells
        out = np.zeros(len(keys), dtype=np.bool_)
        for idx, key in enumerate(keys):
            if key is not None:
                i1, fp, _ = cells.hash(key if isinstance(key, (str, bytes)) else bytes(key))
                out[idx] = cells.lookup(i1, fp)
        return out

    def close(self) -> None:
        """Refuse every later call and release the views (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._cells.release()
        try:
            self._items.release()
        except BufferError:  # pragma: no cover
            pass


class _Unaligned(Exception):
    """The image is not 8-byte aligned: the native handle refuses it (the pure one runs)."""


class _NativeHooks:
    """What the native handle calls to raise the filter's errors (each raises). It holds a
    weak reference to its handle: no reference cycle, so a filter dropped without
    ``close()`` is unmapped at once, as on the pure path."""

    __slots__ = ("_ref",)

    def __init__(self, handle: "CuckooNativeHandle"):
        import weakref  # here: the import lines of this module are left to the pure path's needs

        self._ref = weakref.ref(handle)

    def _h(self) -> "CuckooNativeHandle":
        handle: Optional[CuckooNativeHandle] = self._ref()
        if handle is None:  # pragma: no cover - the C handle lives only as long as it
            raise FilterClosedError("<gone>: filter is closed")
        return handle

    def closed(self) -> None:
        raise FilterClosedError(f"{self._h()._where()}: filter is closed")

    def readonly(self) -> None:
        raise ReadOnlyFilterError(f"{self._h()._where()}: filter was opened read-only; writes are refused")

    def faulted(self) -> None:
        from .scans import raise_faulted  # here, not at import: scans imports the storage

        raise_faulted(self._h()._storage)

    def full(self) -> None:
        raise self._h().full_error()

    def check_size(self) -> None:
        self._h()._storage.check_size()  # LengthMismatchError when the file is shorter


class CuckooNativeHandle(CuckooPyHandle):
    """The native handle of a cuckoo filter: ``mmapbloom._kernels.CuckooHandle`` (C, over
    ``_cuckoo.c``'s cells: the same bytes as :class:`CuckooCells`) for the hot operations,
    with the pure handle's views kept for statistics, ``check`` and ``union``. The same
    guarantees as :class:`CuckooPyHandle`: writes under the write lock (taken in C when
    free), lock-free lookups that never miss a key during a kick, ``committed_items`` on
    every exception leaving a batch, FilterFullError with every earlier key present.
    Every touch of the mapping runs under the SIGBUS guard: a file truncated under the
    handle raises LengthMismatchError."""

    # add, contains, count and remove are the C handle's bound methods themselves (instance
    # slots shadowing the pure methods: a call costs no Python frame here); they answer as
    # CuckooPyHandle's (bool, bool, int, bool).
    __slots__ = ("_c", "add", "contains", "count", "remove", "__weakref__")

    backend = "native"

    def __init__(self, storage: Any, geometry: Geometry, native: Any):
        super().__init__(storage, geometry)
        try:
            c = native.CuckooHandle(
                storage.buf, tuple(geometry), storage.lock, _NativeHooks(self), not storage.readonly
            )
        except ValueError as exc:
            if "aligned" in str(exc):  # pragma: no cover
                super().close()
                raise _Unaligned(str(exc)) from exc
            raise
        self._c = c
        self.add = c.add  # type: ignore[method-assign]
        self.contains = c.contains  # type: ignore[method-assign]
        self.count = c.count  # type: ignore[method-assign]
        self.remove = c.remove  # type: ignore[method-assign]

    def _native_batch(self, items: Iterable[Any], query: bool) -> Any:
        from .kernels import native_module

        return as_batch(items, native_module(), query=query)

    def add_many(self, items: Iterable[Any], out: Optional[npt.NDArray[np.bool_]] = None) -> int:
        """As :meth:`CuckooPyHandle.add_many`, in C (keys hashed without the GIL)."""
        try:
            batch = self._native_batch(items, query=False)
            if out is not None and len(out) != len(batch):
                raise ValueError(f"out has {len(out)} entries, expected {len(batch)}")
        except BaseException as exc:
            exc.committed_items = 0  # type: ignore[attr-defined]
            raise
        return int(self._c.add_many(batch, out))

    def remove_many(self, items: Iterable[Any]) -> int:
        """As :meth:`CuckooPyHandle.remove_many`, in C."""
        try:
            batch = self._native_batch(items, query=False)
        except BaseException as exc:
            exc.committed_items = 0  # type: ignore[attr-defined]
            raise
        return int(self._c.remove_many(batch))

    def contains_many(self, items: Iterable[Any]) -> npt.NDArray[np.bool_]:
        """As :meth:`CuckooPyHandle.contains_many`, in C (no lock, GIL released)."""
        if self.closed:
            raise FilterClosedError(f"{self._where()}: filter is closed")
        batch = self._native_batch(items, query=True)
        out = np.zeros(len(batch), dtype=np.bool_)
        self._c.contains_many(batch, out)
        return out

    def close(self) -> None:
        """Close the C handle, then release the views (idempotent)."""
        c = getattr(self, "_c", None)
        if c is not None:
            c.close()
        super().close()


_ = KeysWithNulls  # the pure batch form (a list with None for a null), read above
