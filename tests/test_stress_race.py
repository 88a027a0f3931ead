"""Stress: racing processes and threads.

Extends tests/test_processes.py and tests/test_properties.py (which run each scenario once,
with spawned workers) with repeated, randomised, forked trials:

* 8 processes released at once by a start gate doing ``open_or_create`` then adds on the
  same new path, with small and large (slow to reserve) files: one file, no temporary
  left, every process on the same inode, "new" exactly once per item, no lost bit.
* A reader keeps a filter open (read-write and read-only) while another process replaces
  the path atomically (``os.replace`` of a new file) again and again: the reader keeps
  working on its own copy, never gets SIGBUS, and a child it forks afterwards still adds
  to that copy; the path ends up holding the replacer's last file, intact.
* A filter opened before ``fork()`` used by 4 children while a parent thread holds the
  write lock, or is adding in a tight loop, at fork time: no deadlock (deadline), no lost
  bit, "new" exactly once.
* 16 threads adding through one handle and 16 threads each with its own handle, mixing
  add, add_many and locked adds, while a reader thread checks that no bit is ever
  cleared: zero lost bits, "new" exactly once per distinct item.

* Counting filter: 4 processes released at once each add their own items and items
  shared by all, and remove a random part of what they themselves added, interleaved
  (single adds and removes, or ``update`` batches and remove loops under ``write_lock()``),
  while a reader process checks that pinned items (added before, never removed) are
  always found: every counter ends equal to the sequential result (no saturation, so the
  order does not matter), every remove found its item, and the reader never missed one.
* Merges: ``merge_into`` (library, or ``mmapbloom merge --into`` through the CLI's
  ``main``) racing with 2 writer processes adding to the target (single adds, batches,
  ``write_lock()`` blocks), a second ``merge_into`` of other shards and a reader checking
  that no bit is ever cleared: the target ends with exactly the bits of everything, no
  item lost on either side, and items added is the exact sum. And ``merge_shards`` into a
  new file while a writer keeps adding to one of the shards: the output contains every
  item acknowledged before the merge started, only bits the shard had by its end, and
  passes verify.

Trials (CI / ``--torture``): open_or_create 4 / 30, replace 4 / 20 (x2 reader modes), fork
4 / 20 (x2 parent-thread modes), threads 2 / 10, counting 3 / 20 (x2: single, batched),
merges 3 / 20 (each of the two merge tests); plus the fixed regression cases.
"""

from __future__ import annotations

import collections
import os
import random
import select
import sys
import threading
import time
from typing import Any, cast

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, FilterClosedError, verify_file
from mmapbloom.merge import merge_into, merge_shards
from tests.torture_support import Forked, Gate, join_all, trials

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()"),
    pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning"),
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    counts = {
        "create_trial": (4, 30),
        "replace_trial": (4, 20),
        "fork_trial": (4, 20),
        "thread_trial": (2, 10),
        "counting_trial": (3, 20),
        "merge_trial": (3, 20),
    }
    for name, (default, torture) in counts.items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, range(trials(metafunc.config, default, torture)))


def reference_bits(config: BloomConfig, items: list[str]) -> bytes:
    f = BloomFilter(config)
    f.update(items)
    return f.to_bytes()[24:]


# -- 8 processes race open_or_create ----------------------------------------------------------


def _open_or_create_and_add(
    path: str, config: BloomConfig, items: list[str], mode: str
) -> tuple[tuple[int, int], list[str]]:
    with BloomFilter.open_or_create(path, config) as f:
        st = os.stat(path)  # nothing replaces the path in this test
        if mode == "add":
            new = [x for x in items if f.add(x)]
        else:
            flags = f.add_many(items)
            new = [x for x, n in zip(items, flags, strict=True) if n]
        return (st.st_dev, st.st_ino), new


