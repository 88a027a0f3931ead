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

from mmapbloom import ConfigError, ExpiringBloomFilter, FilterClosedError, ReadOnlyFilterError

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
