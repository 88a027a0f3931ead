"""``copy.copy`` and ``copy.deepcopy`` of every filter kind (issue 29, item 9): an
independent in-memory filter, as ``f.copy()``, never a second handle on the same file; a
cuckoo filter the same; the directory kinds (scalable, expiring: no in-memory form) refuse
them, naming ``open``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from mmapbloom import (
    M3B2,
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    CuckooFilter,
    ExpiringBloomFilter,
    FilterClosedError,
    ScalableBloomFilter,
)

COPIES: list[Callable[[Any], Any]] = [copy.copy, copy.deepcopy]


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
@pytest.mark.parametrize("how", COPIES, ids=["copy", "deepcopy"])
@pytest.mark.parametrize("where", ["file", "file-readonly", "memory"])
def test_stdlib_copies_are_independent_in_memory_filters(tmp_path: Path, cls: Any, how: Any, where: str) -> None:
    config = BloomConfig.for_items(1000, 0.01)
    path = tmp_path / "f.blm"
    if where == "memory":
        f = cls(config)
    else:
        with cls.create(path, config) as w:
            w.add("a")
        f = cls.open(path, readonly=where == "file-readonly")
    with f:
        if where == "memory":
            f.add("a")
        dup = how(f)
        assert type(dup) is cls and dup is not f
        assert dup == f.copy() and "a" in dup
        assert dup.add("x")  # writable, even when f is read-only
        assert "x" not in f and "x" in dup
        if where == "file":
            f.add("y")
            assert "y" not in dup
        dup.close()
        assert "a" in f  # closing the copy leaves the original open
    if where != "memory":
        with cls.open(path) as again:
            assert "x" not in again


def test_deepcopy_of_a_container_copies_each_filter_once(tmp_path: Path) -> None:
    with BloomFilter.create(tmp_path / "f.blm", BloomConfig.for_items(100, 0.01, strategy=M3B2())) as f:
        f.add("a")
        box = {"one": f, "two": f}
        out = copy.deepcopy(box)
        assert out["one"] is out["two"] and out["one"] is not f
        out["one"].add("z")
        assert "z" not in f


def test_stdlib_copies_of_a_closed_filter_raise(tmp_path: Path) -> None:
    f = BloomFilter.create(tmp_path / "f.blm", BloomConfig.for_items(100, 0.01))
    f.close()
    for how in COPIES:
        with pytest.raises(FilterClosedError):
            how(f)


@pytest.mark.parametrize("how", COPIES, ids=["copy", "deepcopy"])
def test_scalable_filters_refuse_stdlib_copies(tmp_path: Path, how: Any) -> None:
    with ScalableBloomFilter.create(tmp_path / "s", 100, 0.01) as f:
        f.add("a")
        with pytest.raises(TypeError, match=r"ScalableBloomFilter\.open\(path\)") as info:
            how(f)
        assert "second handle" in str(info.value) and str(tmp_path / "s") in str(info.value)
        assert "a" in f


@pytest.mark.parametrize("how", COPIES, ids=["copy", "deepcopy"])
@pytest.mark.parametrize("where", ["file", "file-readonly", "memory"])
def test_cuckoo_stdlib_copies_are_independent_in_memory_filters(tmp_path: Path, how: Any, where: str) -> None:
    path = tmp_path / "f.ckf"
    if where == "memory":
        f = CuckooFilter(1000, 0.01)
    else:
        with CuckooFilter.create(path, 1000, 0.01) as w:
            w.add("a")
        f = CuckooFilter.open(path, readonly=where == "file-readonly")
    with f:
        if where == "memory":
            f.add("a")
        dup = how(f)
        assert type(dup) is CuckooFilter and dup is not f
        assert dup == f.copy() and "a" in dup
        assert dup.add("x") and "x" not in f
        if where == "file":
            f.add("y")
            assert "y" not in dup
        dup.close()
        assert "a" in f
    if where != "memory":
        with CuckooFilter.open(path) as again:
            assert "x" not in again


@pytest.mark.parametrize("how", COPIES, ids=["copy", "deepcopy"])
def test_expiring_filters_refuse_stdlib_copies(tmp_path: Path, how: Any) -> None:
    with ExpiringBloomFilter.create(tmp_path / "e", 60, 100, 0.01) as f:
        f.add("a")
        with pytest.raises(TypeError, match=r"ExpiringBloomFilter\.open\(path\)") as info:
            how(f)
        assert "second handle" in str(info.value)
        assert "a" in f
