"""Torture (issue 6): a writer process SIGKILLed at a random moment.

Each trial forks a writer that works on a known sequence and, after each operation
returns, publishes how far it got in a shared anonymous mapping (so the acknowledgement is
never behind a pipe the parent might not have drained). The parent kills it with SIGKILL
after a random delay, then checks that:

* the file passes ``verify_file`` (header, length, padding) and opens read-write;
* every item whose operation was acknowledged is present (no lost bit);
* the dead writer left no lock behind (a non-blocking ``flock`` succeeds; a new writer adds);
* a killed ``create`` never leaves a file at the destination path unless it is complete
  (only a ``.mmapbloom-*.tmp`` temporary may remain, which a later create ignores).

Scenarios: single adds, adds under ``write_lock()``, ``update`` of 50,000-item batches,
``union`` of 2 MB filters, ``create`` of 2 MB files. CI runs 5 trials of each (25, plus
the 6 of tests/test_processes.py::test_sigkill_keeps_acknowledged_adds); ``--torture``
runs 15 of each (75). Each trial records whether the kill landed inside an operation.

TODO(merge): kills during ``mmapbloom.merge`` (in place and into a new file), once the merge
module lands; TODO(counting): the same scenarios for CountingBloomFilter (add, remove).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import random
import signal
import struct
import time
from typing import Any, Callable

import pytest

from mmapbloom import BloomConfig, BloomFilter, verify_file
from tests.torture_support import trials

# Shared progress record: acked (operations acknowledged), phase (1 = inside an operation).
PROGRESS = struct.Struct("<qq")
IN_OP, BETWEEN = 1, 2

SCENARIOS = ["add", "add_locked", "update", "union", "create"]
BATCH = 50_000
UNION_ITEMS = 300
UNION_SOURCES = 4


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "scenario" in metafunc.fixturenames:
        n = trials(metafunc.config, default=5, torture=15)
        cases = [(s, seed) for s in SCENARIOS for seed in range(n)]
        metafunc.parametrize("scenario, seed", cases, ids=[f"{s}-{seed}" for s, seed in cases])


def item(i: int) -> str:
    return f"https://crash.example/{i}"


def batch_items(b: int) -> list[str]:
    return [item(i) for i in range(b * BATCH, (b + 1) * BATCH)]


def union_items(b: int) -> list[str]:
    return [f"union-{b}-{j}" for j in range(UNION_ITEMS)]


class Progress:
    def __init__(self) -> None:
        self.mm = mmap.mmap(-1, PROGRESS.size)  # MAP_SHARED | MAP_ANONYMOUS: survives fork

    def set(self, acked: int, phase: int) -> None:
        PROGRESS.pack_into(self.mm, 0, acked, phase)

    def get(self) -> tuple[int, int]:
        return PROGRESS.unpack_from(self.mm, 0)


# -- writers (run in the forked child until killed) ----------------------------------------


def write_adds(path: str, p: Progress, locked: bool) -> None:
    with BloomFilter.open(path) as f:
        i = 0
        while True:
            p.set(i, IN_OP)
            if locked:
                with f.write_lock():
                    for j in range(i, i + 100):
                        f.add(item(j))
                i += 100
            else:
                f.add(item(i))
                i += 1
            p.set(i, BETWEEN)


def write_updates(path: str, p: Progress) -> None:
    with BloomFilter.open(path) as f:
        b = 0
        while True:
            items = batch_items(b)
            p.set(b, IN_OP)
            f.update(items)
            b += 1
            p.set(b, BETWEEN)


def write_unions(path: str, p: Progress, config: BloomConfig) -> None:
    sources = []
    for b in range(UNION_SOURCES):  # built before the first report, so kills land in union
        src = BloomFilter(config)
        src.update(union_items(b))
        sources.append(src)
    with BloomFilter.open(path) as f:
        b = 0
        while True:
            p.set(b, IN_OP)
            f |= sources[b % UNION_SOURCES]
            b += 1
            p.set(b, BETWEEN)


def write_creates(directory: str, p: Progress, config: BloomConfig) -> None:
    i = 0
    while True:
        p.set(i, IN_OP)
        BloomFilter.create(os.path.join(directory, f"c{i}.blm"), config).close()
        i += 1
        p.set(i, BETWEEN)


def run_and_kill(target: Callable[[], None], p: Progress, rng: random.Random, max_delay: float) -> tuple[int, int]:
    """Fork a writer, wait until it has started, SIGKILL it after a random delay; return
    the last progress record it published."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 3
        try:
            target()
        except BaseException:
            code = 2
        os._exit(code)
    deadline = time.monotonic() + 30
    while p.get() == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(rng.uniform(0, max_delay))
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL, "the writer stopped before it was killed"
    return p.get()


