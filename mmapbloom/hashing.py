"""Hashing: key encoding and the named, pluggable strategies that map a key to k positions.

A strategy's 4-character ASCII ``name`` is written into every file, so a strategy's
arithmetic is part of the file format and must never change once released; the golden
positions in ``tests/test_hashing.py`` freeze it. Improvements get a new name.

This module is the readable reference of every built-in strategy (plain Python integers
and ``mmh3``); the compiled kernel (``mmapbloom._kernels``, chosen in
:mod:`mmapbloom.kernels`) gives the same positions, which the tests check. In every
definition ``h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)`` (MurmurHash3 x64
128, Appleby 2011) and all arithmetic is on exact integers.

``M3KM`` (kernel id 1; the default before M3MX, readable and writable forever)::

    h1 = h mod 2^64 ;  h2 = h >> 64
    p0 = h1 mod m ;  step = 1 + (h2 mod (m - 1))  if m > 1, else 0
    pos_i = (p0 + i * step) mod m                  for i = 0 .. k-1

Kirsch and Mitzenmacher 2006 ("Less hashing, same performance") show that
g_i = h1 + i h2 mod m keeps the *asymptotic* false-positive rate of k independent hashes.
M3KM's limit: both halves are reduced modulo m before they are combined, so a key's k
positions are one of only m(m - 1) sequences, a step sharing a factor with m cycles early,
and an absent key with a stored key's step shares most of its bits. That puts a floor of
roughly 0.1/m to 2/m under the false-positive rate, whatever k is (:data:`M3KM_FP_FLOOR`);
``BloomConfig.for_items(..., strategy=M3KM())`` warns when asked for less.

``M3M2`` (kernel id 4, the default): M3MX (below) with an odd step::

    a = h mod 2^64 ;  b = (h >> 64) | 1
    z_i   = fmix64((a + i * b) mod 2^64)           for i = 0 .. k-1
    pos_i = (z_i * m) >> 64

``M3B2`` (kernel id 5): M3BL (below) with an odd multiplier seed::

    x = h mod 2^64 ;  y = (h >> 64) | 1 ;  B = m / 512   (m a positive multiple of 512)
    block = (x * B) >> 64
    repeat k times:  y = (y * 0x9E3779B97F4A7C15) mod 2^64 ;  pos = block * 512 + (y >> 55)

Why they exist: under M3MX and M3BL a key whose upper hash half ``h >> 64`` is 0 puts all
k probes on one bit (M3MX: every ``a + i * b`` equals a; M3BL: y stays 0, bit 0 of the
block), and MurmurHash3 of the empty key with seed 0 is exactly 0, so ``""`` was reported
present in about half of all filters at capacity. An odd step is invertible modulo 2^64,
so ``a + i * b`` takes k distinct values and fmix64 (a bijection) keeps them distinct; an
odd y never reaches 0 and ``y * G^i`` runs through 2^62 distinct values. No key's probes
collapse under M3M2 or M3B2; docs/FORMAT.md lists when they collapse under each released
strategy and how likely that is.

``M3MX`` (kernel id 2, the default before M3M2; readable and writable forever): each probe
mixed to 64 bits before reduction::

    a = h mod 2^64 ;  b = h >> 64
    z_i   = fmix64((a + i * b) mod 2^64)           for i = 0 .. k-1
    pos_i = (z_i * m) >> 64                        (multiply-shift, Lemire 2019)

fmix64 is MurmurHash3's 64-bit finalizer (z ^= z >> 33; z *= 0xff51afd7ed558ccd;
z ^= z >> 33; z *= 0xc4ceb9fe1a85ec53; z ^= z >> 33, all mod 2^64), a bijection. Each probe
depends on all 128 hash bits, there is no division, and a power-of-two m is as good as any.
Its fault (fixed by M3M2): ``b = 0`` makes every probe ``fmix64(a)``.

``M3BL`` (kernel id 3; readable and writable forever, M3B2 for new filters):
cache-line-blocked (Putze, Sanders and Singler 2007)::

    x = h mod 2^64 ;  y = h >> 64 ;  B = m / 512   (m must be a multiple of 512)
    block = (x * B) >> 64
    for i = 0 .. k-1:
        y = (y * 0x9E3779B97F4A7C15) mod 2^64
        pos_i = block * 512 + (y >> 55)            (the top 9 bits pick the bit)

All k bits of a key lie in one 512-bit block (64 bytes; in a BLM1 file the body starts at
offset 24, so a block spans two adjacent cache lines, fetched together), so a query costs
one memory access; the price is a higher false-positive rate for the same m (blocks receive a
binomially distributed share of the items), which :meth:`M3BL.expected_fp_rate` and
:meth:`M3BL.size_for` account for.
"""

