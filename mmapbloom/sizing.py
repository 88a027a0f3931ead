"""Sizing: the pure math that turns capacity and false-positive rate into m and k.

Formulas (n items, m bits, k hash functions; Bloom 1970, with the optimum k of
Broder and Mitzenmacher 2004, "Network applications of Bloom filters: a survey"):

* ``m = ceil(-n ln p / (ln 2)^2)``: the bits for false-positive rate p at n items.
* ``k = max(1, round((m / n) ln 2))``: the number of hashes that minimises p for that m.
* ``p(n) = (1 - e^(-k n / m))^k``: expected false-positive rate after n distinct items.
  It assumes independent hash functions; with double hashing (Kirsch and Mitzenmacher
  2006) the rate is asymptotically the same.
* ``fill(n) = 1 - e^(-k n / m)``: expected fraction of bits set after n distinct items.
* ``n* = -(m / k) ln(1 - X / m)``: estimated distinct items from X set bits
  (Swamidass and Baldi 2007).
"""

from __future__ import annotations

import fractions
import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from .errors import ConfigError

if TYPE_CHECKING:
    from .hashing import HashStrategy

__all__ = [
    "MAX_NUM_BITS",
    "MAX_NUM_HASHES",
    "BloomConfig",
    "approx_items",
    "expected_fill_ratio",
    "expected_fp_rate",
    "observed_fp_rate",
]

#: num_bits must be below 2^64: it is stored as an unsigned 64-bit header field.
MAX_NUM_BITS = 2**64 - 1
#: num_hashes must be below 2^32: it is stored as an unsigned 32-bit header field.
MAX_NUM_HASHES = 2**32 - 1

_LN2_SQUARED = math.log(2) ** 2


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
            raise ConfigError(f"capacity {_show(n)} is beyond the float range: no filter can hold it") from None
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
        raise ConfigError(f"fp_rate must be strictly between 0 and 1, got {_show(p)}") from None
    if not math.isfinite(f) or not 0.0 < f < 1.0:
        raise ConfigError(f"fp_rate must be strictly between 0 and 1, got {p!r}")
    return f


