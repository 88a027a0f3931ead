"""Config: :class:`BloomConfig`, the shape of a filter (m, k and a registered strategy).

A config is a value checked against the strategy registry of :mod:`mmapbloom.hashing`; the
strategy brings its own sizing formula (:mod:`mmapbloom.sizing` holds the formulas). This
module depends on both; neither depends on it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Optional, Union

from .errors import ConfigError, IncompatibleFiltersError
from .hashing import DEFAULT_STRATEGY, HashStrategy, Strategy, get_strategy, registered_as, registered_strategies
from .sizing import MAX_NUM_BITS, MAX_NUM_HASHES, show_number

__all__ = ["BloomConfig", "StrategyChoice", "config_at_most", "resolve_strategy"]

#: How a caller names a strategy: a registered :class:`HashStrategy`, an instance of a
#: registered protocol-only class, its registered name (``"M3B2"``), or None (the default).
StrategyChoice = Union[HashStrategy, Strategy, str, None]


def resolve_strategy(strategy: object) -> HashStrategy:
    """The registered :class:`HashStrategy` a caller's choice stands for.

    Raises:
        UnknownSchemeError (a ``ValueError``): an unregistered name.
        ConfigError (a ``ValueError``): an object that is not the strategy registered under
            its name (files name their strategy, so readers in other processes would hash
            differently: false negatives).
    """
    if strategy is None:
        return DEFAULT_STRATEGY
    if isinstance(strategy, str):
        return get_strategy(strategy, source="strategy=")
    registered = registered_as(strategy)  # type: ignore[arg-type]
    if registered is None:
        raise ConfigError(
            f"strategy {strategy!r} is not the one registered under its name "
            f"(registered: {sorted(registered_strategies())}); call register_strategy() first"
        )
    return registered


def _check_capacity(n: object) -> int:
    """Return ``n`` as a positive int; accept integral floats (1e6), refuse bools."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise ConfigError(f"capacity must be a positive integer, got {n!r}")
    if isinstance(n, numbers.Integral):
        value = int(n)
    else:
        try:
            f = float(n)
        except OverflowError:  # a Fraction beyond the float range
            raise ConfigError(f"capacity {show_number(n)} is beyond the float range: no filter can hold it") from None
        if not math.isfinite(f) or not f.is_integer():
            raise ConfigError(f"capacity must be a positive integer, got {n!r}")
        value = int(f)
    if value < 1:
        raise ConfigError(f"capacity must be a positive integer, got {n!r}")
    return value


