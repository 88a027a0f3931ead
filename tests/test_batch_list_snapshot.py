"""A batch given as a list is the list as it was when the call began: the native batch reader
pins each key as it reads it (one pass over the keys' objects, not a tuple copy first), and
pins the rest of the list before it runs any Python code (a key's ``__index__``), which may
change the list. Checked on every kind's ``update`` and ``contains_many``: no key of the
snapshot is lost, none is answered absent, no reference is leaked or dropped, also when the
batch fails half way."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter, ScalableBloomFilter

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")

N = 3000  # past the size from which a batch releases the GIL (256 keys)


def _kinds() -> dict[str, Callable[[str], Any]]:
    config = BloomConfig.for_items(10 * N, 0.01)
    return {
        "bloom": lambda d: BloomFilter.create(os.path.join(d, "f.blm"), config),
        "counting": lambda d: CountingBloomFilter.create(os.path.join(d, "f.blc"), config),
        "scalable": lambda d: ScalableBloomFilter.create(os.path.join(d, "s"), capacity=10 * N, fp_rate=0.01),
        "cuckoo": lambda d: CuckooFilter.create(os.path.join(d, "f.ckf"), capacity=10 * N, fp_rate=0.01),
    }


@pytest.fixture(params=sorted(_kinds()))
def f(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    filt = _kinds()[request.param](str(tmp_path))
    yield filt
    filt.close()


class Clearing:
    """An integer key (``__index__``) whose encoding empties the list it is in, freeing every
    key object only that list referred to (unless the batch pinned them)."""

    def __init__(self, value: int, victim: list[Any]) -> None:
        self.value, self.victim = value, victim

    def __index__(self) -> int:
        self.victim.clear()
        return self.value


def fresh_keys(tag: str) -> list[str]:
    """N str keys referred to by nothing but the returned list (built at run time)."""
    return [f"{tag}-{i}-" + "x" * (i % 50) for i in range(N)]


def test_a_list_emptied_by_a_key_still_adds_and_finds_the_snapshot(f: Any) -> None:
    head, tail = fresh_keys("head"), fresh_keys("tail")
    expected = [k.encode() for k in head + tail] + [(7).to_bytes(8, "little")]
    batch: list[Any] = head + [None] + tail
    del head, tail  # the batch list holds the only reference to each str now
    batch[N] = Clearing(7, batch)
    f.update(batch)
    assert batch == []  # the key's __index__ ran, and emptied the list the call was given
    assert f.contains_many(expected).all()  # no key of the snapshot lost

    query: list[Any] = fresh_keys("head") + [None] + fresh_keys("tail")
    query[N] = Clearing(7, query)
    got = f.contains_many(query)
    assert query == []
    assert len(got) == 2 * N + 1 and got.all()  # every key answered from the snapshot


def test_references_are_kept_and_dropped_exactly(f: Any) -> None:
    keys = fresh_keys("ref")
    before = [sys.getrefcount(k) for k in keys]
    f.update(keys)
    f.contains_many(keys)
    assert [sys.getrefcount(k) for k in keys] == before

    bad = keys + [None]  # fails at the last key: the rest of the snapshot is still released
    before_bad = [sys.getrefcount(k) for k in keys]
    with pytest.raises(TypeError):
        f.update(bad)
    with pytest.raises(TypeError):
        f.contains_many(bad)
    assert [sys.getrefcount(k) for k in keys] == before_bad

    cleared: list[Any] = list(keys) + [Clearing(1, [])]
    cleared[-1].victim = cleared
    f.update(cleared)
    assert cleared == []
    assert [sys.getrefcount(k) for k in keys] == before_bad  # the pins of the rest are released too


def test_a_failing_key_after_a_clearing_key_raises_and_leaks_nothing(f: Any) -> None:
    keys = fresh_keys("fail")
    before = [sys.getrefcount(k) for k in keys]
    batch: list[Any] = list(keys)
    batch.insert(10, Clearing(3, batch))
    batch.append(1.5)  # refused (a float), after the list was emptied by the key at 10
    with pytest.raises(TypeError, match="float"):
        f.update(batch)
    assert batch == []
    assert [sys.getrefcount(k) for k in keys] == before


@pytest.mark.parametrize("bad", [2**64, "lone \ud800 surrogate"], ids=["int-overflow", "surrogate"])
def test_a_bad_key_before_any_python_code_runs_releases_the_pins(f: Any, bad: Any) -> None:
    """The batch fails in mid-list, before the rest of the list was pinned: the keys read so
    far are released, none of the others is touched."""
    keys = fresh_keys("mid")
    before = [sys.getrefcount(k) for k in keys]
    batch: list[Any] = keys[: N // 2] + [bad] + keys[N // 2 :]
    with pytest.raises((OverflowError, ValueError)):
        f.update(batch)
    with pytest.raises((OverflowError, ValueError)):
        f.contains_many(batch)
    del batch
    assert [sys.getrefcount(k) for k in keys] == before


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is Python code from 3.12 on (PEP 688)")
def test_a_bytearray_subclass_whose_buffer_empties_the_list(f: Any) -> None:
    """A query reads a bytearray in place; a subclass's ``__buffer__`` is Python code, so the
    rest of the list is pinned before it runs."""

    class Emptying(bytearray):
        def __buffer__(self, flags: int) -> memoryview:
            victim.clear()
            return super().__buffer__(flags)

    head, tail = fresh_keys("bhead"), fresh_keys("btail")
    f.update(head + tail + [b"abc"])
    victim: list[Any] = head + [Emptying(b"abc")] + tail
    del head, tail
    got = f.contains_many(victim)
    assert victim == []
    assert len(got) == 2 * N + 1 and got.all()


def test_encode_keys_encodes_a_list_subclass_as_it_was() -> None:
    from mmapbloom.hashing import encode_keys

    class Keys(list):  # type: ignore[type-arg]
        pass

    batch = Keys(["a", None, "b", "c"])
    batch[1] = Clearing(1, batch)
    assert encode_keys(batch) == [b"a", (1).to_bytes(8, "little"), b"b", b"c"]
    assert batch == []
