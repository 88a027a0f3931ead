"""Hashing: golden positions of M3KM (part of the file format), the one key-encoding rule, the
registry and complete strategies."""

from __future__ import annotations

from typing import Sequence

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmapbloom import M3KM, BloomConfig, BloomFilter, UnknownSchemeError, encode_key, register_strategy
from mmapbloom.hashing import HashStrategy, get_strategy, registered_strategies

GOLDEN = [
    (b"", 7, 9586, [0, 1, 2, 3, 4, 5, 6]),
    (b"hello", 7, 9586, [9096, 212, 914, 1616, 2318, 3020, 3722]),
    (
        b"https://example.org/",
        10,
        14377588,
        [12000834, 14202044, 2025666, 4226876, 6428086, 8629296, 10830506, 13031716, 855338, 3056548],
    ),
    (b"abc", 3, 1, [0, 0, 0]),
    (b"abc", 4, 2, [1, 0, 1, 0]),
    (
        b"abc",
        5,
        2**64 - 1,
        [13012657714217449575, 17309782531854804410, 3160163275782607630, 7457288093419962465, 11754412911057317300],
    ),
    ("é".encode(), 3, 100, [76, 81, 86]),
]


def reference_positions(key: bytes, k: int, m: int) -> list[int]:
    """The M3KM definition from the docs, written out independently of the package."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    h1, h2 = h % 2**64, h >> 64
    p0 = h1 % m
    step = 1 + (h2 % (m - 1)) if m > 1 else 0
    return [(p0 + i * step) % m for i in range(k)]


@pytest.mark.parametrize("key, k, m, expected", GOLDEN)
def test_golden_positions(key: bytes, k: int, m: int, expected: list[int]) -> None:
    s = M3KM()
    assert reference_positions(key, k, m) == expected
    assert list(s.positions(key, k, m)) == expected
    assert s.positions_many([key], k, m).tolist() == [expected]


def test_strategy_name_frozen() -> None:
    assert M3KM.name == "M3KM"
    assert "M3KM" in registered_strategies()


@given(
    keys=st.lists(st.binary(max_size=100), max_size=40),
    k=st.integers(1, 12),
    m=st.one_of(st.integers(1, 300), st.integers(1, 2**64 - 1), st.integers(2**63, 2**64 - 1)),
)
@settings(max_examples=300, deadline=None)
def test_batch_equals_per_key(keys: list[bytes], k: int, m: int) -> None:
    s = M3KM()
    batch = s.positions_many(keys, k, m)
    assert batch.shape == (len(keys), k) and batch.dtype == np.uint64
    for key, row in zip(keys, batch.tolist(), strict=True):
        assert row == reference_positions(key, k, m)


def test_step_never_zero() -> None:
    s = M3KM()
    for i in range(2000):
        pos = s.positions(str(i).encode(), 2, 97)
        assert pos[0] != pos[1]


def test_encoding() -> None:
    assert encode_key("é") == "é".encode("utf-8")
    assert encode_key(b"\xff") == b"\xff"
    assert encode_key(bytearray(b"ab")) == b"ab"
    assert encode_key(memoryview(b"ab")) == b"ab"
    for bad in (True, 1.5, None, ("a",), ["a"], object()):
        with pytest.raises(TypeError, match="str, bytes"):
            encode_key(bad)


def test_all_paths_encode_alike() -> None:
    f = BloomFilter(BloomConfig(num_bits=1000, num_hashes=4))
    f.add("héllo")
    assert f.might_contain("héllo".encode())
    assert f.might_contain(bytearray("héllo".encode()))
    assert f.might_contain(memoryview("héllo".encode()))
    assert f.contains_many([b"h\xc3\xa9llo"]).tolist() == [True]
    with pytest.raises(TypeError):
        f.add(12345.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        f.might_contain(12345.0)  # type: ignore[arg-type]


class XorShift(HashStrategy):
    """A toy custom strategy (not for production)."""

    name = "TEST"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> Sequence[int]:
        h = sum(key) + 1
        return [(h * (i + 1)) % num_bits for i in range(num_hashes)]


class OtherTest(XorShift):
    pass


def test_registry() -> None:
    s = register_strategy(XorShift())
    assert register_strategy(XorShift()) is s  # same name, same class: no-op
    with pytest.raises(ValueError, match="already registered"):
        register_strategy(OtherTest())
    bad = XorShift()
    bad.name = "TOOLONG"  # type: ignore[misc]
    with pytest.raises(ValueError, match="4 ASCII"):
        register_strategy(bad)
    with pytest.raises(TypeError):
        register_strategy("M3KM")  # type: ignore[arg-type]
    with pytest.raises(UnknownSchemeError, match="'NOPE'"):
        get_strategy("NOPE")


def test_custom_strategy_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    register_strategy(XorShift())
    cfg = BloomConfig(num_bits=500, num_hashes=3, strategy=XorShift())
    with BloomFilter.create(tmp_path / "t.blm", cfg) as f:
        f.add("abc")
        f.update(["x", "y"])
    with BloomFilter.open(tmp_path / "t.blm") as g:
        assert g.strategy.name == "TEST" and g.config == cfg
        assert all(g.contains_many(["abc", "x", "y"]))
        assert g.to_bytes()[4:8] == b"TEST"


@given(key=st.binary(max_size=30), m=st.integers(1, 64), extra=st.integers(0, 200))
def test_positions_repeat_with_period_m(key: bytes, m: int, extra: int) -> None:
    """Double-hashing positions repeat with a period dividing m, so probing min(k, m)
    of them tests exactly the same bits as all k (a property of M3KM's definition)."""
    s = M3KM()
    k = m + extra
    assert set(s.positions(key, k, m)) == set(s.positions(key, min(k, m), m))


# -- the one key-encoding rule -----------------------------------------------------------------
_ITEM = st.one_of(
    st.text(max_size=30),
    st.binary(max_size=30),
    st.binary(max_size=30).map(bytearray),
    st.binary(max_size=30).map(lambda b: memoryview(b)),
    st.binary(max_size=30).map(lambda b: memoryview(b)[::2]),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
)


@given(items=st.lists(_ITEM, max_size=20))
@settings(max_examples=200, deadline=None)
def test_every_encoder_follows_encode_key(items: list) -> None:  # type: ignore[type-arg]
    """encode_keys, kernel_keys and the compiled kernel hash exactly encode_key's bytes."""
    from mmapbloom.hashing import encode_keys, kernel_keys
    from mmapbloom.kernels import native_module

    try:
        expected = [encode_key(x) for x in items]
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            encode_keys(items)
        with pytest.raises(UnicodeEncodeError):
            kernel_keys(items)
        return
    assert encode_keys(items) == expected
    passed = kernel_keys(items)
    assert [encode_key(x) for x in passed] == expected
    assert all(type(x) is bytes or (type(x) is str and x.isascii()) for x in passed)
    native = native_module()
    if native is not None:
        assert [native.hash128(x) for x in passed] == [
            mmh3.hash128(e, seed=0, x64arch=True, signed=False) for e in expected
        ]


def test_kernel_keys_refuse_a_bad_item_before_returning() -> None:
    from mmapbloom.hashing import kernel_keys

    for bad in (["a", 3.0], ["a", "\ud800"], [None], ["a", True], ["a", 2**64]):
        with pytest.raises((TypeError, UnicodeEncodeError, OverflowError)):
            kernel_keys(bad)
    ascii_batch = ["a", b"b", "c"]
    assert kernel_keys(ascii_batch) is ascii_batch  # no copy on the common path


# -- complete strategies -------------------------------------------------------------------------
class ProtocolOnly:
    """A strategy that does not subclass HashStrategy: only a name and positions."""

    name = "PROT"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        return [(sum(key) * 31 + i * 7) % num_bits for i in range(num_hashes)]


def test_a_protocol_only_strategy_is_completed_at_registration() -> None:
    from mmapbloom.sizing import classic_size, expected_fp_rate

    registered = register_strategy(ProtocolOnly())
    assert isinstance(registered, HashStrategy) and registered.name == "PROT"
    assert register_strategy(ProtocolOnly()) is registered and get_strategy("PROT") is registered
    assert (registered.kernel_id, registered.block_bits) == (None, 0)
    assert list(registered.positions(b"ab", 3, 100)) == ProtocolOnly().positions(b"ab", 3, 100)
    assert registered.positions_many([b"ab", b"c"], 3, 100).tolist() == [
        ProtocolOnly().positions(b"ab", 3, 100),
        ProtocolOnly().positions(b"c", 3, 100),
    ]
    assert registered.expected_fp_rate(100, 1000, 4) == expected_fp_rate(100, 1000, 4)
    assert registered.size_for(1000, 0.01) == classic_size(1000, 0.01)
    registered.check_num_bits(1)  # classic: every m accepted
    # A fresh instance of the registered class stands for the registered strategy.
    assert BloomConfig(num_bits=100, num_hashes=3, strategy=ProtocolOnly()).strategy is registered  # type: ignore[arg-type]
    assert BloomConfig.for_items(1000, 0.01, strategy=ProtocolOnly()).strategy is registered

    class Impostor:
        name = "PROT"

        def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
            return [0] * num_hashes

    from mmapbloom import ConfigError

    with pytest.raises(ConfigError, match="not the one registered"):
        BloomConfig(num_bits=100, num_hashes=3, strategy=Impostor())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered to ProtocolOnly"):
        register_strategy(Impostor())


def test_a_subclass_with_its_own_positions_leaves_the_compiled_kernel() -> None:
    """A subclass of a built-in that redefines positions gets no kernel id and the loop
    positions_many, so no path answers with the parent's positions."""

    class Shifted(M3KM):
        name = "SHFT"

        def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
            return [(p + 1) % num_bits for p in super().positions(key, num_hashes, num_bits)]

    class Renamed(M3KM):
        name = "RNMD"

    assert Shifted.kernel_id is None and Shifted.positions_many is HashStrategy.positions_many
    assert Renamed.kernel_id == M3KM.kernel_id and Renamed.positions_many is M3KM.positions_many
    strategy = register_strategy(Shifted())
    f = BloomFilter(BloomConfig(num_bits=64, num_hashes=3, strategy=strategy))
    f.update(["a", "b"])
    expected = bytearray(8)
    for key in (b"a", b"b"):
        for p in strategy.positions(key, 3, 64):
            expected[p >> 3] |= 1 << (p & 7)
    assert f.to_bytes()[24:] == bytes(expected)


def test_registry_api_is_typed() -> None:
    import typing

    from mmapbloom import hashing

    for fn in (hashing.get_strategy, hashing.register_strategy, hashing.registered_strategies):
        hints = typing.get_type_hints(fn)
        assert typing.Any not in (hints["return"], *typing.get_args(hints["return"])), fn
    assert typing.get_type_hints(hashing.get_strategy)["return"] is HashStrategy


def test_no_module_probes_a_strategy() -> None:
    """Strategies are complete, so the package reads their members directly: the only
    getattr on a strategy is the registry's look-up of an arbitrary object's name."""
    import re
    from pathlib import Path

    import mmapbloom

    probes = []
    for path in sorted(Path(mmapbloom.__file__).parent.glob("*.py")):
        for line in path.read_text().splitlines():
            if re.search(r"getattr\(\s*(self\.)?_?strat", line) or "strategy_info(" in line:
                probes.append(f"{path.name}: {line.strip()}")
    assert probes == ['hashing.py: name = getattr(strategy, "name", None)  # the one probe: an arbitrary user object']
