"""Issue 29 item 3: every exception leaving every batch writer of every kind carries
``committed_items`` (how many leading keys were committed; 0 when nothing was), on both
backends (the test suite runs once per backend: ``MMAPBLOOM_PURE=1``).

The bad batches are the issue's: a None, an int past 2**64, a lone high surrogate (which
no key-encoding rule accepts), a float after a numpy int; and the refusals of a closed
filter and of a read-only one."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    CuckooFilter,
    ExpiringBloomFilter,
    ScalableBloomFilter,
)

BAD_BATCHES = {
    "none": ["a", None],
    "big-int": ["a", 2**70],
    "high-surrogate": ["a", "\ud800"],
    "numpy-then-float": [np.int64(1), 1.5],
}


def make(kind: str, path: str, capacity: int = 1000) -> Any:
    config = BloomConfig(num_bits=1 << 16, num_hashes=3) if capacity == 1000 else BloomConfig.for_items(capacity, 0.01)
    if kind == "bloom":
        return BloomFilter.create(path, config)
    if kind == "counting":
        return CountingBloomFilter.create(path, config)
    if kind == "scalable":
        return ScalableBloomFilter.create(path, capacity=capacity, fp_rate=0.01)
    if kind == "cuckoo":
        return CuckooFilter.create(path, capacity=capacity, fp_rate=0.01)
    return ExpiringBloomFilter.create(path, window=3600, capacity=capacity, fp_rate=0.01)


def reopen(kind: str, path: str) -> Any:
    cls: Any = {
        "bloom": BloomFilter,
        "counting": CountingBloomFilter,
        "scalable": ScalableBloomFilter,
        "cuckoo": CuckooFilter,
        "expiring": ExpiringBloomFilter,
    }[kind]
    return cls.open(path, readonly=True)


WRITERS: dict[str, list[str]] = {
    "bloom": ["update", "add_many"],
    "counting": ["update", "add_many"],
    "scalable": ["update"],
    "cuckoo": ["update", "add_many", "remove_many"],
    "expiring": ["update"],
}
CASES = [(kind, writer) for kind, writers in WRITERS.items() for writer in writers]


def committed(call: Callable[[], Any]) -> Any:
    with pytest.raises(BaseException) as info:
        call()
    assert hasattr(info.value, "committed_items"), f"{type(info.value).__name__}: {info.value}"
    return info.value.committed_items  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", list(BAD_BATCHES))
@pytest.mark.parametrize(("kind", "writer"), CASES)
def test_bad_batch_carries_committed_items(tmp_path: Any, kind: str, writer: str, bad: str) -> None:
    with make(kind, str(tmp_path / "f")) as f:
        assert committed(lambda: getattr(f, writer)(BAD_BATCHES[bad])) == 0
        assert "a" not in f  # validated before any cell changed


@pytest.mark.parametrize(("kind", "writer"), CASES)
def test_refusals_carry_committed_items(tmp_path: Any, kind: str, writer: str) -> None:
    path = str(tmp_path / "f")
    f = make(kind, path)
    f.update(["x"])
    f.close()
    assert committed(lambda: getattr(f, writer)(["a", "b"])) == 0
    with reopen(kind, path) as ro:
        assert committed(lambda: getattr(ro, writer)(["a", "b"])) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX")
@pytest.mark.parametrize(("kind", "writer"), CASES)
def test_interrupt_while_numpy_ints_convert(tmp_path: Any, kind: str, writer: str) -> None:
    """A KeyboardInterrupt raised while a numpy int scalar is converted (its __index__
    runs Python: the interrupt lands there deterministically) carries committed_items."""

    class Interrupting(np.int64):
        pass

    calls = [0]

    def index(self: Any) -> int:
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return int(np.int64(self))

    Interrupting.__index__ = index  # type: ignore[method-assign, assignment]
    keys = [np.int64(i) for i in range(3)] + [Interrupting(i) for i in range(3, 6)]
    with make(kind, str(tmp_path / "f")) as f:
        got = committed(lambda: getattr(f, writer)(keys))
        assert got == 0, got


# -- an interrupted write whose bits and count disagree (moved from test_edge_cases.py) --
@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_interrupt_during_update_leaves_bits_and_count_agreeing(kind: type) -> None:
    keys = [f"key-{i}" for i in range(150_000)]
    t0 = time.perf_counter()
    kind(BloomConfig.for_items(2_000_000, 1e-9)).update(keys)
    full = time.perf_counter() - t0
    for fraction in (0.05, 0.2, 0.4, 0.6, 0.8):
        f = kind(BloomConfig.for_items(2_000_000, 1e-9))
        timer = threading.Timer(full * fraction, os.kill, (os.getpid(), signal.SIGINT))
        returned = False
        try:
            timer.start()  # inside the try: under load the signal can land before update starts
            f.update(keys)
            returned = True
            timer.join()  # late signal (a noisy machine): it lands here, after the update
        except KeyboardInterrupt as exc:
            # Every exception out of a batch writer carries committed_items: one without it
            # was raised outside update, before it began or after it returned (the timer
            # thread needs the GIL to send the signal, so it often sends it just as update
            # gives the GIL up on returning, before `returned = True` runs): nothing or all.
            committed = len(keys) if returned else getattr(exc, "committed_items", None)
            if committed is None:
                committed = f.items_added
                assert committed in (0, len(keys)), committed
        else:
            committed = len(keys)
        present = f.contains_many(keys)
        assert present[:committed].all()
        assert int(present.sum()) == committed == f.items_added, (fraction, committed)


# -- a warning made an error (``-W error``) after the batch's last chunk -------------------
# The batch (or, for the expiring filter, the chunk whose handle call warns) is committed
# when its OverCapacityWarning (or a counting filter's SaturationWarning) is emitted, so
# the exception says so. On main it carried none (the expiring filter's update said 0).
WARNS: dict[str, list[str]] = {
    "bloom": ["update", "add_many"],
    "counting": ["update", "add_many"],
    "expiring": ["update"],
}


def small(kind: str, path: str) -> Any:
    config = BloomConfig.for_items(100, 0.01)
    if kind == "bloom":
        return BloomFilter.create(path, config)
    if kind == "counting":
        return CountingBloomFilter.create(path, config)
    return ExpiringBloomFilter.create(path, window=3600, capacity=100, fp_rate=0.01)


@pytest.mark.parametrize("n", [150, 70_000])  # one chunk, several chunks
@pytest.mark.parametrize(("kind", "writer"), [(k, w) for k, ws in WARNS.items() for w in ws])
def test_warning_made_an_error_after_the_last_chunk(tmp_path: Any, kind: str, writer: str, n: int) -> None:
    import warnings

    from mmapbloom import OverCapacityWarning

    keys = [f"k{i}" for i in range(n)]
    with small(kind, str(tmp_path / "f")) as f, warnings.catch_warnings():
        warnings.simplefilter("error", OverCapacityWarning)
        got = committed(lambda: getattr(f, writer)(keys))
        # the expiring filter's handle call per 65,536-key chunk warns after the first one
        assert got == (65_536 if kind == "expiring" and n > 65_536 else n), got
        assert f.contains_many(keys[:got]).all()  # committed indeed


@pytest.mark.parametrize("writer", ["update", "add_many"])
def test_saturation_warning_made_an_error_carries_committed_items(tmp_path: Any, writer: str) -> None:
    import warnings

    from mmapbloom import SaturationWarning

    with CountingBloomFilter.create(str(tmp_path / "f"), BloomConfig(num_bits=1 << 16, num_hashes=3)) as f:
        with warnings.catch_warnings():
            warnings.simplefilter("error", SaturationWarning)
            assert committed(lambda: getattr(f, writer)(["a"] * 40)) == 40
        assert f.count("a") == 15  # a 4-bit counter saturates at 15