def test_eight_processes_open_or_create(tmp_path: Any, create_trial: int) -> None:
    rng = random.Random(create_trial)
    # Alternate small files and 32 MB ones (a slow posix_fallocate widens the race window).
    config = (
        BloomConfig.for_items(2_000, 1e-9)
        if create_trial % 2 == 0
        else BloomConfig(num_bits=8 * 32 * 2**20, num_hashes=30)
    )
    path = str(tmp_path / "race.blm")
    items = [f"item-{create_trial}-{i}" for i in range(400)]
    gate = Gate()
    children = [
        gate.fork(_open_or_create_and_add, path, config, rng.sample(items, len(items)), rng.choice(["add", "add_many"]))
        for _ in range(8)
    ]
    gate.open()
    join_all(children, timeout=120)
    results = [c.result() for c in children]
    assert len({inode for inode, _ in results}) == 1, "processes opened different files"
    assert results[0][0] == (os.stat(path).st_dev, os.stat(path).st_ino)
    counts = collections.Counter(x for _, new in results for x in new)
    assert set(counts) == set(items) and set(counts.values()) == {1}, "new not reported exactly once"
    # one file, no temporaries (the write lock's side file is none)
    assert [n for n in os.listdir(tmp_path) if n != "race.blm.mutex"] == ["race.blm"]
    with cast(BloomFilter, verify_file(path)) as f:
        assert f.items_added == len(items)
        assert f.to_bytes()[24:] == reference_bits(config, items)
    os.unlink(path)  # up to 32 MB: keep the disk free for CI


# -- a reader while the path is replaced ------------------------------------------------------------


def _reader(path: str, readonly: bool, mine: list[str], replaced_fd: int, rounds: int, opened_fd: int) -> int:
    """Keep one handle on the original file while the path is being replaced; check the
    original's items all along; add our own items (read-write); afterwards fork a child
    that adds through the inherited handle. Returns the number of checks made."""
    f = BloomFilter.open(path, readonly=readonly)
    os.write(opened_fd, b"o")  # the replacer starts only now: we hold the original file
    checks = 0
    original = [f"orig-{i}" for i in range(1000)]
    deadline = time.monotonic() + 30
    while os.read(replaced_fd, 1) == b"" and time.monotonic() < deadline:  # pragma: no cover
        time.sleep(0.001)
    for r in range(rounds):
        assert f.contains_many(original).all()
        assert all(x in f for x in original[::50])
        if not readonly:
            f.add(f"{mine[0]}-{r}")
            f.update([f"{x}-{r}" for x in mine])
            assert f.contains_many([f"{x}-{r}" for x in mine]).all()
        f.check()
        checks += 1
    if not readonly:
        # A child forked after the path was replaced reopens its lock descriptor through
        # /proc/self/fd (the same inode), not by path (another file now).
        def grandchild() -> bool:
            return f.add("from-the-grandchild") or "from-the-grandchild" in f

        g = Forked(grandchild)
        join_all([g], 30)
        assert g.result()
        assert "from-the-grandchild" in f
    f.close()
    return checks


def _replacer(path: str, times: int, started_fd: int, opened_fd: int) -> list[str]:
    """Replace ``path`` atomically ``times`` times with new filters, once the reader has
    opened the original (on a loaded machine it could otherwise open a replacement);
    returns the items of the last one."""
    assert os.read(opened_fd, 1) == b"o"
    last: list[str] = []
    for t in range(times):
        tmp = f"{path}.new-{t}"
        with BloomFilter.create(tmp, BloomConfig.for_items(5_000, 1e-9)) as g:
            last = [f"replacement-{t}-{i}" for i in range(200)]
            g.update(last)
        os.replace(tmp, path)
        if t == 0:
            os.write(started_fd, b"x")
    return last


