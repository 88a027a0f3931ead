"""Key types: str and bytes-likes, integers (8 bytes little-endian of the value mod 2^64),
the refused types and the refused batch forms, with one rule and one message on every call,
every filter kind and both backends."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, ScalableBloomFilter
from mmapbloom.hashing import encode_key

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")

CFG = BloomConfig(num_bits=1 << 14, num_hashes=5)


def _pure(f: Any) -> Any:
    """The same filter on the pure-Python handle (same image, lock and counter)."""
    f._h.close()
    f._attach_handle(pure=True)
    return f


def _kinds(tmp_path: Any) -> list[tuple[str, Callable[[], Any]]]:
    made: list[tuple[str, Callable[[], Any]]] = [
        ("bloom", lambda: BloomFilter(CFG)),
        ("bloom-pure", lambda: _pure(BloomFilter(CFG))),
        ("counting", lambda: CountingBloomFilter(CFG)),
        ("counting-pure", lambda: _pure(CountingBloomFilter(CFG))),
    ]
    counter = iter(range(1000))
    made.append(
        (
            "scalable",
            lambda: ScalableBloomFilter.create(
                os.path.join(tmp_path, f"s{next(counter)}"), capacity=1000, fp_rate=0.01
            ),
        )
    )
    return made


@pytest.fixture(params=["bloom", "bloom-pure", "counting", "counting-pure", "scalable"])
def make(request: pytest.FixtureRequest, tmp_path: Any) -> Callable[[], Any]:
    return dict(_kinds(tmp_path))[request.param]


def test_int_is_its_8_byte_little_endian_value() -> None:
    assert encode_key(1) == b"\x01" + bytes(7)
    assert encode_key(-1) == encode_key(2**64 - 1) == b"\xff" * 8
    assert encode_key(-(2**63)) == bytes(7) + b"\x80"
    assert encode_key(np.uint8(5)) == encode_key(np.int64(5)) == encode_key(5)


def test_int_keys_on_every_call(make: Callable[[], Any]) -> None:
    f = make()
    assert f.add(5) is True
    assert 5 in f and f.might_contain(np.int32(5)) and f.might_contain((5).to_bytes(8, "little"))
    assert f.add(np.uint64(5)) is False
    assert f.update([7, np.int8(-1), 2**64 - 1]) == 2  # -1 and 2**64 - 1 are one key
    if hasattr(f, "add_many"):  # the scalable filter has update only
        assert f.add_many([8, 8]).tolist() == [True, False]
    else:
        assert f.update([8, 8]) == 1
    assert f.contains_many([5, 7, -1, 8, 2**64 - 1]).tolist() == [True] * 5
    assert not f.contains_many([6])[0]


@pytest.mark.parametrize(
    "bad, error, text",
    [
        (2**64, OverflowError, "got 18446744073709551616"),
        (-(2**63) - 1, OverflowError, "got -9223372036854775809"),
        (True, TypeError, "got bool"),
        (1.0, TypeError, "got float"),
        (None, TypeError, "got NoneType"),
        (np.float64(1), TypeError, "got numpy.float64"),
        (np.bool_(True), TypeError, "got numpy.bool"),
    ],
)
def test_refused_keys_same_error_on_every_call(make: Callable[[], Any], bad: Any, error: type, text: str) -> None:
    f = make()
    before = f.contains_many(["a"]).tolist()
    calls = [f.add, f.might_contain, lambda x: f.update(["a", x]), lambda x: f.contains_many(["a", x])]
    if hasattr(f, "add_many"):
        calls.append(lambda x: f.add_many(["a", x]))
    for call in calls:
        with pytest.raises(error) as got:
            call(bad)
        assert str(got.value).endswith(text), str(got.value)
    assert f.contains_many(["a"]).tolist() == before  # a bad batch changed nothing


@pytest.mark.parametrize("batch", ["hello", b"hello", bytearray(b"hello"), memoryview(b"hello")])
def test_str_or_bytes_given_as_the_batch_is_refused(make: Callable[[], Any], batch: Any) -> None:
    f = make()
    for call in (f.update, getattr(f, "add_many", f.update), f.contains_many):
        with pytest.raises(TypeError, match="a batch must be an iterable of items"):
            call(batch)
    assert not f.contains_many(["h", "e", 104]).any() and f.items_added == 0


def test_non_contiguous_memoryview_is_its_bytes_everywhere(make: Callable[[], Any]) -> None:
    """One rule for every call and backend: a non-contiguous memoryview is the key
    mv.tobytes() (before, native add / in / contains_many raised BufferError)."""
    mv = memoryview(b"abcdef")[::2]
    f = make()
    assert f.add(mv) is True
    assert mv in f and b"ace" in f
    assert f.contains_many([mv, b"ace", b"bdf"]).tolist() == [True, True, False]
    g = make()
    assert g.update([mv]) == 1 and g.update([mv]) == 0 and b"ace" in g


class _Labelled(bytes):
    """A bytes subclass whose ``__bytes__`` says something else: its key is its buffer."""

    def __bytes__(self) -> bytes:
        return b"not-the-key"


def test_bytes_subclass_is_its_buffer_everywhere(make: Callable[[], Any]) -> None:
    """One rule for every call and backend: the raw bytes, never ``__bytes__`` (the native
    handle reads the buffer; the reference used to call ``bytes(item)``)."""
    key = _Labelled(b"abc")
    assert encode_key(key) == b"abc"
    f = make()
    assert f.add(key) is True and b"abc" in f and b"not-the-key" not in f
    g = make()
    assert g.update([key, bytearray(b"x")]) == 2 and g.contains_many([b"abc", b"not-the-key"]).tolist() == [True, False]


def test_messages_equal_across_backends() -> None:
    native, pure = BloomFilter(CFG), _pure(BloomFilter(CFG))
    for bad in (np.float32(1), object(), 1.5, [1]):
        msgs = []
        for f in (native, pure):
            for call in (f.add, f.might_contain, lambda x: f.contains_many([x])):
                with pytest.raises(TypeError) as got:
                    call(bad)  # type: ignore[arg-type]  # a bad key on purpose
                msgs.append(str(got.value))
        assert len(set(msgs)) == 1, msgs


class _Text(str):
    """A str subclass: its key is its UTF-8 bytes, as for str."""


def _mixed_keys() -> list[Any]:
    """Every kind of key encode_key accepts, several of them aliases of one another."""
    return [
        "s",
        "ünï",
        _Text("sub"),
        b"b",
        bytearray(b"ba"),
        memoryview(b"mv"),
        memoryview(b"abcdef")[::2],  # non-contiguous: the key b"ace"
        b"ace",  # the same key again
        7,
        -1,
        2**64 - 1,  # the same key as -1
        -(2**63),
        np.int64(9),
        np.uint8(3),
        (3).to_bytes(8, "little"),  # the same key as np.uint8(3)
        "",
        b"",
        0,
    ]


@pytest.mark.parametrize("counting", [False, True])
def test_mixed_batch_same_answers_and_file_on_both_backends(tmp_path: Any, counting: bool) -> None:
    """A batch mixing every accepted key type (given as a list, a tuple or a generator)
    gives the same flags, queries and file bytes on the native handle (which resolves the
    keys itself, in C) and on the pure one, and equals adding each item's encode_key."""
    make = CountingBloomFilter if counting else BloomFilter
    keys = _mixed_keys()
    paths = [tmp_path / "native.blm", tmp_path / "pure.blm", tmp_path / "encoded.blm"]
    filters = [make.create(p, CFG) for p in paths]
    _pure(filters[1])
    flags = []
    for f, batch in zip(filters, (keys, keys, [encode_key(k) for k in keys]), strict=True):
        flags.append(f.add_many(batch).tolist())
        assert f.update(tuple(batch)) == 0 and f.update(k for k in batch[:3]) == 0
        assert f.contains_many(batch + ["absent", 8]).tolist() == [True] * len(keys) + [False, False]
        assert f.contains_many(tuple(batch)).all()
    assert flags[0] == flags[1] == flags[2]
    assert flags[0] == [True] * 7 + [False, True, True, False, True, True, True, False, True, False, True]
    for f in filters:
        f.close()
    assert paths[0].read_bytes() == paths[1].read_bytes() == paths[2].read_bytes()


