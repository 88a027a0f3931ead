"""``with f.write_lock():`` (the lock's ``__enter__`` / ``__exit__``: in C on the native
backend, Python on the pure one) keeps every contract of ``acquire`` / ``release``:
re-entry, exclusion of other handles and threads, SelfDeadlockError, FilterClosedError,
release on an exception, and a readonly handle's snapshot leaving mutex mode."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from mmapbloom import BloomConfig, BloomFilter, FilterClosedError, LockTimeout, SelfDeadlockError
from mmapbloom.kernels import native_module
from mmapbloom.locking import WriteLock

CFG = BloomConfig.for_items(10_000, 1e-6)


def _lock(f: Any) -> WriteLock:
    lock = f._storage.lock
    assert isinstance(lock, WriteLock)
    return lock


def test_enter_and_exit_are_the_compiled_ones_on_the_native_backend() -> None:
    kernels = native_module()
    if kernels is None:
        pytest.skip("pure backend: Python __enter__ / __exit__")
    assert WriteLock.__enter__ is kernels.LockState.__enter__
    assert WriteLock.__exit__ is kernels.LockState.__exit__


def test_the_bound_enter_and_exit_are_cheap_callables_that_keep_the_lock() -> None:
    """Issue 28: on an instance, ``lock.__enter__`` / ``__exit__`` (what ``with`` looks up)
    are LockCalls from a free list, not a bound method allocated per statement; they hold
    the lock like a bound method (a temporary lock in ``with`` lives to the end of the block)."""
    import contextlib
    import gc
    import weakref

    kernels = native_module()
    if kernels is None:
        pytest.skip("pure backend: Python __enter__ / __exit__")
    lock = WriteLock(None)
    enter, leave = cast(Any, lock.__enter__), cast(Any, lock.__exit__)  # called wrongly below
    assert type(enter).__name__ == "LockCall" and enter.__self__ is lock and leave.__name__ == "__exit__"
    assert enter.__doc__ == kernels.LockState.__enter__.__doc__ and "__enter__" in repr(enter)
    assert enter() is lock and lock._depth == 1 and leave(None, None, None) is None and lock._depth == 0
    with pytest.raises(TypeError):
        enter(1)
    with pytest.raises(TypeError):
        leave(None, None)
    with pytest.raises(TypeError):
        leave(None, None, tb=None)
    del enter, leave
    with WriteLock(None) as temporary:  # the statement's only reference is the bound __exit__
        assert temporary._depth == 1 and temporary.owned()
    assert temporary._depth == 0
    with contextlib.ExitStack() as stack:  # type(cm).__enter__(cm): the class-level method
        assert stack.enter_context(lock) is lock and lock._depth == 1
    assert lock._depth == 0
    ref = weakref.ref(lock)
    cycle: list[Any] = [lock.__exit__]
    cycle.append(cycle)
    del lock, cycle
    gc.collect()
    assert ref() is None  # a LockCall in a reference cycle is collected with its lock


def test_reentry_and_exclusion_of_a_second_handle(tmp_path: Any) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f, BloomFilter.open(path) as g:
        lock = cast(WriteLock, f.write_lock())  # no timeout: the WriteLock itself
        with lock as entered:
            assert entered is lock and lock._depth == 1
            with lock:
                assert lock._depth == 2
                f.add("inner")  # re-enters: no second file lock
            assert lock._depth == 1 and lock.owned()
            with pytest.raises(SelfDeadlockError):
                g.add("through-the-other-handle")
            done: list[str] = []

            def other_thread() -> None:
                try:
                    with g.write_lock(timeout=0.2):
                        done.append("locked")
                except LockTimeout:
                    done.append("timeout")

            t = threading.Thread(target=other_thread)
            t.start()
            t.join(30)
            assert done == ["timeout"]  # the file lock is held by f: another thread waits
        assert lock._depth == 0 and not lock.owned()
        with g.write_lock(timeout=5):  # released: the other handle takes it at once
            g.add("after")
        assert "inner" in f and "after" in f


def test_exception_inside_releases_everything(tmp_path: Any) -> None:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f, BloomFilter.open(path) as g:
        with pytest.raises(ZeroDivisionError):
            with f.write_lock():
                f.add("a")
                raise ZeroDivisionError("inside the block")
        assert not _lock(f).owned() and _lock(f)._depth == 0
        with g.write_lock(timeout=5):
            g.add("b")
        assert "a" in g and "b" in f


def test_closed_lock_refuses(tmp_path: Any) -> None:
    f = BloomFilter.create(str(tmp_path / "f.blm"), CFG)
    f.add("x")
    lock = cast(WriteLock, f.write_lock())
    f.close()
    with pytest.raises(FilterClosedError):
        with lock:
            pass
    assert not lock.owned()


def test_threads_exclude_each_other(tmp_path: Any) -> None:
    with BloomFilter.create(str(tmp_path / "f.blm"), CFG) as f:
        lock = f.write_lock()
        counter = [0]

        def work() -> None:
            for _ in range(2000):
                with lock:
                    v = counter[0]
                    counter[0] = v + 1  # lost updates if two threads were inside at once

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert counter[0] == 8000


def test_readonly_snapshot_leaves_mutex_mode(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("MMAPBLOOM_LOCK", raising=False)
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, CFG) as f:
        f.add("x")
        if _lock(f).mode != "mutex":
            pytest.skip("no robust mutex here")
        with BloomFilter.open(path, readonly=True) as r:
            assert r.to_bytes() == f.to_bytes()
            lock = _lock(r)
            assert lock.mode == "mutex" and lock._mutex is None and lock._pending  # LOCK_SH dropped
            assert not lock.owned()


def test_in_memory_filter_with_statement() -> None:
    f = BloomFilter(CFG)
    with f.write_lock():
        with f.write_lock():
            f.add("m")
    assert "m" in f and not _lock(f).owned()


def test_wait_for_another_thread_is_interruptible(tmp_path: Any) -> None:
    """The thread lock's wait runs signal handlers between slices: Ctrl-C ends it promptly and
    nothing is held afterwards."""
    import os
    import signal
    import time

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGINT"):
        pytest.skip("signals reach the main thread only")
    with BloomFilter.create(str(tmp_path / "f.blm"), CFG) as f:
        lock = cast(WriteLock, f.write_lock())
        held, leave = threading.Event(), threading.Event()

        def holder() -> None:
            with lock:
                held.set()
                leave.wait(30)

        t = threading.Thread(target=holder)
        t.start()
        assert held.wait(30)
        timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                with lock:
                    pass
            assert time.monotonic() - t0 < 5
        finally:
            timer.cancel()
            leave.set()
            t.join(30)
        assert not lock.owned()
        with lock:  # free again
            f.add("after")
        assert "after" in f
