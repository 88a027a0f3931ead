"""Strategies M3MX, M3BL and their odd-step revisions M3M2 (the default) and M3B2: golden
positions checked by independent exact-integer arithmetic, byte-exact golden files, the
false-positive grid against each strategy's formula, the empty key as an ordinary key, and the
same bits on every code path."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmapbloom import (
    M3B2,
    M3BL,
    M3KM,
    M3M2,
    M3MX,
    BloomConfig,
    BloomFilter,
    ConfigError,
    CountingBloomFilter,
    get_strategy,
    merge_shards,
)
from mmapbloom.hashing import M3KM_FP_FLOOR
from mmapbloom import register_strategy

GOLDEN_DIR = Path(__file__).parent / "golden"
M64 = 2**64 - 1


def ref_m3mx(key: bytes, k: int, m: int) -> list[int]:
    """M3MX from its definition, written out independently of the package."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    a, b = h % 2**64, h >> 64
    out = []
    for i in range(k):
        z = (a + i * b) % 2**64
        z ^= z >> 33
        z = z * 0xFF51AFD7ED558CCD % 2**64
        z ^= z >> 33
        z = z * 0xC4CEB9FE1A85EC53 % 2**64
        z ^= z >> 33
        out.append(z * m >> 64)
    return out


def ref_m3bl(key: bytes, k: int, m: int) -> list[int]:
    """M3BL from its definition, written out independently of the package."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    x, y = h % 2**64, h >> 64
    block = x * (m // 512) >> 64
    out = []
    for _ in range(k):
        y = y * 0x9E3779B97F4A7C15 % 2**64
        out.append(block * 512 + (y >> 55))
    return out


def ref_m3m2(key: bytes, k: int, m: int) -> list[int]:
    """M3M2 from its definition: a = h mod 2^64, b = (h >> 64) | 1,
    pos_i = (fmix64((a + i * b) mod 2^64) * m) >> 64; written independently of the package."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    a, b = h % 2**64, (h >> 64) | 1
    out = []
    for i in range(k):
        z = (a + i * b) % 2**64
        z ^= z >> 33
        z = z * 0xFF51AFD7ED558CCD % 2**64
        z ^= z >> 33
        z = z * 0xC4CEB9FE1A85EC53 % 2**64
        z ^= z >> 33
        out.append(z * m >> 64)
    return out


