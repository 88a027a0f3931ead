"""CuckooFilter (issue 26): sizing, hashing definitions, the CKF1 format (golden bytes,
one error per damage, cross-kind errors), operations, batches, a full filter, the
lifecycle and the reconciliation of the items counter."""

from __future__ import annotations

import math
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmapbloom import (
    BadHeaderError,
    BadMagicError,
    BloomConfig,
    BloomFilter,
    ConfigError,
    ConfigMismatchError,
    CountingBloomFilter,
    CuckooFilter,
    FilterClosedError,
    FilterFullError,
    IncompatibleFiltersError,
    LengthMismatchError,
    MmapBloomError,
    PaddingError,
    ReadOnlyFilterError,
    UnknownStrategyError,
    open_any,
    verify_file,
)
from mmapbloom import format as fmt
from mmapbloom.cuckoo import plan
from mmapbloom.cuckoo_kernels import alt_index, fingerprint, first_index, key_hash
from mmapbloom.hashing import encode_key, fmix64

GOLDEN = Path(__file__).parent / "golden" / "cuckoo12r.ckf"
#: The same history written before capacity and fp_rate were recorded (bytes 40..47 zero).
GOLDEN_UNRECORDED = Path(__file__).parent / "golden" / "cuckoo12.ckf"


def golden_filter() -> CuckooFilter:
    """The golden image's history: 13 keys into 3 buckets of 4 12-bit slots (the last
    one in the victim slot), max_kicks 8."""
    f = CuckooFilter(10, 0.01, fingerprint_bits=12, max_kicks=8)
    for i in range(13):
        assert f.add(f"k{i}")
    with pytest.raises(FilterFullError):
        f.add("k13")
    return f


# -- sizing -------------------------------------------------------------------------------------
@pytest.mark.parametrize("p, bits", [(0.01, 10), (0.001, 13), (0.0001, 17), (0.5, 4), (0.03, 9)])
def test_plan_smallest_width_meeting_the_bound(p: float, bits: int) -> None:
    g = plan(1000, p)
    assert g.fingerprint_bits == bits
    assert 2 * 4 / 2**bits <= p < 2 * 4 / 2 ** (bits - 1) or bits == 4
    assert g.num_buckets == math.ceil(1000 / (4 * 0.95))  # any bucket count, not a power of two


@pytest.mark.parametrize("bits", [8, 12, 16, 32])
def test_explicit_widths_and_bucket_sizes(bits: int) -> None:
    for b in (1, 2, 4, 8):
        f = CuckooFilter(1000, 0.01, fingerprint_bits=bits, bucket_size=b)
        assert (f.fingerprint_bits, f.bucket_size) == (bits, b)
        assert f.size_bytes == 48 + math.ceil(f.num_buckets * b * bits / 8)
        assert f.add("x") and "x" in f and "y" not in f


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": -5},
        {"capacity": 1.5},
        {"fp_rate": 0.0},
        {"fp_rate": 1.0},
        {"fp_rate": "x"},
        {"fp_rate": 1e-12},
        {"fingerprint_bits": 3},
        {"fingerprint_bits": 33},
        {"bucket_size": 3},
        {"bucket_size": True},
        {"max_kicks": 0},
        {"max_kicks": 70000},
    ],
)
def test_invalid_sizing_is_config_error(kwargs: dict[str, Any]) -> None:
    args = {"capacity": 100, "fp_rate": 0.01, **kwargs}
    with pytest.raises(ConfigError):
        CuckooFilter(args.pop("capacity"), args.pop("fp_rate"), **args)


def test_space_at_the_design_points() -> None:
    """Bits per item beside the Bloom and counting filters (issue 26: <= 0.4x counting at 1%)."""
    for p in (0.01, 0.001, 0.0001):
        cf = CuckooFilter(100_000, p)
        bloom = BloomConfig.for_items(100_000, p).num_bits / 100_000
        assert cf.bits_per_item() <= 0.4 * 4 * bloom
        assert cf.bits_per_item() < 1.5 * bloom + 4


# -- hashing ---------------------------------------------------------------------------------------
@given(st.integers(1, 2**40), st.integers(0, 2**40), st.integers(1, 2**32 - 1))
def test_alt_index_is_an_involution_for_any_bucket_count(n: int, i: int, fp: int) -> None:
    i %= n
    j = alt_index(i, fp, n)
    assert 0 <= j < n and alt_index(j, fp, n) == i


