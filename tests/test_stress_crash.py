"""Stress: a writer process SIGKILLed at a random moment.

Each trial forks a writer that works on a known sequence and, after each operation
returns, publishes how far it got in a shared anonymous mapping (so the acknowledgement is
never behind a pipe the parent might not have drained). The parent kills it with SIGKILL
after a random delay, then checks that:

* the file passes ``verify_file`` (header, length, padding) and opens read-write;
* every item whose operation was acknowledged is present (no lost bit);
* items added lies between its values before and after the operation in progress (a
  store of the field is never half done);
* the dead writer left no lock behind (a non-blocking ``flock`` succeeds; a new writer adds);
* a killed ``create`` never leaves a file at the destination path unless it is complete
  (only a ``.mmapbloom-*.tmp`` temporary may remain, which a later create ignores).

Scenarios: single adds, adds under ``write_lock()``, ``update`` of 50,000-item batches,
``union`` of 2 MB filters, ``create`` of 2 MB files;

* counting filter (``counting``: single adds and removes, with multiplicities;
  ``counting_batch``: ``update`` of 400-item batches and loops of removes under
  ``write_lock()``; 4- and 8-bit counters, odd m): every acknowledged add not yet removed
  (nor being removed) is present, and every counter lies between its value before and
  after the operation in progress (equal to "before" when the kill came between
  operations), so no counter was lost or invented; the same for the items field;
* ``merge``: merges into a new file, or over an existing one (``--force``), through the
  library and through the CLI's ``main`` in the child: every acknowledged output is
  complete, the one in progress is absent (or the old file) or complete, never torn, and at
  most one ``.mmapbloom-*.tmp`` is left;
* ``merge_into``: ``merge_into`` / ``mmapbloom merge --into`` loops: the target passes
  verify, every item of the original filter is present, its bits lie between the
  original's and the full merge's (equal to the full merge once a pass was acknowledged),
  items added counts whole passes only, and running the merge again completes it.

CI runs 5 trials of each of the 9 scenarios (45, plus the 6 of
tests/test_processes.py::test_sigkill_keeps_acknowledged_adds); ``--torture`` runs 15 of
each (135). Each trial records whether the kill landed inside an operation.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import random
import signal
import struct
import time
from typing import Any, Callable, cast

import numpy as np
import pytest

from mmapbloom import M3KM, BloomConfig, BloomFilter, CountingBloomFilter, verify_file
from mmapbloom.merge import merge_into, merge_shards
from tests.torture_support import CountingModel, trials

pytestmark = pytest.mark.slow

# Shared progress record: acked (operations acknowledged), phase (1 = inside an operation).
PROGRESS = struct.Struct("<qq")
IN_OP, BETWEEN = 1, 2

SCENARIOS = ["add", "add_locked", "update", "union", "create", "counting", "counting_batch", "merge", "merge_into"]
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
    """(acked, phase) in a shared anonymous mapping, each field written with one 8-byte
    store (``struct.pack_into`` zeroes its destination first: a kill in between would
    publish (0, 0)). ``set`` writes acked before phase, so a kill between the two stores
    publishes the new count with the old phase, which the checks accept."""

    def __init__(self) -> None:
        self.mm = mmap.mmap(-1, PROGRESS.size)  # MAP_SHARED | MAP_ANONYMOUS: survives fork
        self.words = memoryview(self.mm).cast("q")

    def set(self, acked: int, phase: int) -> None:
        self.words[0] = acked
        self.words[1] = phase

    def get(self) -> tuple[int, int]:
        return self.words[0], self.words[1]


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


def assert_unlocked_and_writable(path: str, cls: Any = BloomFilter) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the dead writer's lock stayed
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    with cls.open(path) as f:
        f.add("after-the-crash")
        assert "after-the-crash" in f


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_sigkill_writer(tmp_path: Any, scenario: str, seed: int, record_property: Any) -> None:
    rng = random.Random(f"{scenario}-{seed}")
    p = Progress()
    path = str(tmp_path / "victim.blm")
    if scenario.startswith("counting"):
        killed_counting_writer(tmp_path, p, rng, seed, scenario == "counting_batch", record_property)
        return
    if scenario == "merge":
        killed_merge(tmp_path, p, rng, seed, record_property)
        return
    if scenario == "merge_into":
        killed_merge_into(tmp_path, p, rng, seed, record_property)
        return
    # Items added must lie in [lo, hi]: distinct items into a filter far below capacity
    # are all new but for false positives (a fraction far below 1% here), and the
    # operation in progress may have counted some or all of its items; a union stores the
    # saturating sum in one store, so it is exactly before or after.
    if scenario in ("add", "add_locked"):
        BloomFilter.create(path, BloomConfig.for_items(1_000_000, 0.01)).close()
        acked, phase = run_and_kill(lambda: write_adds(path, p, scenario == "add_locked"), p, rng, 0.3)
        expected = [item(i) for i in range(acked)]
        lo, hi = acked - acked // 100, acked + (100 if scenario == "add_locked" else 1)
    elif scenario == "update":
        BloomFilter.create(path, BloomConfig.for_items(2_000_000, 0.01)).close()
        acked, phase = run_and_kill(lambda: write_updates(path, p), p, rng, 0.5)
        expected = [x for b in range(acked) for x in batch_items(b)]
        lo, hi = acked * BATCH - acked * BATCH // 100, (acked + 1) * BATCH
    elif scenario == "union":
        config = BloomConfig(num_bits=16 * 2**20, num_hashes=7)  # 2 MB of bits
        BloomFilter.create(path, config).close()
        acked, phase = run_and_kill(lambda: write_unions(path, p, config), p, rng, 0.3)
        expected = [x for b in range(min(acked, UNION_SOURCES)) for x in union_items(b)]
        source_items = []
        for b in range(UNION_SOURCES):
            src = BloomFilter(config)
            src.update(union_items(b))
            source_items.append(src.items_added)
        lo = sum(source_items[b % UNION_SOURCES] for b in range(acked))
        hi = lo + source_items[acked % UNION_SOURCES]
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
        assert lo <= f.items_added <= hi, f"items added {f.items_added} outside [{lo}, {hi}] ({acked} acked)"
        if phase == BETWEEN and scenario == "union":
            assert f.items_added == lo
    assert_unlocked_and_writable(path)
    os.unlink(path)


def check_killed_create(tmp_path: Any, config: BloomConfig, acked: int) -> None:
    names = {n for n in os.listdir(tmp_path) if not n.endswith(".mutex")}  # not the write locks' side files
    for i in range(acked):  # every acknowledged create is a complete, empty filter
        with cast(BloomFilter, verify_file(tmp_path / f"c{i}.blm")) as f:
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


# -- the counting filter: adds and removes ------------------------------------------------------

COUNTING_CONFIG = BloomConfig(num_bits=200_003, num_hashes=5, strategy=M3KM())  # odd m: a 4-bit padding nibble
COUNTING_BATCH = 400


def counting_op(batch: bool, j: int) -> tuple[str, list[str]]:
    """The j-th operation of a counting writer: ``("add", items)`` or ``("remove", items)``.

    Single (batch False), in blocks of five: add x, add y, add x again, remove x (x is
    left with multiplicity 1), remove the previous block's y (back to 0). Batches: add a
    batch with ``update``, then remove its first half under one ``write_lock()``. Every
    remove takes an item the writer itself added and has not removed yet.
    """
    if batch:
        b, second = divmod(j, 2)
        items = [f"batch-{b}-{i}" for i in range(COUNTING_BATCH)]
        return ("remove", items[: COUNTING_BATCH // 2]) if second else ("add", items)
    b, step = divmod(j, 5)
    x, y = f"x-{b}", f"y-{b}"
    if step == 4:
        return ("remove", [f"y-{b - 1}"]) if b else ("add", ["z"])
    return [("add", [x]), ("add", [y]), ("add", [x]), ("remove", [x])][step]


def write_counting(path: str, p: Progress, batch: bool) -> None:
    with CountingBloomFilter.open(path) as f:
        j = 0
        while True:
            op, items = counting_op(batch, j)
            p.set(j, IN_OP)
            if op == "add":
                f.update(items) if batch else f.add(items[0])
            elif batch:
                with f.write_lock():
                    for x in items:
                        f.remove(x)
            else:
                f.remove(items[0])
            j += 1
            p.set(j, BETWEEN)


def apply_counting(model: CountingModel, op: str, items: list[str]) -> None:
    for x in items:
        model.add(x) if op == "add" else model.remove(x)


def counters_of(f: CountingBloomFilter) -> "np.ndarray[Any, np.dtype[np.int64]]":
    body = np.frombuffer(f.to_bytes()[32:], dtype=np.uint8)
    if f.counter_bits == 8:
        return body.astype(np.int64)
    return np.stack([body & 15, body >> 4], axis=1).ravel()[: f.num_bits].astype(np.int64)


def killed_counting_writer(
    tmp_path: Any, p: Progress, rng: random.Random, seed: int, batch: bool, record_property: Any
) -> None:
    width = (4, 8)[seed % 2]
    path = str(tmp_path / "victim.blc")
    CountingBloomFilter.create(path, COUNTING_CONFIG, counter_bits=width).close()
    acked, phase = run_and_kill(lambda: write_counting(path, p, batch), p, rng, 0.3)
    record_property("killed_inside_operation", phase == IN_OP)
    record_property("operations_acknowledged", acked)
    m, k = COUNTING_CONFIG.num_bits, COUNTING_CONFIG.num_hashes
    before = CountingModel(m, k, counter_bits=width)
    for j in range(acked):
        apply_counting(before, *counting_op(batch, j))
    op, in_progress = counting_op(batch, acked)
    after = before.copy()
    apply_counting(after, op, in_progress)
    with verify_file(path) as f:
        assert isinstance(f, CountingBloomFilter) and f.counter_bits == width
        # Every acknowledged add not yet removed, nor being removed, is present.
        promised = sorted(set(before.promised()) - ({x.encode() for x in in_progress} if op == "remove" else set()))
        assert f.contains_many(promised).all(), f"acknowledged items lost ({acked} operations acked)"
        got = counters_of(f)
        lo, hi = np.array(before.cells), np.array(after.cells)
        if phase == BETWEEN:  # killed between operations: exactly the acknowledged state
            assert np.array_equal(got, lo) and f.items_added == before.items
        else:
            lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
            bad = np.flatnonzero((got < lo) | (got > hi))
            assert bad.size == 0, f"counters outside [before, after] at cells {bad[:5].tolist()}"
            assert min(before.items, after.items) <= f.items_added <= max(before.items, after.items)
    assert_unlocked_and_writable(path, CountingBloomFilter)
    os.unlink(path)


# -- merges ---------------------------------------------------------------------------------------

MERGE_BODY = 2 * 2**20  # 2 MiB bit arrays
MERGE_SHARDS = 4
MERGE_HEADER = struct.Struct("<4s4sQII")


def make_shards(directory: str, rng: random.Random) -> tuple[list[str], "np.ndarray[Any, np.dtype[np.uint8]]", int]:
    """MERGE_SHARDS sound shard files with random sparse bits; returns their paths, the OR of
    their bit arrays and the sum of their items-added fields."""
    nprng = np.random.default_rng(rng.getrandbits(32))
    union = np.zeros(MERGE_BODY, dtype=np.uint8)
    paths, total = [], 0
    for i in range(MERGE_SHARDS):
        bits = nprng.integers(0, 256, MERGE_BODY, dtype=np.uint8) & nprng.integers(0, 256, MERGE_BODY, dtype=np.uint8)
        union |= bits
        items = 1000 + i
        total += items
        path = os.path.join(directory, f"shard-{i}.blm")
        with open(path, "wb") as fh:
            fh.write(MERGE_HEADER.pack(b"BLM1", b"M3KM", 8 * MERGE_BODY, 3, items) + bits.tobytes())
        paths.append(path)
    return paths, union, total


def merge_cli(*args: str) -> None:
    """``mmapbloom merge ARGS`` through the command line's own entry point, in this process."""
    from mmapbloom.cli import main

    code = main(["merge", "-q", "--no-progress", *args])
    if code != 0:
        raise RuntimeError(f"mmapbloom merge exited with {code}")


