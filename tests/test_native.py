"""The compiled kernel ``mmapbloom._kernels`` against plain-Python references.

Every kernel is compared with a reference written here from the definitions (plain ints
and ``mmh3``): the MurmurHash3 values, the positions of the five strategies, and the
Bloom and counting bodies byte for byte after random operation sequences, written and
read through ``Handle`` (what the filters run).  Images are slices of a larger buffer with
sentinel bytes on both sides, so a write outside the image would be seen
(tools/check_native.sh runs this file under ASan + UBSan as well).
"""

from __future__ import annotations

import array
import contextlib
import functools
import mmap
import os
import random
import re
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmapbloom.errors import KeyEncodingError
from mmapbloom.hashing import encode_key, type_name

K = pytest.importorskip("mmapbloom._kernels")

M64 = (1 << 64) - 1
M3KM, M3MX, M3BL, M3M2, M3B2 = 1, 2, 3, 4, 5
BLOCKED = (M3BL, M3B2)
GOLDEN_RATIO_64 = 0x9E3779B97F4A7C15
ref_hash128 = functools.partial(mmh3.hash128, seed=0, x64arch=True, signed=False)


# ---- references ----------------------------------------------------------------------------


def as_bytes(key: Any) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def fmix64(z: int) -> int:
    z ^= z >> 33
    z = (z * 0xFF51AFD7ED558CCD) & M64
    z ^= z >> 33
    z = (z * 0xC4CEB9FE1A85EC53) & M64
    z ^= z >> 33
    return z


