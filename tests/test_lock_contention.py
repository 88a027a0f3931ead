"""The write lock in one process, in both cross-process modes (the robust mutex, the
default where the extension exists, and ``MMAPBLOOM_LOCK=flock``): a second handle of the
same file held by another thread makes a timed write_lock raise LockTimeout and an untimed
one wait; the same thread through a second handle raises SelfDeadlockError at once; an
unknown MMAPBLOOM_LOCK value is refused naming it; a closed handle refuses to lock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mmapbloom import BloomConfig, BloomFilter, ConfigError, FilterClosedError, LockTimeout, SelfDeadlockError
from mmapbloom.locking import LOCK_ENV, WriteLock

CFG = BloomConfig(num_bits=8192, num_hashes=3)


@pytest.fixture(params=["auto", "flock"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(LOCK_ENV, request.param)
    return str(request.param)


def holding(f: BloomFilter, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """A thread that holds ``f``'s write lock for ``seconds``; the event is set once held."""
    held = threading.Event()

    def hold() -> None:
        with f.write_lock():
            held.set()
            time.sleep(seconds)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(10)
    return t, held


def test_a_timed_write_lock_times_out_then_an_untimed_one_waits(tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "f.blm")
    a = BloomFilter.create(path, CFG)
    b = BloomFilter.open(path)
    try:
        t, _ = holding(a, 0.6)
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            with b.write_lock(timeout=0.1):
                pass
        assert 0.05 < time.monotonic() - t0 < 0.55 and isinstance(info.value, TimeoutError)
        assert info.value.timeout == 0.1
        with pytest.raises(LockTimeout):
            with b.write_lock(timeout=0):
                pass
        b.add("waited")  # waits for the holder's block to end
        assert time.monotonic() - t0 >= 0.5
        t.join()
        assert "waited" in a
        with b.write_lock(timeout=1):
            assert b.add("timed")
    finally:
        a.close()
        b.close()


def test_a_second_handle_in_the_same_thread_is_refused_at_once(tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as a, BloomFilter.open(path) as b:
        with a.write_lock():
            a.add("a")
            t0 = time.monotonic()
            with pytest.raises(
                SelfDeadlockError, match="already holds the write lock of this file through another handle"
            ):
                b.add("b")
            assert time.monotonic() - t0 < 5
            assert b.to_bytes() == a.to_bytes()  # snapshot reads of the second handle work
        assert b.add("b")  # outside the block: fine


def test_the_mode_is_chosen_at_the_first_write(tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        lock = f.write_lock()
        assert isinstance(lock, WriteLock)
        f.add("x")
        assert lock.mode in ("mutex", "flock")
        if mode == "flock":
            assert lock.mode == "flock"


def test_an_unknown_lock_mode_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "f.blm")
    monkeypatch.setenv(LOCK_ENV, "spinlock")
    with BloomFilter.create(path, CFG) as f:
        with pytest.raises(ConfigError, match="MMAPBLOOM_LOCK='spinlock': expected 'auto', 'flock', 'mutex' or unset"):
            f.add("x")
        assert "x" not in f


def test_a_closed_handle_refuses_its_lock(tmp_path: Path) -> None:
    f = BloomFilter.create(str(tmp_path / "f.blm"), CFG)
    lock = f.write_lock()
    f.close()
    with pytest.raises(FilterClosedError):
        lock.acquire()
    with pytest.raises(FilterClosedError):
        f.write_lock()