def ref_m3b2(key: bytes, k: int, m: int) -> list[int]:
    """M3B2 from its definition: x = h mod 2^64, y = (h >> 64) | 1, block = (x * m/512) >> 64,
    k times y = y * 0x9E3779B97F4A7C15 mod 2^64, pos = block * 512 + (y >> 55)."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    x, y = h % 2**64, (h >> 64) | 1
    block = x * (m // 512) >> 64
    out = []
    for _ in range(k):
        y = y * 0x9E3779B97F4A7C15 % 2**64
        out.append(block * 512 + (y >> 55))
    return out


# The empty key hashes to 0 under MurmurHash3 with seed 0, so all its probes land on bit 0
# (block 0 for M3BL): a property of the definition, pinned here.
GOLDEN_M3MX = [
    (b"", 7, 9586, [0, 0, 0, 0, 0, 0, 0]),
    (b"hello", 5, 1, [0, 0, 0, 0, 0]),
    (b"hello", 7, 100, [31, 45, 39, 94, 4, 99, 72]),
    (b"https://example.org/", 4, 2**20, [867571, 423858, 21260, 168251]),
    (b"abc", 3, 2**33 + 17, [6988754073, 6535237532, 1659605338]),
]
GOLDEN_M3BL = [
    (b"", 4, 512, [0, 0, 0, 0]),
    (b"hello", 6, 1024, [640, 707, 763, 581, 973, 782]),
    (b"https://example.org/", 3, 512 * 1000, [137316, 137415, 137703]),
    (b"abc", 5, 512 * 3, [1251, 1461, 1334, 1473, 1306]),
]


# M3M2 / M3B2: the empty key's probes are k values like any key's (only its first M3M2 probe
# is 0, as fmix64(0) = 0). Keys with an odd upper half ("hello", the URL) match M3MX / M3BL.
GOLDEN_M3M2 = [
    (b"", 7, 9586, [0, 6752, 2199, 423, 2679, 8028, 8713]),
    (b"", 20, 288, [0, 202, 66, 12, 80, 241, 261, 130, 79, 163, 112, 269, 154, 260, 209, 244, 107, 264, 274, 286]),
    (b"hello", 5, 1, [0, 0, 0, 0, 0]),
    (b"hello", 7, 100, [31, 45, 39, 94, 4, 99, 72]),
    (b"https://example.org/", 4, 2**20, [867571, 423858, 21260, 168251]),
    (b"abc", 3, 2**33 + 17, [6988754073, 693360866, 966126321]),
]
GOLDEN_M3B2 = [
    (b"", 4, 512, [316, 446, 192, 434]),
    (b"", 8, 512 * 1000, [316, 446, 192, 434, 92, 151, 189, 13]),
    (b"hello", 6, 1024, [640, 707, 763, 581, 973, 782]),
    (b"https://example.org/", 3, 512 * 1000, [137316, 137415, 137703]),
    (b"abc", 5, 512 * 3, [1056, 1396, 1526, 1395, 1399]),
]


@pytest.mark.parametrize("key, k, m, expected", GOLDEN_M3M2)
def test_m3m2_golden_positions(key: bytes, k: int, m: int, expected: list[int]) -> None:
    assert ref_m3m2(key, k, m) == expected
    assert list(M3M2().positions(key, k, m)) == expected
    assert M3M2().positions_many([key], k, m).tolist() == [expected]


@pytest.mark.parametrize("key, k, m, expected", GOLDEN_M3B2)
def test_m3b2_golden_positions(key: bytes, k: int, m: int, expected: list[int]) -> None:
    assert ref_m3b2(key, k, m) == expected
    assert list(M3B2().positions(key, k, m)) == expected
    assert M3B2().positions_many([key], k, m).tolist() == [expected]
    assert len({p // 512 for p in expected}) == 1  # one block


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(max_size=40),
    k=st.integers(1, 40),
    m=st.one_of(st.integers(1, 5000), st.integers(1, M64), st.sampled_from([1, 2, 2**20, 2**33 + 17, M64])),
)
def test_m3m2_matches_reference(key: bytes, k: int, m: int) -> None:
    assert list(M3M2().positions(key, k, m)) == ref_m3m2(key, k, m)
    assert M3M2().positions_many([key, key + b"x"], k, m).tolist() == [ref_m3m2(key, k, m), ref_m3m2(key + b"x", k, m)]


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(max_size=40), k=st.integers(1, 40), blocks=st.one_of(st.integers(1, 3000), st.integers(1, 2**55 - 1))
)
def test_m3b2_matches_reference(key: bytes, k: int, blocks: int) -> None:
    m = 512 * blocks
    assert list(M3B2().positions(key, k, m)) == ref_m3b2(key, k, m)
    assert M3B2().positions_many([key], k, m).tolist() == [ref_m3b2(key, k, m)]


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, M64), b=st.integers(0, M64), k=st.integers(2, 64))
def test_odd_step_probes_never_collapse(a: int, b: int, k: int) -> None:
    """With an odd step, a + i*b mod 2^64 (M3M2) and y * G^i mod 2^64 (M3B2) take k distinct
    values for every hash value: the pre-reduction probes never repeat."""
    step = b | 1
    assert len({(a + i * step) % 2**64 for i in range(k)}) == k
    y, seen = step, set()
    for _ in range(k):
        y = y * 0x9E3779B97F4A7C15 % 2**64
        seen.add(y)
    assert len(seen) == k


def test_empty_key_collapses_under_the_old_strategies_only() -> None:
    """The empty key hashes to 0: one bit under M3MX / M3BL, k spread bits under M3M2 / M3B2."""
    assert mmh3.hash128(b"", seed=0, x64arch=True, signed=False) == 0
    assert set(M3MX().positions(b"", 7, 9586)) == {0} and set(M3BL().positions(b"", 7, 5120)) == {0}
    assert len(set(M3M2().positions(b"", 7, 9586))) == 7 and len(set(M3B2().positions(b"", 7, 5120))) == 7


@pytest.mark.parametrize("name", ["M3M2", "M3B2"])
def test_empty_key_is_an_ordinary_key(name: str) -> None:
    """In filters from for_items(1000, 0.01) holding 1,000 random keys, "" is reported present
    about as often as p (M3MX / M3BL: about half the filters). 300 filters: expected 3
    (binomial, p = 0.01); 12 would be 5 standard deviations above."""
    import random

    rng = random.Random(17)
    config = BloomConfig.for_items(1000, 0.01, strategy=get_strategy(name))
    hits = 0
    for _ in range(300):
        f = BloomFilter(config)
        f.update([rng.randbytes(12) for _ in range(1000)])
        hits += "" in f
    assert hits <= 12


def test_empty_key_with_one_stored_key() -> None:
    """A filter holding only "k475" answers True for "" under M3MX (the fault) and False under M3M2."""
    old = BloomFilter(BloomConfig.for_items(1000, 0.01, strategy=M3MX()))
    old.add("k475")
    assert "" in old
    new = BloomFilter(BloomConfig.for_items(1000, 0.01))
    new.add("k475")
    assert "" not in new


@pytest.mark.parametrize("key, k, m, expected", GOLDEN_M3MX)
def test_m3mx_golden_positions(key: bytes, k: int, m: int, expected: list[int]) -> None:
    assert ref_m3mx(key, k, m) == expected
    assert list(M3MX().positions(key, k, m)) == expected
    assert M3MX().positions_many([key], k, m).tolist() == [expected]


@pytest.mark.parametrize("key, k, m, expected", GOLDEN_M3BL)
def test_m3bl_golden_positions(key: bytes, k: int, m: int, expected: list[int]) -> None:
    assert ref_m3bl(key, k, m) == expected
    assert list(M3BL().positions(key, k, m)) == expected
    assert M3BL().positions_many([key], k, m).tolist() == [expected]
    assert len({p // 512 for p in expected}) == 1  # one block


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(max_size=40),
    k=st.integers(1, 40),
    m=st.one_of(st.integers(1, 5000), st.integers(1, M64), st.sampled_from([1, 2, 2**20, 2**33 + 17, M64])),
)
def test_m3mx_matches_reference(key: bytes, k: int, m: int) -> None:
    assert list(M3MX().positions(key, k, m)) == ref_m3mx(key, k, m)
    assert M3MX().positions_many([key, key + b"x"], k, m).tolist() == [ref_m3mx(key, k, m), ref_m3mx(key + b"x", k, m)]


@settings(max_examples=200, deadline=None)
@given(
    key=st.binary(max_size=40), k=st.integers(1, 40), blocks=st.one_of(st.integers(1, 3000), st.integers(1, 2**55 - 1))
)
def test_m3bl_matches_reference(key: bytes, k: int, blocks: int) -> None:
    m = 512 * blocks
    assert list(M3BL().positions(key, k, m)) == ref_m3bl(key, k, m)
    assert M3BL().positions_many([key], k, m).tolist() == [ref_m3bl(key, k, m)]


def test_m3bl_needs_whole_blocks() -> None:
    for strategy in (M3BL(), M3B2()):
        for m in (1, 511, 513, 1000):
            with pytest.raises(ConfigError, match=f"{strategy.name} needs .* multiple of 512"):
                BloomConfig(num_bits=m, num_hashes=3, strategy=strategy)
        assert BloomConfig.for_items(1000, 0.01, strategy=strategy).num_bits % 512 == 0


def test_default_strategy_is_m3m2() -> None:
    assert BloomConfig.for_items(1000, 0.01).strategy.name == "M3M2"
    assert BloomConfig(num_bits=10, num_hashes=2).strategy.name == "M3M2"
    assert BloomFilter(BloomConfig(num_bits=10, num_hashes=2)).to_bytes()[4:8] == b"M3M2"
    assert CountingBloomFilter(BloomConfig(num_bits=10, num_hashes=2)).strategy.name == "M3M2"


def _golden_image(name: str) -> bytes:
    strategy = get_strategy(name)
    m = 4096 if strategy.block_bits else 1000
    f = BloomFilter(BloomConfig(num_bits=m, num_hashes=5, strategy=strategy))
    f.update([f"golden-{i}" for i in range(100)] + [b"\x00\xff", "é"])
    return f.to_bytes()


@pytest.mark.parametrize("name", ["M3KM", "M3MX", "M3BL", "M3M2", "M3B2"])
def test_golden_file(name: str) -> None:
    """A byte-exact file per strategy: any change to a strategy's arithmetic fails here."""
    path = GOLDEN_DIR / f"{name.lower()}.blm"
    if os.environ.get("MMAPBLOOM_WRITE_GOLDEN"):
        path.write_bytes(_golden_image(name))
    assert _golden_image(name) == path.read_bytes()
    with BloomFilter.open(path, readonly=True) as f:
        assert f.strategy.name == name and f.items_added == 102
        assert f.contains_many([f"golden-{i}" for i in range(100)]).all()