from __future__ import annotations

import abc
import operator
import threading
import warnings
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Protocol, Sequence, Union, runtime_checkable

import mmh3

from . import sizing as _sizing
from ._warn import user_stacklevel
from .errors import KeyEncodingError, UnknownSchemeError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = [
    "BLOCK_BITS",
    "DEFAULT_STRATEGY",
    "HashStrategy",
    "Key",
    "M3B2",
    "M3BL",
    "M3KM",
    "M3KM_FP_FLOOR",
    "M3M2",
    "M3MX",
    "Strategy",
    "encode_key",
    "encode_keys",
    "fmix64",
    "get_strategy",
    "kernel_keys",
    "register_strategy",
    "registered_as",
    "registered_strategies",
    "type_name",
]

#: What a filter accepts as an item (numpy integer scalars too: see :func:`encode_key`).
Key = Union[str, bytes, bytearray, memoryview, int]

#: The accepted range of integer keys: [INT_KEY_MIN, INT_KEY_END) = [-2**63, 2**64).
INT_KEY_MIN = -(1 << 63)
INT_KEY_END = 1 << 64

_MASK64 = (1 << 64) - 1

#: M3KM cannot deliver false-positive rates below about ``M3KM_FP_FLOOR / m`` (measured
#: floors of 0.1/m to 2/m measured over the test grid, pinned in tests/test_strategies.py).
M3KM_FP_FLOOR = 2.0

#: M3BL's block: 512 bits, one 64-byte cache line.
BLOCK_BITS = 512
_GOLDEN64 = 0x9E3779B97F4A7C15


def type_name(obj: object) -> str:
    """The name error messages give an object's type, the same on both backends: the
    qualified name, prefixed by the module outside ``builtins`` (``numpy.float64``)."""
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def encode_key(item: object) -> bytes:
    """Encode one item to the bytes that are hashed, identically on every code path (the one
    key-encoding rule; the compiled kernels resolve str, bytes-likes and ints in place by
    the same rule and call this function for everything else).

    * ``str`` -> its UTF-8 bytes;
    * ``bytes``, ``bytearray``, ``memoryview`` (and their subclasses) -> the raw bytes of
      the buffer (a non-contiguous memoryview gives ``item.tobytes()``, its elements in C
      order; a subclass's ``__bytes__`` is not used);
    * an integer (``int`` or anything implementing ``__index__``, such as numpy integer
      scalars; not ``bool``) -> the 8 bytes little-endian of its value mod 2^64. So -1 and
      2**64 - 1 are one key, and an int is the same key as its own 8-byte little-endian
      bytes (Guava's ``putLong``, Spark's and Parquet's INT64 hashing do the same).

    Anything else raises ``TypeError``: mmapbloom never uses Python's per-process ``hash()``
    nor ``str()``; ``bool``, ``float`` and ``None`` are refused so that True and 1.0 cannot
    alias 1. Every other encoder here (:func:`encode_keys`, :func:`kernel_keys`), the batch
    readers (:mod:`mmapbloom.batches`, ``_columns.c``, :mod:`mmapbloom.arrowc`) and the
    compiled kernel follow this function; tests check them against it.

    Raises:
        TypeError: another type (the message names it, see :func:`type_name`).
        OverflowError: an integer outside [-2**63, 2**64) (the message names it).
        KeyEncodingError (a ``UnicodeEncodeError``, so a ``ValueError``): a str with a
            lone surrogate (strict UTF-8 has no bytes for it; pass bytes instead).

    >>> encode_key("a"), encode_key(1), encode_key(-1) == encode_key(2**64 - 1)
    (b'a', b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00', True)
    """
    if type(item) is str or isinstance(item, str):
        try:
            return str.encode(item)
        except UnicodeEncodeError as exc:
            raise KeyEncodingError(str(item), exc.start, exc.end) from None
    if type(item) is bytes:
        return item
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(memoryview(item))  # the raw bytes: never a subclass's __bytes__
    if type(item) is int or (not isinstance(item, (bool, np.bool_)) and hasattr(type(item), "__index__")):
        try:
            value = operator.index(item)  # type: ignore[arg-type]
        except TypeError:  # e.g. a numpy array of more than one element
            value = None
        if value is not None:
            if not INT_KEY_MIN <= value < INT_KEY_END:
                raise OverflowError(f"integer keys must be in [-2**63, 2**64), got {value}")
            return (value & _MASK64).to_bytes(8, "little")
    raise TypeError(f"items must be str, bytes-like or int, got {type_name(item)}")


