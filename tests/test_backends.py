"""The native and pure-Python backends build byte-identical filters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mmapbloom
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, get_strategy, kernels

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning", "ignore::mmapbloom.SaturationWarning")

native = kernels.native_module()
needs_native = pytest.mark.skipif(
    native is None, reason="the compiled kernel is not in use (MMAPBLOOM_PURE=1 or not built)"
)


def _pure(f: Any) -> Any:
    """Rebind a filter's handle to the pure-Python reference (same image, lock, counter)."""
    f._h.close()
    f._attach_handle(pure=True)
    return f


def test_backend_is_reported() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    pure = subprocess.run(
        [sys.executable, "-m", "mmapbloom", "--version"],
        capture_output=True,
        text=True,
        env={**env, "MMAPBLOOM_PURE": "1"},
    )
    assert "python backend" in pure.stdout
    assert mmapbloom.BACKEND in ("native", "python")
    if native is not None:
        assert mmapbloom.BACKEND == "native"


keys_st = st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=300)), max_size=40)


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    keys=keys_st,
    name=st.sampled_from(["M3KM", "M3MX", "M3BL"]),
    k=st.integers(1, 64),
    m=st.one_of(st.integers(1, 4000), st.integers(1, 2**20)),
    width=st.sampled_from([1, 4, 8]),
)
def test_native_and_pure_build_the_same_image(keys: list[Any], name: str, k: int, m: int, width: int) -> None:
    a: Any
    b: Any
    strategy = get_strategy(name)
    if name == "M3BL":
        m = 512 * max(1, m // 512)
    config = BloomConfig(num_bits=m, num_hashes=k, strategy=strategy)
    if width == 1:
        a, b = BloomFilter(config), _pure(BloomFilter(config))
        flags_a = [a.add(x) for x in keys]
        flags_b = [b.add(x) for x in keys]
        assert flags_a == flags_b
        assert a.add_many(keys[::-1]).tolist() == b.add_many(keys[::-1]).tolist()
    else:
        a, b = CountingBloomFilter(config, counter_bits=width), _pure(CountingBloomFilter(config, counter_bits=width))
        assert [a.add(x) for x in keys] == [b.add(x) for x in keys]
        assert a.update(keys) == b.update(keys)
        for x in keys[:5]:
            assert a.discard(x) == b.discard(x)
        assert [a.count(x) for x in keys] == [b.count(x) for x in keys]
    assert a.to_bytes() == b.to_bytes()
    probe = keys + [b"absent", "zz"]
    assert a.contains_many(probe).tolist() == b.contains_many(probe).tolist() == [x in a for x in probe]
    assert a.count_ones() == b.count_ones()


@needs_native
@pytest.mark.parametrize("name", ["M3KM", "M3MX", "M3BL"])
def test_native_and_pure_agree_above_2_to_33_bits(tmp_path: Path, name: str) -> None:
    """m above 2^33 (a 1 GiB sparse file): the same bytes at every touched position."""
    m = 2**33 + (512 if name == "M3BL" else 17)
    config = BloomConfig(num_bits=m, num_hashes=9, strategy=get_strategy(name))
    keys = [f"k{i}".encode() * (i % 7) for i in range(3000)]
    with (
        BloomFilter.create(tmp_path / "a", config, sparse=True) as a,
        BloomFilter.create(tmp_path / "b", config, sparse=True) as b,
    ):
        _pure(b)
        assert a.update(keys) == b.update(keys)
        pos = np.unique(config.strategy.positions_many(keys, 9, m).ravel() >> np.uint64(3)).astype(np.int64)
        ba, bb = a._bits(), b._bits()
        assert np.array_equal(ba[pos], bb[pos]) and ba[pos].any()
        assert a.items_added == b.items_added
        assert a.contains_many(keys).all() and b.contains_many(keys).all()