# -- the false-positive grid ---------------------------------------------------------------
GRID = [(10, 1e-3), (10, 1e-6), (20, 1e-10), (100, 1e-6), (1000, 1e-3), (1000, 1e-9), (10_000, 0.01), (100_000, 0.05)]
ABSENT = 200_000


def _measure(config: BloomConfig, n: int, absent: int) -> tuple[float, int]:
    """Fill ``max(1, 1000 // n)`` filters with n keys each and spread ``absent`` queries
    over them. One filter of 10 keys is a single draw of its set-bit count (with m = 144 its
    rate spreads from about 0.5x to 2x the formula), so small n is averaged over many filters."""
    filters = max(1, 1000 // n)
    hits = 0
    for j in range(filters):
        f = BloomFilter(config)
        f.update([f"in-{j}-{i}" for i in range(n)])
        share = absent // filters + (j < absent % filters)
        hits += int(f.contains_many([f"out-{j}-{i}" for i in range(share)]).sum())
    # From the true n: items_added omits adds that were already false positives.
    return config.strategy.expected_fp_rate(n, config.num_bits, config.num_hashes), hits


def _within(hits: int, trials: int, rate: float) -> bool:
    """hits within 5 binomial standard deviations (+3 for tiny rates) of trials * rate."""
    mean = trials * rate
    slack = 5 * math.sqrt(mean * (1 - rate)) + 3
    return abs(hits - mean) <= slack


@pytest.mark.parametrize("n, p", GRID)
@pytest.mark.parametrize("name", ["M3M2", "M3B2", "M3MX", "M3BL"])
def test_fp_rate_matches_the_strategys_formula(name: str, n: int, p: float) -> None:
    config = BloomConfig.for_items(n, p, strategy=get_strategy(name))
    expected, hits = _measure(config, n, ABSENT)
    assert expected <= p * 1.05
    assert _within(hits, ABSENT, expected), (name, n, p, config, expected, hits / ABSENT)


@pytest.mark.parametrize("n, p", GRID)
def test_m3km_stays_above_its_documented_floor_only(n: int, p: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        config = BloomConfig.for_items(n, p, strategy=M3KM())
    expected, hits = _measure(config, n, ABSENT)
    assert (
        hits
        <= ABSENT * (expected + M3KM_FP_FLOOR / config.num_bits)
        + 5 * math.sqrt(ABSENT * (expected + 2 / config.num_bits))
        + 3
    )


def test_issue_example_measures_about_one_in_a_million() -> None:
    f = BloomFilter(BloomConfig.for_items(10, 1e-6))  # m = 288, k = 20
    f.update([str(i) for i in range(10)])
    hits = int(f.contains_many([str(i) for i in range(10, 1_000_010)]).sum())
    assert hits <= 8  # expected about 1; M3KM gave 7,210
    m3km = BloomFilter(BloomConfig(num_bits=288, num_hashes=20, strategy=M3KM()))
    m3km.update([str(i) for i in range(10)])
    assert int(m3km.contains_many([str(i) for i in range(10, 200_010)]).sum()) > 500  # the fault, kept visible


def test_power_of_two_m_and_distinct_positions() -> None:
    config = BloomConfig(num_bits=1024, num_hashes=16)
    pos = config.strategy.positions_many([f"k{i}".encode() for i in range(20_000)], 16, 1024)
    distinct = np.mean([len(set(row)) for row in pos.tolist()])
    assert distinct == pytest.approx(1024 * (1 - (1 - 1 / 1024) ** 16), abs=0.03)  # 15.88, as random
    expected, hits = _measure(config, 50, ABSENT)
    assert _within(hits, ABSENT, expected)


def test_m3km_warns_below_its_floor() -> None:
    with pytest.warns(UserWarning, match="M3KM cannot deliver"):
        BloomConfig.for_items(10, 1e-6, strategy=M3KM())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BloomConfig.for_items(100_000, 0.01, strategy=M3KM())
        BloomConfig.for_items(10, 1e-6)


def test_blocked_sizing_premium() -> None:
    """M3BL costs a few percent more memory at 1% and 0.1% (README table)."""
    for p, low, high in ((0.01, 1.0, 1.1), (0.001, 1.0, 1.15)):
        classic = BloomConfig.for_items(1_000_000, p)
        blocked = BloomConfig.for_items(1_000_000, p, strategy=M3BL())
        assert low < blocked.num_bits / classic.num_bits < high
        assert M3BL().expected_fp_rate(1_000_000, blocked.num_bits, blocked.num_hashes) <= p
        smaller = blocked.num_bits - 512
        assert min(M3BL().expected_fp_rate(1_000_000, smaller, k) for k in range(1, 30)) > p


def test_blocked_statistics_use_blocks() -> None:
    config = BloomConfig.for_items(5000, 0.01, strategy=M3BL())
    f = BloomFilter(config)
    f.update([f"s{i}" for i in range(5000)])
    assert f.approx_items() == pytest.approx(5000, rel=0.05)
    assert f.observed_fp_rate() == pytest.approx(f.expected_fp_rate(), rel=0.3)
    c = CountingBloomFilter(config)
    c.update([f"s{i}" for i in range(5000)])
    assert c.observed_fp_rate() == pytest.approx(f.observed_fp_rate())
    assert c.approx_items() == pytest.approx(f.approx_items())
    assert BloomFilter(config).approx_items() == 0.0 and math.copysign(1, BloomFilter(config).approx_items()) == 1


# -- every code path gives the same bits ------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    items=st.lists(st.one_of(st.text(max_size=20), st.binary(max_size=20)), max_size=60),
    name=st.sampled_from(["M3KM", "M3MX", "M3BL", "M3M2", "M3B2"]),
    k=st.integers(1, 12),
    blocks=st.integers(1, 6),
)
def test_every_path_sets_the_same_bits(items: list[Any], name: str, k: int, blocks: int) -> None:
    config = BloomConfig(num_bits=512 * blocks, num_hashes=k, strategy=get_strategy(name))
    one = BloomFilter(config)
    flags = [one.add(x) for x in items]
    batch = BloomFilter(config)
    assert batch.add_many(items).tolist() == flags
    assert batch.to_bytes() == one.to_bytes()
    counting = CountingBloomFilter(config)
    counting.update(items)
    assert counting.to_bloom().to_bytes() == one.to_bytes()
    assert counting.contains_many(items).all() and one.contains_many(items).all()
    assert all(x in one for x in items)


def test_merge_and_cli_set_the_same_bits(tmp_path: Path) -> None:
    for name in ("M3KM", "M3MX", "M3BL", "M3M2", "M3B2"):
        config = BloomConfig(num_bits=512 * 20, num_hashes=6, strategy=get_strategy(name))
        items = [f"item-{i}" for i in range(300)]
        ref = BloomFilter(config)
        ref.update(items)
        shards = []
        for part in range(3):
            path = tmp_path / f"{name}-{part}.blm"
            with BloomFilter.create(path, config) as f:
                f.update(items[part::3])
            shards.append(path)
        merged = tmp_path / f"{name}-merged.blm"
        merge_shards(merged, shards)
        assert merged.read_bytes()[24:] == ref.to_bytes()[24:]
        cli_file = tmp_path / f"{name}-cli.blm"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mmapbloom",
                "create",
                str(cli_file),
                "--bits",
                str(512 * 20),
                "--hashes",
                "6",
                "--strategy",
                name,
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        subprocess.run(
            [sys.executable, "-m", "mmapbloom", "add", "-q", str(cli_file)],
            check=True,
            env=env,
            input="\n".join(items).encode() + b"\n",
            capture_output=True,
        )
        assert cli_file.read_bytes() == ref.to_bytes()


def test_strategy_by_registered_name() -> None:
    """strategy="M3KM" still creates M3KM filters (a registered name is accepted)."""
    # The field is typed as the resolved HashStrategy; the constructor takes a name too.
    assert BloomConfig(num_bits=100, num_hashes=3, strategy="M3KM").strategy == M3KM()  # type: ignore[arg-type]
    blocked = BloomConfig.for_items(1000, 0.01, strategy="M3BL")
    assert blocked.strategy == M3BL() and blocked.num_bits % 512 == 0
    assert BloomConfig.for_items(1000, 0.01, strategy="M3B2").num_bits == blocked.num_bits
    assert BloomConfig(num_bits=100, num_hashes=3, strategy="M3MX").strategy == M3MX()  # type: ignore[arg-type]
    assert BloomFilter(BloomConfig(num_bits=64, num_hashes=2, strategy="M3KM")).to_bytes()[4:8] == b"M3KM"  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["M3M2", "M3B2"])
