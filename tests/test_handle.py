"""The handle bound to each open filter (mmapbloom.handle): the native C object and its pure
twin answer alike, keep the items counter under the lock, refuse every call after close
(also when the object outlives its filter, or a call is in flight in another thread), and
never leave the write lock held."""

from __future__ import annotations

import fcntl
import gc
import os
import threading
import warnings
from typing import Any

import numpy as np
import pytest

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    FilterClosedError,
    OverCapacityWarning,
    ReadOnlyFilterError,
    SaturationWarning,
    kernels,
)
from mmapbloom import format as fmt

native = kernels.native_module()
BACKENDS = ["native", "python"] if native is not None else ["python"]


def bind(f: Any, backend: str) -> Any:
    """The filter with the handle of ``backend`` (the native one is the default)."""
    if backend == "python":
        f._h.close()
        f._attach_handle(pure=True)
    assert f._h.backend == backend
    return f


@pytest.fixture(params=BACKENDS)
def backend(request: Any) -> str:
    return str(request.param)


def test_add_and_batches_keep_the_count(tmp_path: Any, backend: str) -> None:
    f = bind(BloomFilter.create(tmp_path / "a.blm", BloomConfig.for_items(10_000, 0.01)), backend)
    assert f.add("a") and not f.add("a") and f.items_added == 1
    keys = [f"k{i}" for i in range(3000)] + ["a", b"bytes", bytearray(b"ba"), memoryview(b"mv")]
    flags = f.add_many(keys)
    assert flags.tolist() == [True] * 3000 + [False, True, True, True]
    assert f.items_added == 3004
    assert f.update(x for x in ["z", "z", "k1"]) == 1  # any iterable; a repeat is new once
    assert f.contains_many(keys + ["absent"]).tolist() == [True] * len(keys) + [False]
    f.close()


def test_lock_is_free_after_each_write(tmp_path: Any, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write path releases the flock (the file lock, forced here: in mutex mode a
    writer holds LOCK_SH for its lifetime): another description of the file can take it."""
    monkeypatch.setenv("MMAPBLOOM_LOCK", "flock")
    path = tmp_path / "l.blm"
    f = bind(BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)), backend)
    other = os.open(path, os.O_RDONLY)
    try:
        for write in (lambda: f.add("x"), lambda: f.update(["y", "z"]), lambda: f.add_many(["w"])):
            write()
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
            fcntl.flock(other, fcntl.LOCK_UN)
        with f.write_lock():
            assert f.add("inside")  # re-entered: no second flock
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)
        f.close()


def test_write_lock_is_free_after_each_write_whatever_the_lock(tmp_path: Any, backend: str) -> None:
    """Every write path releases the write lock in the default mode too (the mutex where
    the platform has one): a second handle's writer, in another thread, gets it at once."""
    path = tmp_path / "m.blm"
    f = bind(BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)), backend)
    g = BloomFilter.open(path)

    def take() -> None:
        with g.write_lock():
            g.add("from g")

    try:
        for write in (lambda: f.add("x"), lambda: f.update(["y", "z"]), lambda: f.add_many(["w"])):
            write()
            t = threading.Thread(target=take)
            t.start()
            t.join(10)
            assert not t.is_alive(), "the write lock stayed held after a write"
        assert "from g" in f and "w" in g
    finally:
        g.close()
        f.close()


def test_add_waits_for_another_holder(tmp_path: Any, backend: str) -> None:
    """A held lock (another description) sends add to the slow path, which waits for it."""
    path = tmp_path / "w.blm"
    f = bind(BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)), backend)
    other = os.open(path, os.O_RDONLY)
    fcntl.flock(other, fcntl.LOCK_EX)
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(f.add("late")))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not done  # waiting for the other holder
    fcntl.flock(other, fcntl.LOCK_UN)
    t.join(10)
    assert done == [True] and f.items_added == 1
    os.close(other)
    f.close()