def test_hash_definition_pinned() -> None:
    lo, hi = key_hash(b"https://example.org/")
    import mmh3

    h = mmh3.hash128(b"https://example.org/", seed=0, x64arch=True, signed=False)
    assert (lo, hi) == (h & (2**64 - 1), h >> 64)
    n, f = 1000, 12
    assert first_index(lo, n) == (lo * n) >> 64
    assert fingerprint(hi, f) == (((hi >> 32) * 4095) >> 32) + 1
    assert alt_index(5, 7, n) == (n - 1 - 5 + ((fmix64(7) * n) >> 64)) % n
    assert 1 <= fingerprint(0, f) and fingerprint(2**64 - 1, f) <= 4095  # never 0
    assert fingerprint(2**64 - 1, 32) == 2**32 - 1


# -- the format --------------------------------------------------------------------------------------
def test_golden_file_bytes() -> None:
    data = golden_filter().to_bytes()
    assert data == GOLDEN.read_bytes()
    assert data.hex() == (
        "434b46314d33433103000000000000000c0404000d000000080000005007000001000000000000000a000000"
        "0ad7233c0e2d75734fc115a0cc293bdc7c4c6c51df53"
    )
    magic, strat, n, f, b, r16, items, kicks, vfp, vidx, cap, p = fmt.CUCKOO_HEADER.unpack_from(data)
    assert (magic, strat, n, f, b, r16, items, kicks, vfp, vidx, cap) == (
        b"CKF1",
        b"M3C1",
        3,
        12,
        4,
        4,  # the kick counter: two kick paths, each +2
        13,
        8,
        0x750,
        1,
        10,
    )
    assert struct.pack("<f", p) == struct.pack("<f", 0.01)
    g = CuckooFilter.from_bytes(GOLDEN.read_bytes())
    assert all(f"k{i}" in g for i in range(13)) and g.items_added == 13
    assert (g.capacity, g.fp_rate) == (10, 0.01)
    g.check()


def test_golden_file_without_recorded_design_values_still_opens(tmp_path: Path) -> None:
    old = GOLDEN_UNRECORDED.read_bytes()
    new = GOLDEN.read_bytes()
    assert old[40:48] == bytes(8) and old[18:20] == bytes(2)  # written before capacity, fp_rate and the counter
    assert old[:18] + old[20:40] + old[48:] == new[:18] + new[20:40] + new[48:]
    path = tmp_path / "old.ckf"
    path.write_bytes(old)
    for g in (CuckooFilter.from_bytes(old), CuckooFilter.open(path)):
        assert all(f"k{i}" in g for i in range(13)) and g.items_added == 13
        assert (g.capacity, g.fp_rate) == (int(3 * 4 * 0.95), 2 * 4 / 2**12)  # derived, as before
        g.check()
        g.close()
    verify_file(path)


@pytest.mark.parametrize(
    "capacity, fp_rate, reads_back",
    [(1000, 0.01, 0.01), (12345, 0.0123456789, 0.012345679), (7, 0.5, 0.5), (100, 1e-6, 1e-6)],
)
def test_capacity_and_fp_rate_survive_reopening(
    capacity: int, fp_rate: float, reads_back: float, tmp_path: Path
) -> None:
    path = tmp_path / "f.ckf"
    with CuckooFilter.create(path, capacity, fp_rate) as f:
        assert (f.capacity, f.fp_rate) == (capacity, reads_back)
        data = f.to_bytes()
    with CuckooFilter.open(path, readonly=True) as g:
        assert (g.capacity, g.fp_rate) == (capacity, reads_back)
    assert struct.pack("<f", reads_back) == struct.pack("<f", fp_rate)  # the nearest float32
    assert (CuckooFilter.from_bytes(data).capacity, CuckooFilter.from_bytes(data).fp_rate) == (capacity, reads_back)
    assert CuckooFilter(capacity, fp_rate).to_bytes() == data  # in memory: the same bytes


def test_recorded_fp_rate_stays_inside_the_open_interval() -> None:
    assert 0.0 < fmt.cuckoo_f32(1e-300) < 1e-44
    assert 0.99 < fmt.cuckoo_f32(1 - 1e-12) < 1.0
    f = CuckooFilter(10, 1 - 1e-12, fingerprint_bits=8)
    assert 0.99 < CuckooFilter.from_bytes(f.to_bytes()).fp_rate < 1.0


def test_slot_packing_12_bits() -> None:
    f = CuckooFilter(4, 0.5, fingerprint_bits=12, bucket_size=1)
    f._h.cells.set(0, 0xABC)
    f._h.cells.set(1, 0x123)
    assert f.to_bytes()[48:51] == bytes([0xBC, 0x3A, 0x12])  # slot j at bit 12 j, little-endian


