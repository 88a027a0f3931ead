"""Property tests (hypothesis): batch answers equal per-item answers, round trips, union."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmapbloom import BloomConfig, BloomFilter
from tests.conftest import urls

# Tiny filters fill up on purpose here; their over-capacity warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")

keys = st.lists(st.one_of(st.text(max_size=20), st.binary(max_size=20)), max_size=60)
configs = st.builds(lambda m, k: BloomConfig(num_bits=m, num_hashes=k), st.integers(1, 300), st.integers(1, 8))


@given(config=configs, first=keys, second=keys)
@settings(max_examples=300, deadline=None)
def test_batch_equals_sequential(config: BloomConfig, first: list, second: list) -> None:  # type: ignore[type-arg]
    a, b = BloomFilter(config), BloomFilter(config)
    a.update(first)
    b.update(first)
    seq = [a.add(x) for x in second]
    batch = b.add_many(second).tolist()
    assert batch == seq
    assert a.to_bytes() == b.to_bytes()  # same bits and the same items added
    probe = second + first + ["never-added", b"\x00"]
    assert b.contains_many(probe).tolist() == [a.might_contain(x) for x in probe]
    assert all(a.might_contain(x) for x in first + second)  # no false negatives


@given(config=configs, items=keys)
@settings(max_examples=200, deadline=None)
def test_round_trip(config: BloomConfig, items: list) -> None:  # type: ignore[type-arg]
    f = BloomFilter(config)
    f.update(items)
    g = BloomFilter.from_bytes(f.to_bytes())
    assert g == f and g.config == f.config and g.to_bytes() == f.to_bytes()
    assert g.contains_many(items).all()  # all() of an empty answer is True
    g.check()


@given(config=configs, left=keys, right=keys)
@settings(max_examples=200, deadline=None)
def test_union_contains_both(config: BloomConfig, left: list, right: list) -> None:  # type: ignore[type-arg]
    a, b = BloomFilter(config), BloomFilter(config)
    a.update(left)
    b.update(right)
    u = a | b
    assert all(u.might_contain(x) for x in left + right)
    assert u.items_added == min(a.items_added + b.items_added, 2**32 - 1)
    i = a & b
    both = [x for x in left if x in right]
    assert all(i.might_contain(x) for x in both)
    u.check()
    i.check()


def test_threads_one_handle_and_own_handles(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(50_000, 1e-9)
    path = tmp_path / "t.blm"
    shared = BloomFilter.create(path, cfg)
    items = urls(3_000)
    news: list[list[str]] = [[] for _ in range(32)]
    barrier = threading.Barrier(32)

    def work(i: int) -> None:
        f = shared if i < 16 else BloomFilter.open(path)  # 16 share a handle, 16 own one
        barrier.wait()
        for x in items[i % 3 :: 3] + items:  # overlapping items, so "new" races are real
            if f.add(x):
                news[i].append(x)
        if f is not shared:
            f.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reported = [x for n in news for x in n]
    assert sorted(reported) == sorted(items)  # "new" exactly once per distinct item
    assert shared.contains_many(items).all() and shared.items_added == len(items)
    shared.close()


@given(
    n_distinct=st.integers(1, 3000),
    n=st.integers(0, 6000),
    seed=st.integers(0, 2**32 - 1),
    m=st.one_of(st.integers(1, 5000), st.integers(5000, 2**26)),
    k=st.integers(1, 10),
    prefill=st.integers(0, 3000),
)
@settings(max_examples=60, deadline=None)
def test_add_many_equals_sequential_large(n_distinct: int, n: int, seed: int, m: int, k: int, prefill: int) -> None:
    """Big batches with many in-batch duplicates and slot collisions (the hash-table path
    of add_many) give exactly the answers and bytes of sequential adds."""
    import random

    rng = random.Random(seed)
    cfg = BloomConfig(num_bits=m, num_hashes=k)
    items = [f"k{rng.randrange(n_distinct)}" for _ in range(n)]
    a, b = BloomFilter(cfg), BloomFilter(cfg)
    pre = [f"p{i}" for i in range(prefill)]
    a.update(pre)
    b.update(pre)
    assert b.add_many(items).tolist() == [a.add(x) for x in items]
    assert a.to_bytes() == b.to_bytes()


def test_add_many_across_chunks(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mmapbloom.base as base_module

    monkeypatch.setattr(base_module, "CHUNK_KEYS", 7)
    cfg = BloomConfig(num_bits=300, num_hashes=3)
    items = [f"x{i % 40}" for i in range(200)]
    a, b = BloomFilter(cfg), BloomFilter(cfg)
    assert b.add_many(items).tolist() == [a.add(x) for x in items]
    assert b.contains_many(items).all() and a.to_bytes() == b.to_bytes()


@given(key=st.binary(max_size=64))
def test_hash_halves_is_hash128_split(key: bytes) -> None:
    import mmh3

    from mmapbloom.hashing import hash_halves

    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    low, high = hash_halves([key, b"other"])
    assert (int(low[0]), int(high[0])) == (h % 2**64, h >> 64)