@pytest.mark.parametrize(
    "bad",
    [True, np.bool_(False), 1.5, None, object(), [1], 2**64, -(2**63) - 1, "\ud800", np.float64(1)],
    ids=repr,
)
def test_bad_key_anywhere_in_a_mixed_batch_same_error_and_nothing_written(tmp_path: Any, bad: Any) -> None:
    """A refused item at the start, middle or end of a long mixed batch raises the same
    type and message on both backends, from every batch call, before any cell changes."""
    good = _mixed_keys() * 200
    native, pure = BloomFilter.create(tmp_path / "n.blm", CFG), _pure(BloomFilter.create(tmp_path / "p.blm", CFG))
    for where in (0, len(good) // 2, len(good)):
        batch = good[:where] + [bad] + good[where:]
        got = []
        for f in (native, pure):
            for call in (f.update, f.add_many, f.contains_many, lambda b: f.update(tuple(b))):
                with pytest.raises((TypeError, ValueError, OverflowError)) as raised:
                    call(batch)
                got.append((type(raised.value), str(raised.value)))
            assert f.items_added == 0 and f.count_ones() == 0
        assert len(set(got)) == 1, got
        assert isinstance(bad, str) or got[0][0] is (
            OverflowError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
        )
    native.close()
    pure.close()
    assert (tmp_path / "n.blm").read_bytes() == (tmp_path / "p.blm").read_bytes()