def test_bad_key_changes_nothing(backend: str) -> None:
    f = bind(BloomFilter(BloomConfig.for_items(1000, 0.01)), backend)
    for bad, exc in ((["ok", 3.5], TypeError), (["ok", "\ud800"], UnicodeEncodeError)):
        with pytest.raises(exc):
            f.update(bad)
        with pytest.raises(exc):
            f.add_many(bad)
        assert f.items_added == 0 and "ok" not in f
    with pytest.raises(TypeError, match="items must be str, bytes-like or int, got float"):
        f.update([1.0])


def test_failed_batches_release_what_they_pinned(backend: str) -> None:
    """A batch refused for a bad key (after keys the handle pinned, exported or encoded)
    releases them all: refcounts are back, a bytearray key is resizable again, and a
    successful batch after it is unaffected."""
    import sys

    f = bind(BloomFilter(BloomConfig.for_items(1000, 0.01)), backend)
    ba, bb, big = bytearray(b"xyz"), b"held", 2**63 + 5
    batch = ["a", ba, bb, memoryview(b"abcdef")[::2], 5, big, np.int64(3), memoryview(b"q")] * 20
    before = (sys.getrefcount(ba), sys.getrefcount(bb), sys.getrefcount(big))
    for bad, exc in ((1.5, TypeError), (2**64, OverflowError), ("\ud800", UnicodeEncodeError)):
        for call in (f.update, f.add_many, f.contains_many):
            with pytest.raises(exc):
                call(batch + [bad])
    assert (sys.getrefcount(ba), sys.getrefcount(bb), sys.getrefcount(big)) == before
    assert f.items_added == 0 and f.count_ones() == 0
    ba.extend(b"!")  # no buffer export left behind
    assert f.update(batch) == 8 and f.contains_many(batch).all() and b"xyz" not in f
    assert (sys.getrefcount(ba), sys.getrefcount(bb), sys.getrefcount(big)) == before


def test_saturated_count_and_one_warning(backend: str) -> None:
    f = bind(BloomFilter(BloomConfig(num_bits=64, num_hashes=2)), backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f.update([f"k{i}" for i in range(60)])
        f.add("more")
    over = [w for w in caught if issubclass(w.category, OverCapacityWarning)]
    assert len(over) == 1 and over[0].filename == __file__  # once per handle, at the caller
    with f.write_lock():
        f._counter.set(fmt.MAX_ITEMS - 1)
    f.update(["n1", "n2", "n3"])
    assert f.items_added == fmt.MAX_ITEMS  # saturates, never wraps


def test_counting_handle(backend: str) -> None:
    f = bind(CountingBloomFilter(BloomConfig(num_bits=1000, num_hashes=3), counter_bits=4), backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(16):
            f.add("hot")
    sat = [w for w in caught if issubclass(w.category, SaturationWarning)]
    assert len(sat) == 1 and sat[0].filename == __file__
    assert f.count("hot") == 15 and f.items_added == 1
    f.add("cold")
    f.remove("cold")
    assert f.count("cold") == 0 and f.items_added == 1
    with pytest.raises(KeyError):
        f.remove("never")


def test_read_only_handle_refuses_writes(tmp_path: Any, backend: str) -> None:
    path = tmp_path / "r.blm"
    BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)).close()
    f = bind(BloomFilter.open(path, readonly=True), backend)
    for write in (lambda: f.add("a"), lambda: f.update(["a"]), lambda: f._h.add("a"), lambda: f._h.add_many(["a"])):
        with pytest.raises(ReadOnlyFilterError):
            write()
    assert "a" not in f
    f.close()
    with pytest.raises(FilterClosedError):
        f._h.add("a")