@pytest.mark.parametrize("readonly", [False, True], ids=["reader-rw", "reader-ro"])
def test_reader_survives_atomic_replace(tmp_path: Any, replace_trial: int, readonly: bool) -> None:
    path = str(tmp_path / "live.blm")
    with BloomFilter.create(path, BloomConfig.for_items(5_000, 1e-9)) as f:
        f.update([f"orig-{i}" for i in range(1000)])
    mine = [f"reader-{replace_trial}-{i}" for i in range(50)]
    r, w = os.pipe()
    opened_r, opened_w = os.pipe()
    reader = Forked(_reader, path, readonly, mine, r, 200, opened_w)
    replacer = Forked(_replacer, path, 20 + replace_trial, w, opened_r)
    join_all([reader, replacer], timeout=120)
    for fd in (r, w, opened_r, opened_w):
        os.close(fd)
    assert reader.result() == 200  # no SIGBUS, no exception
    last = replacer.result()
    with verify_file(path) as f:  # the path holds the replacer's last file, complete
        assert f.contains_many(last).all()
        assert not f.contains_many([f"orig-{i}" for i in range(100)]).any()
        assert not f.contains_many([f"{x}-0" for x in mine]).any()  # the reader wrote to its own copy
        assert "from-the-grandchild" not in f


# -- fork while a parent thread holds or churns the write lock ------------------------------------


