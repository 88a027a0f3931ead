"""Issue 28 item 4: the batch pipelines (two staged words a key, the commit's L1 ring or its
direct path when the body fits in the cache, the blocked and direct query paths) and the
fixed-length MurmurHash3 path of 8-byte keys give exactly the pure reference's bytes and
answers, for every strategy and both cell kinds, on either side of the direct-path size
(DIRECT_BYTES, 2 MiB, in _cells.h)."""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, get_strategy, kernels

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning", "ignore::mmapbloom.SaturationWarning")

native = kernels.native_module()
needs_native = pytest.mark.skipif(native is None, reason="the compiled kernel is not in use")

STRATEGIES = ["M3KM", "M3MX", "M3BL", "M3M2", "M3B2"]
#: num_bits of a Bloom body under the direct paths' bounds, between the blocked one
#: (256 KiB) and the other (2 MiB), and above both (_cells.h)
SIZES = [512 * 97, 512 * 8_000, 512 * 40_000]


def _pure(f: Any) -> Any:
    f._h.close()
    f._attach_handle(pure=True)
    return f


def _keys(seed: int, n: int) -> list[Any]:
    """Random str / bytes / int keys (8-byte ones included), with duplicates inside a chunk."""
    rng = random.Random(seed)
    base: list[Any] = []
    for i in range(n):
        r = i % 4
        if r == 0:
            base.append(f"https://example.org/{rng.getrandbits(40):x}/{i}")
        elif r == 1:
            base.append(rng.randbytes(rng.choice([0, 1, 7, 8, 9, 16, 31])))
        elif r == 2:
            base.append(rng.getrandbits(63) - 2**62)
        else:
            base.append(rng.getrandbits(64))
    return base + [base[rng.randrange(n)] for _ in range(n // 3)]


@needs_native
@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("width", [1, 4, 8])
def test_batches_match_the_pure_reference(name: str, m: int, width: int) -> None:
    config = BloomConfig(num_bits=m, num_hashes=7, strategy=get_strategy(name))
    keys = _keys(m + width, 3000)
    rng = random.Random(1)
    rng.shuffle(keys)
    ints = np.array([rng.getrandbits(63) for _ in range(2000)] * 2, dtype=np.int64)
    a: Any
    b: Any
    if width == 1:
        a, b = BloomFilter(config), _pure(BloomFilter(config))
    else:
        a, b = CountingBloomFilter(config, counter_bits=width), _pure(CountingBloomFilter(config, counter_bits=width))
    assert a.add_many(keys).tolist() == b.add_many(keys).tolist()
    assert a.update(ints) == b.update(ints)
    assert a.to_bytes() == b.to_bytes()
    probe = keys + [f"absent-{i}" for i in range(2000)] + ints.tolist()
    got = a.contains_many(probe).tolist()
    assert got == b.contains_many(probe).tolist() == [x in b for x in probe]
    assert all(got[: len(keys)]) and all(got[-len(ints) :])  # no false negative
    assert a.contains_many(ints).all()


@needs_native
def test_eight_byte_hash_equals_mmh3() -> None:
    mmh3 = pytest.importorskip("mmh3")
    rng = random.Random(8)
    words = [0, 1, 2**63, 2**64 - 1] + [rng.getrandbits(64) for _ in range(500)]
    for w in words:
        raw = struct.pack("<Q", w)
        want = mmh3.hash128(raw, seed=0, x64arch=True, signed=False)
        assert native.hash128(raw) == want
        assert native.hash128(w) == want
        if w >= 2**63:  # the same value mod 2**64 as a negative int
            assert native.hash128(w - 2**64) == want


#: MurmurHash3_x64_128 (seed 0) of the 8 little-endian bytes of an int key: h1 | h2 << 64,
#: from mmh3.hash128(struct.pack("<q", v), seed=0, x64arch=True, signed=False).
GOLDEN = {
    0: 0xF2557DFCC4E8FE5228DF63B7CC57C3CB,
    1: 0x3D8ACDB4D36D9C06004403B7FB05C44A,
    -1: 0x692112C96B4A46AFA0E4B27A1ABAED73,
    2**62: 0xA5DC7AC6322611F6EEBFF4378969A5EB,
    12345678901234: 0x0FF7030A4341EC03164963C0C7D3ED27,
}


@pytest.mark.parametrize("value", sorted(GOLDEN))
def test_eight_byte_hash_golden_values(value: int) -> None:
    from mmapbloom import hashing

    h1, h2 = hashing.hash_halves([hashing.encode_key(value)])
    assert int(h1[0]) | int(h2[0]) << 64 == GOLDEN[value]
    if native is not None:
        assert native.hash128(value) == GOLDEN[value]
        assert native.hash128(struct.pack("<q", value)) == GOLDEN[value]
