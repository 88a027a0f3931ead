"""Sizing: the golden table of the design and refused inputs."""

from __future__ import annotations

import fractions
import math
import os
from typing import Any

import pytest

from mmapbloom import M3KM, M3M2, M3MX, BloomConfig, ConfigError
from tests.cli_support import one_line_error, run_cli
from mmapbloom.sizing import MAX_NUM_HASHES, approx_items, expected_fill_ratio, expected_fp_rate, observed_fp_rate


@pytest.mark.parametrize(
    "n, p, m, k",
    [
        (1000, 0.01, 9_586, 7),
        (1_000_000, 0.01, 9_585_059, 7),
        (1_000_000, 0.001, 14_377_588, 10),
        (1e6, 0.01, 9_585_059, 7),  # integral float accepted
        (1, 0.5, 2, 1),
        (50_000_000, 0.01, 479_252_919, 7),  # the 57 MiB blocklist of the design,
    ],
)
def test_sizing_table(n: float, p: float, m: int, k: int) -> None:
    c = BloomConfig.for_items(n, p)
    assert (c.num_bits, c.num_hashes) == (m, k)
    assert c.capacity == int(n) and c.fp_rate == p
    assert c.strategy.name == "M3M2"  # the default; classic sizing


def test_k_never_below_one() -> None:
    # p close to 1 gives m/n ln 2 < 0.5, which rounds to 0 without the floor.
    c = BloomConfig.for_items(1000, 0.9)
    assert c.num_hashes == 1


@pytest.mark.parametrize("n", [0, -1, 1.5, True, False, "10", None, float("nan"), float("inf")])
def test_bad_capacity_refused(n: object) -> None:
    with pytest.raises(ConfigError, match=repr(n) if not isinstance(n, float) else "capacity"):
        BloomConfig.for_items(n, 0.01)  # type: ignore[arg-type]


@pytest.mark.parametrize("p", [0, 1, -0.1, 1.5, float("nan"), float("inf"), True, "0.1"])
def test_bad_fp_rate_refused(p: object) -> None:
    with pytest.raises(ValueError, match="fp_rate"):
        BloomConfig.for_items(1000, p)  # type: ignore[arg-type]


def test_too_many_bits_refused() -> None:
    with pytest.raises(ValueError, match="bits"):
        BloomConfig.for_items(2**62, 1e-9)


def test_smallest_fp_rate_fits_header() -> None:
    # k = round((m / n) ln 2) is about -log2(p) <= 1075 for any float p > 0, so the
    # k >= 2**32 refusal of for_items cannot trigger; the smallest p is accepted.
    c = BloomConfig.for_items(1, 5e-324)
    assert (c.num_bits, c.num_hashes) == (1550, 1074)


@pytest.mark.parametrize("m, k", [(0, 1), (1, 0), (2**64, 1), (1, 2**32), (-5, 3), (1.0, 1), (True, 1)])
def test_explicit_config_range(m: object, k: object) -> None:
    with pytest.raises(ConfigError):
        BloomConfig(num_bits=m, num_hashes=k)  # type: ignore[arg-type]


def test_explicit_config_bounds_accepted() -> None:
    c = BloomConfig(num_bits=2**64 - 1, num_hashes=MAX_NUM_HASHES)
    assert c.num_bits == 2**64 - 1 and c.num_hashes == MAX_NUM_HASHES == 4096


def test_num_hashes_above_the_supported_maximum_refused() -> None:
    """A k that makes every operation cost minutes is refused."""
    with pytest.raises(ConfigError, match="num_hashes"):
        BloomConfig(num_bits=2**26, num_hashes=2**32 - 1)
    with pytest.raises(ConfigError, match="num_hashes"):
        BloomConfig(num_bits=2**26, num_hashes=MAX_NUM_HASHES + 1)


