"""Hashing: key encoding and the named, pluggable strategies that map a key to k positions.

A strategy's 4-character ASCII ``name`` is written into every file, so a strategy's
arithmetic is part of the file format and must never change once released; the golden
positions in ``tests/test_hashing.py`` freeze it.

The default strategy ``M3KM`` (MurmurHash3 x64 128-bit, Kirsch-Mitzenmacher double
hashing) is defined exactly as::

    h     = mmh3.hash128(key, seed=0, x64arch=True, signed=False)   # 128-bit unsigned int
    h1    = h mod 2**64
    h2    = h >> 64
    p0    = h1 mod m
    step  = 1 + (h2 mod (m - 1))   if m > 1,   0 if m == 1
    pos_i = (p0 + i * step) mod m  for i = 0 .. k-1             # exact integer arithmetic

Kirsch and Mitzenmacher 2006 ("Less hashing, same performance: building a better Bloom
filter") show that g_i = h1 + i h2 mod m keeps the asymptotic false-positive rate of k
independent hashes. The step lies in [1, m - 1], so it is never 0 mod m and the k
positions of one key never all collapse onto one bit (for m > 1).
"""

from __future__ import annotations

import abc
import threading
from typing import ClassVar, Iterable, Sequence, Union

import mmh3
import numpy as np
import numpy.typing as npt

from .errors import UnknownSchemeError

__all__ = [
    "DEFAULT_STRATEGY",
    "HashStrategy",
    "Key",
    "M3KM",
    "encode_key",
    "encode_keys",
    "get_strategy",
    "register_strategy",
    "registered_strategies",
]

#: What a filter accepts as an item.
Key = Union[str, bytes, bytearray, memoryview]

_MASK64 = (1 << 64) - 1


def encode_key(item: object) -> bytes:
    """Encode one item to the bytes that are hashed, identically on every code path.

    ``str`` -> its UTF-8 bytes; ``bytes``, ``bytearray``, ``memoryview`` -> the raw bytes
    (a memoryview must be C-contiguous). Anything else raises ``TypeError``: mmapbloom
    never uses Python's per-process ``hash()`` nor ``str()``.

    Raises:
        TypeError: the item is not str or bytes-like.
        UnicodeEncodeError (a ``ValueError``): a str with lone surrogates.
    """
    if type(item) is bytes:
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise TypeError(f"items must be str, bytes, bytearray or memoryview, got {type(item).__name__}")


def encode_keys(items: Iterable[object]) -> list[bytes]:
    """Encode many items with :func:`encode_key`; validates all of them before returning.

    Returns a new list of bytes in the same order. Raises as :func:`encode_key`. Batches of
    only ``str`` or only ``bytes`` are encoded by C-level ``map`` calls (no Python loop).
    """
    seq = items if isinstance(items, (list, tuple)) else list(items)
    kinds = set(map(type, seq))
    if kinds == {str}:
        return list(map(str.encode, seq))
    if kinds <= {bytes}:
        return list(seq)
    out: list[bytes] = []
    append = out.append
    for item in seq:
        if type(item) is bytes:
            append(item)
        elif type(item) is str:
            append(item.encode("utf-8"))
        else:
            append(encode_key(item))
    return out


class HashStrategy(abc.ABC):
    """Maps a key (bytes) to k bit positions in [0, m).

    Subclasses set a class attribute ``name`` of exactly 4 ASCII characters, implement
    :meth:`positions`, and may override :meth:`positions_many` for speed; its answers must
    equal :meth:`positions` key by key. Register a subclass instance with
    :func:`register_strategy` so that files naming it can be opened.

    Strategies must be deterministic across machines, processes and runs, and stateless
    (thread-safe). Instances are compared by ``name``.
    """

    name: ClassVar[str]

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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashStrategy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def __reduce__(self) -> tuple[object, ...]:
        return (get_strategy, (self.name,))


