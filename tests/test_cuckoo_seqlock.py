"""CuckooFilter's kick counter (CKF1 header bytes 18..19, issue 26): a lock-free lookup
never misses a fingerprint moved any number of times while it reads, writers make the
counter odd around every move, and a counter left odd by a killed writer neither hangs
readers nor survives the next write or check(repair=True)."""

from __future__ import annotations

import struct
import time
from typing import Any, Callable, Optional

import pytest

from mmapbloom import BadHeaderError, CuckooFilter
from mmapbloom import format as fmt
from mmapbloom.cuckoo_kernels import STALE_WAIT, CuckooCells, CuckooPyHandle, alt_index
from mmapbloom.kernels import native_module


def _seq(f: CuckooFilter) -> int:
    return int(struct.unpack_from("<H", f.to_bytes(), fmt.CUCKOO_KICK_SEQ_OFFSET)[0])


def _key_with_two_buckets(cells: CuckooCells) -> tuple[int, int, int]:
    for k in range(1000):
        i1, fp, _ = cells.hash(f"key{k}")
        i2 = alt_index(i1, fp, cells.n)
        if i1 != i2:
            return i1, i2, fp
    raise AssertionError("no key with two distinct buckets")  # pragma: no cover


def _interleaved_reader(
    cells: CuckooCells, i1: int, i2: int, fp: int, moves: Optional[dict[tuple[int, int], tuple[int, int]]] = None
) -> Callable[[], Any]:
    """Make ``cells.get`` move ``fp`` between its buckets (b = 1: slot = bucket) at the
    worst moments for a reader reading i1, i2, the victim, twice: by default i2 -> i1 just
    before the 1st read of i2, i1 -> i2 before the 2nd read of i1, i2 -> i1 before the 2nd
    read of i2 (``moves``: {(bucket, nth read): (from, to)}). Each move is a writer's: the
    counter odd around it, copy before clear."""
    real_get = cells.get
    reads = {i1: 0, i2: 0}
    if moves is None:
        moves = {(i2, 1): (i2, i1), (i1, 2): (i1, i2), (i2, 2): (i2, i1)}

    def get(j: int) -> int:
        if j in reads:
            reads[j] += 1
            move = moves.pop((j, reads[j]), None)
            if move is not None:
                src, dst = move
                cells._moves_begin()
                cells.set(dst, fp)
                cells.set(src, 0)
                cells._moves_end()
        return real_get(j)

    cells.get = get  # type: ignore[method-assign]
    return lambda: moves


def _setup() -> tuple[CuckooFilter, CuckooCells, int, int, int]:
    f = CuckooFilter(64, 0.01, bucket_size=1, fingerprint_bits=16)
    cells = f._h.cells
    i1, i2, fp = _key_with_two_buckets(cells)
    cells.set(i2, fp)  # fp stored in its second bucket, the first one empty
    return f, cells, i1, i2, fp


def test_lookup_finds_a_fingerprint_moved_three_times_during_it() -> None:
    f, cells, i1, i2, fp = _setup()
    pending = _interleaved_reader(cells, i1, i2, fp)
    assert cells.lookup(i1, fp)
    assert not pending()  # all three moves happened during the lookup
    assert _seq(f) == 6


def test_the_interleaving_defeats_a_reader_without_the_counter() -> None:
    """The same interleaving against the former rule (a miss confirmed by one more pass):
    it misses, so the test above would fail without the counter."""
    f, cells, i1, i2, fp = _setup()
    pending = _interleaved_reader(cells, i1, i2, fp)
    assert not (cells._lookup_once(i1, fp) or cells._lookup_once(i1, fp))
    assert not pending()


def test_count_of_a_fingerprint_moved_three_times_during_it_is_one() -> None:
    f, cells, i1, i2, fp = _setup()
    pending = _interleaved_reader(cells, i1, i2, fp)
    assert cells.count(i1, fp) == 1  # the passes that saw 0 were read again
    assert not pending() and _seq(f) == 6


def test_count_never_sees_a_moving_fingerprint_twice() -> None:
    f, cells, i1, i2, fp = _setup()
    cells.set(i2, 0)
    cells.set(i1, fp)  # fp in its first bucket; moved to i2 between the reads of i1 and i2
    pending = _interleaved_reader(cells, i1, i2, fp, {(i2, 1): (i1, i2)})
    assert cells.count(i1, fp) == 1
    assert not pending() and _seq(f) == 2