def _show(x: object) -> str:
    """A number for a message, also one too long for ``str`` (4,300 digits) or ``float``."""
    if isinstance(x, numbers.Integral) and abs(int(x)) >= 10**30:
        return f"about 10^{int(abs(int(x)).bit_length() * math.log10(2))}"
    if isinstance(x, fractions.Fraction) and abs(x) >= 10**30:
        return f"about 10^{int(abs(x.numerator // x.denominator).bit_length() * math.log10(2))}"
    return repr(x)


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
        num_hashes: k, the number of bit positions per item, ``1 <= k < 2**32``.
        strategy: a :class:`~mmapbloom.hashing.HashStrategy` registered with
            :func:`~mmapbloom.hashing.register_strategy`; ``None`` means the default
            ``M3KM`` (MurmurHash3 x64 128 with Kirsch-Mitzenmacher double hashing).
        capacity: the expected number of items n the filter was sized for, or ``None``.
        fp_rate: the target false-positive rate at ``capacity``, or ``None``.

    Raises:
        ConfigError (a ``ValueError``): m or k out of range or not an integer, or a
            strategy that is not the one registered under its name.

    >>> c = BloomConfig.for_items(1000, 0.01)
    >>> (c.num_bits, c.num_hashes, c.strategy.name)
    (9586, 7, 'M3KM')
    >>> c == BloomConfig(num_bits=9586, num_hashes=7)
    True
    """

    num_bits: int
    num_hashes: int
    strategy: "HashStrategy" = field(default=None)  # type: ignore[assignment]
    capacity: Optional[int] = None
    fp_rate: Optional[float] = None

    def __post_init__(self) -> None:
        from .hashing import DEFAULT_STRATEGY, HashStrategy, registered_strategies

        object.__setattr__(self, "num_bits", _check_int("num_bits", self.num_bits, 1, MAX_NUM_BITS))
        object.__setattr__(self, "num_hashes", _check_int("num_hashes", self.num_hashes, 1, MAX_NUM_HASHES))
        if self.strategy is None:
            object.__setattr__(self, "strategy", DEFAULT_STRATEGY)
        elif not isinstance(self.strategy, HashStrategy):
            raise ConfigError(f"strategy must be a HashStrategy instance, got {self.strategy!r}")
        else:
            # Files name their scheme; a config must use the class registered under that
            # name, or readers (other processes) would hash differently: false negatives.
            registered = registered_strategies().get(getattr(self.strategy, "name", None))  # type: ignore[arg-type]
            if registered is None or type(registered) is not type(self.strategy):
                raise ConfigError(
                    f"strategy {self.strategy!r} is not the one registered under its name "
                    f"(registered: {registered!r}); call register_strategy() first")

    @classmethod
    def for_items(cls, capacity: float, fp_rate: float, strategy: "Optional[HashStrategy]" = None) -> "BloomConfig":
        """Size a filter for ``capacity`` distinct items at false-positive rate ``fp_rate``.

        ``m = ceil(-n ln p / (ln 2)^2)``, ``k = max(1, round((m / n) ln 2))`` (Bloom 1970;
        optimum k per Broder and Mitzenmacher 2004).

        Args:
            capacity: n, a positive integer (an integral float such as ``1e6`` is accepted,
                a bool is not).
            fp_rate: p, strictly between 0 and 1, finite.
            strategy: hash strategy, default ``M3KM``.

        Returns:
            The config, with ``capacity`` and ``fp_rate`` remembered.

        Raises:
            ConfigError (a ``ValueError``): bad n or p, or an m or k that does not fit the
                header (m >= 2**64 or k >= 2**32), including any capacity beyond the float
                range (never a bare ``OverflowError``). The message shows the value.

        >>> c = BloomConfig.for_items(1_000_000, 0.001)
        >>> c.num_bits, c.num_hashes
        (14377588, 10)
        """
        n = _check_capacity(capacity)
        p = _check_fp_rate(fp_rate)
        try:
            m_float = -float(n) * math.log(p) / _LN2_SQUARED
        except OverflowError:  # n beyond the float range: m would be too (p < 1 is at most 1 - 2^-53)
            m_float = math.inf
        if not m_float < MAX_NUM_BITS:
            need = f"{m_float:.4g} bits" if math.isfinite(m_float) else "more bits than a float can count"
            raise ConfigError(f"capacity {_show(n)} at fp_rate {p} needs {need}, more than the maximum "
                              f"{MAX_NUM_BITS:,} bits")
        m = math.ceil(m_float)
        k = max(1, round(m / n * math.log(2)))
        if m > MAX_NUM_BITS:
            raise ConfigError(f"capacity {n} at fp_rate {p} needs {m} bits, more than the maximum {MAX_NUM_BITS}")
        if k > MAX_NUM_HASHES:
            raise ConfigError(f"capacity {n} at fp_rate {p} needs {k} hashes, more than the maximum {MAX_NUM_HASHES}")
        return cls(num_bits=m, num_hashes=k, strategy=strategy, capacity=n, fp_rate=p)  # type: ignore[arg-type]

    @property
    def size_bytes(self) -> int:
        """Bytes of the bit array, ``ceil(m / 8)`` (the file adds a 24-byte header)."""
        return (self.num_bits + 7) // 8

    def _key(self) -> tuple[int, int, str]:
        return (self.num_bits, self.num_hashes, self.strategy.name)

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


def _config_from_state(m: int, k: int, scheme: str, capacity: Optional[int], fp_rate: Optional[float]) -> BloomConfig:
    from .hashing import get_strategy

    return BloomConfig(num_bits=m, num_hashes=k, strategy=get_strategy(scheme), capacity=capacity, fp_rate=fp_rate)


def expected_fill_ratio(num_items: int, num_bits: int, num_hashes: int) -> float:
    """Expected fraction of set bits after ``num_items`` distinct items: ``1 - e^(-k n / m)``.

    Returns a float in [0, 1). Source: Bloom 1970.
    """
    return -math.expm1(-num_hashes * num_items / num_bits)


def expected_fp_rate(num_items: int, num_bits: int, num_hashes: int) -> float:
    """Expected false-positive rate after ``num_items`` distinct items: ``(1 - e^(-k n / m))^k``.

    Returns a float in [0, 1). Source: Bloom 1970; the approximation is accurate for
    m >> k (Bose et al. 2008 bound the error). It counts distinct adds only.
    """
    return expected_fill_ratio(num_items, num_bits, num_hashes) ** num_hashes


def observed_fp_rate(ones: int, num_bits: int, num_hashes: int) -> float:
    """False-positive rate implied by the bits actually set: ``(X / m)^k``.

    Args:
        ones: X, the number of set bits, ``0 <= X <= m``.
    Returns a float in [0, 1]. Source: Bloom 1970 (probability that k uniform positions
    all hit set bits).
    """
    return (ones / num_bits) ** num_hashes


def approx_items(ones: int, num_bits: int, num_hashes: int) -> float:
    """Estimated distinct items from the set bits: ``-(m / k) ln(1 - X / m)``.

    Source: Swamidass and Baldi 2007, "Mathematical correction for fingerprint
    similarity measures". Returns ``math.inf`` when every bit is set (X = m).
    """
    if ones >= num_bits:
        return math.inf
    return -(num_bits / num_hashes) * math.log1p(-ones / num_bits)