def encode_keys(items: Iterable[object]) -> list[bytes]:
    """:func:`encode_key` over a batch; every item is validated before this returns.

    Returns a new list of bytes in the same order. Raises as :func:`encode_key`. Batches of
    only ``str`` or only ``bytes`` are encoded by C-level ``map`` calls (no Python loop).
    """
    seq = items if isinstance(items, (list, tuple)) else list(items)
    kinds = set(map(type, seq))
    if kinds == {str}:
        try:
            return list(map(str.encode, seq))
        except UnicodeEncodeError:
            pass  # encode_key below raises KeyEncodingError for the first bad key
    if kinds <= {bytes}:
        return list(seq)
    # encode_key may run an item's own code (__index__), which may change a list: encode the
    # batch as it was when the call began, as the compiled batch reader does
    return list(map(encode_key, tuple(seq) if isinstance(seq, list) else seq))


def kernel_keys(items: Iterable[object]) -> list[Any]:
    """A batch as the compiled kernel takes it, every item validated by :func:`encode_key`'s
    rule first (so a bad item raises before a batch writer touches any cell).

    ``bytes`` and ASCII ``str`` items pass through unchanged (the kernel hashes a str's UTF-8
    bytes without a copy; an ASCII str cannot fail to encode); if any other item is present
    the whole batch is :func:`encode_keys`' list of bytes. C-level passes only: the common
    batches cost about 20 ns a key.

    Raises:
        as :func:`encode_key`.
    """
    seq = items if isinstance(items, list) else list(items)
    kinds = set(map(type, seq))
    if kinds <= {bytes} or (kinds <= {str, bytes} and all(map(str.isascii, (x for x in seq if type(x) is str)))):
        return seq
    return encode_keys(seq)


@runtime_checkable
class Strategy(Protocol):
    """What a hash strategy is: any object with a 4-character ASCII ``name`` and
    ``positions(key, num_hashes, num_bits)`` returning ``num_hashes`` ints in
    ``[0, num_bits)``. It must be deterministic across machines, processes and runs, and
    stateless (thread-safe). Register an instance with :func:`register_strategy`.

    :func:`register_strategy` wraps such an object in a :class:`HashStrategy` with the
    classic formulas (Bloom 1970) and returns the wrapper; the package only ever handles
    :class:`HashStrategy` objects. A custom strategy runs on the pure-Python path.
    """

    name: str

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> Sequence[int]: ...