def _child_adds(f: BloomFilter, part: list[str]) -> list[str]:
    new = [x for x in part[: len(part) // 2] if f.add(x)]
    flags = f.add_many(part[len(part) // 2 :])
    return new + [x for x, n in zip(part[len(part) // 2 :], flags, strict=True) if n]


@pytest.mark.parametrize("parent_thread", ["holds-lock", "adds-in-loop"])
def test_fork_while_parent_thread_uses_lock(tmp_path: Any, fork_trial: int, parent_thread: str) -> None:
    rng = random.Random(fork_trial)
    config = BloomConfig.for_items(50_000, 1e-9)
    f = BloomFilter.create(tmp_path / "fk.blm", config)
    parent_items = [f"parent-{i}" for i in range(3000)]
    parts = [[f"child{c}-{i}" for i in range(2000)] for c in range(4)]
    shared = parts[0][:300]  # every child also adds these: "new" exactly once
    parts = [p + shared for p in parts]
    stop = threading.Event()
    holding = threading.Event()
    parent_new: list[str] = []

    def hold() -> None:
        while not stop.is_set():
            with f.write_lock():
                holding.set()
                time.sleep(rng.uniform(0, 0.02))

    def churn() -> None:
        for x in parent_items:
            if f.add(x):
                parent_new.append(x)
            holding.set()

    t = threading.Thread(target=hold if parent_thread == "holds-lock" else churn)
    t.start()
    holding.wait(10)
    children = []
    for part in parts:  # fork at random moments while the thread works
        time.sleep(rng.uniform(0, 0.005))
        children.append(Forked(_child_adds, f, part))
    join_all(children, timeout=60)  # a deadlocked child fails here
    stop.set()
    t.join(30)
    assert not t.is_alive()
    news = [x for c in children for x in c.result()] + parent_new
    everything = sorted(
        {x for p in parts for x in p} | (set(parent_items) if parent_thread == "adds-in-loop" else set())
    )
    counts = collections.Counter(news)
    assert sorted(counts) == everything and set(counts.values()) == {1}
    assert f.to_bytes()[24:] == reference_bits(config, everything)  # not one bit lost
    assert f.items_added == len(everything)
    f.close()


# Regression (found by this suite): leaving the block in the child raised RuntimeError
# 'cannot release un-acquired lock' because the child's lock was reset to depth 0.
def test_fork_inside_write_lock_block(tmp_path: Any) -> None:
    """The forking thread itself holds the lock: the child may leave the block and go on."""
    f = BloomFilter.create(tmp_path / "in.blm", BloomConfig.for_items(1000, 0.01))
    pid = -1
    try:
        with f.write_lock():
            f.add("parent")
            pid = os.fork()
        if pid == 0:  # pragma: no cover - child, after leaving the block
            f.add("child")
            os._exit(0)
    except BaseException:
        if pid == 0:  # pragma: no cover - never let a forked child return into pytest
            os._exit(2)
        raise
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child failed leaving the write_lock block"
    assert "child" in f
    f.close()


# -- 16 threads on one handle and 16 threads with their own handles ----------------------------------


def test_threads_shared_and_own_handles(tmp_path: Any, thread_trial: int) -> None:
    rng = random.Random(thread_trial)
    config = BloomConfig.for_items(60_000, 1e-9)
    path = tmp_path / "t.blm"
    shared = BloomFilter.create(path, config)
    items = [f"t{thread_trial}-{i}" for i in range(4000)]
    news: list[list[str]] = [[] for _ in range(32)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(33)
    done = threading.Event()
    cleared: list[int] = []

    def work(i: int) -> None:
        try:
            f = shared if i < 16 else BloomFilter.open(path)
            order = rng.sample(items, len(items)) if i % 2 else items[i % 4 :: 4] + items
            barrier.wait()
            mode = i % 3
            for start in range(0, len(order), 100):
                chunk = order[start : start + 100]
                if mode == 0:
                    news[i].extend(x for x in chunk if f.add(x))
                elif mode == 1:
                    news[i].extend(x for x, n in zip(chunk, f.add_many(chunk), strict=True) if n)
                else:
                    with f.write_lock():
                        news[i].extend(x for x in chunk if f.add(x))
            if f is not shared:
                f.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def monitor() -> None:
        """Readers take no lock and must never see a bit cleared."""
        with BloomFilter.open(path, readonly=True) as r:
            previous = np.frombuffer(r.to_bytes()[24:], dtype=np.uint8).copy()
            barrier.wait()
            while not done.is_set():
                now = np.frombuffer(r.to_bytes()[24:], dtype=np.uint8).copy()
                if (previous & ~now).any():
                    cleared.append(int(np.flatnonzero(previous & ~now)[0]))
                previous = now

    threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
    mon = threading.Thread(target=monitor)
    for t in threads + [mon]:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    mon.join(30)
    assert not errors, errors
    assert not cleared, f"a reader saw bits cleared at byte offsets {cleared[:5]}"
    reported = collections.Counter(x for n in news for x in n)
    assert sorted(reported) == sorted(items) and set(reported.values()) == {1}
    assert shared.items_added == len(items)
    assert shared.to_bytes()[24:] == reference_bits(config, items)
    shared.close()


class Calls:
    """What one thread's loop did around a ``close()``: calls that returned (``ok``), the
    call that raised FilterClosedError (``refused``, 0 or 1: it ends the loop), and
    ``first`` set once one call has returned (so the close comes after real work)."""

    def __init__(self) -> None:
        self.ok = 0
        self.refused = 0
        self.first = threading.Event()

    def returned(self) -> None:
        self.ok += 1
        self.first.set()


def close_during(
    f: Any, threads: list[threading.Thread], calls: list[Calls], delay: float, problems: list[str]
) -> None:
    """Start ``threads``, wait until each has completed a call (``calls``), close ``f``
    after ``delay`` more seconds and wait for them all; a close that raises is recorded in
    ``problems``. Then prove that the close raced the calls: every thread completed calls
    before it and was still calling when it came (its loop, long enough to outlast any
    delay, ended with FilterClosedError, not by running out)."""
    for t in threads:
        t.start()
    for c in calls:
        assert c.first.wait(60), "a thread never completed a call"
    time.sleep(delay)
    try:
        f.close()
    except BaseException as exc:
        problems.append(f"close: {type(exc).__name__}: {exc}")
    for t in threads:
        t.join(60)
    assert f.closed and not any(t.is_alive() for t in threads)
    assert [c.ok > 0 for c in calls] == [True] * len(calls)  # work done before the close
    assert [c.refused for c in calls] == [1] * len(calls)  # and cut off by it: a race


# Regression (found by this suite): close() raised BufferError ('cannot close exported
# pointers exist') while a batch query held a numpy view, and a query could get a plain
# ValueError instead of FilterClosedError.
def test_close_while_other_threads_query(tmp_path: Any) -> None:
    """close() from one thread while others query: close raises nothing, each query
    returns a correct answer or raises FilterClosedError, and every querying thread did
    both (queries answered before the close, one refused after it)."""
    config = BloomConfig.for_items(200_000, 0.01)
    items = [f"q{i}" for i in range(200_000)]
    problems: list[str] = []
    for trial in range(6):
        f = BloomFilter.create(tmp_path / f"c{trial}.blm", config)
        f.update(items[:1000])
        calls = [Calls(), Calls()]

        def query(c: Calls) -> None:
            try:
                for _ in range(1_000_000):  # far longer than the delay: the close cuts it off
                    assert f.contains_many(items[:1000]).all()
                    c.returned()
                    f.contains_many(items)
                    c.returned()
            except FilterClosedError:
                c.refused += 1
            except BaseException as exc:
                problems.append(f"query: {type(exc).__name__}: {exc}")

        close_during(f, [threading.Thread(target=query, args=(c,)) for c in calls], calls, 0.002 * trial, problems)
    assert not problems, problems


# Regression (found in review): close() released the items view before marking the handle
# closed, so items_added in another thread raised a plain ValueError; and close() did not
# wait for a write in flight, whose file lock then vanished with the descriptor.
@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_close_while_other_threads_write(tmp_path: Any, kind: Any) -> None:
    """close() from one thread while others add, update, read items_added and query:
    every call returns or raises FilterClosedError, close raises nothing, every thread
    completed calls before the close and was cut off by it, and every add that returned
    is in the file afterwards, which verifies."""
    config = BloomConfig.for_items(100_000, 0.01)
    problems: list[str] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave threads finely
    try:
        for trial in range(8):
            path = tmp_path / f"w{trial}.blc"
            f = kind.create(path, config)
            done: list[list[str]] = [[], []]
            calls = [Calls() for _ in range(4)]

            def writer(w: int, batch: bool, c: Calls) -> None:
                try:
                    for i in range(100_000):
                        keys = [f"w{w}-{i}-{j}" for j in range(20)] if batch else [f"w{w}-{i}"]
                        f.update(keys) if batch else f.add(keys[0])
                        done[w].extend(keys)
                        c.returned()
                except FilterClosedError:
                    c.refused += 1
                except BaseException as exc:
                    problems.append(f"writer: {type(exc).__name__}: {exc}")

            def reader(c: Calls) -> None:
                try:
                    for i in range(10_000_000):  # each call returns or raises FilterClosedError
                        _ = f.items_added
                        c.returned()
                        _ = f"w0-{i}" in f
                        c.returned()
                except FilterClosedError:
                    c.refused += 1
                except BaseException as exc:
                    problems.append(f"reader: {type(exc).__name__}: {exc}")

            threads = [
                threading.Thread(target=writer, args=(0, False, calls[0])),
                threading.Thread(target=writer, args=(1, True, calls[1])),
                threading.Thread(target=reader, args=(calls[2],)),
                threading.Thread(target=reader, args=(calls[3],)),
            ]
            close_during(f, threads, calls, 0.003 * trial, problems)
            acknowledged = done[0] + done[1]
            assert len(acknowledged) >= 21  # both writers completed calls (close_during checked)
            with verify_file(path) as g:
                assert g.contains_many(acknowledged).all()
    finally:
        sys.setswitchinterval(switch)
    assert not problems, problems


# -- the counting filter: processes adding and removing at once ------------------------------------


def _stopped(fd: int) -> bool:
    """True once the parent has closed the write end of the stop pipe."""
    return bool(select.select([fd], [], [], 0)[0])


def _counting_worker(path: str, plan: list[tuple[str, list[str]]], batched: bool) -> int:
    """Run a plan of ("add", items) / ("remove", items) steps; return the adds reported new."""
    new = 0
    with CountingBloomFilter.open(path) as f:
        for op, items in plan:
            if op == "add":
                new += f.update(items) if batched else sum(f.add(x) for x in items)
            elif batched:
                with f.write_lock():
                    for x in items:
                        f.remove(x)  # KeyError here would mean a lost counter
            else:
                for x in items:
                    f.remove(x)
    return new


def _counting_reader(path: str, pinned: list[str], stop_fd: int) -> int:
    """Check, until told to stop, that the pinned items are always found; return the rounds."""
    rounds = 0
    with CountingBloomFilter.open(path, readonly=True) as f:
        while not _stopped(stop_fd) or rounds == 0:
            assert f.contains_many(pinned).all(), "a pinned item was missed while others added and removed"
            assert all(f.count(x) >= 1 for x in pinned[::25])
            rounds += 1
    return rounds


def _counting_plan(
    rng: random.Random, own: list[str], shared: list[str], chunk: int
) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Adds of ``own + shared`` in a random order, in chunks; after each chunk, maybe remove a
    random part of what was added so far and not removed yet. Returns the plan and the removes."""
    adds = own + shared
    rng.shuffle(adds)
    plan: list[tuple[str, list[str]]] = []
    live: list[str] = []
    removed: list[str] = []
    for start in range(0, len(adds), chunk):
        part = adds[start : start + chunk]
        plan.append(("add", part))
        live += part
        if rng.random() < 0.6:
            rng.shuffle(live)
            cut = rng.randrange(0, len(live) // 2 + 1)
            gone, live = live[:cut], live[cut:]
            plan.append(("remove", gone))
            removed += gone
    return plan, removed


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_counting_processes_add_and_remove(tmp_path: Any, counting_trial: int, batched: bool) -> None:
    rng = random.Random(f"counting-{counting_trial}-{batched}")
    width = (8, 4)[counting_trial % 2]
    cfg = BloomConfig(num_bits=24_001, num_hashes=4)  # small: writers often share counter bytes
    path = str(tmp_path / "race.blc")
    pinned = [f"pinned-{i}" for i in range(500)]
    with CountingBloomFilter.create(path, cfg, counter_bits=width) as f:
        f.update(pinned)
    shared = [f"shared-{counting_trial}-{i}" for i in range(300 if width == 4 else 600)]
    plans = []
    for w in range(4):
        own = [f"w{w}-{counting_trial}-{i}" for i in range(800)]
        plans.append(_counting_plan(rng, own, shared, 100 if batched else 7))
    # The sequential result: every add, then every remove, in any order (no counter saturates,
    # which is checked, so counter updates commute).
    expected = CountingBloomFilter(cfg, counter_bits=width)
    expected.update(pinned)
    for plan, _removed in plans:
        expected.update([x for op, items in plan if op == "add" for x in items])
    for _plan, removed in plans:
        for x in removed:
            expected.remove(x)
    assert expected.saturated_counters() == 0, "the trial would depend on the order"
    gate = Gate()
    stop_r, stop_w = os.pipe()
    reader = Forked(_counting_reader, path, pinned, stop_r, gate=gate.r, close_in_child=(gate.w, stop_w))
    workers = [gate.fork(_counting_worker, path, plan, batched) for plan, _ in plans]
    gate.open()
    try:
        join_all(workers, timeout=120)
    finally:
        os.close(stop_w)
        join_all([reader], timeout=60)
        os.close(stop_r)
    for c in workers:
        c.result()  # each worker ran its whole plan: no remove missed its item (KeyError)
    assert reader.result() >= 1
    with verify_file(path) as f:
        assert isinstance(f, CountingBloomFilter)
        assert f.to_bytes()[32:] == expected.to_bytes()[32:], "counters differ from the sequential result"
        kept = sorted(
            {x for plan, removed in plans for op, items in plan if op == "add" for x in items}
            - {x for _, removed in plans for x in removed}
            | set(pinned)
        )
        assert f.contains_many(kept).all()


# -- merges racing with writers ------------------------------------------------------------------------


def _merge_writer(path: str, items: list[str], mode: str) -> tuple[int, float, float]:
    """Add ``items`` to the merge target: one by one, in batches, or in write_lock blocks.
    Returns the adds reported new and when it started and ended (monotonic clock)."""
    new = 0
    started = time.monotonic()
    with BloomFilter.open(path) as f:
        for start in range(0, len(items), 500):
            chunk = items[start : start + 500]
            if mode == "add":
                new += sum(f.add(x) for x in chunk)
            elif mode == "update":
                new += f.update(chunk)
            else:
                with f.write_lock():
                    new += sum(f.add(x) for x in chunk)
    return new, started, time.monotonic()


def _merger(target: str, shards: list[str], via_cli: bool) -> tuple[int, float, float]:
    """``merge_into`` (or ``mmapbloom merge --into``); returns the exit status and when it
    started and ended."""
    started = time.monotonic()
    if via_cli:
        from mmapbloom.cli import main

        code = main(["merge", "-q", "--no-progress", "--chunk-mib", "1", "--into", target, *shards])
    else:
        merge_into(target, shards, chunk_bytes=64 * 1024, progress=False)
        code = 0
    return code, started, time.monotonic()


def _bits_monitor(path: str, stop_fd: int) -> int:
    """Read the target's bits until told to stop; fail if a bit is ever cleared."""
    rounds = 0
    with BloomFilter.open(path, readonly=True) as f:
        previous = np.frombuffer(f.to_bytes()[24:], dtype=np.uint8).copy()
        while not _stopped(stop_fd) or rounds == 0:
            now = np.frombuffer(f.to_bytes()[24:], dtype=np.uint8).copy()
            lost = np.flatnonzero(previous & ~now)
            assert lost.size == 0, f"a reader saw bits cleared at byte offsets {lost[:5].tolist()}"
            previous = now
            rounds += 1
    return rounds


def write_shard_files(directory: Any, cfg: BloomConfig, parts: list[list[str]], prefix: str) -> list[str]:
    paths = []
    for i, part in enumerate(parts):
        f = BloomFilter(cfg)
        f.update(part)
        path = str(directory / f"{prefix}-{i}.blm")
        with open(path, "wb") as fh:
            fh.write(f.to_bytes())
        paths.append(path)
    return paths


def test_merge_into_races_writers(tmp_path: Any, merge_trial: int, record_property: Any) -> None:
    rng = random.Random(f"merge-{merge_trial}")
    cfg = BloomConfig(num_bits=8 * 2**20 + 8 * rng.randrange(1, 4096) - rng.randrange(8), num_hashes=5)
    parts_a = [[f"a{s}-{merge_trial}-{j}" for j in range(15_000)] for s in range(3)]
    parts_b = [[f"b{s}-{merge_trial}-{j}" for j in range(15_000)] for s in range(2)]
    shards_a = write_shard_files(tmp_path, cfg, parts_a, "a")
    shards_b = write_shard_files(tmp_path, cfg, parts_b, "b")
    target = str(tmp_path / "live.blm")
    before = [f"before-{i}" for i in range(2000)]
    with BloomFilter.create(target, cfg) as f:
        f.update(before)
        before_items = f.items_added
    writers_items = [[f"live{w}-{merge_trial}-{i}" for i in range(6000)] for w in range(2)]
    writers_items[1] += writers_items[0][:1000]  # both add these: "new" exactly once between them
    modes = rng.sample(["add", "update", "locked"], 2)
    gate = Gate()
    stop_r, stop_w = os.pipe()
    monitor = Forked(_bits_monitor, target, stop_r, gate=gate.r, close_in_child=(gate.w, stop_w))
    children = [gate.fork(_merge_writer, target, items, mode) for items, mode in zip(writers_items, modes, strict=True)]
    mergers = [gate.fork(_merger, target, shards_a, merge_trial % 2 == 1), gate.fork(_merger, target, shards_b, False)]
    gate.open()
    try:
        join_all(children + mergers, timeout=120)
    finally:
        os.close(stop_w)
        join_all([monitor], timeout=60)
        os.close(stop_r)
    merged = [m.result() for m in mergers]
    written = [c.result() for c in children]
    assert [code for code, _, _ in merged] == [0, 0]
    writer_new = sum(new for new, _, _ in written)
    # Evidence that the race happened: seconds during which a merge and a writer both ran.
    overlap = max(min(me, we) - max(ms, ws) for _, ms, me in merged for _, ws, we in written)
    record_property("merge_writer_overlap_s", round(overlap, 4))
    assert monitor.result() >= 1
    everything = before + [x for items in writers_items for x in items] + [x for p in parts_a + parts_b for x in p]
    shard_items = 0
    for s in shards_a + shards_b:
        with BloomFilter.open(s, readonly=True) as g:
            shard_items += g.items_added
    with cast(BloomFilter, verify_file(target)) as f:
        assert f.contains_many(everything).all(), "an item was lost"
        assert f.to_bytes()[24:] == reference_bits(cfg, everything), "not exactly the bits of everything"
        assert f.items_added == before_items + writer_new + shard_items


def _shard_writer(path: str, items: list[str], started_fd: int) -> tuple[int, float]:
    with BloomFilter.open(path) as f:
        for i in range(0, len(items), 50):
            f.update(items[i : i + 50])
            if i == 0:
                os.write(started_fd, b"x")
    return len(items), time.monotonic()


def test_merge_while_a_shard_is_written(tmp_path: Any, merge_trial: int, record_property: Any) -> None:
    cfg = BloomConfig(num_bits=8 * 4 * 2**20, num_hashes=3)
    parts = [[f"s{s}-{merge_trial}-{j}" for j in range(10_000)] for s in range(3)]
    shards = write_shard_files(tmp_path, cfg, parts, "s")
    with BloomFilter.open(shards[0], readonly=True) as f:
        at_start = np.frombuffer(f.to_bytes()[24:], dtype=np.uint8).copy()
    late = [f"late-{merge_trial}-{i}" for i in range(40_000)]
    r, w = os.pipe()
    writer = Forked(_shard_writer, shards[0], late, w)
    assert os.read(r, 1) == b"x"  # the writer is adding to the shard: merge now
    out = str(tmp_path / "out.blm")
    result = merge_shards(out, shards, chunk_bytes=(64 + merge_trial) * 1024, progress=False)
    merged_at = time.monotonic()
    join_all([writer], timeout=60)
    os.close(r)
    os.close(w)
    count, writer_done = writer.result()
    assert count == len(late)
    record_property("writer_still_adding_after_merge", writer_done > merged_at)
    with BloomFilter.open(shards[0], readonly=True) as f:
        at_end = np.frombuffer(f.to_bytes()[24:], dtype=np.uint8).copy()
    others = np.zeros_like(at_end)
    for s in shards[1:]:
        with BloomFilter.open(s, readonly=True) as f:
            others |= np.frombuffer(f.to_bytes()[24:], dtype=np.uint8)
    with cast(BloomFilter, verify_file(out)) as f:
        got = np.frombuffer(f.to_bytes()[24:], dtype=np.uint8)
        assert not ((at_start | others) & ~got).any(), "the output lost a bit the shards had at the start"
        assert not (got & ~(at_end | others)).any(), "the output has a bit no shard ever had"
        assert f.contains_many([x for p in parts for x in p]).all()
        assert f.items_added == result.items_added
