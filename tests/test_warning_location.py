"""Every warning the package emits points at the user's line (this file), whatever path
inside the package raised it: the over-capacity warning of each kind and each writer
(per-item add, update, union, merge_into, merge_shards), the M3KM sizing floor (direct and from
a scalable layer's sizing) and the saturation warning of the counting filter."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, ScalableBloomFilter
from mmapbloom.errors import OverCapacityWarning
from mmapbloom import merge_into, merge_shards


def _caught(fn: Callable[[], object], category: type[Warning]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [w for w in seen if issubclass(w.category, category)]


def _assert_here(seen: list[warnings.WarningMessage]) -> None:
    assert seen, "no warning"
    assert all(w.filename == __file__ for w in seen), [(w.filename, w.lineno) for w in seen]


SMALL = BloomConfig.for_items(10, 0.01)


@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_over_capacity_from_add_points_at_the_caller(kind: type) -> None:
    f = kind(SMALL)

    def adds() -> None:
        for i in range(40):
            f.add(f"k{i}")

    _assert_here(_caught(adds, OverCapacityWarning))


@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
@pytest.mark.parametrize("keys", [[f"k{i}" for i in range(40)], np.arange(40, dtype=np.int64)], ids=["list", "numpy"])
def test_over_capacity_from_update_points_at_the_caller(kind: type, keys: object) -> None:
    f = kind(SMALL)
    _assert_here(_caught(lambda: f.update(keys), OverCapacityWarning))


@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_over_capacity_from_union_points_at_the_caller(kind: type) -> None:
    a, b = kind(SMALL), kind(SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a.update([f"a{i}" for i in range(9)])
        b.update([f"b{i}" for i in range(9)])
    _assert_here(_caught(lambda: a.union(b), OverCapacityWarning))


def test_over_capacity_from_merge_tools_points_at_the_caller(tmp_path: Path) -> None:
    shards = []
    for s in range(2):
        p = tmp_path / f"s{s}.blm"
        with BloomFilter.create(p, SMALL) as f:
            f.update([f"s{s}-{i}" for i in range(9)])
        shards.append(p)
    BloomFilter.create(tmp_path / "t.blm", SMALL).close()
    _assert_here(_caught(lambda: merge_into(tmp_path / "t.blm", shards, progress=False), OverCapacityWarning))
    _assert_here(_caught(lambda: merge_shards(tmp_path / "out.blm", shards, progress=False), OverCapacityWarning))


def test_m3km_floor_points_at_the_caller(tmp_path: Path) -> None:
    _assert_here(_caught(lambda: BloomConfig.for_items(10**6, 1e-9, strategy="M3KM"), UserWarning))

    def scalable() -> None:  # unusual sizes: layer configs are cached per process (sized, and warned, once)
        with ScalableBloomFilter.create(tmp_path / "s", 97, 0.00093, strategy="M3KM") as f:
            f.update([f"k{i}" for i in range(2000)])

    _assert_here(_caught(scalable, UserWarning))


@pytest.mark.parametrize("name", ["M3KM", "M3B2"])
def test_directory_kinds_take_a_strategy_by_name_as_bloomconfig_does(tmp_path: Path, name: str) -> None:
    from mmapbloom import ExpiringBloomFilter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ScalableBloomFilter.create(tmp_path / "s", 1000, 0.01, strategy=name) as f:
            assert f.strategy.name == name
        with ExpiringBloomFilter.create(tmp_path / "e", 60, 1000, 0.01, strategy=name) as e:
            assert e.strategy.name == name
