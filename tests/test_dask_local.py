"""mmapbloom.dask on Dask's synchronous scheduler, in this process (fast: no cluster; the
real-process LocalCluster runs are the slow tests of test_dask.py): shards of a Bag and of
a Series equal to a single-process build, ``build`` with ``overwrite`` and ``into``, and
every refusal before anything is computed, naming the value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("dask")

import dask  # noqa: E402
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402

from mmapbloom import BloomConfig, BloomFilter, IncompatibleFiltersError  # noqa: E402
from mmapbloom.dask import build, build_shards  # noqa: E402

CFG = BloomConfig(num_bits=1 << 14, num_hashes=5)
ITEMS = [f"item-{i}" for i in range(600)]


@pytest.fixture(autouse=True)
def synchronous() -> Iterator[None]:
    with dask.config.set(scheduler="synchronous"):
        yield


def single(items: list[Any]) -> bytes:
    f = BloomFilter(CFG)
    f.update(items)
    return bytes(f.to_bytes())[24:]  # the bits (the header's items count may differ)


def bits(path: str) -> bytes:
    with BloomFilter.open(path, readonly=True) as f:
        return bytes(f.to_bytes())[24:]


def listing(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not n.endswith(".mutex"))


def test_bag_shards_are_one_per_partition(tmp_path: Path) -> None:
    bag = db.from_sequence(ITEMS, npartitions=3)
    shards = build_shards(bag, CFG, tmp_path / "sh", prefix="p")
    assert [os.path.basename(s) for s in shards] == ["p-00000.blm", "p-00001.blm", "p-00002.blm"]
    union = BloomFilter(CFG)
    for s in shards:
        with BloomFilter.open(s, readonly=True) as f:
            union |= f
    assert bytes(union.to_bytes())[24:] == single(ITEMS)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        build_shards(bag, CFG, tmp_path / "sh", prefix="p")
    assert build_shards(bag, CFG, tmp_path / "sh", prefix="p", overwrite=True) == shards


def test_series_shards_skip_missing_values(tmp_path: Path) -> None:
    series = dd.from_pandas(pd.Series(ITEMS[:100] + [None] * 5, dtype=object), npartitions=2)
    shards = build_shards(series, CFG, tmp_path / "sh")
    assert len(shards) == 2
    items = 0
    for s in shards:
        with BloomFilter.open(s, readonly=True) as f:
            items += f.items_added
    assert items == 100  # a missing value is never added


def test_build_then_overwrite_then_into(tmp_path: Path) -> None:
    out = str(tmp_path / "out.blm")
    assert build(db.from_sequence(ITEMS[:300], npartitions=2), CFG, out) == out
    assert bits(out) == single(ITEMS[:300])
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        build(db.from_sequence(ITEMS, npartitions=2), CFG, out)
    build(db.from_sequence(ITEMS[300:], npartitions=2), CFG, out, overwrite=True)
    assert bits(out) == single(ITEMS[300:])
    build(db.from_sequence(ITEMS[:300], npartitions=3), CFG, out, into=True)
    assert bits(out) == single(ITEMS)
    assert listing(tmp_path) == ["out.blm"]  # the shard directory is gone


def test_build_of_a_collection_without_partitions_is_an_empty_filter(tmp_path: Path) -> None:
    out = str(tmp_path / "empty.blm")
    build(db.from_sequence([], npartitions=1), CFG, out)
    with BloomFilter.open(out, readonly=True) as f:
        assert f.items_added == 0 and f.count_ones() == 0


def test_refusals_before_anything_is_computed(tmp_path: Path) -> None:
    bag = db.from_sequence(ITEMS, npartitions=2)
    with pytest.raises(TypeError, match="config must be a BloomConfig, got dict"):
        build_shards(bag, {"num_bits": 10}, tmp_path)  # type: ignore[arg-type]
    frame = dd.from_pandas(pd.DataFrame({"url": ITEMS, "n": range(len(ITEMS))}), npartitions=2)
    with pytest.raises(TypeError, match=r"ONE DataFrame column.*\['url', 'n'\]"):
        build_shards(frame, CFG, tmp_path / "x")
    with pytest.raises(TypeError, match="a Dask Bag or a Dask Series, got list"):
        build_shards(ITEMS, CFG, tmp_path / "x")
    with pytest.raises(ValueError, match="exclude each other"):
        build(bag, CFG, tmp_path / "o.blm", overwrite=True, into=True)
    with pytest.raises(FileNotFoundError):
        build(bag, CFG, tmp_path / "missing.blm", into=True)
    other = str(tmp_path / "other.blm")
    BloomFilter.create(other, BloomConfig(num_bits=1 << 12, num_hashes=5)).close()
    with pytest.raises(IncompatibleFiltersError, match="num_bits differs"):
        build(bag, CFG, other, into=True)
    assert listing(tmp_path) == ["other.blm"]


def test_an_item_of_another_type_names_its_partition(tmp_path: Path) -> None:
    bag = db.from_sequence(["a", "b", 1.5, "c"], npartitions=2)
    with pytest.raises(TypeError, match="partition 1: .*series.astype\\(str\\)"):
        build_shards(bag, CFG, tmp_path / "sh")
    assert [n for n in listing(tmp_path / "sh") if n.startswith(".mmapbloom-")] == []  # no partial shard