def _damaged(offset: int, value: bytes) -> bytes:
    data = bytearray(GOLDEN.read_bytes())
    data[offset : offset + len(value)] = value
    return bytes(data)


@pytest.mark.parametrize(
    "data, error, words",
    [
        (_damaged(0, b"CKF2"), BadMagicError, "bad magic"),
        (_damaged(4, b"M3C9"), UnknownStrategyError, "hashing scheme"),
        (_damaged(8, struct.pack("<Q", 0)), BadHeaderError, "num_buckets is 0"),
        (_damaged(16, b"\x03"), BadHeaderError, "fingerprint_bits is 3"),
        (_damaged(17, b"\x03"), BadHeaderError, "bucket_size is 3"),
        (_damaged(20, struct.pack("<I", 14)), BadHeaderError, "exceeds"),
        (_damaged(24, struct.pack("<I", 0)), BadHeaderError, "max_kicks is 0"),
        (_damaged(28, struct.pack("<I", 0x1000)), BadHeaderError, "wider than 12 bits"),
        (_damaged(32, struct.pack("<Q", 3)), BadHeaderError, "victim bucket index 3"),
        (_damaged(28, struct.pack("<I", 0)), BadHeaderError, "without a victim"),
        (_damaged(40, struct.pack("<I", 0)), BadHeaderError, "both recorded or both 0"),
        (_damaged(44, bytes(4)), BadHeaderError, "both recorded or both 0"),
        (_damaged(40, struct.pack("<I", 13)), BadHeaderError, "recorded capacity 13 exceeds"),
        (_damaged(44, struct.pack("<f", 1.0)), BadHeaderError, "recorded fp_rate 1.0"),
        (_damaged(44, struct.pack("<f", -0.5)), BadHeaderError, "recorded fp_rate -0.5"),
        (_damaged(44, struct.pack("<I", 0x7FC00000)), BadHeaderError, "recorded fp_rate nan"),
        (GOLDEN.read_bytes()[:-1], LengthMismatchError, "truncated"),
        (GOLDEN.read_bytes() + b"\0", LengthMismatchError, "over-long"),
        (GOLDEN.read_bytes()[:30], BadHeaderError, "truncated header"),
        (_damaged(8, struct.pack("<Q", 5)), LengthMismatchError, "header says"),
    ],
)
def test_each_damage_is_refused_with_its_own_error(data: bytes, error: type, words: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=words):
        CuckooFilter.from_bytes(data)
    path = tmp_path / "bad.ckf"
    path.write_bytes(data)
    with pytest.raises(error, match=words):
        CuckooFilter.open(path)
    with pytest.raises(error, match=words):
        verify_file(path)


def test_padding_bits() -> None:
    f = CuckooFilter(1, 0.5, fingerprint_bits=5, bucket_size=1)  # 1 slot of 5 bits: 3 padding bits
    data = bytearray(f.to_bytes())
    data[-1] |= 0x80
    with pytest.raises(PaddingError):
        CuckooFilter.from_bytes(bytes(data))


def test_cross_kind_errors_name_both_kinds(tmp_path: Path) -> None:
    bloom = tmp_path / "b.blm"
    BloomFilter.create(bloom, BloomConfig.for_items(100, 0.01)).close()
    counting = tmp_path / "c.blc"
    CountingBloomFilter.create(counting, BloomConfig.for_items(100, 0.01)).close()
    cuckoo = tmp_path / "k.ckf"
    CuckooFilter.create(cuckoo, 100, 0.01).close()
    with pytest.raises(BadMagicError, match="a Bloom filter, not a cuckoo filter"):
        CuckooFilter.open(bloom)
    with pytest.raises(BadMagicError, match="a counting Bloom filter, not a cuckoo filter"):
        CuckooFilter.open(counting)
    with pytest.raises(BadMagicError, match="a cuckoo filter, not a Bloom filter"):
        BloomFilter.open(cuckoo)
    with pytest.raises(BadMagicError, match="a cuckoo filter, not a counting Bloom filter"):
        CountingBloomFilter.open(cuckoo)
    with open_any(cuckoo) as f:
        assert isinstance(f, CuckooFilter)
    verify_file(cuckoo).close()


# -- operations -----------------------------------------------------------------------------------------
def test_add_remove_count_discard() -> None:
    f = CuckooFilter(1000, 0.001)
    assert f.add("a") is True and f.add("a") is False
    assert f.add(b"a") is False  # one encoding: str as UTF-8
    assert "a" in f and f.count("a") == 1 and f.items_added == 1
    f.remove("a")
    assert "a" not in f and f.count("a") == 0 and f.items_added == 0
    with pytest.raises(KeyError):
        f.remove("a")
    assert f.discard("a") is False
    assert f.add(5) and encode_key(5) in f and f.discard(5)
    with pytest.raises(TypeError):
        f.add(1.5)  # type: ignore[arg-type]  # refused at run time
    with pytest.raises(TypeError):
        _ = None in f  # type: ignore[arg-type]  # refused at run time


