"""The over-capacity warning is emitted by the operation that passes the design point, and is
never left pending on a handle to fire on a later, unrelated call."""

from __future__ import annotations

import os
import signal
import warnings

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, OverCapacityWarning
from mmapbloom.base import CHUNK_KEYS
from tests.conftest import urls

CFG = BloomConfig.for_items(1000, 0.01)  # past its design point after about 1,250 items


def over_capacity_warnings(caught: list[warnings.WarningMessage]) -> int:
    return sum(1 for w in caught if w.category is OverCapacityWarning)


@pytest.mark.parametrize("width", [4, 8])
def test_to_bloom_of_a_full_counting_filter_leaves_no_pending_warning(width: int) -> None:
    c = CountingBloomFilter(CFG, counter_bits=width)
    items = urls(5000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c.update(items)
        assert over_capacity_warnings(caught) == 1  # the counting filter's own, where it happened
        b = c.to_bloom()
        assert b.items_added == c.items_added and b.is_over_capacity()
        assert over_capacity_warnings(caught) == 1  # the conversion adds nothing
        assert b.add(items[0]) is False  # adds nothing: nothing to warn about
        b.update(items[:10])
        assert b.contains_many(items).all()
        assert over_capacity_warnings(caught) == 1
        # Its own first add past the design point warns, once, as a freshly opened file would.
        new = next(x for x in urls(5000, prefix="https://new.example/") if x not in b)
        assert b.add(new) is True
        assert over_capacity_warnings(caught) == 2
        b.add(next(x for x in urls(5000, prefix="https://new2.example/") if x not in b))
        assert over_capacity_warnings(caught) == 2


def pure(f: BloomFilter) -> BloomFilter:
    """The filter on the pure handle, whose kernels can be wrapped (the native handle runs a
    chunk in C: no Python code runs between its cells and its count)."""
    f._h.close()
    f._attach_handle(pure=True)
    return f


def test_a_batch_interrupted_after_passing_the_design_point_warns_at_once() -> None:
    # A real SIGINT arriving while the second chunk commits: deferred_signals delivers it
    # after that chunk, so update() ends with KeyboardInterrupt. The warning recorded by the
    # first chunk is emitted by this update, not by the next unrelated add.
    f = pure(BloomFilter(CFG))
    real = f._h._k.add_many
    calls = []

    def add_many_then_interrupt(keys):  # type: ignore[no-untyped-def]
        calls.append(len(keys))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(keys)

    f._h._k.add_many = add_many_then_interrupt
    items = urls(3 * CHUNK_KEYS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt) as info:
            f.update(items)
        assert info.value.committed_items == 2 * CHUNK_KEYS  # type: ignore[attr-defined]
        assert over_capacity_warnings(caught) == 1
        f._h._k.add_many = real
        assert f.add(items[0]) is False
        f.update(items[:100])
        assert over_capacity_warnings(caught) == 1


def test_a_warning_made_an_error_never_replaces_the_interrupt() -> None:
    f = pure(BloomFilter(CFG))
    real = f._h._k.add_many
    calls = []

    def add_many_then_interrupt(keys):  # type: ignore[no-untyped-def]
        calls.append(len(keys))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(keys)

    f._h._k.add_many = add_many_then_interrupt
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverCapacityWarning)
        with pytest.raises(KeyboardInterrupt):
            f.update(urls(3 * CHUNK_KEYS))
        f._h._k.add_many = real
        assert f.add(urls(1)[0]) is False  # nothing pending: no OverCapacityWarning raised here


def test_plain_union_past_its_design_point_warns() -> None:
    """10 full shards of for_items(10_000, 0.01) OR-ed together: the plain union warns too."""
    config = BloomConfig.for_items(10_000, 0.01)
    total = BloomFilter(config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shard in range(10):
            part = BloomFilter(config)
            part.update([f"s{shard}-{i}" for i in range(10_000)])
            total |= part
    assert any(issubclass(w.category, OverCapacityWarning) for w in caught)
    assert total.is_over_capacity()