def test_equality_ignores_capacity() -> None:
    a = BloomConfig.for_items(1000, 0.01)
    b = BloomConfig(num_bits=9586, num_hashes=7, strategy=M3M2())
    assert a != BloomConfig(num_bits=9586, num_hashes=7, strategy=M3KM())
    assert a != BloomConfig(num_bits=9586, num_hashes=7, strategy=M3MX())
    assert a == b and hash(a) == hash(b)
    assert a != BloomConfig(num_bits=9587, num_hashes=7)
    assert len({a, b}) == 1


def test_config_is_frozen() -> None:
    c = BloomConfig(num_bits=10, num_hashes=2)
    with pytest.raises(AttributeError):
        c.num_bits = 11  # type: ignore[misc]


def test_formulas() -> None:
    c = BloomConfig.for_items(1_000_000, 0.01)
    # At capacity the expected rate is the target (within rounding of m and k).
    assert expected_fp_rate(1_000_000, c.num_bits, c.num_hashes) == pytest.approx(0.01, rel=0.01)
    assert expected_fill_ratio(1_000_000, c.num_bits, c.num_hashes) == pytest.approx(0.518, abs=0.001)
    assert observed_fp_rate(50, 100, 2) == 0.25
    assert approx_items(0, 100, 3) == 0
    assert approx_items(100, 100, 3) == math.inf
    assert approx_items(50, 100, 1) == pytest.approx(-100 * math.log(0.5))


def test_strategy_must_be_the_registered_one() -> None:
    from mmapbloom.hashing import M3KM, HashStrategy

    class Unregistered(HashStrategy):
        name = "UNRG"

        def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
            return [0] * num_hashes

    class FakeM3KM(M3KM):  # reuses the name of the default scheme: readers would hash differently
        pass

    for bad in (Unregistered(), FakeM3KM()):
        with pytest.raises(ConfigError, match="register"):
            BloomConfig(num_bits=100, num_hashes=3, strategy=bad)


def test_bloomconfig_lives_in_config_only() -> None:
    """The ``sizing.BloomConfig`` alias is gone (nothing released had it)."""
    import mmapbloom.sizing

    assert BloomConfig.__module__ == "mmapbloom.config"
    with pytest.raises(AttributeError):
        mmapbloom.sizing.BloomConfig  # type: ignore[attr-defined]  # noqa: B018


# -- large p: k = 1 -----------------------------------------------------------------------------
@pytest.mark.parametrize("p, m", [(0.36, 2241), (0.4, 1958), (0.5, 1443), (0.9, 435), (0.95, 334), (0.999, 145)])
def test_k1_is_sized_for_k1(p: float, m: int) -> None:
    """When k rounds to 1, m = ceil(-n / ln(1 - p)), so that p = 1 - e^(-n/m) holds at n."""
    c = BloomConfig.for_items(1000, p)
    assert (c.num_bits, c.num_hashes) == (m, 1) == (math.ceil(-1000 / math.log1p(-p)), 1)
    assert expected_fp_rate(1000, c.num_bits, 1) <= p < expected_fp_rate(1000, c.num_bits - 1, 1)


@pytest.mark.parametrize("p, low, high", [(0.9, 0.85, 0.92), (0.95, 0.92, 0.965)])
def test_large_p_measures_about_p(p: float, low: float, high: float) -> None:
    """Before: for_items(1000, 0.9) measured 0.977 and for_items(1000, 0.95) answered present
    for every query (m = 107). With k = 1 the rate is the fill X/m, which is about p."""
    from mmapbloom import BloomFilter

    f = BloomFilter(BloomConfig.for_items(1000, p))
    f.update([f"in-{i}" for i in range(1000)])
    measured = float(f.contains_many([f"out-{i}" for i in range(100_000)]).mean())
    assert low < measured < high
    assert measured == pytest.approx(f.count_ones() / f.num_bits, abs=0.005)


def test_large_p_filter_does_not_warn_before_its_design_point() -> None:
    """for_items(1000, 0.9) used to warn after 215 new items; now not before 1,000 adds
    (per item or batch), and still once well past them."""
    import warnings

    from mmapbloom import BloomFilter, OverCapacityWarning

    config = BloomConfig.for_items(1000, 0.9)
    keys = [f"k{i}" for i in range(1000)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverCapacityWarning)
        one = BloomFilter(config)
        for key in keys:
            one.add(key)
        batch = BloomFilter(config)
        batch.update(keys)
        assert not one.is_over_capacity() and not batch.is_over_capacity()
    with pytest.warns(OverCapacityWarning, match="past its design point"):
        batch.update([f"more-{i}" for i in range(3000)])
    assert batch.is_over_capacity()