def assert_unlocked_and_writable(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the dead writer's lock stayed
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    with BloomFilter.open(path) as f:
        f.add("after-the-crash")
        assert "after-the-crash" in f


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_sigkill_writer(tmp_path: Any, scenario: str, seed: int, record_property: Any) -> None:
    rng = random.Random(f"{scenario}-{seed}")
    p = Progress()
    path = str(tmp_path / "victim.blm")
    if scenario in ("add", "add_locked"):
        BloomFilter.create(path, BloomConfig.for_items(1_000_000, 0.01)).close()
        acked, phase = run_and_kill(lambda: write_adds(path, p, scenario == "add_locked"), p, rng, 0.3)
        expected = [item(i) for i in range(acked)]
    elif scenario == "update":
        BloomFilter.create(path, BloomConfig.for_items(2_000_000, 0.01)).close()
        acked, phase = run_and_kill(lambda: write_updates(path, p), p, rng, 0.5)
        expected = [x for b in range(acked) for x in batch_items(b)]
    elif scenario == "union":
        config = BloomConfig(num_bits=16 * 2**20, num_hashes=7)  # 2 MB of bits
        BloomFilter.create(path, config).close()
        acked, phase = run_and_kill(lambda: write_unions(path, p, config), p, rng, 0.3)
        expected = [x for b in range(min(acked, UNION_SOURCES)) for x in union_items(b)]
    else:
        config = BloomConfig(num_bits=16 * 2**20, num_hashes=3)  # 2 MB files
        acked, phase = run_and_kill(lambda: write_creates(str(tmp_path), p, config), p, rng, 0.3)
        check_killed_create(tmp_path, config, acked)
        record_property("killed_inside_operation", phase == IN_OP)
        for name in os.listdir(tmp_path):  # dozens of files: keep the disk free for CI
            os.unlink(tmp_path / name)
        return
    record_property("killed_inside_operation", phase == IN_OP)
    with verify_file(path) as f:
        if expected:
            assert f.contains_many(expected).all(), f"acknowledged items lost ({acked} operations acked)"
        assert f.items_added <= 2**32 - 1
    assert_unlocked_and_writable(path)
    os.unlink(path)


def check_killed_create(tmp_path: Any, config: BloomConfig, acked: int) -> None:
    names = set(os.listdir(tmp_path))
    for i in range(acked):  # every acknowledged create is a complete, empty filter
        with verify_file(tmp_path / f"c{i}.blm") as f:
            assert f.config == config and f.count_ones() == 0 and f.items_added == 0
    published = {f"c{i}.blm" for i in range(acked + 1)} & names
    temporaries = {n for n in names if n.startswith(".mmapbloom-") and n.endswith(".tmp")}
    # The create in progress either published a complete file or nothing, and at most its
    # own temporary is left; nothing else appeared.
    assert names == published | temporaries, sorted(names - published - temporaries)
    assert len(temporaries) <= 1
    in_progress = tmp_path / f"c{acked}.blm"
    if in_progress.exists():
        verify_file(in_progress).close()
    else:  # a later create at the same path ignores the leftover temporary
        with BloomFilter.open_or_create(in_progress, config) as f:
            f.add("x")
    assert_unlocked_and_writable(str(in_progress))