def write_merges(out_dir: str, shards: list[str], p: Progress, replace: bool, via_cli: bool) -> None:
    i = 0
    while True:
        out = os.path.join(out_dir, "out.blm" if replace else f"out-{i}.blm")
        p.set(i, IN_OP)
        if via_cli:
            merge_cli(*(["--force"] if replace else []), "--chunk-mib", "1", out, *shards)
        else:
            merge_shards(out, shards, replace=replace, chunk_bytes=256 * 1024, progress=False)
        i += 1
        p.set(i, BETWEEN)


def killed_merge(tmp_path: Any, p: Progress, rng: random.Random, seed: int, record_property: Any) -> None:
    replace, via_cli = seed % 2 == 1, (seed // 2) % 2 == 1
    shards, union, total = make_shards(str(tmp_path), rng)
    complete = MERGE_HEADER.pack(b"BLM1", b"M3KM", 8 * MERGE_BODY, 3, total) + union.tobytes()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    old = b""
    if replace:  # the file being replaced: a sound filter of another shape
        with BloomFilter.create(out_dir / "out.blm", BloomConfig(num_bits=1000, num_hashes=2, strategy=M3KM())) as f:
            f.add("old")
            old = f.to_bytes()
    acked, phase = run_and_kill(lambda: write_merges(str(out_dir), shards, p, replace, via_cli), p, rng, 0.3)
    record_property("killed_inside_operation", phase == IN_OP)
    record_property("merges_acknowledged", acked)
    names = {n for n in os.listdir(out_dir) if not n.endswith(".mutex")}  # not the write locks' side files
    temporaries = {n for n in names if n.startswith(".mmapbloom-") and n.endswith(".tmp")}
    assert len(temporaries) <= 1, sorted(temporaries)  # at most the killed merge's own
    if replace:
        assert names - temporaries == {"out.blm"}
        data = (out_dir / "out.blm").read_bytes()
        assert data == complete or (acked == 0 and data == old), "a replaced output is torn"
    else:
        published = names - temporaries
        assert published <= {f"out-{i}.blm" for i in range(acked + 1)}, sorted(published)
        for i in range(acked + 1):
            out = out_dir / f"out-{i}.blm"
            if i < acked or out.exists():  # acknowledged, or published by the merge killed
                assert out.read_bytes() == complete, f"{out.name} is torn"
    for name in names:
        path = out_dir / name
        if name not in temporaries:
            verify_file(path).close()
        os.unlink(path)


MERGE_TARGETS = 12


def write_merges_into(targets: list[str], shards: list[str], p: Progress, via_cli: bool) -> None:
    """Merge the shards into each target in turn (so that most kills land in a first,
    partial merge), then wait to be killed."""
    for i, target in enumerate(targets):
        p.set(i, IN_OP)
        if via_cli:
            merge_cli("--chunk-mib", "1", "--into", target, *shards)
        else:
            merge_into(target, shards, chunk_bytes=64 * 1024, progress=False)
        p.set(i + 1, BETWEEN)
    while True:
        time.sleep(1)


def killed_merge_into(tmp_path: Any, p: Progress, rng: random.Random, seed: int, record_property: Any) -> None:
    via_cli = seed % 2 == 1
    shards, union, total = make_shards(str(tmp_path), rng)
    original = [f"original-{seed}-{i}" for i in range(20_000)]
    f = BloomFilter(BloomConfig(num_bits=8 * MERGE_BODY, num_hashes=3, strategy=M3KM()))
    f.update(original)
    image, orig_items = f.to_bytes(), f.items_added
    orig_bits = np.frombuffer(image[24:], dtype=np.uint8)
    full = orig_bits | union
    targets = [str(tmp_path / f"live-{i}.blm") for i in range(MERGE_TARGETS)]
    for target in targets:
        with open(target, "wb") as fh:
            fh.write(image)
    acked, phase = run_and_kill(lambda: write_merges_into(targets, shards, p, via_cli), p, rng, 0.3)
    record_property("killed_inside_operation", phase == IN_OP)
    record_property("merges_acknowledged", acked)
    for i, target in enumerate(targets):
        with cast(BloomFilter, verify_file(target)) as g:
            assert g.contains_many(original).all(), f"{i}: an item of the original filter was lost"
            got = np.frombuffer(g.to_bytes()[24:], dtype=np.uint8)
            if i < acked:  # merged and acknowledged: complete
                assert np.array_equal(got, full) and g.items_added == orig_items + total, f"{i}: incomplete"
            elif i > acked or phase == BETWEEN:  # never touched
                assert np.array_equal(got, orig_bits) and g.items_added == orig_items, f"{i}: touched"
            else:  # the merge in progress: between the original and the full merge
                assert not (orig_bits & ~got).any(), "a bit of the original filter was cleared"
                assert not (got & ~full).any(), "a bit from nowhere"
                assert g.items_added in (orig_items, orig_items + total), (g.items_added, orig_items, total)
                record_property("partial_merge_bytes", int(np.count_nonzero(got != orig_bits)))
    if acked < MERGE_TARGETS:
        target = targets[acked]
        assert_unlocked_and_writable(target)
        merge_into(target, shards, progress=False)  # running it again completes it
        with BloomFilter.open(target, readonly=True) as g:
            again = np.frombuffer(g.to_bytes()[24:], dtype=np.uint8)
            assert not (full & ~again).any(), "merging again did not complete it"
            assert g.contains_many(original + ["after-the-crash"]).all()
    for name in os.listdir(tmp_path):
        os.unlink(tmp_path / name)
