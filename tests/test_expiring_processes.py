"""ExpiringBloomFilter across real processes: 8 processes crossing period boundaries
together on a shared fake clock, SIGKILL at every stage of a rotation and mid-add, and
the pure-Python path writing the same bytes as the native one."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mmapbloom import ExpiringBloomFilter, verify_file
from tests.conftest import ROOT
from tests.expiring_workers import FileClock, crossing_worker

CTX = mp.get_context("spawn")
W, K = 80.0, 8
P = W / K


def _run_worker(q, *args):  # type: ignore[no-untyped-def]
    try:
        q.put(("ok", crossing_worker(*args)))
    except BaseException as exc:  # pragma: no cover - reported by the test
        q.put(("error", repr(exc)))
        raise


def test_eight_processes_cross_boundaries_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 23 period boundaries, each crossed by 8 processes at once; 11 on the pure-Python path,
    # where the test takes 15 times as long (83 s against 5 s): still past K + 1 = 9 periods,
    # so a key comes back as new at least once
    procs_n, steps = 8, (12 if os.environ.get("MMAPBLOOM_PURE") == "1" else 24)
    clock = FileClock(str(tmp_path / "clock"))
    clock.set(0.5)
    path = str(tmp_path / "f")
    log = str(tmp_path / "rotations.log")
    ExpiringBloomFilter.create(path, W, 20_000, 1e-6, periods=K, clock=clock).close()
    keys = [f"url-{i}" for i in range(150)]
    barrier = CTX.Barrier(procs_n + 1)
    q = CTX.Queue()
    procs = [
        CTX.Process(target=_run_worker, args=(q, path, clock.path, log, keys, steps, seed, barrier))
        for seed in range(procs_n)
    ]
    for p in procs:
        p.start()
    lost = 0
    with ExpiringBloomFilter.open(path, readonly=True, clock=clock) as reader:
        for step in range(steps):
            clock.set(step * P + 0.5)
            barrier.wait(timeout=120)
            barrier.wait(timeout=120)
            # every key was added (acknowledged) within this window: none may be missing
            lost += sum(k not in reader for k in keys)
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(status == "ok" for status, _ in results), results
    claims = collections.Counter(pair for _, got in results for pair in got)
    assert all(n == 1 for n in claims.values()), [c for c, n in claims.items() if n > 1][:5]
    # A key added (True) at step s is found until step s + K and new again at s + K + 1.
    want = {(s, k) for s in range(0, steps, K + 1) for k in keys}
    assert set(claims) == want
    assert lost == 0
    rotations = collections.Counter(int(line.split()[1]) for line in open(log).read().splitlines())
    assert sorted(rotations) == list(range(1, steps))  # every boundary rotated ...
    assert max(rotations.values()) == 1  # ... exactly once
    twice = sum(n > 1 for n in rotations.values())
    print(  # the figures of the closing note (pytest -s)
        f"\n{procs_n} processes, {steps - 1} boundaries, {len(keys)} keys: {sum(claims.values())} adds True, "
        f"{sum(n == 1 for n in claims.values())} (step, key) pairs True exactly once (expected {len(want)}); "
        f"rotations {sum(rotations.values())}, done twice {twice}; acknowledged keys lost {lost} "
        f"(of {steps * len(keys)} checks)"
    )
    with verify_file(path) as v:
        assert len(v.describe(scan=False)["live_periods"]) <= K + 1


_KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from mmapbloom import ExpiringBloomFilter, expiring
    path, stage, t = sys.argv[1], sys.argv[2], float(sys.argv[3])

    def hook(s, n):
        if s == stage:
            os.kill(os.getpid(), signal.SIGKILL)

    expiring._ROTATE_HOOK = hook
    with ExpiringBloomFilter.open(path, clock=lambda: t) as f:
        f.add("after-rotation")
    """
)

STAGES = [
    "dropped-published",
    "dropped-committed",
    "files-removed",
    "period-created",
    "manifest-published",
    "committed",
]


