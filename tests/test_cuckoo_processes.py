"""Real processes sharing one CuckooFilter file: exactly-once add, lock-free readers that
never miss while writers kick, SIGKILL of a writer mid-batch, fork."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mmapbloom import CuckooFilter, verify_file
from tests import cuckoo_workers, workers
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

CTX = mp.get_context("spawn")


def run_calls(calls):  # type: ignore[no-untyped-def]
    queue = CTX.Queue()
    procs = [
        CTX.Process(target=workers.run_and_report, args=(queue, i, func, *args)) for i, (func, args) in enumerate(calls)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return [results[i] for i in range(len(procs))]


def test_exactly_once_add_across_eight_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "once.ckf")
    # 32-bit fingerprints: no two of these keys share a fingerprint pair (checked below)
    CuckooFilter.create(path, 6000, 0.01, fingerprint_bits=32).close()
    keys = [f"https://example.org/{i}" for i in range(4000)]
    barrier = CTX.Barrier(8)
    calls = []
    for w in range(8):
        mine = keys[w * 250 : w * 250 + 2000]  # overlapping ranges: most keys by 2..8 writers
        mine = mine + keys[:500]
        random.Random(w).shuffle(mine)
        calls.append((cuckoo_workers.add_each, (path, mine, barrier)))
    results = run_calls(calls)
    counts = collections.Counter(k for r in results for k in r)
    wanted = set(k for w in range(8) for k in keys[w * 250 : w * 250 + 2000]) | set(keys[:500])
    print(
        f"exactly-once: 8 processes, {sum(len(args[1]) for _, args in calls):,} add calls, {len(wanted):,} keys, "
        f"{sum(counts.values()):,} True answers"
    )
    assert set(counts) == wanted and set(counts.values()) == {1}
    with CuckooFilter.open(path) as f:
        assert f.items_added == len(wanted)
        assert f.contains_many(sorted(wanted)).all()
        f.check()


def test_reader_never_misses_while_writers_fill_to_95_percent(tmp_path: Path) -> None:
    path = str(tmp_path / "kick.ckf")
    present = [f"present-{i}" for i in range(3000)]
    with CuckooFilter.create(path, 12_000, 0.001, fingerprint_bits=12) as f:  # packed 12-bit slots
        stored = f.update(present)  # a key sharing a fingerprint pair with another is refused
    stop = str(tmp_path / "stop")
    ready = CTX.Event()
    queue = CTX.Queue()
    reader = CTX.Process(
        target=workers.run_and_report, args=(queue, 0, cuckoo_workers.hammer, path, present, stop, ready)
    )
    reader.start()
    assert ready.wait(60)
    barrier = CTX.Barrier(2)
    inserted = run_calls([(cuckoo_workers.fill, (path, f"w{w}", 0.95, barrier)) for w in range(2)])
    Path(stop).touch()
    _, (misses, miscounts, rounds) = queue.get(timeout=300)
    reader.join(60)
    assert reader.exitcode == 0
    print(f"reader: {rounds} rounds of {len(present)} keys, {misses} misses, {miscounts} counts != 1")
    assert misses == 0 and miscounts == 0 and rounds >= 2
    with CuckooFilter.open(path) as f:
        assert f.load_factor >= 0.94
        assert f.items_added == stored + sum(inserted)
        assert f.contains_many(present).all()
        f.check()


@pytest.mark.parametrize("batch, capacity", [(1, 40_000), (500, 400_000)])
def test_sigkill_mid_batch_keeps_acknowledged_keys(tmp_path: Path, batch: int, capacity: int) -> None:
    """The writer fills to 95% of capacity; it is killed once it has acknowledged a random
    60..90% of its keys (load 0.57..0.86 of the design point, kick paths frequent), so the
    kill lands inside a batch or a kick path, not after the last one."""
    rng = random.Random(batch)
    count = capacity * 95 // 100
    interrupted = 0
    for trial in range(3):
        path = str(tmp_path / f"k{trial}.ckf")
        CuckooFilter.create(path, capacity, 0.001).close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cuckoo_workers", path, str(count), str(batch)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        threshold = int(rng.uniform(0.6, 0.9) * count)
        first = 0
        while first < threshold:
            first = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        lines = proc.stdout.read().split()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        acked = int(lines[-1]) if lines else first
        assert acked >= first > 0
        interrupted += acked < count
        print(f"SIGKILL (batch {batch}), trial {trial}: {acked:,} keys acknowledged before the kill", end="")
        with CuckooFilter.open(path) as f:
            lost = int((~f.contains_many([f"item-{i}" for i in range(acked)])).sum())
            print(f", {lost} lost, items counter {f.items_added:,} before repair")
            assert lost == 0
            f.check(repair=True)  # the counter of an interrupted batch, any copy of an interrupted path
            f.check()
            assert f.contains_many([f"item-{i}" for i in range(acked)]).all()
        verify_file(path).close()
    assert interrupted >= 1  # at least one kill landed before the writer's last batch


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_children_share_the_handle(tmp_path: Path) -> None:
    f = CuckooFilter.create(tmp_path / "fork.ckf", 10_000, 0.0001)
    pids = []
    for w in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                f.update([f"c{w}-{i}" for i in range(1000)])
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert f.contains_many([f"c{w}-{i}" for w in range(3) for i in range(1000)]).all()
    assert f.items_added == 3000
    f.check()
    f.close()
