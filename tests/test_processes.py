"""Real processes sharing one filter file: no lost bits, exactly-once "new", fork, races, SIGKILL."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, verify_file
from tests import workers
from tests.conftest import ROOT, urls

pytestmark = pytest.mark.slow

CTX = mp.get_context("spawn")


def run_processes(func, arglists):  # type: ignore[no-untyped-def]
    """Run ``func(*args)`` in one real process per arglist; return the results in order.
    Every process must exit with status 0."""
    return run_calls([(func, args) for args in arglists])


def run_calls(calls):  # type: ignore[no-untyped-def]
    """Run each ``func(*args)`` of ``calls`` in its own real process, all at once; return
    the results in order. Every process must exit with status 0."""
    queue = CTX.Queue()
    procs = [
        CTX.Process(target=workers.run_and_report, args=(queue, i, func, *args)) for i, (func, args) in enumerate(calls)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return [results[i] for i in range(len(procs))]


def sequential_bits(config: BloomConfig, items: list[str]) -> bytes:
    f = BloomFilter(config)
    f.update(items)
    return f.to_bytes()[24:]


@pytest.mark.parametrize("mode", ["add", "add_many", "locked"])
def test_four_processes_disjoint(tmp_path, mode: str) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(40_000, 0.01)
    path = str(tmp_path / "d.blm")
    BloomFilter.create(path, cfg).close()
    parts = [urls(10_000, prefix=f"https://w{w}.example/") for w in range(4)]
    barrier = CTX.Barrier(4)
    results = run_processes(workers.add_items, [(path, part, barrier, mode) for part in parts])
    everything = [x for part in parts for x in part]
    with BloomFilter.open(path) as f:
        assert f.contains_many(everything).all()
        assert f.items_added == sum(len(r) for r in results)
        assert f.to_bytes()[24:] == sequential_bits(cfg, everything)  # not one bit lost


@pytest.mark.parametrize("mode", ["add", "add_many"])
def test_four_processes_same_items_new_exactly_once(tmp_path, mode: str) -> None:  # type: ignore[no-untyped-def]
    # p = 1e-9: a false positive at add time (an item that is never new) is practically impossible.
    cfg = BloomConfig.for_items(5_000, 1e-9)
    path = str(tmp_path / "s.blm")
    BloomFilter.create(path, cfg).close()
    items = urls(5_000)
    barrier = CTX.Barrier(4)
    # Each worker adds the same items, in its own shuffled order.
    orders = [random.Random(w).sample(items, len(items)) for w in range(4)]
    results = run_processes(workers.add_items, [(path, order, barrier, mode) for order in orders])
    counts = collections.Counter(x for r in results for x in r)
    assert set(counts) == set(items)
    assert set(counts.values()) == {1}
    with BloomFilter.open(path) as f:
        assert f.items_added == len(items)


def test_pickled_handle_in_pool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(8_000, 0.01)
    f = BloomFilter.create(tmp_path / "h.blm", cfg)
    parts = [urls(2_000, prefix=f"https://h{w}.example/") for w in range(4)]
    barrier = CTX.Barrier(4)
    run_processes(workers.add_with_handle, [(f, part, barrier) for part in parts])
    assert f.contains_many([x for p in parts for x in p]).all()
    f.close()


def _fork_children(f: BloomFilter, parts: list[list[str]]) -> list[float]:
    """Fork one child per part; each adds its part through the inherited handle.
    Returns, per child, the CLOCK_MONOTONIC time at which its first add returned."""
    pids, pipes = [], []
    for part in parts:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: use the inherited handle
            code = 0
            try:
                os.close(r)
                f.add(part[0])
                os.write(w, repr(time.monotonic()).encode())
                for x in part[1:]:
                    f.add(x)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(w)
        pids.append(pid)
        pipes.append(r)
    times = []
    for pid, r in zip(pids, pipes, strict=True):
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        times.append(float(os.read(r, 100)))
        os.close(r)
    return times


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_children_share_handle(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(20_000, 0.01)
    f = BloomFilter.create(tmp_path / "fk.blm", cfg)
    parts = [urls(4_000, prefix=f"https://f{w}.example/") for w in range(4)]
    _fork_children(f, parts)
    everything = [x for p in parts for x in p]
    assert f.contains_many(everything).all()
    assert f.to_bytes()[24:] == sequential_bits(cfg, everything)
    f.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_while_another_thread_holds_lock(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(20_000, 0.01)
    f = BloomFilter.create(tmp_path / "fl.blm", cfg)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with f.write_lock():
            holding.set()
            release.wait(30)
            f.add("from-parent-thread")

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(10)
    parts = [urls(2_000, prefix=f"https://t{w}.example/") for w in range(4)]
    # Children fork while the parent's thread holds both the thread lock and the flock;
    # they must neither deadlock on the copied thread lock nor bypass the flock.
    released_at: list[float] = []

    def release_later() -> None:
        released_at.append(time.monotonic())
        release.set()

    threading.Timer(0.5, release_later).start()
    first_add_done = _fork_children(f, parts)
    t.join(30)
    # No child's add got through while the parent's thread held the flock.
    assert min(first_add_done) > released_at[0]
    everything = [x for p in parts for x in p] + ["from-parent-thread"]
    assert f.contains_many(everything).all()
    assert f.to_bytes()[24:] == sequential_bits(cfg, everything)
    f.close()


def test_create_race_eight_processes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(10_000, 1e-9)
    path = str(tmp_path / "race.blm")
    items = urls(500)
    barrier = CTX.Barrier(8)
    results = run_processes(workers.open_or_create_and_add, [(path, cfg, items, barrier)] * 8)
    counts = collections.Counter(x for r in results for x in r)
    assert set(counts.values()) == {1} and len(counts) == len(items)
    # no temporaries left; the write lock's side file (mutex mode) is no temporary
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "race.blm.mutex") == ["race.blm"]
    verify_file(path).close()


@pytest.mark.parametrize("batch", [1, 1000])
def test_sigkill_keeps_acknowledged_adds(tmp_path, batch: int, torture: bool) -> None:  # type: ignore[no-untyped-def]
    trials = 20 if torture else 3
    rng = random.Random(batch)
    for trial in range(trials):
        path = str(tmp_path / f"k{trial}.blm")
        BloomFilter.create(path, BloomConfig.for_items(200_000, 0.01)).close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers", path, "200000", str(batch)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        first = int(proc.stdout.readline())  # kill only once something was acknowledged
        time.sleep(rng.uniform(0, 0.5))
        proc.send_signal(signal.SIGKILL)
        lines = proc.stdout.read().split()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        acked = int(lines[-1]) if lines else first
        assert acked >= first > 0
        with verify_file(path) as f:
            assert f.contains_many([f"item-{i}" for i in range(acked)]).all()


@pytest.mark.parametrize(
    "kind, batch", [(BloomFilter, 1), (BloomFilter, 7), (CountingBloomFilter, 1), (CountingBloomFilter, 7)]
)
def test_reader_never_sees_items_added_go_back(tmp_path, kind, batch: int) -> None:  # type: ignore[no-untyped-def]
    """The items field is written with one aligned 4-byte store and read with one load: a
    reader process polling it while a writer process adds never sees it go back (a store
    that zeroes the field before writing it, as ``struct.pack_into`` does, shows 0 in
    between, and so would a crash at that moment). Per-item ``add`` of the plain filter
    has its own inlined store; the other writers go through ``format.store_items``."""
    path = str(tmp_path / "items.blm")
    n = 50_000 if batch == 1 else 150_000
    kind.create(path, BloomConfig.for_items(100 * n, 1e-6)).close()
    barrier = CTX.Barrier(2)
    added, (reads, drops) = run_calls(
        [(workers.add_distinct, (path, n, barrier, batch)), (workers.watch_items, (path, n, barrier))]
    )
    assert added == n and reads >= 10_000
    assert drops == [], f"items_added went back in {len(drops)}+ of {reads} reads, e.g. {drops[:3]}"
    with kind.open(path) as f:
        assert f.items_added == n