def test_handle_outliving_its_filter_refuses_every_call(tmp_path: Any, backend: str) -> None:
    """The C object kept after its filter closed and was collected: every method raises
    FilterClosedError (the image export is gone; nothing reads unmapped memory)."""
    for counting, make in (
        (False, lambda: BloomFilter.create(tmp_path / f"o{backend}.blm", BloomConfig.for_items(1000, 0.01))),
        (False, lambda: BloomFilter(BloomConfig.for_items(1000, 0.01))),
        (True, lambda: CountingBloomFilter(BloomConfig.for_items(1000, 0.01))),
    ):
        f = bind(make(), backend)
        f.add("a")
        h = f._h
        f.close()
        del f
        gc.collect()
        calls = [
            lambda: h.add("a"),
            lambda: h.contains("a"),
            lambda: h.add_many(["a"]),
            lambda: h.contains_many(["a"], np.zeros(1, dtype=np.bool_)),
        ]
        if counting:
            calls += [lambda: h.count("a"), lambda: h.remove("a")]
        for call in calls:
            with pytest.raises(FilterClosedError):
                call()
        h.close()  # idempotent
        assert h.closed
    f = BloomFilter.create(tmp_path / f"gc{backend}.blm", BloomConfig.for_items(1000, 0.01))
    h = f._h
    del f  # collected without close(): __del__ closes, the handle refuses
    gc.collect()
    with pytest.raises(FilterClosedError):
        h.contains("a")


def test_close_during_batches_in_other_threads(tmp_path: Any, backend: str) -> None:
    """close() while batch adds and queries run in other threads (the GIL released during
    hashing): each call finishes or raises FilterClosedError (with committed_items for
    adds); the process never reads unmapped memory (see tools/check_native.sh)."""
    keys = [f"key-{i}" for i in range(300_000)]
    for trial in range(4):
        f = bind(BloomFilter.create(tmp_path / f"c{backend}{trial}.blm", BloomConfig.for_items(400_000, 0.01)), backend)
        errors: list[BaseException] = []

        def run(op: Any) -> None:
            try:
                op()
            except BaseException as exc:  # every exception is checked below: only FilterClosedError
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(lambda: f.update(keys),)),
            threading.Thread(target=run, args=(lambda: f.contains_many(keys),)),
        ]
        for t in threads:
            t.start()
        threading.Event().wait(0.002 * trial)
        f.close()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert all(isinstance(exc, FilterClosedError) for exc in errors), errors
        with BloomFilter.open(tmp_path / f"c{backend}{trial}.blm") as g:
            n = g.items_added
            assert n <= len(keys) and g.contains_many(keys[:n]).all()  # what was counted is there
            for exc in errors:
                committed = getattr(exc, "committed_items", None)
                if committed is not None:
                    assert 0 <= committed <= len(keys) and g.contains_many(keys[:committed]).all()


def test_queries_racing_close_with_keys_that_run_python(tmp_path: Any, backend: str) -> None:
    """Keys whose encoding runs Python (numpy integer scalars go through encode_key) give
    another thread the chance to close the filter mid-call: every query answers or raises
    FilterClosedError; none reads the unmapped image (a crash would kill this process)."""
    for trial in range(3):
        f = bind(BloomFilter.create(tmp_path / f"q{backend}{trial}.blm", BloomConfig.for_items(10_000, 0.01)), backend)
        f.update(range(1000))
        outcomes: list[object] = []

        def query() -> None:
            try:
                for i in range(200_000):
                    assert np.int64(i % 1000) in f  # added: never a false negative
            except BaseException as exc:  # checked below
                outcomes.append(exc)

        threads = [threading.Thread(target=query) for _ in range(2)]
        for t in threads:
            t.start()
        threading.Event().wait(0.001 * (trial + 1))
        f.close()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert outcomes and all(isinstance(exc, FilterClosedError) for exc in outcomes), outcomes


