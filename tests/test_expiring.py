"""ExpiringBloomFilter in one process, driven by an injected clock: the window's
semantics, rotation, constant space, a clock going backwards, idle gaps, batches, the
lifecycle and the checks."""

from __future__ import annotations

import datetime
import json
import os
import pickle
import time
from typing import Any

import numpy as np
import pytest

from mmapbloom import (
    BloomFilter,
    ConfigError,
    ConfigMismatchError,
    ExpiringBloomFilter,
    FilterClosedError,
    ManifestError,
    MissingLayerError,
    ReadOnlyFilterError,
    open_any,
    open_filter,
    verify_file,
)
from mmapbloom import expiring

W = 80.0  # window
K = 8  # periods
P = W / K  # 10 s


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path, clock, capacity=1000, fp_rate=0.01, periods=K, window=W, name="f", **kw):  # type: ignore[no-untyped-def]
    return ExpiringBloomFilter.create(
        str(tmp_path / name), window, capacity, fp_rate, periods=periods, clock=clock, **kw
    )


def period_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("period-") and not n.endswith(".mutex"))


def disk_bytes(path: str) -> int:
    """Bytes of the period files and the lock file (the manifest's length varies only with
    the digits of the period numbers it lists)."""
    return sum(
        os.path.getsize(os.path.join(path, n))
        for n in os.listdir(path)
        if n != "manifest.json" and not n.endswith(".mutex")  # the write locks' side files: 256 bytes each
    )


# -- semantics --------------------------------------------------------------------------------
@pytest.mark.parametrize("t0", [0.0, 3.7, 9.999, 1234.5])
def test_found_for_the_whole_window_and_forgotten_after_window_plus_period(tmp_path, t0) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(t0)
    with make(tmp_path, clock) as f:
        assert f.add("a") is True
        assert f.add("a") is False
        for dt in np.linspace(0.0, W, 161):
            clock.t = t0 + float(dt)
            assert "a" in f, dt
            assert f.add("a") is False, dt
        clock.t = t0 + W + P  # past window + period: forgotten
        assert "a" not in f
        assert f.add("a") is True  # and new again
        assert "a" in f
        clock.t = t0 + 2 * W + P
        assert "a" in f


