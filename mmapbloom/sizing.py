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

Blocked layouts (strategies M3B2 and M3BL: all k bits of a key in one block of s = 512 bits; Putze,
Sanders and Singler 2007, section 3): with B = m / s blocks, ``p(n) = sum_i P(i) E[(X_i / s)^k]``, P the Binomial(n, 1/B) law of
the keys sharing the query's block and X_i the set bits after those keys' i k throws, over
its exact occupancy distribution (:func:`blocked_fp_rate`); the observed rate and the item
estimate are taken per block from the set bits of each block.
Each strategy says which formulas it obeys (``HashStrategy.expected_fp_rate`` /
``size_for`` / ``block_bits``); this module holds the formulas themselves.
"""

from __future__ import annotations

import math
import sys
import numbers
import threading
from typing import Callable

from .errors import ConfigError

__all__ = [
    "MAX_NUM_BITS",
    "MAX_NUM_HASHES",
    "approx_items",
    "approx_items_blocks",
    "blocked_fp_rate",
    "blocked_size",
    "classic_size",
    "distinct_items",
    "expected_fill_ratio",
    "expected_fp_rate",
    "expected_new_items",
    "observed_fp_rate",
    "observed_fp_rate_blocks",
]

#: num_bits must be below 2^64: it is stored as an unsigned 64-bit header field.
MAX_NUM_BITS = 2**64 - 1
#: The largest supported num_hashes k. The header field is 32 bits wide, but every
#: operation costs O(k) (and a counting filter O(k) memory), so a forged header could make
#: each call take minutes; ``for_items`` never needs more than about 1,100 (k = log2(1/p)
#: at the smallest double p). Configs and files above it are refused.
MAX_NUM_HASHES = 4096

_LN2_SQUARED = math.log(2) ** 2


def show_number(x: object) -> str:
    """A number for a message (``repr``), also one too long for ``str`` (4,300 digits) or
    ``float``: ``"about 10^N"`` for an int or Fraction of 10**30 or more. Package-internal
    (``config``'s messages use it too); never raises."""
    if isinstance(x, numbers.Integral) and abs(int(x)) >= 10**30:
        return f"about 10^{int(abs(int(x)).bit_length() * math.log10(2))}"
    fractions = sys.modules.get("fractions")  # not imported: x is no Fraction (saves its import)
    if fractions is not None and isinstance(x, fractions.Fraction) and abs(x) >= 10**30:
        return f"about 10^{int(abs(x.numerator // x.denominator).bit_length() * math.log10(2))}"
    return repr(x)


def expected_fill_ratio(num_items: float, num_bits: int, num_hashes: int) -> float:
    """Expected fraction of set bits after ``num_items`` distinct items: ``1 - e^(-k n / m)``.

    Returns a float in [0, 1). Source: Bloom 1970.
    """
    return 0.0 - math.expm1(-num_hashes * num_items / num_bits)  # 0.0 - : never -0.0


def expected_fp_rate(num_items: float, num_bits: int, num_hashes: int) -> float:
    """Expected false-positive rate after ``num_items`` distinct items: ``(1 - e^(-k n / m))^k``.

    Returns a float in [0, 1). Source: Bloom 1970; the approximation is accurate for
    m >> k (Bose et al. 2008 bound the error). It counts distinct adds only.
    """
    return expected_fill_ratio(num_items, num_bits, num_hashes) ** num_hashes


def expected_new_items(num_items: float, num_bits: int, num_hashes: int) -> float:
    """Expected count of adds that set at least one new bit (what a filter's ``items_added``
    counts) among ``num_items`` distinct adds: ``n - integral_0^n (1 - e^(-k x / m))^k dx``,
    each add being a false positive with the rate of the filter before it (Bloom 1970).
    Closed form for k = 1: ``m (1 - e^(-n / m))`` (the expected set bits); otherwise
    Simpson's rule on 256 intervals (relative error far below 1e-6 here). O(1).
    """
    n, m, k = float(num_items), num_bits, num_hashes
    if n <= 0:
        return 0.0
    if k == 1:
        return -m * math.expm1(-n / m)
    steps = 256
    h = n / steps
    total = 0.0
    for i in range(steps + 1):
        weight = 1 if i in (0, steps) else 4 if i % 2 else 2
        total += weight * expected_fp_rate(i * h, m, k)
    return n - total * h / 3


def distinct_items(added: float, rate: "Callable[[float], float]") -> float:
    """The distinct adds n behind an items count ``added`` that skips the adds that were
    false positives (what a filter's ``items_added`` counts): the root of
    ``g(n) = n - integral_0^n rate(x) dx - added`` (the relation of
    :func:`expected_new_items`), ``rate`` the strategy's expected rate after x distinct
    adds. Newton's method from ``n = added`` (``g'(n) = 1 - rate(n)``), at most 8 steps, to
    1e-9 relative; the integral by Simpson's rule on 64 intervals. At p = 0.01 n is about
    0.2% above ``added``, which moves the expected rate by about 1%."""
    a = float(added)
    if a <= 0:
        return 0.0
    n = a
    for _ in range(8):
        steps = 64
        h = n / steps
        total = sum((1 if i in (0, steps) else 4 if i % 2 else 2) * rate(i * h) for i in range(steps + 1))
        slope = 1.0 - rate(n)
        if slope <= 1e-12:  # the rate is 1 here: every further add is a false positive
            break
        step = (n - total * h / 3 - a) / slope
        n -= step
        if abs(step) <= 1e-9 * n:
            break
    return n


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
    return 0.0 - (num_bits / num_hashes) * math.log1p(-ones / num_bits)  # 0.0 - : never -0.0


def classic_size(capacity: int, fp_rate: float) -> tuple[int, int]:
    """``(m, k)`` for n = ``capacity`` at p = ``fp_rate``: ``m = ceil(-n ln p / (ln 2)^2)``,
    ``k = max(1, round((m / n) ln 2))`` (Bloom 1970; Broder and Mitzenmacher 2004).

    When k rounds to 1 (p above about 0.35), m is sized for k = 1 instead, where
    ``p = 1 - e^(-n/m)`` exactly: ``m = ceil(-n / ln(1 - p))``. (The first formula assumes
    the real-valued optimum k; with k = 1 it undersizes m: p = 0.9 would get a rate of
    0.98 at n.)

    Raises:
        ConfigError: m would not fit the 64-bit header field (the message shows it).

    >>> classic_size(1000, 0.01)
    (9586, 7)
    """
    n, p = capacity, fp_rate
    try:
        m_float = -float(n) * math.log(p) / _LN2_SQUARED
    except OverflowError:  # n beyond the float range
        m_float = math.inf
    if not m_float < MAX_NUM_BITS:
        need = f"{m_float:.4g} bits" if math.isfinite(m_float) else "more bits than a float can count"
        raise ConfigError(
            f"capacity {show_number(n)} at fp_rate {p} needs {need}, more than the maximum {MAX_NUM_BITS:,} bits"
        )
    m = math.ceil(m_float)
    k = max(1, round(m / n * math.log(2)))
    if k == 1:
        m = math.ceil(-n / math.log1p(-p))
    if m > MAX_NUM_BITS:
        raise ConfigError(f"capacity {n} at fp_rate {p} needs {m} bits, more than the maximum {MAX_NUM_BITS}")
    return m, k


def _poisson_terms(lam: float) -> "list[tuple[int, float]]":
    """``(i, Pois(i; lam))`` for every i that carries probability above about 1e-17."""
    if lam <= 0:
        return [(0, 1.0)]
    spread = 12 * math.sqrt(lam) + 30
    lo, hi = max(0, int(lam - spread)), int(lam + spread) + 1
    log_lam = math.log(lam)
    return [(i, math.exp(i * log_lam - lam - math.lgamma(i + 1))) for i in range(lo, hi + 1)]


def _block_terms(num_items: float, blocks: int) -> "list[tuple[int, float]]":
    """``(i, P(i))`` for the number i of the ``num_items`` keys that share a query's block,
    for every i that carries probability above about 1e-17: Binomial(n, 1 / B) when n is a
    whole number (each key picks one of the B blocks uniformly), else Poisson(n / B)."""
    n = float(num_items)
    if n <= 0:
        return [(0, 1.0)]
    lam = n / blocks
    spread = 12 * math.sqrt(lam) + 30
    lo, hi = max(0, int(lam - spread)), int(lam + spread) + 1
    if blocks == 1:
        return [(round(n), 1.0)] if n == int(n) else _poisson_terms(lam)
    if n != int(n) or n > 2**53:
        return _poisson_terms(lam)
    hi = min(hi, int(n))
    log_p, log_q = -math.log(blocks), math.log1p(-1.0 / blocks)
    head = math.lgamma(n + 1)
    return [
        (i, math.exp(head - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q))
        for i in range(lo, hi + 1)
    ]


#: (block_bits, k) -> [E[(X_i / s)^k] for i = 0, 1, ...]: the in-block false-positive rate
#: of a block holding i keys (see :func:`_in_block_rates`), extended on demand.
_IN_BLOCK: "dict[tuple[int, int], list[float]]" = {}
_IN_BLOCK_LOCK = threading.Lock()


def _in_block_rates(block_bits: int, num_hashes: int, upto: int) -> "list[float]":
    """``r[i]`` for i = 0 .. upto: the probability that a query's k bits (drawn uniformly
    with replacement in its block of s = ``block_bits`` bits) are all set when i keys, each
    setting k bits drawn the same way, share the block: ``r[i] = E[(X / s)^k]`` over the
    exact occupancy distribution of X, the set bits after ``i k`` uniform throws into s cells
    (a Markov chain: a throw hits a set bit with probability x / s). Not ``(E[X] / s)^k``:
    by Jensen's inequality that underestimates, by about 1% at p = 0.01 (Putze, Sanders and
    Singler 2007 compute the in-block rate from the occupancy distribution too). Cached per
    (s, k); O(s) per throw, numpy."""
    key = (block_bits, num_hashes)
    with _IN_BLOCK_LOCK:
        rates = _IN_BLOCK.get(key)
        if rates is not None and len(rates) > upto:
            return rates
    import numpy as np  # noqa: PLC0415  (import mmapbloom stays light: numpy on first use)

    s, k = block_bits, num_hashes
    cells = np.arange(s + 1, dtype=np.float64)
    hit = (cells / s) ** k
    stay = cells / s  # a throw lands on one of the x set bits
    grow = (s - cells[:-1]) / s  # ... or sets a new one: x -> x + 1
    dist = np.zeros(s + 1)
    dist[0] = 1.0
    out = [0.0]
    i = 0
    while i < upto:
        i += 1
        if dist[s] > 1.0 - 1e-15:  # every bit set: the rate is 1 from here on
            out.extend([1.0] * (upto - len(out) + 1))
            break
        for _ in range(k):
            nxt = dist * stay
            nxt[1:] += dist[:-1] * grow
            dist = nxt
        out.append(min(1.0, float(dist @ hit)))
    with _IN_BLOCK_LOCK:
        old = _IN_BLOCK.get(key)
        if old is None or len(old) < len(out):
            _IN_BLOCK[key] = out
    return out


def blocked_fp_rate(num_items: float, num_bits: int, num_hashes: int, block_bits: int) -> float:
    """Expected false-positive rate of a blocked Bloom filter after ``num_items`` items:
    ``sum_i P(i) r_k(i)`` over the number i of keys in the query's block (Binomial(n, 1/B)
    with B = m / s blocks of s = ``block_bits`` bits; Poisson(n / B) for a fractional n),
    where ``r_k(i) = E[(X_i / s)^k]`` is the exact in-block rate over the occupancy
    distribution of the set bits X_i after i k uniform throws (:func:`_in_block_rates`;
    Putze, Sanders and Singler 2007, section 3; the k bits of a key are drawn with
    replacement). Returns a float in [0, 1].

    The approximation ``(1 - (1 - 1/s)^(i k))^k`` (the rate at the mean fill), which sized
    blocked filters before, is below this by about 1% at p = 0.01 and 2% at p = 0.001;
    measured rates follow this exact mixture (``tools/bench_blocked_fp.py``).
    """
    if num_items <= 0:
        return 0.0
    terms = _block_terms(num_items, num_bits // block_bits)
    rates = _in_block_rates(block_bits, num_hashes, terms[-1][0])
    total = math.fsum(weight * rates[i] for i, weight in terms)
    return min(total, 1.0)


def blocked_size(capacity: int, fp_rate: float, block_bits: int) -> tuple[int, int]:
    """``(m, k)``: the smallest whole number of ``block_bits``-bit blocks, with the k that
    minimises :func:`blocked_fp_rate` (the exact occupancy mixture) for it, that meets
    ``fp_rate`` at ``capacity`` (Putze, Sanders and Singler 2007). Searched by bisection on
    the block count from the classic size upwards; each step walks k from the classic
    optimum ``(s / lam) ln 2`` downwards and upwards while the rate falls, up to the
    classic k of :func:`classic_size`.

    Raises:
        ConfigError: the size would not fit the header.
    """
    m0, k_cap = classic_size(capacity, fp_rate)

    def rate(blocks: int, k: int) -> float:
        return blocked_fp_rate(capacity, blocks * block_bits, k, block_bits)

    def best(blocks: int) -> tuple[float, int]:
        # The classic optimum k0 = (s / lam) ln 2 overshoots when few items share a block,
        # so the search walks down from it, then up, while the rate falls (it is unimodal
        # in k); ties go to the smaller k. k stays at most the classic k for (n, p): a few
        # keys in one block would otherwise take k up to 128 for a rate far below p.
        lam = capacity / blocks
        k0 = min(k_cap, max(1, round(block_bits / lam * math.log(2))))
        found = (rate(blocks, k0), k0)
        for step in (-1, 1):
            k = k0 + step
            while 1 <= k <= k_cap:
                here = (rate(blocks, k), k)
                if here[0] > found[0] or (here[0] == found[0] and k > found[1]):
                    break
                found = here
                k += step
        return found

    lo = max(1, -(-m0 // block_bits))
    hi = lo
    while best(hi)[0] > fp_rate:
        lo = hi + 1
        hi *= 2
        if hi * block_bits > MAX_NUM_BITS:
            raise ConfigError(
                f"capacity {capacity} at fp_rate {fp_rate} needs more than {MAX_NUM_BITS} bits "
                f"with {block_bits}-bit blocks"
            )
    while lo < hi:
        mid = (lo + hi) // 2
        if best(mid)[0] <= fp_rate:
            hi = mid
        else:
            lo = mid + 1
    return hi * block_bits, best(hi)[1]


def observed_fp_rate_blocks(histogram: "list[int]", block_bits: int, num_hashes: int) -> float:
    """False-positive rate implied by the set bits of a blocked filter: the mean over blocks
    of ``(X_b / s)^k``, from ``histogram[j]`` = number of blocks with j bits set (a query
    hashes to a uniformly random block; Putze et al. 2007). With one block of s = m bits
    this is :func:`observed_fp_rate`."""
    blocks = sum(histogram)
    if blocks == 0:
        return 0.0
    return sum(count * (j / block_bits) ** num_hashes for j, count in enumerate(histogram) if count) / blocks


def approx_items_blocks(histogram: "list[int]", block_bits: int, num_hashes: int) -> float:
    """Estimated distinct items of a blocked filter: the sum over blocks of
    ``-(s / k) ln(1 - X_b / s)`` (Swamidass and Baldi 2007, per block); ``math.inf`` when
    some block is full."""
    total = 0.0
    for j, count in enumerate(histogram):
        if count and j:
            if j >= block_bits:
                return math.inf
            total -= count * (block_bits / num_hashes) * math.log1p(-j / block_bits)
    return total
