"""ExpiringBloomFilter batches across live periods, driven by an injected clock: a key
held by an older live period is not new again, for every batch form (a list, a numpy
array, an Arrow column with nulls), the refusals of a read-only or closed filter carry
``committed_items``, and the clock and configuration refusals name the value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from mmapbloom import (
    ConfigError,
    ConfigMismatchError,
    ExpiringBloomFilter,
    FilterClosedError,
    ReadOnlyFilterError,
    UnknownSchemeError,
)

WINDOW, PERIODS = 40.0, 4
P = WINDOW / PERIODS


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path: Path, clock: Clock) -> ExpiringBloomFilter:
    return ExpiringBloomFilter.create(str(tmp_path / "f"), WINDOW, 1000, 0.001, periods=PERIODS, clock=clock)


@pytest.mark.parametrize("form", ["list", "numpy-bytes", "numpy-int", "arrow"])
def test_a_key_of_an_older_live_period_is_not_new(tmp_path: Path, form: str) -> None:
    clock = Clock(0.0)
    old = [f"old-{i}" for i in range(50)] if form != "numpy-int" else list(range(50))
    fresh = [f"new-{i}" for i in range(30)] if form != "numpy-int" else list(range(1000, 1030))

    def batch(keys: list[Any]) -> Any:
        if form == "list":
            return keys
        if form == "numpy-bytes":
            return np.array([k.encode() for k in keys], dtype=object)
        if form == "numpy-int":
            return np.array(keys, dtype=np.int64)
        return pa.array(keys + [None])  # a null is never added

    with make(tmp_path, clock) as f:
        assert f.update(batch(old)) == 50
        clock.t = 2.5 * P  # two periods later: the first period is still live
        assert f.update(batch(old + fresh)) == 30  # only the new keys are new
        assert f.update(batch(fresh)) == 0
        assert all(k in f for k in old + fresh)
        clock.t = WINDOW + 3 * P  # past the first period's window: its keys may be new again
        assert f.update(batch(old)) == 50


def test_add_sees_an_older_live_period(tmp_path: Path) -> None:
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        assert f.add("k") is True
        clock.t = 1.5 * P
        assert f.add("k") is False and f.add("j") is True
        with f.write_lock():
            assert f.add("i") is True and f.add("k") is False


def test_read_only_and_closed_refusals_carry_committed_items(tmp_path: Path) -> None:
    clock = Clock(0.0)
    path = str(tmp_path / "f")
    make(tmp_path, clock).close()
    with ExpiringBloomFilter.open(path, readonly=True, clock=clock) as r:
        with pytest.raises(ReadOnlyFilterError, match="opened read-only") as info:
            r.update(["a", "b"])
        assert info.value.committed_items == 0  # type: ignore[attr-defined]
        with pytest.raises(ReadOnlyFilterError):
            r.add("a")
        with pytest.raises(ReadOnlyFilterError):
            r.write_lock()
    f = ExpiringBloomFilter.open(path, clock=clock)
    f.close()
    with pytest.raises(FilterClosedError, match="closed") as closed:
        f.update(["a"])
    assert closed.value.committed_items == 0  # type: ignore[attr-defined]
    with pytest.raises(FilterClosedError):
        f.add("a")


def test_clock_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="clock must be a zero-argument callable"):
        ExpiringBloomFilter.create(str(tmp_path / "c"), WINDOW, 100, 0.01, clock=42)  # type: ignore[arg-type]
    assert not os.path.exists(tmp_path / "c")
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        clock.t = float("nan")
        with pytest.raises(ConfigError, match="the clock returned nan, not a finite number"):
            f.add("x")
        clock.t = 0.0
        assert f.add("x")


def _forms() -> list[tuple[str, Any, list[Any]]]:
    """(name, batch, the same keys one by one: None for a null)."""
    strs = [f"s{i}" for i in range(40)]
    raw = [s.encode() for s in strs]
    ints = list(range(-20, 20)) + [2**63, 2**64 - 1]
    out: list[tuple[str, Any, list[Any]]] = [
        ("list-str", strs, strs),
        ("list-bytes", raw, raw),
        ("list-bytearray", [bytearray(b) for b in raw], raw),
        ("list-memoryview", [memoryview(b) for b in raw], raw),
        (
            "list-strided-memoryview",
            [memoryview(b"x" + b + b"y")[::2] for b in raw],
            [(b"x" + b + b"y")[::2] for b in raw],
        ),
        ("list-int", ints, ints),
        ("list-numpy-scalars", [np.int32(i) for i in range(30)], list(range(30))),
        ("list-mixed", ["m", b"m", 5, bytearray(b"q")], ["m", b"m", 5, b"q"]),
        ("numpy-S", np.array(raw), raw),
        ("numpy-U", np.array(strs), strs),
        ("numpy-object", np.array(raw, dtype=object), raw),
    ]
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        values = np.arange(0, 60, dtype=dtype)
        out.append((f"numpy-{np.dtype(dtype).name}", values, [int(v) for v in values]))
    with_nulls = strs[:10] + [None] + strs[10:20] + [None]
    ints_nulls = [1, None, 3, -4, None, 2**62]
    for name, typ, keys in (
        ("arrow-string", pa.string(), with_nulls),
        ("arrow-large_string", pa.large_string(), with_nulls),
        ("arrow-binary", pa.binary(), [None if k is None else k.encode() for k in with_nulls]),
        ("arrow-large_binary", pa.large_binary(), [None if k is None else k.encode() for k in with_nulls]),
        ("arrow-int64", pa.int64(), ints_nulls),
        ("arrow-int32", pa.int32(), ints_nulls[:-1]),
    ):
        out.append((name, pa.array(keys, type=typ), keys))
    out.append(("arrow-chunked", pa.chunked_array([with_nulls[:11], with_nulls[11:]]), with_nulls))
    out.append(("arrow-sliced", pa.array(with_nulls)[3:], with_nulls[3:]))
    return out


@pytest.mark.parametrize(("name", "batch", "keys"), _forms(), ids=[f[0] for f in _forms()])
def test_every_key_form_batch_equals_per_item(tmp_path: Path, name: str, batch: Any, keys: list[Any]) -> None:
    """``update`` / ``contains_many`` of every batch form the other kinds take give the
    per-item ``add`` / ``in`` answers (nulls never added, answered False), with keys held
    by an older live period, and write the same period files."""
    clock = Clock(0.0)
    a = ExpiringBloomFilter.create(str(tmp_path / "a"), WINDOW, 1000, 0.001, periods=PERIODS, clock=clock)
    b = ExpiringBloomFilter.create(str(tmp_path / "b"), WINDOW, 1000, 0.001, periods=PERIODS, clock=clock)
    with a, b:
        half = [k for k in keys[::2] if k is not None]  # an older live period holds these
        assert a.update(half) == sum(b.add(k) for k in half)
        clock.t = 1.5 * P
        per_item = sum(b.add(k) for k in keys if k is not None)
        assert a.update(batch) == per_item
        assert a.contains_many(batch).tolist() == [k is not None and k in b for k in keys]
        assert all(a.contains_many(batch).tolist()[i] for i, k in enumerate(keys) if k is not None)
        assert a.items_added == b.items_added
    for n in sorted(os.listdir(tmp_path / "a")):
        if n.startswith("period-") and n.endswith(".blm"):
            assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes(), n


def test_polars_and_duckdb_columns(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        col = pl.Series("u", ["a", None, "b"])
        assert f.update(col) == 2
        assert f.contains_many(col).tolist() == [True, False, True]
        assert f.contains_many(pl.Series("v", ["a", "zz"])).tolist() == [True, False]


@pytest.mark.parametrize("bad", [None, 1.5, object(), ["a"]])
def test_refused_keys_per_item_and_in_batches(tmp_path: Path, bad: Any) -> None:
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        with pytest.raises(TypeError):
            f.add(bad)
        with pytest.raises(TypeError):
            bad in f  # noqa: B015
        with pytest.raises(TypeError) as info:
            f.update(["ok", bad])
        assert info.value.committed_items == 0  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            f.contains_many(["ok", bad])
        assert "ok" not in f and f.items_added == 0


def test_open_and_open_or_create_refusals(tmp_path: Path) -> None:
    clock = Clock(0.0)
    path = str(tmp_path / "f")
    make(tmp_path, clock).close()
    with pytest.raises(ConfigError, match="clock must be a zero-argument callable"):
        ExpiringBloomFilter.open(path, clock=42)  # type: ignore[arg-type]
    for kw in ({"window": 0}, {"capacity": 1.5}, {"fp_rate": 2.0}, {"periods": 0}, {"clock": "time"}):
        args: dict[str, Any] = {
            "window": WINDOW,
            "capacity": 1000,
            "fp_rate": 0.001,
            "periods": PERIODS,
            "clock": clock,
        }
        args.update(kw)
        with pytest.raises(ConfigError):
            ExpiringBloomFilter.open_or_create(
                str(tmp_path / "new"),
                args["window"],
                args["capacity"],
                args["fp_rate"],
                periods=args["periods"],
                clock=args["clock"],
            )
        assert not (tmp_path / "new").exists(), kw
    with pytest.raises(UnknownSchemeError, match="NOPE"):
        ExpiringBloomFilter.create(str(tmp_path / "s"), WINDOW, 100, 0.01, strategy="NOPE")
    with pytest.raises(TypeError, match="mode must be permission bits"):  # as for the scalable kind
        ExpiringBloomFilter.create(str(tmp_path / "m"), WINDOW, 100, 0.01, mode=0o10000)
    assert not (tmp_path / "s").exists() and not (tmp_path / "m").exists()
    with ExpiringBloomFilter.open_or_create(path, WINDOW, 1000, 0.001, periods=PERIODS, clock=clock) as f:
        assert f.periods == PERIODS
    for field, kw in (("periods", {"periods": 8}), ("capacity", {"capacity": 999}), ("fp_rate", {"fp_rate": 0.01})):
        args = {"capacity": 1000, "fp_rate": 0.001, "periods": PERIODS}
        args.update(kw)
        with pytest.raises(ConfigMismatchError, match=field):
            ExpiringBloomFilter.open_or_create(
                path, WINDOW, args["capacity"], args["fp_rate"], periods=args["periods"], clock=clock
            )


@pytest.mark.parametrize("which", ["newest", "older"])
def test_contains_many_on_a_truncated_period_raises(tmp_path: Path, which: str) -> None:
    """A period file truncated under the handle: ``contains_many`` (the newest period
    alone first, then the older ones for the keys it did not hold) raises
    LengthMismatchError instead of dying of SIGBUS, whichever period shrank."""
    from mmapbloom import LengthMismatchError

    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        for step in range(3):
            clock.t = step * P + 1
            f.update([f"k{step}-{i}" for i in range(100)])
        names = sorted(
            (n for n in os.listdir(f.path) if n.startswith("period-") and n.endswith(".blm")),
            key=lambda n: int(n[7:-4]),
        )
        os.truncate(os.path.join(f.path, names[-1] if which == "newest" else names[0]), 64)
        with pytest.raises(LengthMismatchError):
            f.contains_many([f"k0-{i}" for i in range(100)] + ["absent"])
        with pytest.raises(LengthMismatchError):
            f.contains_many(np.arange(5000, dtype=np.int64))  # absent keys: every period probed
