"""A same-process second handle must not hang.

Reads that need a consistent snapshot (``copy``, ``to_bytes``, ``|``, ``to_bloom``, a
counting union with a second handle of the same file) used to take the exclusive flock
through their own handle, so inside ``a.write_lock()`` they waited for the caller's own
lock forever. A real self-deadlock (a *write* through a second handle inside the block)
now raises at once, and ``write_lock(timeout=...)`` raises ``LockTimeout``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, LockTimeout, MmapBloomError, SelfDeadlockError
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

CFG = BloomConfig(num_bits=1000, num_hashes=3)


def within(seconds: float, func: Callable[[], Any]) -> Any:
    """Run ``func`` in a daemon thread; fail (instead of hanging the suite) if it does
    not return within ``seconds``. Returns its result or re-raises its exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not return within {seconds} s (hung on its own lock)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_issue_example_counting_union_inside_write_lock(tmp_path: Any) -> None:
    p = str(tmp_path / "c.blc")
    a = CountingBloomFilter.create(p, CFG)
    b = CountingBloomFilter.open(p)
    a.add("x")

    def body() -> int:
        with a.write_lock():
            a.union(b)  # used to never return
        return a.count("x")

    assert within(5, body) == 2  # a multiset sum: the counter doubled
    a.close()
    b.close()


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
@pytest.mark.parametrize("readonly", [False, True])
def test_snapshot_reads_of_second_handle_inside_write_lock(tmp_path: Any, cls: Any, readonly: bool) -> None:
    p = str(tmp_path / "f.bin")
    a = cls.create(p, CFG)
    b = cls.open(p, readonly=readonly)
    ops: dict[str, Callable[[], Any]] = {
        "b.to_bytes": b.to_bytes,
        "b.copy": lambda: b.copy().to_bytes(),
        "b | a": lambda: (b | a).to_bytes(),
        "a | b": lambda: (a | b).to_bytes(),
        "pickle-free copy of a": lambda: a.copy().to_bytes(),
    }
    if cls is CountingBloomFilter:
        ops["b.to_bloom"] = lambda: b.to_bloom().to_bytes()
    for name, op in ops.items():

        def body() -> Any:
            with a.write_lock():
                a.add(name)  # the snapshot must see the block's own writes
                return op()

        snap = within(5, body)
        assert isinstance(snap, bytes), name
        if name.endswith("to_bloom"):
            assert name in BloomFilter.from_bytes(snap), name
        elif "|" not in name or cls is BloomFilter:
            assert name in cls.from_bytes(snap), name
    a.close()
    b.close()


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
def test_write_through_second_handle_inside_write_lock_fails_at_once(tmp_path: Any, cls: Any) -> None:
    p = str(tmp_path / "f.bin")
    a = cls.create(p, CFG)
    b = cls.open(p)
    writes: dict[str, Callable[[], Any]] = {
        "add": lambda: b.add("y"),
        "update": lambda: b.update(["y", "z"]),
        "union": lambda: b.union(cls(CFG)),
        "write_lock": lambda: b.write_lock().__enter__(),
        "write_lock timeout": lambda: b.write_lock(timeout=30).__enter__(),
    }
    if cls is BloomFilter:
        writes["add_many"] = lambda: b.add_many(["y"])
    else:
        writes["remove"] = lambda: b.discard("x")
    for name, op in writes.items():

        def body() -> None:
            with a.write_lock():
                t0 = time.monotonic()
                with pytest.raises(SelfDeadlockError) as info:
                    op()
                assert time.monotonic() - t0 < 1, name
                assert p in str(info.value) and "another handle" in str(info.value), name

        within(5, body)
    assert isinstance(SelfDeadlockError("m"), (MmapBloomError, RuntimeError))
    # Outside the block the second handle writes normally, and a's lock was not disturbed.
    assert within(5, lambda: b.add("after"))
    with a.write_lock():
        a.add("a-after")
    a.close()
    b.close()


def test_other_thread_holding_same_file_is_waited_for(tmp_path: Any) -> None:
    """Another thread of this process holding the file's lock (through another handle) is
    not a self-deadlock: the snapshot and the write wait for it, then proceed."""
    p = str(tmp_path / "f.blm")
    a = BloomFilter.create(p, CFG)
    b = BloomFilter.open(p)
    holding, done = threading.Event(), []

    def hold() -> None:
        with a.write_lock():
            holding.set()
            time.sleep(0.4)
            a.add("held")
            done.append(time.monotonic())

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(5)
    snap = within(5, b.to_bytes)
    assert done and "held" in BloomFilter.from_bytes(snap)  # waited for the holder's block
    assert within(5, lambda: b.add("later"))
    t.join(5)
    a.close()
    b.close()


HOLD = r"""
import sys, time
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter
f = BloomFilter.open({path!r})
with f.write_lock():
    print("held", flush=True)
    time.sleep(30)
"""


def test_write_lock_timeout_against_another_process(tmp_path: Any) -> None:
    p = str(tmp_path / "t.blm")
    f = BloomFilter.create(p, CFG)
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(root=ROOT, path=p)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            with f.write_lock(timeout=0.3):
                pytest.fail("took a lock another process holds")
        waited = time.monotonic() - t0
        assert 0.25 <= waited < 2, waited
        assert isinstance(info.value, TimeoutError) and isinstance(info.value, MmapBloomError)
        assert p in str(info.value) and "0.3" in str(info.value)
        assert info.value.timeout == 0.3
        # The failed attempt left nothing held: after the holder dies the lock is ours.
        proc.kill()
        proc.wait(10)
        with f.write_lock(timeout=5):
            f.add("mine")
        with f.write_lock(timeout=0):  # free: a zero timeout still takes it
            assert f.add("again")
    finally:
        proc.kill()
        proc.wait(10)
        f.close()


def test_write_lock_timeout_against_another_thread_same_handle(tmp_path: Any) -> None:
    f = BloomFilter.create(tmp_path / "t.blm", CFG)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with f.write_lock():
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(5)
    with pytest.raises(LockTimeout):
        with f.write_lock(timeout=0.1):
            pass
    release.set()
    t.join(5)
    with f.write_lock(timeout=1):  # re-entrant and timed
        with f.write_lock(timeout=0):
            f.add("x")
    with pytest.raises(ValueError):
        f.write_lock(timeout=-1)
    f.close()
    m = BloomFilter(CFG)  # in memory: only the thread lock, timeout works the same
    with m.write_lock(timeout=0.1):
        m.add("x")


def test_merge_into_inside_own_write_lock_fails_at_once(tmp_path: Any) -> None:
    """The tools meet the same kind: merge_into opens its own handle of the target, so
    inside the caller's write_lock() of that file it raises instead of hanging."""
    from mmapbloom import merge_into
    from tests.conftest import write_shards

    target = str(tmp_path / "t.blm")
    (shard,) = write_shards(tmp_path, CFG, [["s"]])
    a = BloomFilter.create(target, CFG)

    def body() -> None:
        with a.write_lock():
            with pytest.raises(SelfDeadlockError):
                merge_into(target, [shard], progress=False)

    within(5, body)
    merge_into(target, [shard], progress=False)  # outside the block it works
    assert "s" in a
    a.close()