def ref_positions(sid: int, key: Any, m: int, k: int) -> list[int]:
    """The five strategies, written from their definitions (M3M2 / M3B2: M3MX / M3BL with
    the upper half forced odd)."""
    h = ref_hash128(as_bytes(key))
    h1, h2 = h & M64, h >> 64
    if sid == M3KM:
        if m == 1:
            return [0] * k
        step = 1 + h2 % (m - 1)
        return [(h1 % m + i * step) % m for i in range(k)]
    if sid in (M3MX, M3M2):
        step = h2 | 1 if sid == M3M2 else h2
        return [(fmix64((h1 + i * step) & M64) * m) >> 64 for i in range(k)]
    assert sid in BLOCKED and m % 512 == 0
    block = (h1 * (m // 512)) >> 64
    out, y = [], (h2 | 1 if sid == M3B2 else h2)
    for _ in range(k):
        y = (y * GOLDEN_RATIO_64) & M64
        out.append(block * 512 + (y >> 55))
    return out


class Model:
    """A Bloom (width 1) or counting (width 4 / 8) body in a bytearray, in plain Python."""

    def __init__(self, sid: int, m: int, k: int, width: int = 1) -> None:
        self.sid, self.m, self.k, self.width = sid, m, k, width
        self.top = (1 << width) - 1
        self.body = bytearray((m * width + 7) // 8)

    def _get(self, c: int) -> int:
        if self.width == 8:
            return self.body[c]
        return (self.body[c >> 1] >> ((c & 1) * 4)) & 15

    def _put(self, c: int, v: int) -> None:
        if self.width == 8:
            self.body[c] = v
        else:
            shift = (c & 1) * 4
            self.body[c >> 1] = (self.body[c >> 1] & (0xF0 >> shift)) | (v << shift)

    def _cells(self, key: Any) -> list[int]:
        return sorted(set(ref_positions(self.sid, key, self.m, self.k)))

    def add(self, key: Any) -> bool:
        new = False
        for p in ref_positions(self.sid, key, self.m, self.k):
            if not self.body[p >> 3] >> (p & 7) & 1:
                new = True
                self.body[p >> 3] |= 1 << (p & 7)
        return new

    def contains(self, key: Any) -> bool:
        return all(self.body[p >> 3] >> (p & 7) & 1 for p in ref_positions(self.sid, key, self.m, self.k))

    def count_add(self, key: Any) -> tuple[bool, bool]:
        new = sat = False
        for c in self._cells(key):
            v = self._get(c)
            new |= v == 0
            if v < self.top:
                self._put(c, v + 1)
                sat |= v + 1 == self.top
        return new, sat

    def count_remove(self, key: Any) -> int:
        cells = self._cells(key)
        values = [self._get(c) for c in cells]
        if 0 in values:
            return -1
        emptied = 0
        for c, v in zip(cells, values, strict=True):
            if v < self.top:
                self._put(c, v - 1)
                emptied |= v == 1
        return emptied

    def count_min(self, key: Any) -> int:
        return min(self._get(c) for c in self._cells(key))


PAD = 40  # sentinel bytes on each side of an image
HDR = 8  # the image's header: the items word (4 bytes) and 4 spare bytes


def padded(nbytes: int, fill: int = 0) -> tuple[bytearray, memoryview]:
    """A buffer with PAD sentinel bytes (0xA5) around an image: an HDR-byte header, then a
    body of nbytes; (whole, body view).  bind() builds a Handle over the image."""
    whole = bytearray(b"\xa5" * PAD + bytes(HDR) + bytes([fill]) * nbytes + b"\xa5" * PAD)
    return whole, memoryview(whole)[PAD + HDR : PAD + HDR + nbytes]


def assert_sentinels(whole: bytearray) -> None:
    assert whole[:PAD] == b"\xa5" * PAD and whole[-PAD:] == b"\xa5" * PAD


class Refused(Exception):
    """What the test handles' closed / readonly hooks raise."""


class Bound:
    """A native Handle over a body made by padded() (the code users run: the filters'
    handle), with hooks that record its warnings."""

    def __init__(self, body: Any, sid: int, m: int, k: int, width: int = 1, writable: bool = True) -> None:
        image = memoryview(body.obj)[PAD : PAD + HDR + body.nbytes] if isinstance(body, memoryview) else body
        self.saturations = 0
        self.h = make_handle(image, HDR, sid, m, k, width, writable, self)

    def saturated(self) -> None:
        self.saturations += 1

    def __getattr__(self, name: str) -> Any:  # the handle's methods
        return getattr(self.h, name)


def make_handle(image: Any, header_size: int, sid: int, m: Any, k: int, width: int, writable: bool, owner: Any) -> Any:
    """K.Handle over image (the items word at offset 0), with a fresh LockState and hooks
    that raise Refused for a closed handle or a refused write."""

    def refuse(what: str) -> Callable[[], None]:
        def hook() -> None:
            raise Refused(what)

        return hook

    def saturated() -> None:
        if owner is not None:
            owner.saturated()

    hooks = SimpleNamespace(
        closed=refuse("closed"),
        readonly=refuse("readonly"),
        faulted=refuse("faulted"),
        over=lambda count: None,
        saturated=saturated,
    )
    return K.Handle(image, (sid, m, k, width, header_size, 0), K.LockState(), hooks, writable, float("inf"))


def bind(sid: int, m: int, k: int, width: int = 1, fill: int = 0) -> tuple[bytearray, memoryview, Any]:
    """padded() for a body of m cells of width bits, and a Bound handle over it: (whole, body, bound)."""
    whole, body = padded((m * width + 7) // 8, fill)
    return whole, body, Bound(body, sid, m, k, width)


def random_keys(rng: random.Random, n: int, max_len: int = 40) -> list[Any]:
    """Keys of every accepted type: str (ASCII and not), bytes, bytearray, memoryview."""
    out: list[Any] = []
    for _ in range(n):
        raw = rng.randbytes(rng.randrange(max_len + 1))
        kind = rng.randrange(5)
        if kind == 0:
            out.append(raw.hex()[: len(raw)])
        elif kind == 1:
            out.append("".join(chr(rng.choice((0xE9, 0x3B1, 0x4E2D, 0x1F600, 65 + b % 26))) for b in raw[:12]))
        elif kind == 2:
            out.append(bytearray(raw))
        elif kind == 3:
            out.append(memoryview(raw))
        else:
            out.append(raw)
    return out


# ---- MurmurHash3 ---------------------------------------------------------------------------


def test_hash128_million_random_keys() -> None:
    """10**6 random keys, lengths 0-300 (every tail length 0-15), in chunks of 10**5."""
    rng = random.Random(1105)
    total = 0
    for _ in range(10):
        lengths = [rng.randrange(301) for _ in range(100_000)]
        blob = rng.randbytes(sum(lengths))
        keys, at = [], 0
        for n in lengths:
            keys.append(blob[at : at + n])
            at += n
        assert list(map(K.hash128, keys)) == list(map(ref_hash128, keys))
        total += len(keys)
        assert {n & 15 for n in lengths} == set(range(16))
    assert total == 10**6


def test_hash128_values_and_key_types() -> None:
    assert K.hash128(b"") == 0
    assert K.hash128(b"hello") == ref_hash128(b"hello")
    for key in ("", "é", "日本語テキスト", "\U0001f600" * 7, "a" * 300 + "é"):
        assert K.hash128(key) == ref_hash128(key.encode("utf-8"))
    raw = bytes(range(256)) * 2
    for n in range(40):
        expected = ref_hash128(raw[:n])
        assert K.hash128(raw[:n]) == expected
        assert K.hash128(bytearray(raw[:n])) == expected
        assert K.hash128(memoryview(raw)[:n]) == expected
    # a memoryview of another format hashes its raw bytes, as bytes(view) does
    ints = array.array("i", [1, -2, 3])
    assert K.hash128(memoryview(ints)) == ref_hash128(bytes(memoryview(ints)))


def test_hash128_lone_surrogates_raise_like_encode() -> None:
    for s in ("\ud800", "ab\udfffcd", "é\ud83d"):
        with pytest.raises(KeyEncodingError) as native:
            K.hash128(s)
        with pytest.raises(UnicodeEncodeError) as python:
            s.encode("utf-8")
        assert isinstance(native.value, UnicodeEncodeError) and "lone surrogate" in str(native.value)
        assert (native.value.start, native.value.end) == (python.value.start, python.value.end)


@pytest.mark.parametrize(
    "bad", [True, 1.5, None, ("a",), ["a"], object(), array.array("b", b"ab"), np.float64(1), np.bool_(True)]
)
def test_bad_key_types(bad: Any) -> None:
    """The compiled kernels refuse a bad key with the pure path's own message (one rule,
    hashing.encode_key: 'numpy.float64' on both backends, not 'float64' on one)."""
    with pytest.raises(TypeError) as pure:
        encode_key(bad)
    assert str(pure.value) == "items must be str, bytes-like or int, got " + type_name(bad)
    with pytest.raises(TypeError, match=re.escape(str(pure.value))):
        K.hash128(bad)
    with pytest.raises(TypeError, match=type(bad).__name__):
        K.positions(M3KM, bad, 100, 3)


def test_non_contiguous_memoryview_hashed_as_its_bytes() -> None:
    """One rule on both backends: a non-contiguous memoryview is the key mv.tobytes()."""
    mv = memoryview(b"abcdef")[::2]
    assert K.hash128(mv) == mmh3.hash128(b"ace", seed=0, x64arch=True, signed=False)


# ---- positions -----------------------------------------------------------------------------

M_ALL = [1, 2, 7, 512, 1024, 2**20, 2**33 + 17, 2**64 - 1]
M_BLOCKED = [512, 1024, 512 * 3, 512 * 1000, 512 * 18721, 2**33, 2**64 - 512]


@pytest.mark.parametrize("sid", [M3KM, M3MX, M3M2])
@pytest.mark.parametrize("m", M_ALL)
def test_positions_match_reference(sid: int, m: int) -> None:
    rng = random.Random(m * 10 + sid)
    for k in range(1, 65):
        for key in random_keys(rng, 3):
            pos = K.positions(sid, key, m, k)
            assert pos == ref_positions(sid, key, m, k)
            assert all(0 <= p < m for p in pos)


@pytest.mark.parametrize("sid", BLOCKED)
@pytest.mark.parametrize("m", M_BLOCKED)
def test_positions_blocked_match_reference(sid: int, m: int) -> None:
    rng = random.Random(m)
    for k in range(1, 65):
        for key in random_keys(rng, 3):
            pos = K.positions(sid, key, m, k)
            assert pos == ref_positions(sid, key, m, k)
            assert len({p // 512 for p in pos}) == 1 and all(0 <= p < m for p in pos)


def test_positions_large_k() -> None:
    for sid, m in ((M3KM, 1000), (M3MX, 2**40 + 3), (M3BL, 4096), (M3M2, 2**40 + 3), (M3B2, 4096)):
        assert K.positions(sid, b"key", m, 4096) == ref_positions(sid, b"key", m, 4096)


def test_m3km_matches_the_package() -> None:
    from mmapbloom import M3KM as PackageM3KM

    s = PackageM3KM()
    for m in M_ALL:
        for key in (b"", b"hello", "é".encode(), b"x" * 33):
            assert K.positions(M3KM, key, m, 9) == list(s.positions(key, 9, m))


@pytest.mark.parametrize(
    "name, sid, m",
    [("M3MX", M3MX, 9_585_059), ("M3BL", M3BL, 512 * 18721), ("M3M2", M3M2, 9_585_059), ("M3B2", M3B2, 512 * 18721)],
)
def test_other_strategies_match_the_package_when_registered(name: str, sid: int, m: int) -> None:
    """The kernel agrees with hashing.py, and the ids agree with the module constants."""
    from mmapbloom.hashing import registered_strategies

    strategy = registered_strategies()[name]
    assert strategy.kernel_id == sid == getattr(K, name)
    rng = random.Random(7)
    for key in random_keys(rng, 200):
        assert K.positions(sid, key, m, 7) == list(strategy.positions(as_bytes(key), 7, m))


@given(
    key=st.one_of(st.binary(max_size=300), st.text(max_size=80)),
    sid=st.sampled_from([M3KM, M3MX, M3BL, M3M2, M3B2]),
    m=st.one_of(st.integers(1, 5000), st.integers(1, 2**64 - 1), st.integers(2**63, 2**64 - 1)),
    k=st.integers(1, 64),
)
@settings(max_examples=200, deadline=None)
def test_positions_property(key: Any, sid: int, m: int, k: int) -> None:
    if sid in BLOCKED:
        m = max(512, m - m % 512)
    try:
        key.encode("utf-8") if isinstance(key, str) else None
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            K.positions(sid, key, m, k)
        return
    assert K.positions(sid, key, m, k) == ref_positions(sid, key, m, k)


# ---- Bloom bodies --------------------------------------------------------------------------

CONFIGS = [
    (M3KM, 1, 3),
    (M3KM, 13, 4),
    (M3KM, 2000, 7),
    (M3KM, 100, 1),
    (M3MX, 1, 2),
    (M3MX, 999, 5),
    (M3MX, 5003, 7),
    (M3MX, 20011, 100),
    (M3BL, 512, 6),
    (M3BL, 2048, 8),
    (M3BL, 512 * 7, 3),
    (M3BL, 1024, 1),
    (M3M2, 1, 2),
    (M3M2, 999, 5),
    (M3M2, 20011, 100),
    (M3B2, 512, 6),
    (M3B2, 512 * 7, 3),
    (M3B2, 1024, 1),
]


@pytest.mark.parametrize("sid, m, k", CONFIGS)
def test_bloom_add_contains_against_model(sid: int, m: int, k: int) -> None:
    rng = random.Random(sid * 1000 + m)
    model = Model(sid, m, k)
    whole, body, h = bind(sid, m, k)
    keys = random_keys(rng, 60)
    new = 0
    for key in keys:
        assert h.contains(key) == model.contains(key)
        fresh = h.add(key)
        assert fresh == model.add(key)
        new += fresh
        assert h.contains(key)
        assert bytes(body) == bytes(model.body)
    ro = Bound(bytes(whole[PAD:-PAD]), sid, m, k, writable=False)  # a read-only image
    for key in keys + random_keys(rng, 60):  # present and (mostly) absent keys
        assert h.contains(key) == model.contains(key)
        assert ro.contains(key) == model.contains(key)
    assert_sentinels(whole)
    assert int.from_bytes(whole[PAD : PAD + 4], "little") == new  # the items word, bumped once per new key


@pytest.mark.parametrize("sid, m, k", CONFIGS)
def test_bloom_batches_against_model(sid: int, m: int, k: int) -> None:
    rng = random.Random(sid * 7 + m)
    model = Model(sid, m, k)
    whole, body, h = bind(sid, m, k)
    for n in (0, 1, 5, 300, 700):
        keys = random_keys(rng, n)
        keys += [keys[i] for i in range(0, len(keys), 3)]  # repeats inside the batch
        rng.shuffle(keys)
        batch = keys if n % 2 else tuple(keys)
        out = np.zeros(len(keys), dtype=np.bool_)
        expected = [model.add(key) for key in keys]
        assert h.add_many(batch, out) == sum(expected)
        assert out.tolist() == expected
        assert bytes(body) == bytes(model.body)
        probe = keys + random_keys(rng, n)
        got = np.ones(len(probe), dtype=np.bool_)
        h.contains_many(probe, got)
        assert got.tolist() == [model.contains(key) for key in probe]
        assert got[: len(keys)].all()  # no false negatives
    assert_sentinels(whole)


_key = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=60),
    st.binary(max_size=300).map(bytearray),
    st.binary(max_size=300).map(lambda b: memoryview(b)),
)


@given(
    keys=st.lists(_key, max_size=60),
    sid=st.sampled_from([M3KM, M3MX, M3BL, M3M2, M3B2]),
    m=st.integers(1, 4000),
    k=st.integers(1, 40),
    width=st.sampled_from([1, 4, 8]),
)
@settings(max_examples=150, deadline=None)
def test_batches_property(keys: list[Any], sid: int, m: int, k: int, width: int) -> None:
    """Batch add then batch query, any key types and lengths, against the model."""
    if sid in BLOCKED:
        m = max(512, m - m % 512)
    keys = keys + keys[::2]  # repeats
    model = Model(sid, m, k, width)
    whole, body, h = bind(sid, m, k, width)
    out = np.zeros(len(keys), dtype=np.bool_)
    if width == 1:
        expected = [model.add(key) for key in keys]
        assert h.add_many(keys, out) == sum(expected)
    else:
        pairs = [model.count_add(key) for key in keys]
        expected = [p[0] for p in pairs]
        assert h.add_many(keys, out) == sum(expected)
        assert (h.saturations > 0) == any(p[1] for p in pairs)
    assert out.tolist() == expected and bytes(body) == bytes(model.body)
    probe = keys + [b"absent-%d" % i for i in range(300)]
    got = np.zeros(len(probe), dtype=np.bool_)
    h.contains_many(probe, got)
    if width == 1:
        assert got.tolist() == [model.contains(key) for key in probe]
    else:
        assert got.tolist() == [model.count_min(key) > 0 for key in probe]
    assert_sentinels(whole)


def test_add_many_duplicates_are_new_once() -> None:
    _, _, h = bind(M3KM, 8000, 5)
    out = np.zeros(4, dtype=np.bool_)
    assert h.add_many(["a", b"a", bytearray(b"a"), memoryview(b"a")], out) == 1
    assert out.tolist() == [True, False, False, False]


@pytest.mark.parametrize("bad", [1.5, None, "\ud800", 2**64, object()])
def test_add_many_bad_key_changes_nothing(bad: Any) -> None:
    for width, m in ((1, 512), (4, 128)):
        whole, body, h = bind(M3KM, m, 3, width)
        keys = [f"key{i}" for i in range(500)] + [bad]
        out = np.zeros(len(keys), dtype=np.bool_)
        with pytest.raises((TypeError, ValueError, OverflowError)):
            h.add_many(keys, out)
        assert not any(body) and not out.any() and not any(whole[PAD : PAD + HDR])


def test_large_sparse_body() -> None:
    """m above 2**33 on an anonymous mapping (pages are only touched where bits are set)."""
    m = 2**33 + 17
    nbytes = (m + 7) // 8
    with mmap.mmap(-1, HDR + nbytes) as mm:
        image = memoryview(mm)
        try:
            keys = [f"k{i}" for i in range(200)]
            out = np.zeros(len(keys), dtype=np.bool_)
            for sid in (M3KM, M3MX):
                h = make_handle(image, HDR, sid, m, 7, 1, True, None)
                h.add_many(keys, out)
                for key in keys:
                    for p in ref_positions(sid, key, m, 7):
                        assert mm[HDR + (p >> 3)] >> (p & 7) & 1
                    assert h.contains(key)
                h.close()
            h = make_handle(image, HDR, M3BL, m - 17, 7, 1, True, None)
            assert h.add("blocked") is True
            assert h.contains("blocked")
            h.close()
        finally:
            image.release()


# ---- counting bodies -----------------------------------------------------------------------


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize(
    "sid, m, k",
    [
        (M3KM, 1, 3),
        (M3KM, 33, 4),
        (M3MX, 17, 5),
        (M3MX, 700, 7),
        (M3BL, 512, 6),
        (M3BL, 1024, 30),
        (M3M2, 700, 7),
        (M3B2, 1024, 30),
    ],
)
def test_counting_against_model(width: int, sid: int, m: int, k: int) -> None:
    rng = random.Random(width * 100 + m + sid)
    model = Model(sid, m, k, width)
    whole, body, h = bind(sid, m, k, width)
    pool = random_keys(rng, 40)
    for step in range(1500):
        key = rng.choice(pool)
        op = rng.randrange(10)
        if op < 5:
            before = h.saturations
            new, sat = model.count_add(key)
            assert h.add(key) == new and (h.saturations > before) == sat
        elif op < 8:
            before_bytes = bytes(body)
            result = h.remove(key)
            assert result == model.count_remove(key)
            if result == -1:
                assert bytes(body) == before_bytes
        else:
            assert h.count(key) == model.count_min(key)
            ro = Bound(bytes(whole[PAD:-PAD]), sid, m, k, width, writable=False)
            assert ro.count(key) == model.count_min(key)
        assert bytes(body) == bytes(model.body), step
    assert_sentinels(whole)


@pytest.mark.parametrize("width", [4, 8])
def test_counting_saturation(width: int) -> None:
    top = (1 << width) - 1
    model = Model(M3KM, 50, 3, width)
    _, body, h = bind(M3KM, 50, 3, width)
    results = []
    for _ in range(top + 5):
        before = h.saturations
        results.append((h.add("hot"), h.saturations > before))
    assert results == [model.count_add("hot") for _ in range(top + 5)]
    assert results[0] == (True, False) and results[top - 1] == (False, True) and results[top] == (False, False)
    assert h.count("hot") == top
    # saturated counters never decrement: remove reports no emptied cell and changes nothing
    before = bytes(body)
    assert h.remove("hot") == 0
    assert bytes(body) == before == bytes(model.body)


def test_counting_nibbles_independent() -> None:
    """4-bit cells: even cells are low nibbles, odd cells high nibbles; neighbours untouched."""
    _, body, h = bind(M3KM, 2, 1, 4)
    h.add(b"x")
    cell = K.positions(M3KM, b"x", 2, 1)[0]
    assert body[0] == (1 << (4 * cell))
    key = next(f"k{i}" for i in range(100) if K.positions(M3KM, f"k{i}", 2, 1) == [0])
    _, body, h = bind(M3KM, 2, 1, 4, fill=0xFF)
    assert h.remove(key) == 0  # saturated low nibble stays
    _, body, h = bind(M3KM, 2, 1, 4, fill=0xF3)
    assert h.remove(key) == 0 and bytes(body) == b"\xf2"


def test_counting_remove_absent_leaves_body() -> None:
    rng = random.Random(5)
    for width in (4, 8):
        model = Model(M3MX, 300, 4, width)
        _, body, h = bind(M3MX, 300, 4, width)
        for key in random_keys(rng, 40):
            h.add(key)
            model.count_add(key)
        absent = [key for key in random_keys(rng, 200) if model.count_min(key) == 0]
        assert absent
        before = bytes(body)
        for key in absent:
            assert h.remove(key) == -1
        assert bytes(body) == before


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize(
    "sid, m, k", [(M3KM, 91, 3), (M3MX, 2000, 7), (M3BL, 1024, 5), (M3KM, 5000, 1), (M3MX, 3001, 90)]
)
def test_counting_batches_against_model(width: int, sid: int, m: int, k: int) -> None:
    rng = random.Random(width + m)
    model = Model(sid, m, k, width)
    whole, body, h = bind(sid, m, k, width)
    pool = random_keys(rng, 50)
    for n in (0, 1, 40, 400):
        keys = [rng.choice(pool) for _ in range(n)]
        out = np.zeros(n, dtype=np.bool_)
        expected = [model.count_add(key) for key in keys]
        before = h.saturations
        new = h.add_many(keys, out)
        assert new == sum(e[0] for e in expected) and (h.saturations > before) == any(e[1] for e in expected)
        assert out.tolist() == [e[0] for e in expected]
        assert bytes(body) == bytes(model.body)
        probe = pool + random_keys(rng, 300)
        got = np.zeros(len(probe), dtype=np.bool_)
        h.contains_many(tuple(probe), got)
        assert got.tolist() == [model.count_min(key) > 0 for key in probe]
    assert_sentinels(whole)


# ---- argument checks -----------------------------------------------------------------------


def test_argument_checks() -> None:
    whole = bytearray(HDR + 128)
    out = np.zeros(1, dtype=np.bool_)
    _, _, h = bind(M3KM, 100, 3)
    cases: list[tuple[type, str, Callable[[], Any]]] = [
        (ValueError, "strategy id 0", lambda: make_handle(whole, HDR, 0, 100, 3, 1, True, None)),
        (ValueError, "strategy id 6", lambda: K.positions(6, "a", 100, 3)),
        (ValueError, "m must be at least 1", lambda: K.positions(M3KM, "a", 0, 3)),
        (ValueError, r"m must be in \[0, 2\*\*64\), got -1", lambda: K.positions(M3KM, "a", -1, 3)),
        (ValueError, "m must be in", lambda: K.positions(M3KM, "a", 2**64, 3)),
        (ValueError, r"k must be in \[1, 4096\], got 0", lambda: make_handle(whole, HDR, M3KM, 100, 0, 1, True, None)),
        (ValueError, "got 4097", lambda: make_handle(whole, HDR, M3KM, 100, 4097, 1, True, None)),
        (ValueError, "multiple of 512, got 1000", lambda: make_handle(whole, HDR, M3BL, 1000, 3, 1, True, None)),
        (ValueError, "multiple of 512, got 256", lambda: K.positions(M3BL, "a", 256, 3)),
        (
            ValueError,
            "M3B2 needs m to be a positive multiple of 512, got 1000",
            lambda: K.positions(M3B2, "a", 1000, 3),
        ),
        (
            ValueError,
            r"image has 136 bytes, expected at least 8 \+ 129",
            lambda: make_handle(whole, HDR, M3KM, 1025, 3, 1, True, None),
        ),
        (ValueError, r"expected at least 8 \+ 129", lambda: make_handle(whole, HDR, M3KM, 129, 3, 8, True, None)),
        (ValueError, r"expected at least 8 \+ 129", lambda: make_handle(whole, HDR, M3KM, 257, 3, 4, True, None)),
        (ValueError, "width must be 1, 4 or 8, got 2", lambda: make_handle(whole, HDR, M3KM, 100, 3, 2, True, None)),
        (ValueError, "out has 1 bytes, expected 2", lambda: h.add_many(["a", "b"], out)),
        (ValueError, "out has 1 bytes, expected 2", lambda: h.contains_many(["a", "b"], out)),
        (TypeError, "m must be an int, got float", lambda: make_handle(whole, HDR, M3KM, 100.0, 3, 1, True, None)),
        (TypeError, "remove needs a counting handle", lambda: h.remove("a")),
        (TypeError, "count needs a counting handle", lambda: h.count("a")),
    ]
    for exc, message, call in cases:
        with pytest.raises(exc, match=message):
            call()
    assert whole == bytearray(HDR + 128)


def test_read_only_image_refused_for_writes() -> None:
    out = np.zeros(1, dtype=np.bool_)
    for ro in (bytes(HDR + 64), memoryview(bytearray(HDR + 64)).toreadonly()):
        for width in (1, 4, 8):
            with pytest.raises((TypeError, BufferError)):
                make_handle(ro, HDR, M3KM, 50, 3, width, True, None)  # a writable handle needs a writable image
            h = make_handle(ro, HDR, M3KM, 50, 3, width, False, None)
            calls = [lambda: h.add("a"), lambda: h.add_many(["a"], out)]
            if width > 1:
                calls.append(lambda: h.remove("a"))
            for call in calls:
                with pytest.raises(Refused):
                    call()
    _, _, h = bind(M3KM, 100, 3)
    with pytest.raises((TypeError, BufferError)):
        h.contains_many(["a"], bytes(1))  # out must be writable


# ---- threads and the GIL -------------------------------------------------------------------


def test_contains_many_from_two_threads() -> None:
    m, k = 200_003, 7
    rng = random.Random(11)
    _, body, h = bind(M3MX, m, k)
    present = [f"in{i}" for i in range(3000)]
    h.add_many(present, np.zeros(len(present), dtype=np.bool_))
    probe = present + [rng.randbytes(12) for _ in range(3000)]
    expected = np.array([h.contains(key) for key in probe])
    assert expected[:3000].all()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(20):
                got = np.zeros(len(probe), dtype=np.bool_)
                h.contains_many(probe, got)
                assert (got == expected).all()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@contextlib.contextmanager
def gil_watch() -> Iterator[list[int]]:
    """A thread that counts while it holds the GIL, under a 30 s switch interval: the main
    thread then keeps the GIL unless it releases it itself, so the count cannot advance
    across a call that keeps the GIL (it advances across a long call that releases it;
    a very short release may go unseen).  Yields the one-element count list."""
    ticks = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)  # releases the GIL, so the main thread can take it back

    old = sys.getswitchinterval()
    thread = threading.Thread(target=spin)
    sys.setswitchinterval(30.0)
    try:
        thread.start()
        while ticks[0] == 0:
            time.sleep(0.001)
        yield ticks
    finally:
        stop.set()
        sys.setswitchinterval(old)
        thread.join()


def test_batch_queries_release_the_gil() -> None:
    """A large contains_many releases the GIL; a small one (below 256 keys) keeps it."""
    m, k = 1_000_003, 7
    _, _, h = bind(M3KM, m, k)
    _, _, c = bind(M3BL, m - m % 512, k, 8)
    big = [f"key{i}" for i in range(200_000)]
    small = big[:100]
    calls = [h.contains_many, c.contains_many]
    with gil_watch() as ticks:
        for call in calls:
            out = np.zeros(len(small), dtype=np.bool_)
            before = ticks[0]
            call(small, out)
            assert ticks[0] == before  # GIL kept
            out = np.zeros(len(big), dtype=np.bool_)
            before = ticks[0]
            for _ in range(20):  # the other thread may get no CPU in one call on a busy machine
                call(big, out)
                if ticks[0] > before:
                    break
            assert ticks[0] > before  # GIL released


# ---- flock ---------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(K, "flock_try"), reason="no flock on this platform")
def test_flock_try_and_unlock(tmp_path: Any) -> None:
    path = tmp_path / "lock"
    path.write_bytes(b"")
    fd1 = os.open(path, os.O_RDWR)
    fd2 = os.open(path, os.O_RDWR)  # a second open file description: flock conflicts
    try:
        assert K.flock_try(fd1) is True
        assert K.flock_try(fd1) is True  # re-locking one's own lock succeeds
        assert K.flock_try(fd2) is False
        assert K.flock_unlock(fd1) is None
        assert K.flock_try(fd2) is True
        assert K.flock_try(fd1) is False
        K.flock_unlock(fd2)
        with open(path, "rb") as f:  # objects with fileno() work too
            assert K.flock_try(f) is True
            K.flock_unlock(f)
    finally:
        os.close(fd1)
        os.close(fd2)
    with pytest.raises(OSError):
        K.flock_try(fd1)  # closed descriptor: EBADF
    with pytest.raises(ValueError):
        K.flock_unlock(-1)


def test_type_stub_lists_the_module() -> None:
    """mmapbloom/_kernels.pyi names exactly the module's public functions and constants,
    with the same positional parameters."""
    import ast
    import inspect

    stub_path = os.path.join(os.path.dirname(os.path.abspath(K.__file__)), "_kernels.pyi")
    tree = ast.parse(open(stub_path, encoding="utf-8").read())
    stub_funcs = {n.name: [a.arg for a in n.args.posonlyargs] for n in tree.body if isinstance(n, ast.FunctionDef)}
    stub_consts = {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    stub_classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    public = {name for name in dir(K) if not name.startswith("_")}
    assert set(stub_funcs) | stub_consts | set(stub_classes) == public
    for name, node in stub_classes.items():  # every method of a class, public or the LockState protocol
        stubbed = {n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
        assert stubbed == {
            m for m in vars(getattr(K, name)) if not m.startswith("__") and callable(getattr(K, name).__dict__[m])
        }, name
    for name, params in stub_funcs.items():
        assert list(inspect.signature(getattr(K, name)).parameters) == params, name


# -- the guarded scans (mmapbloom.scans): the ops against numpy, and their argument checks --
@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=0, max_size=300), st.binary(min_size=0, max_size=300), st.integers(0, 5))
def test_scan_ops_match_numpy(a: bytes, b: bytes, op: int) -> None:
    n = min(len(a), len(b))
    dst, src = bytearray(a[:n]), np.frombuffer(b[:n], dtype=np.uint8)
    x, y = np.frombuffer(a[:n], dtype=np.uint8).astype(np.uint16), src.astype(np.uint16)
    got = K.scan(dst, 0, b, 0, n, op)
    if op == 5:
        assert got == int(a[:n] == b[:n]) and dst == a[:n]
        return
    assert got is True
    lo, hi = np.minimum((x & 15) + (y & 15), 15), np.minimum((x >> 4) + (y >> 4), 15)
    want = [y, x | y, x & y, np.minimum(x + y, 255), lo | (hi << 4)][op]
    assert bytes(dst) == want.astype(np.uint8).tobytes()


def test_scan_bytes_copies_a_range() -> None:
    data = bytes(range(256))
    assert K.scan_bytes(data, 10, 5) == data[10:15] and K.scan_bytes(data, 256, 0) == b""


@pytest.mark.parametrize(
    "call",
    [
        lambda: K.scan(bytearray(4), 1, b"abcd", 0, 4, 0),
        lambda: K.scan(bytearray(4), 0, b"abc", 0, 4, 1),
        lambda: K.scan(bytearray(4), 0, b"abcd", -1, 1, 1),
        lambda: K.scan(bytearray(4), 0, b"abcd", 0, 4, 6),
        lambda: K.scan_bytes(b"abcd", 3, 2),
    ],
)
def test_scan_refuses_bad_ranges_and_ops(call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match="outside the buffer|op must be 0 to 5"):
        call()


def test_scan_refuses_overlapping_ranges_of_a_writing_op() -> None:
    buf = bytearray(b"abcdefgh")
    for op in range(5):
        with pytest.raises(ValueError, match="overlap"):
            K.scan(buf, 0, buf, 2, 4, op)
    assert K.scan(buf, 0, buf, 4, 4, 0) and buf == bytearray(b"efghefgh")  # adjacent: fine
    assert K.scan(buf, 0, buf, 2, 4, 5) == 0  # a comparison only reads


def test_scan_refuses_a_read_only_destination() -> None:
    with pytest.raises(BufferError):
        K.scan(b"abcd", 0, b"abcd", 0, 4, 1)