def test_new_strategies_in_scalable_and_counting_filters(tmp_path: Path, name: str) -> None:
    """M3M2 / M3B2 end to end in the scalable filter (every layer, reopened) and the counting
    filter, where removing a never-added "" no longer succeeds just because cell 0 is set."""
    from mmapbloom import ScalableBloomFilter

    strategy = get_strategy(name)
    keys = [f"s-{i}" for i in range(600)]
    with ScalableBloomFilter.create(tmp_path / name, 100, 0.01, strategy=strategy) as f:
        f.update(keys)
        assert len(f.layers) > 1
    with ScalableBloomFilter.open(tmp_path / name) as g:
        assert g.strategy.name == name
        for layer in g.layers:
            with BloomFilter.open(layer.path, readonly=True) as one:
                assert one.strategy.name == name
        assert g.contains_many(keys).all()
    c = CountingBloomFilter(BloomConfig.for_items(1000, 0.01, strategy=strategy))
    c.add("k475")
    with pytest.raises(KeyError):
        c.remove("")
    assert "k475" in c
    old = CountingBloomFilter(BloomConfig.for_items(1000, 0.01, strategy=M3BL() if strategy.block_bits else M3MX()))
    old.add("k475")
    if "" in old:  # M3MX: "" lies on one bit; k475 happens to set it (the reported fault)
        old.remove("")
        assert "k475" not in old