def _check_fp_rate(p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise ConfigError(f"fp_rate must be a number strictly between 0 and 1, got {p!r}")
    try:
        f = float(p)
    except OverflowError:
        raise ConfigError(f"fp_rate must be strictly between 0 and 1, got {show_number(p)}") from None
    if not math.isfinite(f) or not 0.0 < f < 1.0:
        raise ConfigError(f"fp_rate must be strictly between 0 and 1, got {p!r}")
    return f


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    v = int(value)
    if not low <= v <= high:
        raise ConfigError(f"{name} must be in [{low}, {high}], got {v}")
    return v


@dataclass(frozen=True, eq=False)
class BloomConfig:
    """The shape of a Bloom filter: num_bits (m), num_hashes (k) and the hash strategy.

    Frozen and hashable. Equality and hashing use m, k and the strategy *name* only, so a
    config read back from a file equals the one that created it; ``capacity`` and
    ``fp_rate`` are remembered when the config was sized by :meth:`for_items` but are not
    stored in the file and take no part in equality.

    Args:
        num_bits: m, the number of bits, ``1 <= m < 2**64``.
        num_hashes: k, the number of bit positions per item, ``1 <= k <= MAX_NUM_HASHES``
            (4096).
        strategy: a strategy registered with :func:`~mmapbloom.hashing.register_strategy`,
            or its registered name (``"M3KM"``); ``None`` means the default
            ``M3M2`` (see :mod:`mmapbloom.hashing`).
        capacity: the expected number of items n the filter was sized for, or ``None``.
        fp_rate: the target false-positive rate at ``capacity``, or ``None``.

    Raises:
        ConfigError (a ``ValueError``): m or k out of range or not an integer, a
            strategy that is not the one registered under its name, or an m the strategy
            cannot address (M3B2, M3BL: not a multiple of 512).

    >>> c = BloomConfig.for_items(1000, 0.01)
    >>> (c.num_bits, c.num_hashes, c.strategy.name)
    (9586, 7, 'M3M2')
    >>> c == BloomConfig(num_bits=9586, num_hashes=7)
    True
    """

    num_bits: int
    num_hashes: int
    strategy: HashStrategy = field(default=None)  # type: ignore[assignment]  # None, a name: resolved
    capacity: Optional[int] = None
    fp_rate: Optional[float] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_bits", _check_int("num_bits", self.num_bits, 1, MAX_NUM_BITS))
        object.__setattr__(self, "num_hashes", _check_int("num_hashes", self.num_hashes, 1, MAX_NUM_HASHES))
        object.__setattr__(self, "strategy", resolve_strategy(self.strategy))
        try:
            self.strategy.check_num_bits(self.num_bits)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @classmethod
    def for_items(cls, capacity: float, fp_rate: float, strategy: StrategyChoice = None) -> "BloomConfig":
        """Size a filter for ``capacity`` distinct items at false-positive rate ``fp_rate``.

        The strategy brings its formula: classic strategies (M3M2, M3MX, M3KM, custom ones)
        use ``m = ceil(-n ln p / (ln 2)^2)``, ``k = max(1, round((m / n) ln 2))`` (Bloom
        1970; optimum k per Broder and Mitzenmacher 2004); M3B2 and M3BL take the smallest whole
        number of 512-bit blocks that meets p under the blocked formula (Putze et al. 2007).
        M3KM warns (``UserWarning``) when p is below the floor its arithmetic allows.

        Args:
            capacity: n, a positive integer (an integral float such as ``1e6`` is accepted,
                a bool is not).
            fp_rate: p, strictly between 0 and 1, finite.
            strategy: hash strategy, default ``M3M2``.

        Returns:
            The config, with ``capacity`` and ``fp_rate`` remembered.

        Raises:
            ConfigError (a ``ValueError``): bad n or p (including an n beyond the float
                range), or an m or k beyond the maximum (m >= 2**64, k > MAX_NUM_HASHES).
                The message shows the value.

        >>> c = BloomConfig.for_items(1_000_000, 0.001)
        >>> c.num_bits, c.num_hashes
        (14377588, 10)
        """
        n = _check_capacity(capacity)
        p = _check_fp_rate(fp_rate)
        chosen = resolve_strategy(strategy)
        m, k = chosen.size_for(n, p)
        if k > MAX_NUM_HASHES:
            raise ConfigError(f"capacity {n} at fp_rate {p} needs {k} hashes, more than the maximum {MAX_NUM_HASHES}")
        return cls(num_bits=m, num_hashes=k, strategy=chosen, capacity=n, fp_rate=p)

    @property
    def size_bytes(self) -> int:
        """Bytes of a Bloom filter's bit array, ``ceil(m / 8)`` (a BLM1 file adds its 24-byte
        header; a counting filter's body is 4 or 8 times larger, see
        ``CountingBloomFilter.size_bytes`` for a whole image)."""
        return (self.num_bits + 7) // 8

    def _key(self) -> tuple[int, int, str]:
        return (self.num_bits, self.num_hashes, self.strategy.name)

    # -- compatibility: the one check behind union, intersection, merge and open_or_create --
    def difference(self, other: "BloomConfig") -> "Optional[tuple[str, object, object]]":
        """The first of ``num_bits``, ``num_hashes``, ``strategy`` (compared by name) that
        differs, as ``(field, self's value, other's value)``; ``None`` when the cells of
        filters of the two configs line up. ``capacity`` and ``fp_rate`` take no part."""
        for name, mine, theirs in zip(("num_bits", "num_hashes", "strategy"), self._key(), other._key(), strict=True):
            if mine != theirs:
                return name, mine, theirs
        return None

    def is_compatible(self, other: object) -> bool:
        """True if ``other`` is a ``BloomConfig`` with the same m, k and strategy name, so
        that filters of the two configs can be combined (union, intersection, merge), as
        Guava's ``BloomFilter.isCompatible``. Never raises."""
        return isinstance(other, BloomConfig) and self.difference(other) is None

    def check_compatible(self, other: "BloomConfig", *, where: str = "") -> None:
        """Raise unless :meth:`is_compatible`: the one compatibility check of the package
        (filters' ``union``/``intersection``/``is_compatible``, ``merge_shards``,
        ``merge_into``, ``mmapbloom.dask.build(into=True)``).

        Args:
            other: the config to compare with.
            where: a prefix for the message (e.g. the files concerned).

        Raises:
            IncompatibleFiltersError (a ``ValueError``): naming the first field that
                differs, with ``left`` this config's value and ``right`` the other's.
        """
        diff = self.difference(other)
        if diff is not None:
            raise IncompatibleFiltersError(*diff, where=where)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomConfig):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        extra = ""
        if self.capacity is not None:
            extra = f", capacity={self.capacity}, fp_rate={self.fp_rate}"
        return f"BloomConfig(num_bits={self.num_bits}, num_hashes={self.num_hashes}, strategy={self.strategy.name!r}{extra})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_config_from_state, (self.num_bits, self.num_hashes, self.strategy.name, self.capacity, self.fp_rate))


def _config_from_state(m: int, k: int, strategy: str, capacity: Optional[int], fp_rate: Optional[float]) -> BloomConfig:
    return BloomConfig(num_bits=m, num_hashes=k, strategy=get_strategy(strategy), capacity=capacity, fp_rate=fp_rate)


def config_at_most(n: int, p: float, strategy: HashStrategy) -> BloomConfig:
    """The shape for ``n`` items whose expected rate at ``n`` is at most ``p`` (for filters
    whose rates are summed: scalable layers, expiring periods). k comes from
    :meth:`BloomConfig.for_items` (``round((m/n) ln 2)``), and m is the smallest number of
    bits, at least for_items' m, with ``(1 - e^(-k n / m))^k <= p``, i.e.
    ``m >= -k n / ln(1 - p^(1/k))`` (rounding k alone can leave the rate up to 0.3% above
    p). A blocked strategy (``block_bits`` set) keeps for_items' shape: its own sizing
    already meets p in whole blocks.

    Raises ConfigError when it does not fit BLM1 (m >= 2**64, k > 4096)."""
    base = BloomConfig.for_items(n, p, strategy)
    k = base.num_hashes
    if strategy.block_bits or strategy.expected_fp_rate(n, base.num_bits, k) <= p:
        return base
    m = max(base.num_bits, math.ceil(-k * n / math.log1p(-(p ** (1.0 / k)))))
    while strategy.expected_fp_rate(n, m, k) > p:  # float rounding at the boundary
        m += 1
    return BloomConfig(num_bits=m, num_hashes=k, strategy=strategy, capacity=n, fp_rate=p)