@pytest.mark.parametrize("stage", STAGES)
def test_sigkill_mid_rotation_keeps_every_acknowledged_key(tmp_path, stage) -> None:  # type: ignore[no-untyped-def]
    t = [0.5]
    path = str(tmp_path / "f")
    with ExpiringBloomFilter.create(path, W, 1000, 0.001, periods=K, clock=lambda: t[0]) as f:
        for step in range(K + 1):  # periods 0..8: the next rotation drops period 0
            t[0] = step * P + 0.5
            assert f.add(f"k{step}")
    kill_at = (K + 1) * P + 0.5
    r = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, path, stage, str(kill_at)], cwd=ROOT, capture_output=True, timeout=120
    )
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()
    with verify_file(path):
        pass
    clock = [kill_at]
    with ExpiringBloomFilter.open(path, clock=lambda: clock[0]) as f:
        f.verify()
        # k1..k8 are inside their window at kill_at (k0 is past window + period)
        assert all(f"k{i}" in f for i in range(1, K + 1))
        assert f.add("after-rotation")  # the killed add was never acknowledged
        f.verify()
        names = [n for n in os.listdir(path) if n.startswith("period-") and n.endswith(".blm")]  # not side files
        assert sorted(names) == sorted(f"period-{n}.blm" for n in range(1, K + 2))
        assert all(f"k{i}" in f for i in range(1, K + 1))
        # readers opened afresh see the same set
        with ExpiringBloomFilter.open(path, readonly=True, clock=lambda: clock[0]) as r2:
            assert r2.contains_many([f"k{i}" for i in range(1, K + 1)] + ["after-rotation"]).all()


_ADDER_SCRIPT = textwrap.dedent(
    """
    import sys
    from mmapbloom import ExpiringBloomFilter
    from tests.expiring_workers import FileClock
    path, clock_path, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    clock = FileClock(clock_path)
    with ExpiringBloomFilter.open(path, clock=clock) as f:
        i = 0
        while True:
            key = f"{prefix}-{i}"
            if i % 3:
                f.add(key)
            else:
                f.update([key, key + "-b"])
            sys.stdout.write(f"{i}\\n")
            sys.stdout.flush()
            i += 1
    """
)