def test_batches_lists_numpy_arrow_and_nulls() -> None:
    pa = pytest.importorskip("pyarrow")
    f = CuckooFilter(10_000, 0.001)
    assert f.update([f"u{i}" for i in range(1000)]) == 1000
    assert f.update(np.arange(500, dtype=np.int32)) == 500
    assert f.update(pa.array(["x", None, "y", "u3"])) == 2
    assert f.items_added == 1502
    got = f.contains_many(pa.array(["x", None, "u999", "nope"]))
    assert got.tolist() == [True, False, True, False]
    assert f.contains_many(np.arange(500, dtype=np.int64)).all()  # 5 as int32 == 5 as int64
    flags = f.add_many(["x", "new", "new"])
    assert flags.tolist() == [False, True, False]
    assert f.remove_many(pa.array(["x", "x", "nope", None])) == 1
    assert f.remove_many(np.arange(500, dtype=np.uint64)) == 500
    assert f.items_added == 1502 + 1 - 1 - 500
    with pytest.raises(TypeError):
        f.update("a string is not a batch")
    f.check()


def test_bad_item_in_a_batch_changes_nothing() -> None:
    f = CuckooFilter(100, 0.01)
    with pytest.raises(TypeError) as info:
        f.update(["a", "b", 1.5])  # type: ignore[list-item]  # refused at run time
    assert info.value.committed_items == 0  # type: ignore[attr-defined]
    assert f.items_added == 0 and "a" not in f


def test_full_filter_drops_nothing_and_reports_committed_items() -> None:
    f = CuckooFilter(100, 0.01, bucket_size=4, max_kicks=50)
    keys = [f"key-{i}" for i in range(10_000)]
    with pytest.raises(FilterFullError) as info:
        f.update(keys)
    committed = info.value.committed_items  # type: ignore[attr-defined]
    assert isinstance(info.value, MmapBloomError) and isinstance(info.value, RuntimeError)
    assert 0 < committed < len(keys)
    assert f.contains_many(keys[:committed]).all()  # nothing dropped by any kick
    assert f.load_factor >= 0.9
    fulls = 0
    for key in keys[committed : committed + 50]:  # a further key: a free slot, present, or full
        before = f.to_bytes()
        try:
            f.add(key)
        except FilterFullError:
            fulls += 1
            assert f.to_bytes() == before  # a failed insert changes nothing
    assert fulls > 0
    # removing makes room again; the victim is re-homed first
    for key in keys[:20]:
        f.remove(key)
    assert f._h.cells.victim()[0] == 0
    assert f.contains_many(keys[20:committed]).all()
    f.check()


def test_load_at_first_failure_b4() -> None:
    f = CuckooFilter(5000, 0.01, fingerprint_bits=16)
    i = 0
    with pytest.raises(FilterFullError):
        while True:
            f.add(i)
            i += 1
    assert f.items_added / f.num_slots >= 0.94


def test_measured_fp_rate_at_the_design_point() -> None:
    for capacity in (2000, 7001):
        f = CuckooFilter(capacity, 0.01)
        f.update(range(capacity))
        absent = np.arange(10**9, 10**9 + 100_000, dtype=np.int64)
        rate = float(f.contains_many(absent).mean())
        assert rate <= 0.01, rate
        assert f.expected_fp_rate() <= 0.01


# -- properties ----------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=250),
    st.sampled_from([(8, 4), (12, 4), (16, 2), (10, 1), (32, 8)]),
)
def test_no_false_negatives_and_count_matches_the_model(ops: list[tuple[bool, int]], shape: tuple[int, int]) -> None:
    bits, bucket = shape
    f = CuckooFilter(80, 0.01, fingerprint_bits=bits, bucket_size=bucket, max_kicks=100)
    cells = f._h.cells
    present: dict[tuple[int, int], int] = {}  # the identity (fp, bucket pair) -> key

    def ident(key: int) -> tuple[int, int]:
        i1, fp, _ = cells.hash(encode_key(key))
        return fp, min(i1, alt_index(i1, fp, cells.n))

    for add, key in ops:
        if add:
            try:
                inserted = f.add(key)
            except FilterFullError:
                assert ident(key) not in present
                continue
            assert inserted == (ident(key) not in present)
            present.setdefault(ident(key), key)
        elif ident(key) in present and present[ident(key)] == key:
            f.remove(key)
            del present[ident(key)]
        for k in present.values():
            assert k in f
        for k in range(0, 301, 17):
            assert f.count(k) == (1 if ident(k) in present else 0)
    assert f.items_added == len(present)
    f.check()