def test_expected_new_items() -> None:
    from mmapbloom.sizing import expected_new_items

    assert expected_new_items(1000, 435, 1) == pytest.approx(435 * (1 - math.exp(-1000 / 435)))
    for n, m, k in ((1000, 2186, 2), (500, 1000, 3), (1000, 9586, 7)):
        brute = sum(1 - expected_fp_rate(i, m, k) for i in range(n))  # add i sees i items before it
        assert expected_new_items(n, m, k) == pytest.approx(brute, rel=2e-3)
    assert expected_new_items(0, 100, 3) == 0.0


# -- blocked strategies: the exact block-occupancy mixture (issue 29, item 12) ------------------
@pytest.mark.parametrize("name", ["M3B2", "M3BL"])
@pytest.mark.parametrize(
    "n, p, m, k, old_m",
    [
        (1_000_000, 0.01, 9_918_464, 6, 9_895_936),
        (1_000_000, 0.001, 15_545_856, 9, 15_488_512),
        (100_000, 0.01, 992_256, 6, 989_696),
        (10_000, 0.01, 99_328, 6, 99_328),
        (1000, 0.001, 15_872, 9, 15_872),
        (50_000_000, 0.01, 495_899_648, 6, 494_795_264),
        (10, 1e-6, 512, 20, 512),  # one block: k capped at the classic k (was 19)
        (1, 0.9, 512, 1, 512),  # was k = 35
    ],
)
def test_blocked_sizing_table(name: str, n: int, p: float, m: int, k: int, old_m: int) -> None:
    """Golden blocked sizes; ``old_m`` is the size before the exact mixture (mean-fill
    in-block rate, Poisson block load), which measured about 1% above p at 1% (item 12)."""
    from mmapbloom import get_strategy

    strategy = get_strategy(name)
    c = BloomConfig.for_items(n, p, strategy=strategy)
    assert (c.num_bits, c.num_hashes) == (m, k)
    assert strategy.expected_fp_rate(n, m, k) <= p
    if m > 512:
        assert min(strategy.expected_fp_rate(n, m - 512, j) for j in range(1, k + 4)) > p
    assert old_m <= m


def test_in_block_rate_is_the_exact_occupancy_mixture() -> None:
    """r[i] = E[(X_i / s)^k] by hand for s = 8, and by brute force over every throw."""
    import itertools
    from fractions import Fraction

    from mmapbloom.sizing import _in_block_rates

    r = _in_block_rates(8, 2, 3)
    assert r[0] == 0.0
    assert r[1] == pytest.approx(29 / 512, rel=1e-12)  # X = 1 (p 1/8) or 2 (p 7/8)
    s, k = 4, 2
    for i in (1, 2, 3):
        total = Fraction(0)
        for throws in itertools.product(range(s), repeat=i * k):
            total += Fraction(len(set(throws)), s) ** k
        assert _in_block_rates(s, k, 3)[i] == pytest.approx(float(total / s ** (i * k)), rel=1e-12)


