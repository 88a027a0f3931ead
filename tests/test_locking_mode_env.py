"""``MMAPBLOOM_LOCK``: ``mutex`` requires the robust mutex (a clear ConfigError naming the file
and the reason where it cannot be used, never a silent flock), and an unknown value is refused
naming the valid ones. Both backends (the mutex is used by the pure path too)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, ConfigError
from mmapbloom import locking
from mmapbloom.locking import LOCK_ENV, SIDE_SUFFIX

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX locks")

CFG = BloomConfig.for_items(1_000, 1e-6)


def _mutex_here(tmp_path: Any, monkeypatch: Any) -> bool:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with BloomFilter.create(str(tmp_path / "probe.blm"), CFG) as f:
        f.add("x")
        return f._storage.lock.mode == "mutex"


@pytest.fixture
def mutex_platform(tmp_path: Any, monkeypatch: Any) -> None:
    if not _mutex_here(tmp_path, monkeypatch):
        pytest.skip("no robust process-shared mutex on this platform / file system")


def _still_writable(path: str, monkeypatch: Any) -> None:
    """Nothing was left held by the refused lock: another handle writes, no false negative."""
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with BloomFilter.open(path) as g:
        g.add("after")
        assert "after" in g and "before" in g


@pytest.mark.parametrize("value", ["mutx", "fcntl", "1"])
def test_unknown_value_is_refused_naming_the_valid_ones(tmp_path: Any, monkeypatch: Any, value: str) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        monkeypatch.delenv(LOCK_ENV, raising=False)
    with BloomFilter.open(path) as f:
        monkeypatch.setenv(LOCK_ENV, value)
        with pytest.raises(ConfigError) as info:
            f.add("k")
        msg = str(info.value)
        assert repr(value) in msg and "'auto'" in msg and "'flock'" in msg and "'mutex'" in msg
        assert isinstance(info.value, ValueError)
        monkeypatch.delenv(LOCK_ENV)
        f.add("before")  # the refusal held nothing: the same handle writes once it is fixed
        assert "before" in f


@pytest.mark.parametrize("value", ["mutex", " MUTEX "])
def test_mutex_required_uses_the_mutex(tmp_path: Any, monkeypatch: Any, mutex_platform: None, value: str) -> None:
    monkeypatch.setenv(LOCK_ENV, value)
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:  # its build temporary is exempt: one builder
        f.add("k")
        assert f._storage.lock.mode == "mutex"
        with f.write_lock():
            f.add("j")
        assert "k" in f and "j" in f
    assert os.path.exists(path + SIDE_SUFFIX)


def test_mutex_required_refuses_hard_links(tmp_path: Any, monkeypatch: Any, mutex_platform: None) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        f.add("before")
    os.link(path, str(tmp_path / "other.blm"))
    monkeypatch.setenv(LOCK_ENV, "mutex")
    with BloomFilter.open(path) as f:
        with pytest.raises(ConfigError) as info:
            f.add("k")
        assert path in str(info.value) and "2 hard links" in str(info.value) and "mutex" in str(info.value)
        with pytest.raises(ConfigError):
            with f.write_lock():
                pass
        assert f._storage.lock.mode is None  # never fell back to flock
    _still_writable(path, monkeypatch)


def test_mutex_required_refuses_an_unknown_file_system(tmp_path: Any, monkeypatch: Any, mutex_platform: None) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        f.add("before")
    reason = "file system type 0x6969 (nfs) is not a known local one"
    monkeypatch.setattr(locking._mutex_kernels, "mutex_supported", lambda fd: reason)
    monkeypatch.setenv(LOCK_ENV, "mutex")
    with BloomFilter.open(path) as f:
        with pytest.raises(ConfigError) as info:
            f.add("k")
        assert path in str(info.value) and reason in str(info.value)
    monkeypatch.setenv(LOCK_ENV, "auto")  # auto falls back to flock on the same file system
    with BloomFilter.open(path) as f:
        f.add("k")
        assert f._storage.lock.mode == "flock" and "k" in f and "before" in f


def test_mutex_required_refuses_a_side_file_that_cannot_be_made(
    tmp_path: Any, monkeypatch: Any, mutex_platform: None
) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        f.add("before")
    side = path + SIDE_SUFFIX
    if os.path.exists(side):
        os.unlink(side)
    os.mkdir(side)  # a directory in its place: neither opened nor replaced by rename
    monkeypatch.setenv(LOCK_ENV, "mutex")
    with BloomFilter.open(path) as f:
        with pytest.raises(ConfigError) as info:
            f.add("k")
        assert path in str(info.value) and side in str(info.value)
    _still_writable(path, monkeypatch)
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert leftovers == []