# A 16-byte key computed by inverting MurmurHash3 x64 128 (seed 0; a bijection for a fixed
# 16-byte length) so that its upper hash half is 0 (docs/FORMAT.md, "Chosen keys").
CRAFTED_ZERO_STEP = bytes.fromhex("37f868c74aa19eba85fde84fe2c6c740")


def test_collapse_cases_of_the_released_strategies() -> None:
    """The cases of docs/FORMAT.md: a zero upper half collapses M3MX / M3BL to one probe;
    v2 = 63 leaves two M3MX probes and one M3BL bit; M3KM's period is m / gcd(step, m)."""
    h = mmh3.hash128(CRAFTED_ZERO_STEP, seed=0, x64arch=True, signed=False)
    assert h >> 64 == 0 and h & M64 == 12345
    assert len(set(M3MX().positions(CRAFTED_ZERO_STEP, 16, 2**40))) == 1
    assert len(set(M3BL().positions(CRAFTED_ZERO_STEP, 16, 512 * 1000))) == 1
    assert len(set(M3M2().positions(CRAFTED_ZERO_STEP, 16, 2**40))) == 16
    assert len(set(M3B2().positions(CRAFTED_ZERO_STEP, 16, 512 * 1000))) > 12  # 16 in 512, as random

    def mx_probes(a: int, b: int, k: int) -> int:  # distinct pre-reduction probes of M3MX
        return len({(a + i * b) % 2**64 for i in range(k)})

    def bl_probes(y: int, k: int) -> int:  # distinct positions of M3BL inside the block
        out = set()
        for _ in range(k):
            y = y * 0x9E3779B97F4A7C15 % 2**64
            out.add(y >> 55)
        return len(out)

    assert [mx_probes(7, b, 16) for b in (0, 2**63, 2**62, 2**61, 2**60, 1)] == [1, 2, 4, 8, 16, 16]
    assert [bl_probes(y, 16) for y in (0, 2**62, 2**63, 3 * 2**62, 2**61, 2**60, 2**59)] == [1, 1, 1, 1, 2, 4, 8]
    # M3KM: m = 2^20 has periods 2 and 4 below k = 7 (phi(2) + phi(4) = 3 steps of 2^20 - 1).
    m = 2**20
    short = [s for s in (m // 2, m // 4, 3 * m // 4, m // 8, 1) if m // math.gcd(s, m) < 7]
    assert short == [m // 2, m // 4, 3 * m // 4]


# -- strategies are a protocol (moved from test_edge_cases.py) --
class PlainStrategy:
    """A custom strategy that does not subclass HashStrategy (only name and positions)."""

    name = "PLN1"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        h = int.from_bytes(key[:8].ljust(8, b"\0"), "little") * 0x9E3779B97F4A7C15
        return [(h + i * 7919) % num_bits for i in range(num_hashes)]


def test_protocol_strategy_registers_and_round_trips(tmp_path: Path) -> None:
    strategy = register_strategy(PlainStrategy())
    config = BloomConfig(num_bits=5000, num_hashes=4, strategy=strategy)
    for kind in (BloomFilter, CountingBloomFilter):
        path = tmp_path / f"plain-{kind.__name__}"
        with kind.create(path, config) as f:
            assert f.add("a") and f.update(["b", "c", "a"]) == 2
            assert f.contains_many(["a", "b", "c"]).all()
            assert f.expected_fp_rate() > 0 and f.approx_items() == pytest.approx(3, abs=1)
        assert path.read_bytes()[4:8] == b"PLN1"
        with kind.open(path, readonly=True) as g:
            assert g.strategy is strategy and all(x in g for x in "abc")