class HashStrategy(abc.ABC):
    """A complete strategy, as every part of the package uses it: ``name``, ``kernel_id``,
    ``block_bits``, :meth:`positions`, :meth:`positions_many`, :meth:`check_num_bits` and the
    statistics :meth:`expected_fp_rate` / :meth:`size_for`. Equality and pickling are by
    ``name``. The defaults are the classic ones (Bloom 1970: positions spread over the
    whole array) and a loop over :meth:`positions`.

    Subclasses set a class attribute ``name`` of exactly 4 ASCII characters and implement
    :meth:`positions`; they may override :meth:`positions_many` for speed (its answers must
    equal :meth:`positions` key by key). A subclass that redefines :meth:`positions` loses
    its parent's ``kernel_id`` and numpy :meth:`positions_many` unless it sets them again
    itself, so the compiled kernel and the numpy form never answer for different positions.
    Instances are stateless and thread-safe.
    """

    name: ClassVar[str]
    #: The compiled kernel's id for this strategy; None for custom strategies (pure path).
    kernel_id: ClassVar[Optional[int]] = None
    #: 0: positions spread over the whole array. Otherwise all k positions of a key lie in
    #: one aligned block of this many cells, and the statistics are taken per block.
    block_bits: ClassVar[int] = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "positions" in cls.__dict__:
            if "kernel_id" not in cls.__dict__:
                cls.kernel_id = None
            if "positions_many" not in cls.__dict__:
                cls.positions_many = HashStrategy.positions_many  # type: ignore[method-assign]

    @abc.abstractmethod
    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> Sequence[int]:
        """Return the ``num_hashes`` positions of ``key``, each an int in [0, num_bits)."""

    def positions_many(self, keys: Sequence[bytes], num_hashes: int, num_bits: int) -> npt.NDArray[np.uint64]:
        """Positions of many keys: a ``uint64`` array of shape ``(len(keys), num_hashes)``.

        Row i equals ``positions(keys[i], ...)``. The default loops over :meth:`positions`.
        """
        out = np.empty((len(keys), num_hashes), dtype=np.uint64)
        for i, key in enumerate(keys):
            out[i] = self.positions(key, num_hashes, num_bits)
        return out

    def check_num_bits(self, num_bits: int) -> None:  # noqa: B027  (an optional hook, not abstract)
        """Raise ``ValueError`` if this strategy cannot address ``num_bits`` cells
        (every m >= 1 is accepted unless a strategy says otherwise)."""

    def expected_fp_rate(self, num_items: float, num_bits: int, num_hashes: int) -> float:
        """Expected false-positive rate after ``num_items`` distinct items, in [0, 1):
        ``(1 - e^(-k n / m))^k`` (Bloom 1970)."""
        return _sizing.expected_fp_rate(num_items, num_bits, num_hashes)

    def size_for(self, capacity: int, fp_rate: float) -> tuple[int, int]:
        """``(m, k)`` for ``capacity`` items at ``fp_rate``: ``m = ceil(-n ln p / (ln 2)^2)``,
        ``k = max(1, round((m / n) ln 2))`` (Bloom 1970; Broder and Mitzenmacher 2004).
        Raises ConfigError when m does not fit the header."""
        return _sizing.classic_size(capacity, fp_rate)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashStrategy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def __reduce__(self) -> tuple[object, ...]:
        return (get_strategy, (self.name,))


def mmh3_key(key: Any) -> Any:
    """``key`` as mmh3 may be given it: bytes and ASCII ``str`` unchanged, anything else
    through :func:`encode_key` (so a str with a lone surrogate raises KeyEncodingError
    instead of reaching mmh3, which crashes the process on one; a non-ASCII str becomes its
    UTF-8 bytes, the same hash)."""
    if type(key) is bytes or (type(key) is str and key.isascii()):
        return key
    return encode_key(key)