@pytest.mark.skipif(native is None, reason="the compiled kernel is not in use")
def test_native_handle_checks_its_arguments() -> None:
    from mmapbloom.locking import WriteLock

    image = bytearray(24 + 128)
    lock = WriteLock(None)

    def make(**kw: Any) -> Any:
        from mmapbloom.handle import Geometry, Hooks

        geometry = Geometry(strategy_id=2, m=1024, k=3, width=1, header_size=24, items_offset=20)
        geometry = geometry._replace(**{key: kw.pop(key) for key in list(kw) if key in Geometry._fields})
        hooks = Hooks(lambda: None, lambda: None, lambda: None, lambda: None, lambda n: None, None)  # type: ignore[arg-type, return-value]
        args = dict(image=image, geometry=geometry, lock=lock, hooks=hooks, writable=True, warn_at=1e9)
        args.update(kw)
        return native.Handle(**args)

    h = make()
    assert h.add("a") and h.contains("a") and int.from_bytes(image[20:24], "little") == 1
    with pytest.raises(ValueError, match="image has"):
        make(m=2048)
    with pytest.raises(ValueError, match="width"):
        make(width=2)
    with pytest.raises(ValueError, match="items_offset"):
        make(items_offset=22)
    with pytest.raises(TypeError):
        make(lock=object())
    with pytest.raises(TypeError, match="counting"):
        h.remove("a")
    with pytest.raises(ValueError, match="out has"):
        h.add_many(["a", "b"], np.zeros(3, dtype=np.bool_))
    h.close()
    with pytest.raises(ValueError, match="closed"):  # hooks.closed() returned without raising
        h.contains("a")
    image.extend(b"x")  # the export is gone: the bytearray may be resized again


def test_interrupt_while_waiting_for_the_lock(backend: str) -> None:
    """A batch waiting for the thread lock (held by another thread) is interruptible: the
    KeyboardInterrupt carries committed_items (0 here), nothing is held afterwards and
    nothing was written."""
    import signal
    import time

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread only")
    f = bind(BloomFilter(BloomConfig.for_items(1000, 0.01)), backend)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with f._storage.lock.thread_lock:
            held.set()
            time.sleep(0.3)  # the main thread is waiting for the lock now
            os.kill(os.getpid(), signal.SIGINT)
            release.wait(10)

    keys = [f"k{i}" for i in range(1000)]  # built first: the signal must find update() waiting
    t = threading.Thread(target=holder)
    gc.disable()  # a gc callback (hypothesis registers one) running at the signal would swallow it
    t.start()
    held.wait(10)
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            f.update(keys)
        assert info.value.committed_items == 0  # type: ignore[attr-defined]
    finally:
        gc.enable()
        release.set()
        t.join(10)
    assert f.items_added == 0 and not f._storage.lock.owned()
    assert f.update(["a", "b"]) == 2  # the lock is free again


def test_custom_strategy_runs_on_the_pure_handle_with_warnings_at_the_caller() -> None:
    """A strategy without a compiled kernel: the filter's base (compiled FilterBase on the
    native backend) calls the pure handle, and the warnings still name the caller's line."""
    import hashlib

    from mmapbloom import register_strategy

    class Sha:
        name = "TSH1"

        def positions(self, key: bytes, k: int, m: int) -> list[int]:
            h = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
            return [(h + i * 7919) % m for i in range(k)]

    strategy = register_strategy(Sha())
    f = BloomFilter(BloomConfig(num_bits=64, num_hashes=2, strategy=strategy))
    c = CountingBloomFilter(BloomConfig(num_bits=64, num_hashes=2, strategy=strategy))
    assert f._h.backend == "python"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert f.add("a") and not f.add("a") and "a" in f and f.might_contain("a")
        for i in range(60):
            f.add(f"x{i}")
        for _ in range(16):
            c.add("hot")
    kinds = {w.category for w in caught}
    assert kinds == {OverCapacityWarning, SaturationWarning}
    assert all(w.filename == __file__ for w in caught)
    assert c.count("hot") == 15 and c.items_added == 1
