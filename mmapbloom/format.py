"""The BLM1 byte format: a 24-byte little-endian header followed by the bit array.

======  ======  =========  ===========================================================
offset  size    type       field
======  ======  =========  ===========================================================
0       4       bytes      magic ``b"BLM1"``
4       4       ASCII      hash-scheme name, e.g. ``b"M3KM"`` (see ``mmapbloom.hashing``)
8       8       u64 LE     num_bits m, ``1 <= m < 2**64``
16      4       u32 LE     num_hashes k, ``1 <= k < 2**32``
20      4       u32 LE     items added (adds that set a new bit), saturating at 2**32 - 1
24      ceil(m/8) bytes    bit array: bit i is in byte ``24 + (i >> 3)``, mask ``1 << (i & 7)``
======  ======  =========  ===========================================================

The total length is exactly ``24 + ceil(m / 8)``; the ``8 * ceil(m / 8) - m`` padding bits
in the last byte are always 0. The same bytes are used on disk, by ``to_bytes`` and by
``from_bytes``. Validation (:func:`parse_header`, :func:`check_length`) looks only at the
header and the total length, so nothing proportional to m is allocated or mapped before
the header is known to agree with the length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import BadHeaderError, BadMagicError, LengthMismatchError, PaddingError
from .hashing import HashStrategy, get_strategy

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "ITEMS_OFFSET",
    "MAGIC",
    "MAX_ITEMS",
    "Header",
    "body_size",
    "check_length",
    "check_padding",
    "pack_header",
    "padding_mask",
    "parse_header",
]

MAGIC = b"BLM1"
#: magic, scheme, num_bits, num_hashes, items added.
HEADER = struct.Struct("<4s4sQII")
HEADER_SIZE = HEADER.size  # 24
#: Byte offset of the items-added field, rewritten in place by writers.
ITEMS_OFFSET = 20
ITEMS_FIELD = struct.Struct("<I")
#: Items added saturates here and never wraps.
MAX_ITEMS = 2**32 - 1

assert HEADER_SIZE == 24


@dataclass(frozen=True)
class Header:
    """A decoded, validated header. ``strategy`` is the registered strategy it names."""

    magic: bytes
    strategy: HashStrategy
    num_bits: int
    num_hashes: int
    items_added: int

    @property
    def total_size(self) -> int:
        """Bytes of the whole file or byte string: ``24 + ceil(m / 8)``."""
        return HEADER_SIZE + body_size(self.num_bits)


def body_size(num_bits: int) -> int:
    """Bytes of the bit array, ``ceil(num_bits / 8)``."""
    return (num_bits + 7) >> 3


def pack_header(scheme: str, num_bits: int, num_hashes: int, items_added: int, magic: bytes = MAGIC) -> bytes:
    """The 24 header bytes for the given fields (see the module table)."""
    return HEADER.pack(magic, scheme.encode("ascii"), num_bits, num_hashes, min(items_added, MAX_ITEMS))


def parse_header(data: bytes, *, source: str = "<bytes>", magic: bytes = MAGIC, kind: str = "Bloom filter",
                 other_kinds: dict[bytes, str] | None = None) -> Header:
    """Decode and validate the first 24 bytes of a filter.

    Args:
        data: at least the first 24 bytes (more is ignored).
        source: a path or ``"<bytes>"``, used in error messages.
        magic: the magic expected for this kind of filter.
        kind: the human name of that kind, for messages.
        other_kinds: magic -> name of other known kinds, so that a file of another kind is
            refused with a message naming both kinds.

    Raises:
        BadHeaderError: fewer than 24 bytes, m = 0 or k = 0.
        BadMagicError: wrong magic.
        UnknownSchemeError: a scheme name that is not registered.
        (all ``FormatError``, a ``ValueError``)
    """
    if len(data) < HEADER_SIZE:
        raise BadHeaderError(
            f"truncated header: expected at least {HEADER_SIZE} bytes, got {len(data)}",
            source=source, expected=HEADER_SIZE, actual=len(data),
        )
    got_magic, scheme, m, k, items = HEADER.unpack_from(data, 0)
    if got_magic != magic:
        known = (other_kinds or {}).get(got_magic)
        what = f" (a {known}, not a {kind})" if known else ""
        raise BadMagicError(
            f"bad magic: expected {magic!r} ({kind}), got {got_magic!r}{what}",
            source=source, expected=magic, actual=got_magic,
        )
    try:
        name = scheme.decode("ascii")
    except UnicodeDecodeError:
        name = scheme.decode("latin-1")
    strategy = get_strategy(name, source=source)
    if m == 0:
        raise BadHeaderError("num_bits is 0: expected at least 1", source=source, expected=">= 1", actual=0)
    if k == 0:
        raise BadHeaderError("num_hashes is 0: expected at least 1", source=source, expected=">= 1", actual=0)
    return Header(got_magic, strategy, m, k, items)


def check_length(header_total: int, actual: int, *, source: str = "<bytes>") -> None:
    """Refuse a body that is truncated or over-long.

    Raises:
        LengthMismatchError (a ``FormatError``): ``actual != header_total``.
    """
    if actual != header_total:
        word = "truncated" if actual < header_total else "over-long"
        raise LengthMismatchError(
            f"{word} filter: header says {header_total} bytes in all, got {actual}",
            source=source, expected=header_total, actual=actual,
        )


def padding_mask(num_bits: int) -> int:
    """Mask of the padding bits in the last byte of the bit array (0 when m % 8 == 0)."""
    used = num_bits & 7
    return 0 if used == 0 else (0xFF << used) & 0xFF


def check_padding(last_byte: int, num_bits: int, *, source: str = "<bytes>") -> None:
    """Refuse a set padding bit past num_bits.

    Raises:
        PaddingError (a ``FormatError``): a padding bit is set.
    """
    mask = padding_mask(num_bits)
    if last_byte & mask:
        raise PaddingError(
            f"padding bits past num_bits {num_bits} must be 0, last byte is 0x{last_byte:02x}",
            source=source, expected=0, actual=last_byte & mask,
        )