def test_forgotten_at_most_one_period_after_the_window(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        for i in range(40):  # one key per 2 s
            clock.t = 2.0 * i
            f.add(f"k{i}")
        for i in range(40):
            added = 2.0 * i
            clock.t = added + W
            assert f"k{i}" in f
            clock.t = added + W + P
            assert f"k{i}" not in f


def test_readers_see_expiry_without_any_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        f.add("a")
        with ExpiringBloomFilter.open(f.path, readonly=True, clock=clock) as r:
            assert "a" in r
            clock.t = W + P
            assert "a" not in r and "a" not in f
            assert r.items_added == 0


def test_timedelta_window_and_properties(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with make(tmp_path, Clock(), window=datetime.timedelta(days=30), periods=30) as f:
        assert f.window == 30 * 86400.0
        assert f.periods == 30
        assert f.period_seconds == 86400.0
        assert f.capacity == 1000 and f.fp_rate == 0.01
        info = f.info()
        assert info["kind"] == "expiring" and info["period_capacity"] == 34
        assert info["period_fp_rate"] == pytest.approx(0.01 / 31)


def test_rotation_keeps_at_most_periods_plus_one_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        for step in range(30):
            clock.t = step * P + 1
            f.add(f"k{step}")
            assert len(period_files(f.path)) <= K + 1
        assert len(period_files(f.path)) == K + 1
        info = f.info()
        assert [e["period"] for e in info["live_periods"]] == list(range(30 - K - 1, 30))
        assert all(e["start"] == e["period"] * P for e in info["live_periods"])
        f.verify()


def test_constant_space_over_50_windows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 4 periods per window (each rotation fsyncs a few times: 200 of them, not 400)
    k = 4
    clock = Clock(0.0)
    capacity = 4000
    per_period = capacity // k
    sizes = {}
    with make(tmp_path, clock, capacity=capacity, periods=k) as f:
        n = 0
        for step in range(50 * k + 1):
            clock.t = step * f.period_seconds + 0.5
            f.update([f"key-{n + i}" for i in range(per_period)])
            n += per_period
            if step in (2 * k, 50 * k):
                sizes[step] = disk_bytes(f.path)
                assert len(period_files(f.path)) == k + 1
        assert sizes[2 * k] == sizes[50 * k]
        # a new key that some live period already reports (a false positive) is not added
        assert 0.99 * (k + 1) * per_period <= f.items_added <= (k + 1) * per_period


def test_false_positive_rate_at_steady_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    capacity, fp = 16000, 0.01
    with make(tmp_path, clock, capacity=capacity, fp_rate=fp) as f:
        for step in range(3 * K):
            clock.t = step * P + 0.5
            f.update([f"in-{step}-{i}" for i in range(capacity // K)])
        probes = [f"never-{i}" for i in range(200_000)]
        rate = float(np.count_nonzero(f.contains_many(probes))) / len(probes)
        assert rate <= fp, rate
        assert f.expected_fp_rate() <= fp


def test_clock_backwards_loses_no_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(200.0)  # period 20
    with make(tmp_path, clock) as f:
        assert f.add("before")
        files = period_files(f.path)
        clock.t = 100.0  # an NTP step back by 10 periods
        assert "before" in f
        assert f.add("during")  # goes to the newest period (20)
        assert f.add("before") is False
        assert period_files(f.path) == files  # no rotation backwards
        clock.t = 200.0
        assert "before" in f and "during" in f
        clock.t = 200.0 + W  # still inside "before"'s window
        assert "before" in f and "during" in f
        clock.t = 200.0 + W + P
        assert "before" not in f


def test_clock_far_backwards_then_forwards(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(1000.0)
    with make(tmp_path, clock) as f:
        for i in range(5):
            clock.t = 1000.0 + i * P
            f.add(f"k{i}")
        clock.t = 0.0  # far back: every period stays
        assert all(f"k{i}" in f for i in range(5))
        f.add("back")
        clock.t = 1000.0 + 4 * P
        assert all(f"k{i}" in f for i in range(5)) and "back" in f


def test_long_idle_gap_rotates_in_constant_work(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    stages: list[str] = []
    with make(tmp_path, clock) as f:
        for i in range(K + 1):
            clock.t = i * P
            f.add(f"k{i}")
        expiring._ROTATE_HOOK = lambda stage, n: stages.append(stage)
        try:
            clock.t = 1e12 * P  # 10**12 periods later
            t0 = time.perf_counter()
            assert "k0" not in f and f.items_added == 0
            assert f.add("later")
            elapsed = time.perf_counter() - t0
        finally:
            expiring._ROTATE_HOOK = None
        assert elapsed < 2.0
        assert stages.count("committed") == 1
        assert len(period_files(f.path)) == 1
        assert all(f"k{i}" not in f for i in range(K + 1))
        f.verify()


def test_update_and_contains_many_equal_per_item_calls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    a = make(tmp_path, clock, name="a")
    b = make(tmp_path, clock, name="b")
    try:
        for step in range(3 * K):
            clock.t = step * P + 1
            keys = [f"k{(step * 37 + i) % 500}" for i in range(120)] + [b"raw", 7, 2**63]
            got_add = sum(a.add(k) for k in keys)
            assert b.update(keys) == got_add
            probe = [f"k{i}" for i in range(600)] + [b"raw", 7, 8]
            assert b.contains_many(probe).tolist() == [k in a for k in probe]
            assert a.contains_many(probe).tolist() == b.contains_many(probe).tolist()
        for n in sorted(os.listdir(a.path)):
            if n.startswith("period-") and not n.endswith(".mutex"):
                assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes()
    finally:
        a.close()
        b.close()


def test_batches_of_every_key_type(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pa = pytest.importorskip("pyarrow")
    clock = Clock(0.0)
    with make(tmp_path, clock) as f:
        assert f.update(np.arange(10, dtype=np.int32)) == 10
        assert f.update(list(range(10))) == 0  # the same keys as 8-byte integers
        assert f.update(np.array([b"x", b"y"])) == 2
        assert f.update(np.array(["s", "t"])) == 2
        col = pa.array(["u", None, "v"])
        assert f.update(col) == 2
        assert f.contains_many(col).tolist() == [True, False, True]
        assert f.contains_many(pa.array([None, None], type=pa.string())).tolist() == [False, False]
        assert f.contains_many(np.arange(12, dtype=np.uint64)).tolist() == [True] * 10 + [False] * 2
        assert f.items_added == 16
        with pytest.raises(TypeError):
            f.update("abc")
        with pytest.raises(TypeError):
            f.add(1.5)  # type: ignore[arg-type]


def test_update_error_carries_committed_items(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with make(tmp_path, Clock()) as f:
        with pytest.raises(TypeError) as info:
            f.update(["a", object()])
        assert info.value.committed_items == 0  # type: ignore[attr-defined]
        assert "a" not in f  # validated before anything was written


# -- parameters, lifecycle, checks ------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {"window": 0},
        {"window": -5},
        {"window": float("nan")},
        {"window": float("inf")},
        {"window": "30d"},
        {"window": True},
        {"window": datetime.timedelta(0)},
        {"periods": 0},
        {"periods": 1.5},
        {"periods": True},
        {"periods": 5000},
        {"capacity": 0},
        {"capacity": -1},
        {"fp_rate": 0.0},
        {"fp_rate": 1.0},
        {"clock": 5},
    ],
)
def test_invalid_values_are_refused(tmp_path, kw) -> None:  # type: ignore[no-untyped-def]
    args: dict[str, Any] = {"window": W, "capacity": 100, "fp_rate": 0.01, "periods": K, "clock": Clock()}
    args.update(kw)
    with pytest.raises(ConfigError):
        ExpiringBloomFilter.create(
            str(tmp_path / "f"),
            args["window"],
            args["capacity"],
            args["fp_rate"],
            periods=args["periods"],
            clock=args["clock"],
        )
    assert not (tmp_path / "f").exists()


def test_existing_path_and_open_or_create(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    make(tmp_path, clock).close()
    with pytest.raises(FileExistsError):
        make(tmp_path, clock)
    with ExpiringBloomFilter.open_or_create(str(tmp_path / "f"), W, 1000, 0.01, clock=clock) as f:
        f.add("x")
    with ExpiringBloomFilter.open_or_create(str(tmp_path / "g"), W, 1000, 0.01, clock=clock) as g:
        assert g.add("x")
    with pytest.raises(ConfigMismatchError):
        ExpiringBloomFilter.open_or_create(str(tmp_path / "f"), W * 2, 1000, 0.01, clock=clock)
    with pytest.raises(TypeError):
        ExpiringBloomFilter()


def test_pickles_as_the_path_readonly_and_close(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = ExpiringBloomFilter.create(str(tmp_path / "f"), 3600, 1000, 0.01)  # the real clock
    f.add("a")
    g = pickle.loads(pickle.dumps(f))
    assert "a" in g and g.path == f.path and not g.readonly
    g.close()
    r = ExpiringBloomFilter.open(f.path, readonly=True)
    assert "a" in r
    with pytest.raises(ReadOnlyFilterError):
        r.add("b")
    with pytest.raises(ReadOnlyFilterError):
        r.update(["b"])
    assert pickle.loads(pickle.dumps(r)).readonly
    r.close()
    f.close()
    f.close()
    assert f.closed
    with pytest.raises(FilterClosedError):
        "a" in f  # noqa: B015
    with pytest.raises(FilterClosedError):
        f.add("a")
    assert "ExpiringBloomFilter" in repr(f)


def test_open_any_open_filter_verify_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    with make(tmp_path, clock) as f:
        f.add("a")
    for opener in (open_any, open_filter):
        with opener(str(tmp_path / "f"), readonly=True) as g:
            assert isinstance(g, ExpiringBloomFilter)
            assert g.contains_many(["a"]).tolist() == [True] or True  # the real clock: maybe expired
            assert g.describe()["kind"] == "expiring"
    with verify_file(str(tmp_path / "f")) as v:
        assert isinstance(v, ExpiringBloomFilter)
    assert expiring.is_expiring(str(tmp_path / "f"))


def test_manifest_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(25.0)
    with make(tmp_path, clock) as f:
        doc = json.loads((tmp_path / "f" / "manifest.json").read_text())
        assert doc["format"] == "mmapbloom-expiring" and doc["version"] == 1
        assert doc["live"] == [{"period": 2, "file": "period-2.blm", "start": 20.0}]
        assert doc["generation"] == 1
        assert doc["num_bits"] == f.config.num_bits
        assert (tmp_path / "f" / "lock").read_bytes()[:4] == b"BLEX"


def test_check_and_verify_find_damage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    f = make(tmp_path, clock)
    for i in range(3):
        clock.t = i * P
        f.add(f"k{i}")
    f.check()
    f.verify()
    os.unlink(tmp_path / "f" / "period-1.blm")
    with pytest.raises(MissingLayerError):
        f.verify()
    f.close()
    with pytest.raises(MissingLayerError):
        ExpiringBloomFilter.open(str(tmp_path / "f"))
    (tmp_path / "f" / "manifest.json").write_text("{}")
    with pytest.raises(ManifestError):
        ExpiringBloomFilter.open(str(tmp_path / "f"))
    with pytest.raises(ManifestError):
        verify_file(str(tmp_path / "f"))


def test_threads_claim_each_key_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import threading

    clock = Clock(0.0)
    keys = [f"k{i}" for i in range(2000)]
    claimed: list[str] = []
    guard = threading.Lock()
    with make(tmp_path, clock, capacity=20000) as f:

        def work(seed: int) -> None:
            import random

            mine = list(keys)
            random.Random(seed).shuffle(mine)
            got = [k for k in mine if (f.add(k) if seed % 2 else f.update([k]))]
            with guard:
                claimed.extend(got)

        ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert sorted(claimed) == sorted(keys)


def test_new_period_files_keep_the_shared_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    old = os.umask(0o077)
    try:
        with make(tmp_path, clock, mode=0o660) as f:
            for i in range(3):
                clock.t = i * P
                f.add(f"k{i}")
            for n in period_files(f.path) + ["manifest.json", "lock"]:
                assert os.stat(os.path.join(f.path, n)).st_mode & 0o777 == 0o660, n
    finally:
        os.umask(old)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_a_long_lived_handle_releases_dropped_periods(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.0)
    with make(tmp_path, clock) as f, ExpiringBloomFilter.open(f.path, readonly=True, clock=clock) as r:
        counts: list[int] = []
        side_counts: list[int] = []
        for step in range(6 * K):
            clock.t = step * P + 1
            f.add(f"k{step}")
            assert f"k{step}" in r
            if step >= 2 * K:
                with open("/proc/self/maps") as maps:
                    lines = [line for line in maps if "period-" in line and "(deleted)" in line]
                counts.append(sum(".mutex" not in line for line in lines))
                side_counts.append(sum(".mutex" in line for line in lines))
        assert max(counts) <= 4  # mappings of removed files do not pile up (2 handles x 2)
        assert max(side_counts) <= 2  # nor the writer's side files of those (mutex mode)


def test_no_private_reads_of_other_modules_objects() -> None:
    """expiring.py reads other modules' objects only through their non-underscore names
    (``BloomFilter.kernel_handle`` / ``kernel_module``, not ``_h`` / ``_native()``): every
    ``x._name`` it writes is a name of its own class (its slots and methods, inherited
    ones included)."""
    import ast

    tree = ast.parse(open(expiring.__file__, encoding="utf-8").read())
    private = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    }
    foreign = sorted(name for name in private if not hasattr(ExpiringBloomFilter, name))
    assert foreign == [], foreign


def test_add_precheck_reads_no_word_and_a_stale_handle_decides_under_the_lock(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``add`` of a key this handle's last view holds answers False without a ``pread``;
    a key it misses is decided under the lock on the committed view, so a handle that has
    not seen another handle's rotation still answers False for a key added there."""
    clock = Clock(0.5)
    with make(tmp_path, clock) as a, ExpiringBloomFilter.open(str(tmp_path / "f"), clock=clock) as b:
        assert a.add("old") and b.add("fresh-b")
        clock.t = 3 * P + 0.5
        assert a.add("x")  # a rotates; b's view is now stale
        calls = []
        real = os.pread

        def counting(fd: int, n: int, off: int) -> bytes:
            calls.append(fd)
            return real(fd, n, off)

        monkeypatch.setattr(os, "pread", counting)
        assert b.add("old") is False and calls == []  # found in b's last view: no pread
        assert b.add("x") is False and calls  # not in b's stale view: decided on the committed one
        assert b.add("y") is True and a.add("y") is False
        monkeypatch.undo()
        clock.t = W + 4 * P  # "old" expired (its period dropped): new again for both
        assert b.add("old") is True and a.add("old") is False


@pytest.mark.parametrize("size", [0, 4, 10])
def test_in_on_a_truncated_lock_file_raises_manifest_error(tmp_path, size) -> None:  # type: ignore[no-untyped-def]
    """The generation word is read through a mapping (native ``in`` and ``add``) or a
    pread (pure, batches, rotations): a lock file truncated under the handle is
    ManifestError, never SIGBUS (0 bytes: the mapped page is past the end of the file). A
    truncation that leaves the word's bytes as they were (10 bytes: the rest of a small
    generation reads as zeros) still answers from the committed view on the native
    backend, and its ``add`` writes the current period that view lists; batches, a
    rotation, check() and verify() raise."""
    clock = Clock(0.5)
    with make(tmp_path, clock) as f:
        assert f.add("a") and "a" in f
        os.truncate(os.path.join(f.path, "lock"), size)
        if size < 10 or f._word is None:
            with pytest.raises(ManifestError):
                "a" in f  # noqa: B015
            with pytest.raises(ManifestError):
                f.add("b")
        else:
            assert "a" in f and "zz" not in f
            assert f.add("b") and "b" in f and not f.add("b")
        with pytest.raises(ManifestError):
            f.contains_many(["a"])
        with pytest.raises(ManifestError):
            f.update(["c"])
        with pytest.raises(ManifestError):
            f.check()
        clock.t += f.window  # a new period: the rotation reads the word with pread
        with pytest.raises(ManifestError):
            f.add("d")


def test_in_reads_the_word_through_the_mapping_and_sees_other_handles_rotations(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    clock = Clock(0.5)
    with make(tmp_path, clock) as a, ExpiringBloomFilter.open(a.path, readonly=True, clock=clock) as r:
        assert a.add("k0") and "k0" in r
        native = r._word is not None
        calls = []
        real = os.pread

        def counting(fd: int, n: int, off: int) -> bytes:
            calls.append(fd)
            return real(fd, n, off)

        monkeypatch.setattr(os, "pread", counting)
        assert "k0" in r and "zz" not in r
        assert (calls == []) == native  # native: no pread when nothing changed
        for step in range(1, 3 * K):
            clock.t = step * P + 0.5
            assert a.add(f"k{step}")  # a rotation by the other handle each time
            assert f"k{step}" in r, step  # seen at once: the word moved, the manifest re-read
            assert (f"k{step - K - 1}" in r) is False or step - K - 1 < 0
        monkeypatch.undo()
    assert r._word is None and a._word is None  # closed: the mappings are released


def test_add_after_another_handles_rotation_writes_the_newest_period(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``add`` reads the word through the mapping under the lock (native): a handle whose
    view predates another process's rotation, and whose own clock is still in the old
    period, must not write the old period from that view; the moved word sends it to the
    pread path, which reloads the view and writes the newest period (the clock went back
    for it)."""
    slow, fast = Clock(0.5), Clock(P + 0.5)
    with make(tmp_path, slow) as a, ExpiringBloomFilter.open(a.path, clock=fast) as b:
        assert a.add("k0")  # a's view: period 0 alone
        assert b.add("k1")  # b rotates: period 1 is the newest, the word moved
        assert list(a._view.numbers) == [0]
        assert a.add("k2")
        periods = {}
        for n in (0, 1):
            with BloomFilter.open(a._period_path(n), readonly=True) as period:
                periods[n] = ("k2" in period, "k0" in period, "k1" in period)
        assert periods == {0: (False, True, False), 1: (True, False, True)}, periods
        assert not b.add("k2") and not a.add("k2")  # exact-once across the two handles


class _Killed(Exception):
    """A writer "killed" at a rotation stage (raised from expiring._ROTATE_HOOK)."""


def test_add_on_a_view_with_an_uncommitted_manifest_commits_it_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A writer killed after publishing a rotation's manifest, before storing the word,
    leaves a manifest one generation ahead of the word. A handle that loads that view must
    commit it before it adds (the pread path: the native fast path is for committed views
    only), or a reader that follows the committed word misses the key: a false negative
    inside the window."""
    clock = Clock(0.5)
    with make(tmp_path, clock) as w, ExpiringBloomFilter.open(w.path, readonly=True, clock=clock) as r:
        assert w.add("a") and "a" in r
        clock.t = P + 0.5

        def killed_after_publishing(stage: str, n: int) -> None:
            if stage == "manifest-published":
                raise _Killed

        expiring._ROTATE_HOOK = killed_after_publishing
        try:
            with pytest.raises(_Killed):
                w.add("x")
        finally:
            expiring._ROTATE_HOOK = None
        with ExpiringBloomFilter.open(w.path, clock=clock) as a:
            assert a._view.generation == a._view.word + 1  # the published, uncommitted manifest
            assert a.add("k")
            assert "k" in r and "a" in r


@pytest.fixture
def watched(tmp_path):  # type: ignore[no-untyped-def]
    """(filter holding "a", its newest period's kernel handle), on the native backend only:
    the one whose generation word is watched through a mapping."""
    with make(tmp_path, Clock(0.5)) as f:
        f.add("a")
        if f._word is None:
            pytest.skip("the word is watched through a mapping on the native backend only")
        yield f, f._view.filters[-1].kernel_handle


def test_add_unless_watch_argument_is_checked(watched) -> None:  # type: ignore[no-untyped-def]
    f, newest = watched
    assert newest.add_unless((), "b", f._word, f._view.word + 1) is None  # moved: nothing written
    assert "b" not in f
    assert newest.add_unless((), "b", f._word, f._view.word) is True
    assert newest.add_unless((), "b", None, 0) is False
    with pytest.raises(ValueError, match="4 aligned bytes"):
        newest.add_unless((), "c", b"abc", 0)
    with pytest.raises(TypeError):
        newest.add_unless((), "c", f._word)
    assert "c" not in f


def test_contains_any_watch_argument_is_checked(watched) -> None:  # type: ignore[no-untyped-def]
    f, newest = watched
    assert newest.contains_any((), "a", f._word, f._view.word) is True
    assert newest.contains_any((), "a", f._word, f._view.word + 1) is None  # moved: no answer
    assert newest.contains_any((), "a", None, 0) is True
    with pytest.raises(ValueError, match="4 aligned bytes"):
        newest.contains_any((), "a", b"abc", 0)
    with pytest.raises(TypeError):
        newest.contains_any((), "a", f._word)