def test_the_interleavings_defeat_a_count_without_the_counter() -> None:
    """The same interleavings against one pass (the former count): 0 and 2, so the two
    tests above would fail without the counter."""
    f, cells, i1, i2, fp = _setup()
    _interleaved_reader(cells, i1, i2, fp)
    assert cells._count_once(i1, fp) == 0
    g, cells, i1, i2, fp = _setup()
    cells.set(i2, 0)
    cells.set(i1, fp)
    _interleaved_reader(cells, i1, i2, fp, {(i2, 1): (i1, i2)})
    assert cells._count_once(i1, fp) == 2


@pytest.mark.parametrize("pure", [True, False])
def test_count_waits_out_a_counter_left_odd(pure: bool, tmp_path: Any) -> None:
    """count reads the kick counter on both backends: an odd, unchanged counter (a writer
    killed mid path) delays the first count by STALE_WAIT (one pass alone would answer at
    once), then that handle believes passes bracketed by it."""
    if not pure and native_module() is None:
        pytest.skip("native backend not in use")
    path = tmp_path / "odd.ckf"
    with CuckooFilter.create(path, 1000, 0.01) as f:
        f.update(["a", "b"])
    with open(path, "r+b") as raw:
        raw.seek(fmt.CUCKOO_KICK_SEQ_OFFSET)
        raw.write(struct.pack("<H", 7))
    g = CuckooFilter.open(path, readonly=True)
    try:
        if pure:
            g._h.close()
            g._h = CuckooPyHandle.attach(g._storage, g._geometry, pure=True)
        assert g._h.backend == ("python" if pure else "native")
        t0 = time.monotonic()
        assert g.count("a") == 1
        first = time.monotonic() - t0
        t0 = time.monotonic()
        assert g.count("b") == 1 and g.count("absent") == 0
        again = time.monotonic() - t0
        assert STALE_WAIT * 0.9 <= first < STALE_WAIT + 5 and again < STALE_WAIT / 2
    finally:
        g.close()


def test_every_kick_move_runs_while_the_counter_is_odd() -> None:
    f = CuckooFilter(200, 0.01, fingerprint_bits=8)
    cells = f._h.cells
    stores: list[int] = []
    real_set = cells.set

    def set_(j: int, v: int) -> None:
        stores.append(cells.seq())
        real_set(j, v)

    cells.set = set_  # type: ignore[method-assign]
    paths = 0
    for k in range(190):
        before = len(stores)
        assert cells.insert(*cells.hash(f"k{k}")) >= 0  # 0: an 8-bit fingerprint already there
        if len(stores) - before > 1:  # a kick path: every one of its stores while odd
            paths += 1
            assert all(s & 1 for s in stores[before:])
        assert cells.seq() % 2 == 0  # even between writes
    assert paths > 0 and cells.seq() == 2 * paths
    native = CuckooFilter(200, 0.01, fingerprint_bits=8)  # the C cells count the same paths
    native.update(f"k{k}" for k in range(190))
    assert _seq(native) == 2 * paths and native.to_bytes()[48:] == f.to_bytes()[48:]


@pytest.mark.parametrize("pure", [True, False])
def test_counter_left_odd_by_a_killed_writer(pure: bool, tmp_path: Any) -> None:
    if not pure and native_module() is None:
        pytest.skip("native backend not in use")
    path = tmp_path / "odd.ckf"
    f = CuckooFilter.create(path, 1000, 0.01)
    f.update(["a", "b"])
    with open(path, "r+b") as raw:  # a writer killed between the counter's two stores
        raw.seek(fmt.CUCKOO_KICK_SEQ_OFFSET)
        raw.write(struct.pack("<H", 7))
    g = CuckooFilter.open(path, readonly=True)
    if pure:
        for h in (f, g):
            h._h.close()
            h._h = CuckooPyHandle.attach(h._storage, h._geometry, pure=True)
    assert g._h.backend == ("python" if pure else "native")
    try:
        g.contains_many([])  # the lazy numpy import (0.4 s on a loaded machine) before the timed calls
        t0 = time.monotonic()
        assert "absent" not in g  # waits the stale counter out once, then misses
        first = time.monotonic() - t0
        t0 = time.monotonic()
        assert not g.contains_many(["absent2", "absent3"]).any() and "a" in g
        again = time.monotonic() - t0
        assert STALE_WAIT * 0.9 <= first < STALE_WAIT + 5 and again < STALE_WAIT / 2
        with pytest.raises(BadHeaderError, match="kick counter 7 is odd"):
            f.check()
        f.check(repair=True)
        assert _seq(f) == 8
        f.check()
        f.add("c")  # and a write repairs it too
        with open(path, "r+b") as raw:
            raw.seek(fmt.CUCKOO_KICK_SEQ_OFFSET)
            raw.write(struct.pack("<H", 9))
        f.add("d")
        assert _seq(f) == 10 and all(k in g for k in "abcd")
    finally:
        g.close()
        f.close()
