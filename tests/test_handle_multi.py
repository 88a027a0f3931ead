"""Handle.add_many_unless / contains_many_any / add_unless / contains_any (several handles
of one geometry, each key hashed once: the expiring filter's periods): the native handle
against the pure twin (same answers, same bytes), and against the per-handle definition."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, get_strategy, kernels

native = kernels.native_module()
needs_native = pytest.mark.skipif(native is None, reason="the compiled kernel is not in use")

STRATEGIES = ["M3KM", "M3MX", "M3BL", "M3M2", "M3B2"]
pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.SaturationWarning")


def _pure(f: Any) -> Any:
    f._h.close()
    f._attach_handle(pure=True)
    return f


def _filters(name: str, width: int, m: int, pure: bool, n: int = 4, fill: int = 0) -> list[Any]:
    config = BloomConfig(num_bits=m, num_hashes=7, strategy=get_strategy(name))
    out = []
    for i in range(n):
        f = BloomFilter(config) if width == 1 else CountingBloomFilter(config, counter_bits=width)
        if pure:
            _pure(f)
        f.update([f"k{i}-{j}" for j in range(fill or m // 40)] + [f"shared-{j}" for j in range(0, 200, i + 2)])
        out.append(f)
    return out


def _keys(seed: int) -> list[Any]:
    rng = random.Random(seed)
    keys: list[Any] = []
    for _ in range(1200):
        r = rng.random()
        i = rng.randrange(400)
        keys.append(
            f"shared-{i}" if r < 0.3 else f"k{rng.randrange(4)}-{i}" if r < 0.6 else i if r < 0.8 else b"b%d" % i
        )
    return keys


def _expected_any(fs: list[Any], keys: list[Any]) -> list[bool]:
    return [any(k in f for f in fs) for k in keys]


def _expected_unless(fs: list[Any], keys: list[Any]) -> list[bool]:
    """Sequential definition: key new in fs[0] unless one of fs[1:] may hold it."""
    out = []
    for k in keys:
        out.append(False if any(k in f for f in fs[1:]) else bool(fs[0].add(k)))
    return out


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("pure", [False, True])
def test_batch_methods_match_definition(name: str, width: int, pure: bool) -> None:
    if not pure and native is None:
        pytest.skip("native kernel not in use")
    m = 512 * 40
    fs = _filters(name, width, m, pure)
    keys = _keys(1)
    hs = [f._h for f in fs]
    got = np.zeros(len(keys), dtype=np.bool_)
    hs[0].contains_many_any(hs[1:], keys, got)
    assert got.tolist() == _expected_any(fs, keys)
    assert [hs[0].contains_any(hs[1:], k) for k in keys[:300]] == _expected_any(fs, keys[:300])
    ref = _filters(name, width, m, pure)
    want = _expected_unless(ref, keys)
    out = np.zeros(len(keys), dtype=np.bool_)
    new = hs[0].add_many_unless(hs[1:], keys, out)
    assert out.tolist() == want and new == sum(want)
    assert bytes(fs[0].to_bytes()) == bytes(ref[0].to_bytes())
    more = _keys(2)
    ref_more = _expected_unless(ref, more)
    assert [hs[0].add_unless(hs[1:], k) for k in more] == ref_more
    assert bytes(fs[0].to_bytes()) == bytes(ref[0].to_bytes())


@needs_native
@pytest.mark.parametrize("name", STRATEGIES)
def test_pure_equals_native(name: str) -> None:
    m = 512 * 40960  # 2.5 MiB bodies, beyond the cache-sized direct path: the prefetching loops
    a, b = _filters(name, 1, m, False, 3, 5000), _filters(name, 1, m, True, 3, 5000)
    keys = _keys(3) + list(range(20_000))
    arr = np.array(list(range(10_000, 30_000)), dtype=np.uint64)
    for batch in (keys, arr):
        ga = np.zeros(len(batch), dtype=np.bool_)
        gb = np.zeros(len(batch), dtype=np.bool_)
        a[0]._h.contains_many_any([f._h for f in a[1:]], batch, ga)
        b[0]._h.contains_many_any([f._h for f in b[1:]], batch, gb)
        assert ga.tolist() == gb.tolist()
        oa = np.zeros(len(batch), dtype=np.bool_)
        ob = np.zeros(len(batch), dtype=np.bool_)
        assert a[0]._h.add_many_unless([f._h for f in a[1:]], batch, oa) == b[0]._h.add_many_unless(
            [f._h for f in b[1:]], batch, ob
        )
        assert oa.tolist() == ob.tolist()
        assert bytes(a[0].to_bytes()) == bytes(b[0].to_bytes())
        assert a[0].items_added == b[0].items_added


def test_no_false_negative_across_handles() -> None:
    fs = _filters("M3M2", 1, 512 * 64, False)
    keys = [f"x{i}" for i in range(2000)]
    fs[2].update(keys[:1000])
    fs[3].update(keys[1000:])
    hs = [f._h for f in fs]
    got = np.zeros(len(keys), dtype=np.bool_)
    hs[0].contains_many_any(hs[1:], keys, got)
    assert got.all()
    assert all(hs[0].contains_any(hs[1:], k) for k in keys)
    assert hs[0].add_many_unless(hs[1:], keys) == 0
    assert not any(hs[0].add_unless(hs[1:], k) for k in keys)


@pytest.mark.parametrize("pure", [False, True])
def test_geometry_and_type_refused(pure: bool) -> None:
    if not pure and native is None:
        pytest.skip("native kernel not in use")
    a = _filters("M3M2", 1, 512 * 8, pure, 1)[0]
    b = _filters("M3M2", 1, 512 * 16, pure, 1)[0]
    out = np.zeros(1, dtype=np.bool_)
    with pytest.raises(ValueError, match="geometry"):
        a._h.contains_many_any([b._h], ["k"], out)
    with pytest.raises(ValueError, match="geometry") as exc:
        a._h.add_many_unless([b._h], ["k"])
    assert exc.value.committed_items == 0  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        a._h.contains_any(["not a handle"], "k")
    with pytest.raises(TypeError):
        a._h.add_unless(b._h, "k")


def test_closed_other_refused() -> None:
    from mmapbloom.errors import FilterClosedError

    fs = _filters("M3M2", 1, 512 * 8, False, 2)
    fs[1].close()
    with pytest.raises(FilterClosedError):
        fs[0]._h.contains_any([fs[1]._h], "k")
    with pytest.raises(FilterClosedError):
        fs[0]._h.add_many_unless([fs[1]._h], ["k"])