class M3KM(HashStrategy):
    """The default strategy: MurmurHash3 x64 128 with Kirsch-Mitzenmacher double hashing.

    Exact definition in the module docstring (it is part of the BLM1 format). Cost: one
    128-bit MurmurHash3 per key plus k integer operations; the batch form does the same
    with numpy in exact unsigned 64-bit arithmetic.
    """

    name = "M3KM"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        """The M3KM positions of ``key`` (definition in the module docstring)."""
        h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
        p = (h & _MASK64) % num_bits
        if num_bits == 1:
            return [0] * num_hashes
        step = 1 + (h >> 64) % (num_bits - 1)
        return [(p + i * step) % num_bits for i in range(num_hashes)]

    #: ``hash_pair(key) -> (h1, h2)``: the two 64-bit halves of the 128-bit hash, as
    #: unsigned ints (the same values as ``hash128(..., signed=False)`` split in two);
    #: used by the filters' per-item fast path.
    hash_pair = staticmethod(mmh3.mmh3_x64_128_utupledigest)

    def hash_pairs(self, keys: Iterable[bytes]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """``(h1, h2)`` for every key (any iterable of bytes) as two ``uint64`` arrays.

        ``mmh3_x64_128_digest`` returns the 128-bit hash as 16 little-endian bytes, the
        same value as ``hash128(key, seed=0, x64arch=True, signed=False)``.
        """
        digest = mmh3.mmh3_x64_128_digest
        raw = np.frombuffer(b"".join(map(digest, keys)), dtype="<u8").reshape(-1, 2)
        return raw[:, 0].astype(np.uint64, copy=False), raw[:, 1].astype(np.uint64, copy=False)

    def positions_many(self, keys: Sequence[bytes], num_hashes: int, num_bits: int) -> npt.NDArray[np.uint64]:
        """Vectorised :meth:`positions` (numpy, exact 64-bit arithmetic)."""
        if type(self).positions is not M3KM.positions:  # a subclass redefined the positions
            return super().positions_many(keys, num_hashes, num_bits)
        if len(keys) == 0:
            return np.empty((0, num_hashes), dtype=np.uint64)
        h1, h2 = self.hash_pairs(keys)
        return self.positions_from_pairs(h1, h2, num_hashes, num_bits)

    def positions_from_pairs(self, h1: npt.NDArray[np.uint64], h2: npt.NDArray[np.uint64], num_hashes: int,
                             num_bits: int) -> npt.NDArray[np.uint64]:
        """Positions, shape ``(n, num_hashes)``, from the hash halves of :meth:`hash_pairs`."""
        n = h1.shape[0]
        m = np.uint64(num_bits)
        p0 = h1 % m
        if num_bits == 1:
            return np.zeros((n, num_hashes), dtype=np.uint64)
        step = h2 % np.uint64(num_bits - 1) + np.uint64(1)
        if (num_hashes - 1) * (num_bits - 1) + num_bits < 2**64:
            # p0 + i * step < m + (k - 1)(m - 1) fits in 64 bits: one exact modulo.
            i = np.arange(num_hashes, dtype=np.uint64)
            return (p0[:, None] + i[None, :] * step[:, None]) % m
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


_REGISTRY: dict[str, HashStrategy] = {}
_REGISTRY_LOCK = threading.Lock()


def register_strategy(strategy: HashStrategy) -> HashStrategy:
    """Register a strategy instance under its ``name`` so files naming it can be opened.

    Registering the same name again with an instance of the same class is a no-op.

    Returns:
        The registered instance (the first one, for a repeated registration).
    Raises:
        ValueError: the name is not exactly 4 ASCII characters, or the name is already
            registered to a different class.
        TypeError: ``strategy`` is not a :class:`HashStrategy` instance.
    """
    if not isinstance(strategy, HashStrategy):
        raise TypeError(f"register_strategy needs a HashStrategy instance, got {strategy!r}")
    name = getattr(strategy, "name", None)
    if not isinstance(name, str) or len(name) != 4 or not name.isascii():
        raise ValueError(f"a strategy name must be exactly 4 ASCII characters, got {name!r}")
    with _REGISTRY_LOCK:
        existing = _REGISTRY.get(name)
        if existing is not None:
            if type(existing) is type(strategy):
                return existing
            raise ValueError(
                f"strategy name {name!r} is already registered to {type(existing).__qualname__}, "
                f"not {type(strategy).__qualname__}"
            )
        _REGISTRY[name] = strategy
        return strategy


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
            f"unknown hash scheme {name!r}; registered: {sorted(_REGISTRY)}",
            source=source,
            expected=sorted(_REGISTRY),
            actual=name,
        ) from None


def registered_strategies() -> dict[str, HashStrategy]:
    """A copy of the registry: name -> strategy instance."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


#: The default strategy instance, used by every constructor unless told otherwise.
DEFAULT_STRATEGY: HashStrategy = register_strategy(M3KM())
