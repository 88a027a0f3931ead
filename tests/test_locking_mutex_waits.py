"""The mutex's waits and its side file's creation: the timeout= contract of a wait for another
process's hold (slices on the monotonic clock where glibc has pthread_mutex_clocklock), and
the temporaries a creator SIGKILLed mid-create leaves behind (removed by the next creator)."""

from __future__ import annotations

import os
import platform
import signal
import time
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, LockTimeout
from mmapbloom import locking
from mmapbloom.locking import LOCK_ENV, SIDE_SUFFIX

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

CFG = BloomConfig.for_items(1_000, 1e-6)


@pytest.fixture
def mutex_mode(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with BloomFilter.create(str(tmp_path / "probe.blm"), CFG) as f:
        f.add("x")
        if f._storage.lock.mode != "mutex":
            pytest.skip("no robust process-shared mutex on this platform / file system")


def _hold_in_child(path: str) -> int:
    """A child process that holds the write lock of ``path`` until SIGKILLed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            g = BloomFilter.open(path)
            with g.write_lock():
                g.add("held")
                os.write(w, b"1")
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    return pid


def test_wait_clock_is_monotonic_where_glibc_has_clocklock(tmp_path: Any, mutex_mode: None) -> None:
    with BloomFilter.create(str(tmp_path / "f.blm"), CFG) as f:
        f.add("k")
        clock = f._storage.lock._mutex.wait_clock
    libc, version = platform.libc_ver()
    if libc == "glibc" and tuple(int(x) for x in version.split(".")[:2]) >= (2, 30):
        assert clock == "monotonic"
    else:
        assert clock in ("monotonic", "realtime")


@pytest.mark.parametrize("timeout", [0.0, 0.15, 0.4])
def test_timeout_contract_while_another_process_holds(tmp_path: Any, mutex_mode: None, timeout: float) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    pid = _hold_in_child(path)
    try:
        with BloomFilter.open(path) as f:
            t0 = time.monotonic()
            with pytest.raises(LockTimeout) as info:
                with f.write_lock(timeout=timeout):
                    f.add("never")
            waited = time.monotonic() - t0
            assert f._storage.lock.mode == "mutex"
            assert info.value.timeout == timeout and info.value.path == path
            assert timeout <= waited < timeout + 2.0, waited  # not early, not slices late
            assert not f._storage.lock.owned()  # nothing held after the timeout
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with BloomFilter.open(path) as f:
        with f.write_lock(timeout=5):
            f.add("after")
        assert "held" in f and "after" in f and "never" not in f


def _temporaries(folder: Any, side_name: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(side_name + ".") and n.endswith(".tmp"))


def test_temporary_of_a_creator_killed_mid_create_is_removed(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    side = path + SIDE_SUFFIX
    if os.path.exists(side):
        os.unlink(side)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child: stops inside _create_side, after its temporary exists
        try:
            real = locking._Mutex

            class Stuck:
                def __new__(cls, *args: Any) -> Any:
                    return real(*args)

                @staticmethod
                def create(*args: Any) -> None:
                    os.write(w, b"1")
                    time.sleep(60)

            locking._Mutex = Stuck
            with BloomFilter.open(path) as g:
                g.add("k")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    left = _temporaries(tmp_path, os.path.basename(side))
    assert len(left) == 1 and left[0].startswith(f"{os.path.basename(side)}.{pid}."), left  # the killed one's
    with BloomFilter.open(path) as f:
        f.add("k")
        assert f._storage.lock.mode == "mutex"
    assert _temporaries(tmp_path, os.path.basename(side)) == []
    assert os.path.exists(side)


def test_planted_temporaries_of_this_side_file_only_are_removed(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    side = path + SIDE_SUFFIX
    if os.path.exists(side):
        os.unlink(side)
    stale = [side + ".12345.678.tmp", side + ".1.2.tmp"]
    kept = [side + ".notes.tmp", str(tmp_path / "g.blm.mutex.12345.678.tmp"), side + ".1.2.3.tmp"]
    for name in stale + kept:
        open(name, "wb").close()
    with BloomFilter.open(path) as f:
        f.add("k")
        assert f._storage.lock.mode == "mutex"
    for name in stale:
        assert not os.path.exists(name), name
    for name in kept:
        assert os.path.exists(name), name