def test_sigkill_mid_add_and_rotation_keeps_acknowledged_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = FileClock(str(tmp_path / "clock"))
    path = str(tmp_path / "f")
    window = 1000.0  # 4 rounds of ~4 periods each: every round's keys stay inside the window
    ExpiringBloomFilter.create(path, window, 200_000, 0.001, periods=K, clock=clock).close()
    for round_ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", _ADDER_SCRIPT, path, clock.path, f"r{round_}"], cwd=ROOT, stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        acked = -1
        deadline = time.monotonic() + 60
        while acked < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
            if acked % 40 == 0:  # move the clock: rotations happen while adds go on
                clock.set(clock() + window / K / 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with verify_file(path):
            pass
        with ExpiringBloomFilter.open(path, clock=clock) as f:
            f.verify()
            # r<round>-0 .. r<round>-<acked> were acknowledged, all within the window
            missing = [i for i in range(acked + 1) if f"r{round_}-{i}" not in f]
            assert missing == [], (round_, missing[:5])
            assert len([n for n in os.listdir(path) if n.startswith("period-") and n.endswith(".blm")]) <= K + 1


_SCRIPTED = textwrap.dedent(
    """
    import sys
    import numpy as np
    from mmapbloom import ExpiringBloomFilter, BACKEND
    path = sys.argv[1]
    t = [3.0]
    f = ExpiringBloomFilter.create(path, 60, 5000, 0.01, periods=6, clock=lambda: t[0])
    out = []
    for step in range(20):
        t[0] = 3.0 + step * 7.0
        out.append(f.update([f"k{(step * 13 + i) % 900}" for i in range(200)]))
        out.append(f.update(np.arange(step, step + 50, dtype=np.int64)))
        out.append(sum(f.add(x) for x in (b"b%d" % step, step, "s")))
        out.append(int(f.contains_many([f"k{i}" for i in range(900)]).sum()))
    f.close()
    print(BACKEND, out)
    """
)


def test_pure_writes_the_same_bytes_as_native(tmp_path) -> None:  # type: ignore[no-untyped-def]
    outs = {}
    for name, pure in (("native", False), ("pure", True)):
        env = dict(os.environ)
        env.pop("MMAPBLOOM_PURE", None)
        if pure:
            env["MMAPBLOOM_PURE"] = "1"
        r = subprocess.run(
            [sys.executable, "-c", _SCRIPTED, str(tmp_path / name)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr.decode()
        outs[name] = r.stdout.decode().split(" ", 1)
    assert outs["pure"][0] == "python" and outs["native"][0] == "native"
    assert outs["native"][1] == outs["pure"][1]
    a, b = tmp_path / "native", tmp_path / "pure"
    files = sorted(
        n for n in os.listdir(a) if not n.endswith(".mutex")
    )  # the write locks' side files hold inode numbers
    assert files == sorted(n for n in os.listdir(b) if not n.endswith(".mutex"))
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


_ROTATING_WRITER = textwrap.dedent(
    """
    import os, struct, sys, time
    from mmapbloom import ExpiringBloomFilter, expiring
    from tests.expiring_workers import FileClock
    path, clock_path, acked_path, steps, dt = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    clock = FileClock(clock_path)
    acked = os.open(acked_path, os.O_RDWR)
    # widen every step of a rotation, so that the readers' queries land inside them
    expiring._ROTATE_HOOK = lambda stage, n: time.sleep(0.002)
    with ExpiringBloomFilter.open(path, clock=clock) as f:
        for s in range(steps):
            clock.set(s * dt + 0.1)
            assert f.add(f"k{s}"), s
            os.pwrite(acked, struct.pack("<q", s), 0)  # acknowledged
    """
)


def test_readers_never_see_a_partial_set_during_rotations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A writer rotates ~100 times (dropping a period each time) while this process
    queries: every key acknowledged before a query and still inside its window at the
    query's clock is found, by a long-lived handle (``in`` and ``contains_many``) and by
    handles opened afresh in the middle of rotations."""
    import struct

    w, k, dt, steps = 8.0, 8, 0.25, 400  # P = 1 s: a rotation every 4 steps
    clock = FileClock(str(tmp_path / "clock"))
    clock.set(0.1)
    path = str(tmp_path / "f")
    ExpiringBloomFilter.create(path, w, 10_000, 1e-6, periods=k, clock=clock).close()
    acked_path = str(tmp_path / "acked")
    with open(acked_path, "wb") as fh:
        fh.write(struct.pack("<q", -1))
    acked_fd = os.open(acked_path, os.O_RDONLY)
    writer = subprocess.Popen(
        [sys.executable, "-c", _ROTATING_WRITER, path, clock.path, acked_path, str(steps), str(dt)], cwd=ROOT
    )
    checked = fresh_opens = 0
    misses: list[tuple[str, int, float]] = []
    try:
        with ExpiringBloomFilter.open(path, readonly=True, clock=clock) as reader:
            while writer.poll() is None or checked == 0:
                a = struct.unpack("<q", os.pread(acked_fd, 8, 0))[0]
                if a < 0:
                    continue
                keys = [f"k{j}" for j in range(max(0, a - 40), a + 1)]
                one = [key in reader for key in keys]
                many = reader.contains_many(keys).tolist()
                fresh = None
                if checked % 7 == 0:
                    with ExpiringBloomFilter.open(path, readonly=True, clock=clock) as g:
                        fresh = [key in g for key in keys]
                    fresh_opens += 1
                t_after = clock()
                for i, key in enumerate(keys):
                    j = int(key[1:])
                    if j * dt + 0.1 + w >= t_after:  # inside its window at every clock read above
                        for how, got in (("in", one), ("contains_many", many), ("fresh", fresh)):
                            if got is not None and not got[i]:
                                misses.append((how, j, t_after))
                checked += 1
    finally:
        writer.wait(timeout=300)
        os.close(acked_fd)
    assert writer.returncode == 0
    assert misses == [], misses[:5]
    assert checked > 20 and fresh_opens > 2, (checked, fresh_opens)
    with verify_file(path) as v:
        assert len(v.describe(scan=False)["live_periods"]) <= k + 1