# -- lifecycle -----------------------------------------------------------------------------------------
def test_files_lifecycle(tmp_path: Path) -> None:
    path = tmp_path / "f.ckf"
    with CuckooFilter.create(path, 1000, 0.01) as f:
        f.update(["a", "b"])
        assert f.path == str(path)
        assert pickle.loads(pickle.dumps(f)).contains_many(["a", "b"]).all()
        copy = f.copy()
        assert copy == f and copy.path is None
        f.flush()
    assert f.closed
    with pytest.raises(FilterClosedError):
        f.add("c")
    with pytest.raises(FileExistsError):
        CuckooFilter.create(path, 1000, 0.01)
    with CuckooFilter.open_or_create(path, 1000, 0.01) as g:
        assert "a" in g and g.items_added == 2 and g.capacity == 1000
    with pytest.raises(ConfigMismatchError, match="fingerprint_bits"):
        CuckooFilter.open_or_create(path, 1000, 0.0001)
    with CuckooFilter.open(path, readonly=True) as r:
        assert "a" in r and r.readonly
        for write in (lambda: r.add("z"), lambda: r.remove("a"), lambda: r.update(["z"]), lambda: r.remove_many(["a"])):
            with pytest.raises(ReadOnlyFilterError):
                write()
        assert "z" not in r
    new = CuckooFilter.open_or_create(tmp_path / "new.ckf", 50, 0.01)
    assert new.items_added == 0
    new.close()


def test_describe_and_statistics() -> None:
    f = CuckooFilter(1000, 0.01)
    n = f.update(range(500))  # a few of 500 keys share a fingerprint pair: test-and-set refuses them
    assert 490 <= n <= 500
    info = f.info()
    assert info["kind"] == "CuckooFilter" and info["items_added"] == n
    assert info["occupied_slots"] == n and info["num_buckets"] == f.num_buckets
    assert 0 < f.expected_fp_rate() < 0.01
    assert f.load_factor == n / f.num_slots
    assert pickle.loads(pickle.dumps(f)) == f


def test_check_reconciles_the_items_counter() -> None:
    f = CuckooFilter(1000, 0.0001)
    assert f.update(range(300)) == 300
    fmt.store_items(f._h._items, 290)  # a writer killed before its counter store
    with pytest.raises(BadHeaderError, match="items counter 290 disagrees with 300"):
        f.check()
    # a writer killed mid kick path: a fingerprint copied into its other bucket, not yet overwritten
    cells = f._h.cells
    bucket, fp = next(iter(cells.fingerprints()))
    other = alt_index(bucket, fp, cells.n)
    empty = cells._empty(other)
    assert empty >= 0
    cells.set(empty, fp)
    f.check(repair=True)
    assert f.items_added == 300 and cells.occupied() == 300
    assert f.contains_many(range(300)).all()
    f.check()


def test_union_same_geometry_and_refusal() -> None:
    a = CuckooFilter(1000, 0.0001)
    b = CuckooFilter(1000, 0.0001)
    a.update(range(0, 400))
    b.update(range(200, 600))
    a.union(b)
    assert a.contains_many(range(600)).all() and a.items_added == 600
    a.check()
    with pytest.raises(IncompatibleFiltersError, match="fingerprint_bits"):
        a.union(CuckooFilter(1000, 0.01))
    x, y = CuckooFilter(100, 0.0001), CuckooFilter(100, 0.0001)
    x.update(range(90))
    y.update(range(1000, 1090))
    with pytest.raises(FilterFullError) as info:
        x.union(y)
    assert info.value.committed_items > 0  # type: ignore[attr-defined]
    assert x.contains_many(range(90)).all()  # nothing of its own dropped
    x.check()


def test_write_lock_block() -> None:
    f = CuckooFilter(100, 0.01)
    with f.write_lock():
        assert f.add("a") and not f.add("a")
    assert "a" in f


def test_truncated_file_is_refused_not_sigbus(tmp_path: Path) -> None:
    path = tmp_path / "t.ckf"
    f = CuckooFilter.create(path, 100_000, 0.01)
    os.truncate(path, 100)
    with pytest.raises(LengthMismatchError):
        f.add("x")
    with pytest.raises(LengthMismatchError):
        _ = "x" in f
    f.close()