def test_blocked_rate_is_above_the_mean_fill_rate_and_uses_the_binomial_load() -> None:
    from mmapbloom.sizing import _in_block_rates, blocked_fp_rate

    # One block: every key is in it (binomial, not Poisson), so the rate is r[n].
    assert blocked_fp_rate(10, 512, 7, 512) == _in_block_rates(512, 7, 10)[10]
    # Jensen: E[(X / s)^k] >= (E[X] / s)^k; the mean-fill formula is about 1% low at 1%.
    m, k, n = 9_895_936, 6, 1_000_000
    mean_fill = sum(
        math.exp(i * math.log(n * 512 / m) - n * 512 / m - math.lgamma(i + 1)) * (1 - (1 - 1 / 512) ** (i * k)) ** k
        for i in range(400)
    )
    assert 1.005 < blocked_fp_rate(n, m, k, 512) / mean_fill < 1.015
    assert blocked_fp_rate(n, m, k, 512) == pytest.approx(0.0100924, rel=1e-5)
    # A fractional n (an estimate) takes the Poisson load; both agree closely for many blocks.
    assert blocked_fp_rate(n + 0.5, m, k, 512) == pytest.approx(blocked_fp_rate(n, m, k, 512), rel=1e-5)
    # Overfull: every bit set, rate 1.
    assert blocked_fp_rate(100_000, 512, 3, 512) == pytest.approx(1.0, abs=1e-12)


def test_files_sized_by_the_old_blocked_formula_still_open(tmp_path: object) -> None:
    """m is in the header: a file created with the old m opens and works."""
    from pathlib import Path

    from mmapbloom import M3B2, BloomFilter

    path = Path(str(tmp_path)) / "old.blm"
    config = BloomConfig(num_bits=989_696, num_hashes=6, strategy=M3B2())
    with BloomFilter.create(path, config) as f:
        f.update([f"k{i}" for i in range(1000)])
    with BloomFilter.open(path) as f:
        assert f.num_bits == 989_696 and f.num_hashes == 6 and f.strategy == M3B2()
        assert all(f"k{i}" in f for i in range(1000))
        assert f.add("new") and "new" in f


def test_distinct_items_inverts_expected_new_items() -> None:
    from mmapbloom.sizing import distinct_items, expected_new_items

    for m, k, n in ((9_585_059, 7, 1_000_000), (1443, 1, 1000), (14_377_588, 10, 2_000_000)):
        a = expected_new_items(n, m, k)
        assert a < n
        assert distinct_items(a, lambda x: expected_fp_rate(x, m, k)) == pytest.approx(n, rel=1e-6)
    assert distinct_items(0, lambda x: 1.0) == 0.0


@pytest.mark.parametrize("name", ["M3M2", "M3B2"])
def test_expected_fp_rate_of_a_filter_is_the_rate_at_its_distinct_adds(name: str) -> None:
    """``items_added`` skips the adds that were false positives; ``expected_fp_rate()``
    corrects for them, so it matches the formula at the n distinct keys (item 12)."""
    from mmapbloom import BloomFilter, get_strategy

    strategy = get_strategy(name)
    n = 20_000
    f = BloomFilter(BloomConfig.for_items(n, 0.01, strategy=strategy))
    f.update(range(n))
    assert f.items_added < n
    at_n = strategy.expected_fp_rate(n, f.num_bits, f.num_hashes)
    at_count = strategy.expected_fp_rate(f.items_added, f.num_bits, f.num_hashes)
    assert abs(f.expected_fp_rate() - at_n) < 0.25 * abs(at_count - at_n)


# -- capacities beyond the float range (moved from test_errors.py) --
@pytest.mark.slow
@pytest.mark.parametrize(
    "capacity",
    [10**309, 10**5000, fractions.Fraction(10**400), 2**1024],
    ids=["1e309", "1e5000", "Fraction-1e400", "2^1024"],
)
def test_for_items_beyond_float_range_is_a_config_error(capacity: Any) -> None:
    with pytest.raises(ConfigError, match="capacity"):
        BloomConfig.for_items(capacity, 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("sub", ["plan", "create"])
def test_cli_capacity_beyond_float_range(tmp_path: Any, sub: str) -> None:
    args = ["plan", "-n", "1e309", "-p", "1%"] if sub == "plan" else ["create", "x.blm", "-n", "1e309", "-p", "1%"]
    one_line_error(run_cli(*args, cwd=tmp_path), "capacity")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_fp_rate_that_rounds_to_zero_is_refused_by_the_parser(tmp_path: Any) -> None:
    err = run_cli("plan", "-n", "1000", "-p", "1e-400", cwd=tmp_path).stderr
    assert "1e-400" in err and "Traceback" not in err, err