def hash_halves(keys: Iterable[bytes]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """``(h mod 2^64, h >> 64)`` of ``hash128(key, seed=0, x64arch=True, signed=False)`` for
    every key (any iterable of bytes), as two ``uint64`` arrays. ``mmh3_x64_128_digest``
    returns the 128-bit hash as 16 little-endian bytes."""
    digest = mmh3.mmh3_x64_128_digest
    raw = np.frombuffer(b"".join(map(digest, keys)), dtype="<u8").reshape(-1, 2)
    return raw[:, 0].astype(np.uint64, copy=False), raw[:, 1].astype(np.uint64, copy=False)


def fmix64(z: int) -> int:
    """MurmurHash3's 64-bit finalizer (Appleby 2011), a bijection on [0, 2^64).

    >>> fmix64(0), fmix64(1)
    (0, 12994781566227106604)
    """
    z ^= z >> 33
    z = (z * 0xFF51AFD7ED558CCD) & _MASK64
    z ^= z >> 33
    z = (z * 0xC4CEB9FE1A85EC53) & _MASK64
    return z ^ (z >> 33)


def _fmix64_np(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """:func:`fmix64` over a ``uint64`` array (numpy wraps modulo 2^64, as required)."""
    z = z ^ (z >> np.uint64(33))
    z = z * np.uint64(0xFF51AFD7ED558CCD)
    z = z ^ (z >> np.uint64(33))
    z = z * np.uint64(0xC4CEB9FE1A85EC53)
    out: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(33))
    return out


def mulhi64(a: npt.NDArray[np.uint64], m: int) -> npt.NDArray[np.uint64]:
    """``(a * m) >> 64`` for a ``uint64`` array and an int ``0 <= m < 2^64``, exactly, from
    32-bit limbs (numpy has no 128-bit product)."""
    lo32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    a_lo, a_hi = a & lo32, a >> s32
    m_lo, m_hi = np.uint64(m & 0xFFFFFFFF), np.uint64(m >> 32)
    lh, hl = a_lo * m_hi, a_hi * m_lo
    mid = ((a_lo * m_lo) >> s32) + (lh & lo32) + (hl & lo32)  # < 3 * 2^32: no overflow
    high: npt.NDArray[np.uint64] = a_hi * m_hi + (lh >> s32) + (hl >> s32) + (mid >> s32)
    return high


class M3KM(HashStrategy):
    """MurmurHash3 x64 128 with Kirsch-Mitzenmacher double hashing (the default before
    M3MX; files naming it keep opening, reading and writing exactly as before).

    Exact definition and its false-positive floor in the module docstring. Cost: one
    128-bit MurmurHash3 per key plus k integer operations.
    """

    name = "M3KM"
    kernel_id = 1

    def size_for(self, capacity: int, fp_rate: float) -> tuple[int, int]:
        """As the classic sizing, but warns (``UserWarning``) when ``fp_rate`` is below
        ``M3KM_FP_FLOOR / m``, the floor M3KM's arithmetic puts under the rate."""
        m, k = super().size_for(capacity, fp_rate)
        if fp_rate < M3KM_FP_FLOOR / m:
            warnings.warn(
                f"M3KM cannot deliver fp_rate {fp_rate:g} at m = {m}: its positions put a floor of about "
                f"{M3KM_FP_FLOOR / m:.2g} ({M3KM_FP_FLOOR:g}/m) under the rate; use the default strategy M3M2",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        return m, k

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        """The M3KM positions of ``key`` (definition in the module docstring)."""
        h = mmh3.hash128(mmh3_key(key), seed=0, x64arch=True, signed=False)
        p = (h & _MASK64) % num_bits
        if num_bits == 1:
            return [0] * num_hashes
        step = 1 + (h >> 64) % (num_bits - 1)
        return [(p + i * step) % num_bits for i in range(num_hashes)]

    def positions_many(self, keys: Sequence[bytes], num_hashes: int, num_bits: int) -> npt.NDArray[np.uint64]:
        """Vectorised :meth:`positions` (numpy, exact 64-bit arithmetic)."""
        h1, h2 = hash_halves(keys)
        n = h1.shape[0]
        m = np.uint64(num_bits)
        p0 = h1 % m
        if num_bits == 1:
            return np.zeros((n, num_hashes), dtype=np.uint64)
        step = h2 % np.uint64(num_bits - 1) + np.uint64(1)
        if (num_hashes - 1) * (num_bits - 1) + num_bits < 2**64:
            # p0 + i * step < m + (k - 1)(m - 1) fits in 64 bits: one exact modulo.
            i = np.arange(num_hashes, dtype=np.uint64)
            exact: npt.NDArray[np.uint64] = (p0[:, None] + i[None, :] * step[:, None]) % m
            return exact
        out = np.empty((n, num_hashes), dtype=np.uint64)
        pos = p0
        out[:, 0] = pos
        # pos + step may exceed 2**64 when m is huge, so add modulo m without overflow:
        # pos + step >= m  <=>  pos >= m - step.
        gap = m - step
        for j in range(1, num_hashes):
            pos = np.where(pos >= gap, pos - gap, pos + step)
            out[:, j] = pos
        return out


class _MixedDoubleHash(HashStrategy):
    """M3MX and M3M2 (module docstring): probe i is ``fmix64(a + i * b)`` reduced by
    multiply-shift. The two differ only in ``b``: M3M2 forces it odd (``step_bit = 1``)."""

    #: OR-ed into the step ``b = h >> 64``: 0 for M3MX, 1 for M3M2 (an odd step).
    step_bit: ClassVar[int] = 0

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        """The positions of ``key`` (definitions of M3MX / M3M2 in the module docstring)."""
        h = mmh3.hash128(mmh3_key(key), seed=0, x64arch=True, signed=False)
        a, b = h & _MASK64, (h >> 64) | self.step_bit
        return [(fmix64((a + i * b) & _MASK64) * num_bits) >> 64 for i in range(num_hashes)]

    def positions_many(self, keys: Sequence[bytes], num_hashes: int, num_bits: int) -> npt.NDArray[np.uint64]:
        """Vectorised :meth:`positions` (numpy, exact 64-bit arithmetic)."""
        a, b = hash_halves(keys)
        b = b | np.uint64(self.step_bit)
        out = np.empty((a.shape[0], num_hashes), dtype=np.uint64)
        z = a.copy()
        for i in range(num_hashes):
            out[:, i] = mulhi64(_fmix64_np(z), num_bits)
            z += b  # wraps modulo 2^64
        return out


class M3MX(_MixedDoubleHash):
    """MurmurHash3 x64 128, each probe mixed to 64 bits by fmix64 before multiply-shift
    reduction (the default before M3M2; files naming it keep opening, reading and writing
    exactly as before). Exact definition in the module docstring.

    Its fault: a key whose upper hash half is 0 (the empty key ``""`` is one) puts all k
    probes on one bit, so such a key is a false positive as soon as that bit is set. Cost:
    one 128-bit MurmurHash3 per key plus k multiply-xorshift rounds, no division.
    """

    name = "M3MX"
    kernel_id = 2


class M3M2(_MixedDoubleHash):
    """The default strategy: M3MX with an odd step, ``b = (h >> 64) | 1`` (module
    docstring). ``a + i * b`` then takes k distinct values and fmix64 is a bijection, so no
    key's probes collapse onto fewer than k mixed values; the empty key is an ordinary key.

    Keeps the classic false-positive rate at every size: small m, rates far below 1/m and
    power-of-two m. Cost: as M3MX.
    """

    name = "M3M2"
    kernel_id = 4
    step_bit = 1


class _BlockedHash(HashStrategy):
    """M3BL and M3B2 (module docstring): one 512-bit block per key, the k bits from the top 9
    bits of successive products ``y * 0x9E3779B97F4A7C15``. M3B2 forces the seed ``y`` odd
    (``seed_bit = 1``)."""

    block_bits = BLOCK_BITS
    #: OR-ed into the multiplier seed ``y = h >> 64``: 0 for M3BL, 1 for M3B2.
    seed_bit: ClassVar[int] = 0

    def check_num_bits(self, num_bits: int) -> None:
        """Raise ``ValueError`` unless ``num_bits`` is a positive multiple of 512."""
        if num_bits < BLOCK_BITS or num_bits % BLOCK_BITS:
            raise ValueError(
                f"{self.name} needs num_bits to be a positive multiple of {BLOCK_BITS} "
                f"(whole 64-byte blocks), got {num_bits}"
            )

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        """The positions of ``key`` (definitions of M3BL / M3B2 in the module docstring)."""
        self.check_num_bits(num_bits)
        h = mmh3.hash128(mmh3_key(key), seed=0, x64arch=True, signed=False)
        x, y = h & _MASK64, (h >> 64) | self.seed_bit
        base = ((x * (num_bits // BLOCK_BITS)) >> 64) * BLOCK_BITS
        out = []
        for _ in range(num_hashes):
            y = (y * _GOLDEN64) & _MASK64
            out.append(base + (y >> 55))
        return out

    def positions_many(self, keys: Sequence[bytes], num_hashes: int, num_bits: int) -> npt.NDArray[np.uint64]:
        """Vectorised :meth:`positions` (numpy, exact 64-bit arithmetic)."""
        self.check_num_bits(num_bits)
        x, y = hash_halves(keys)
        base = mulhi64(x, num_bits // BLOCK_BITS) * np.uint64(BLOCK_BITS)
        out = np.empty((x.shape[0], num_hashes), dtype=np.uint64)
        golden, top = np.uint64(_GOLDEN64), np.uint64(55)
        y = y | np.uint64(self.seed_bit)  # a copy: y is updated in place below
        for i in range(num_hashes):
            y *= golden  # wraps modulo 2^64
            out[:, i] = base + (y >> top)
        return out

    def expected_fp_rate(self, num_items: float, num_bits: int, num_hashes: int) -> float:
        """Blocked false-positive rate (Putze, Sanders and Singler 2007, section 3): a key's
        block holds a Binomial(n, 1 / B) number of the other items, and a block of s = 512
        bits holding i items gives a false positive with probability ``E[(X_i / s)^k]`` over
        the exact distribution of its set bits X_i (:func:`mmapbloom.sizing.blocked_fp_rate`)."""
        return _sizing.blocked_fp_rate(num_items, num_bits, num_hashes, BLOCK_BITS)

    def size_for(self, capacity: int, fp_rate: float) -> tuple[int, int]:
        """The smallest whole number of 512-bit blocks, with its best k, that meets
        ``fp_rate`` at ``capacity`` under the blocked formula (Putze et al. 2007)."""
        return _sizing.blocked_size(capacity, fp_rate, BLOCK_BITS)


class M3BL(_BlockedHash):
    """Cache-line-blocked strategy (Putze, Sanders and Singler 2007, "Cache-, hash- and
    space-efficient Bloom filters"; RocksDB's FastLocalBloom and Parquet's split-block
    filter are production relatives): all k positions of a key in one 512-bit block.
    Files naming it keep opening, reading and writing exactly as before; new blocked
    filters should use :class:`M3B2`.

    ``num_bits`` must be a positive multiple of 512 (``ValueError`` otherwise;
    ``BloomConfig.for_items`` sizes in whole blocks). The false-positive rate is higher
    than the classic one for the same m and k; :meth:`expected_fp_rate` and
    :meth:`size_for` use the blocked formula. Its fault: a key whose upper hash half is 0
    (the empty key is one) puts all k bits on bit 0 of its block.
    """

    name = "M3BL"
    kernel_id = 3


class M3B2(_BlockedHash):
    """The blocked strategy to choose for new filters: M3BL with an odd multiplier seed
    ``y = (h >> 64) | 1`` (module docstring), so ``y`` never becomes 0 and a key's bits never
    all fall on bit 0 of its block. Same layout, sizing and statistics as :class:`M3BL`.
    """

    name = "M3B2"
    kernel_id = 5
    seed_bit = 1


class _ProtocolStrategy(HashStrategy):
    """A :class:`Strategy` that does not subclass :class:`HashStrategy`, completed at
    registration: its own ``name`` and ``positions``, the classic formulas and the loop
    :meth:`positions_many` of :class:`HashStrategy`. ``wrapped`` is the user's object."""

    def __init__(self, wrapped: Strategy) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name  # type: ignore[misc]  # per instance: the wrapped object's name

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> Sequence[int]:
        """The wrapped object's positions of ``key``."""
        return self.wrapped.positions(key, num_hashes, num_bits)

    def __repr__(self) -> str:
        return f"<{type(self.wrapped).__qualname__} {self.name!r} (registered strategy)>"


def _origin(strategy: HashStrategy) -> type:
    """The class a user registered: the wrapped object's for a protocol-only strategy."""
    return type(strategy.wrapped) if isinstance(strategy, _ProtocolStrategy) else type(strategy)


_REGISTRY: dict[str, HashStrategy] = {}
_REGISTRY_LOCK = threading.Lock()


def register_strategy(strategy: Union[HashStrategy, Strategy]) -> HashStrategy:
    """Register a strategy instance under its ``name`` so files naming it can be opened.

    A :class:`HashStrategy` is registered as it is. Any other object satisfying the
    :class:`Strategy` protocol (a 4-character ASCII ``name`` and a callable ``positions``)
    is wrapped in a :class:`HashStrategy` with the classic formulas (Bloom 1970), and the
    wrapper is what is registered and returned. Registering the same name again with an
    instance of the same class is a no-op. Thread-safe.

    Returns:
        The registered :class:`HashStrategy` (the first one, for a repeated registration).
    Raises:
        ValueError: the name is not exactly 4 ASCII characters, or the name is already
            registered to a different class.
        TypeError: ``strategy`` has no ``name`` or no callable ``positions``.
    """
    if isinstance(strategy, HashStrategy):
        candidate = strategy
    elif isinstance(strategy, Strategy) and callable(strategy.positions):
        candidate = _ProtocolStrategy(strategy)
    else:
        raise TypeError(
            "register_strategy needs an object with a 4-character name and "
            f"positions(key, num_hashes, num_bits), got {strategy!r}"
        )
    name: object = candidate.name
    if not isinstance(name, str) or len(name) != 4 or not name.isascii():
        raise ValueError(f"a strategy name must be exactly 4 ASCII characters, got {name!r}")
    with _REGISTRY_LOCK:
        existing = _REGISTRY.get(name)
        if existing is not None:
            if _origin(existing) is _origin(candidate):
                return existing
            raise ValueError(
                f"strategy name {name!r} is already registered to {_origin(existing).__qualname__}, "
                f"not {_origin(candidate).__qualname__}"
            )
        _REGISTRY[name] = candidate
        return candidate


def registered_as(strategy: Union[HashStrategy, Strategy]) -> Optional[HashStrategy]:
    """The registered :class:`HashStrategy` that ``strategy`` stands for, or None.

    ``strategy`` stands for the registered one when it is an instance of the class
    registered under its name (for a protocol-only strategy: of the wrapped object's
    class). A file names its strategy, so any other object would make readers in other
    processes hash differently (false negatives). Never raises.
    """
    name = getattr(strategy, "name", None)  # the one probe: an arbitrary user object
    registered = _REGISTRY.get(name) if isinstance(name, str) else None
    if registered is None:
        return None
    origin = type(strategy.wrapped) if isinstance(strategy, _ProtocolStrategy) else type(strategy)
    return registered if origin is _origin(registered) else None


def get_strategy(name: str, *, source: str = "<bytes>") -> HashStrategy:
    """Look up a registered strategy by its 4-character name.

    Raises:
        UnknownSchemeError (a ``ValueError``): the name is not registered; the message names
            it and lists the registered ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownSchemeError(
            f"unknown hash strategy {name!r}; registered: {sorted(_REGISTRY)}",
            source=source,
            expected=sorted(_REGISTRY),
            actual=name,
        ) from None


def registered_strategies() -> dict[str, HashStrategy]:
    """A copy of the registry: name -> registered strategy."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


register_strategy(M3KM())
register_strategy(M3MX())
register_strategy(M3BL())
register_strategy(M3B2())
#: The default strategy instance (M3M2), used by every constructor unless told otherwise.
DEFAULT_STRATEGY: HashStrategy = register_strategy(M3M2())
