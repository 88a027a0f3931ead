"""The byte formats: BLM1 (Bloom filter) and BLC1 (counting Bloom filter).

BLM1 is a 24-byte little-endian header followed by the bit array.

======  ======  =========  ===========================================================
offset  size    type       field
======  ======  =========  ===========================================================
0       4       bytes      magic ``b"BLM1"``
4       4       ASCII      hash-strategy name, e.g. ``b"M3M2"`` (see ``mmapbloom.hashing``)
8       8       u64 LE     num_bits m, ``1 <= m < 2**64``
16      4       u32 LE     num_hashes k, ``1 <= k <= 4096`` (``sizing.MAX_NUM_HASHES``)
20      4       u32 LE     items added (adds that set a new bit), saturating at 2**32 - 1
24      ceil(m/8) bytes    bit array: bit i is in byte ``24 + (i >> 3)``, mask ``1 << (i & 7)``
======  ======  =========  ===========================================================

The total length is exactly ``24 + ceil(m / 8)``; the ``8 * ceil(m / 8) - m`` padding bits
in the last byte are always 0. The same bytes are used on disk, by ``to_bytes`` and by
``from_bytes``. Validation (:func:`validate_image`: :func:`parse_header`,
:func:`check_length`, :func:`check_padding`) looks only at the header, the total length
and the last byte, so nothing proportional to m is allocated or mapped before the header
is known to agree with the length. Every reader (``open``, ``from_bytes``, ``check``,
the shard merger) validates through that one function.

BLC1 (counting filter, Fan et al. 2000) shares the first 24 bytes (with magic ``b"BLC1"``
and m counting cells instead of bits), then:

======  ======  =========  ===========================================================
offset  size    type       field
======  ======  =========  ===========================================================
20      4       u32 LE     items: adds that made some counter non-zero, minus removes
                           that returned some counter to zero; saturates at 2**32 - 1
24      1       u8         counter width in bits: 4 or 8
25      7       zeros      reserved, must be 0
32      body               counters: 8-bit: cell i is byte ``32 + i``; 4-bit: cell i is
                           in byte ``32 + (i >> 1)``, the low nibble for even i, the high
                           nibble for odd i
======  ======  =========  ===========================================================

The body is ``ceil(m * width / 8)`` bytes; with 4-bit cells and odd m the unused high
nibble of the last byte is 0.
"""

from __future__ import annotations

import mmap
import struct
import sys
from dataclasses import dataclass
from typing import Callable, Union

from .errors import BadHeaderError, BadMagicError, LengthMismatchError, PaddingError, UnknownStrategyError
from .hashing import HashStrategy, get_strategy
from .sizing import MAX_NUM_HASHES

__all__ = [
    "COUNTER_WIDTHS",
    "COUNTING_HEADER_SIZE",
    "COUNTING_MAGIC",
    "CUCKOO_HEADER_SIZE",
    "CUCKOO_MAGIC",
    "CUCKOO_STRATEGY",
    "CuckooHeader",
    "HEADER",
    "HEADER_SIZE",
    "ITEMS_OFFSET",
    "KINDS",
    "MAGIC",
    "MAX_ITEMS",
    "Reader",
    "Header",
    "body_size",
    "check_length",
    "check_padding",
    "cuckoo_f32",
    "header_size",
    "items_word",
    "load_items",
    "pack_counting_header",
    "pack_cuckoo_header",
    "parse_cuckoo_header",
    "pack_header",
    "padding_mask",
    "parse_header",
    "store_items",
    "validate_cuckoo_image",
    "validate_image",
]

MAGIC = b"BLM1"
COUNTING_MAGIC = b"BLC1"
#: Magic -> human name of every kind of filter, for "wrong kind" messages.
KINDS = {MAGIC: "Bloom filter", COUNTING_MAGIC: "counting Bloom filter", b"CKF1": "cuckoo filter"}
#: magic, strategy, num_bits, num_hashes, items added.
HEADER = struct.Struct("<4s4sQII")
HEADER_SIZE = HEADER.size  # 24
#: Byte offset of the items-added field, rewritten in place by writers.
ITEMS_OFFSET = 20
#: Items added saturates here and never wraps.
MAX_ITEMS = 2**32 - 1

#: BLC1 extension after the common 24 bytes: counter width (u8) and 7 reserved bytes.
COUNTING_EXT = struct.Struct("<B7s")
COUNTING_HEADER_SIZE = HEADER_SIZE + COUNTING_EXT.size  # 32
COUNTER_WIDTHS = (4, 8)

assert HEADER_SIZE == 24 and COUNTING_HEADER_SIZE == 32

_NATIVE_LITTLE = sys.byteorder == "little"


def items_word(buf: Union[bytearray, mmap.mmap]) -> memoryview:
    """A one-element view of the items field as a native unsigned 32-bit integer.

    Writers update the field in place while readers (which take no lock) read it, and a
    writer may be killed at any moment, so the field must change in one aligned 4-byte
    store and be read in one load. ``struct.pack_into`` does not do that: it zeroes the
    destination and then writes it byte by byte, so a concurrent reader, or a file left by
    a SIGKILL at that moment, sees 0 (a reader process watches for that in
    tests/test_processes.py; tests/test_stress_crash.py checks the field after kills).
    Read and write the view with :func:`load_items` and :func:`store_items` (they keep
    the file little-endian on any host). The view pins ``buf``: release it before
    unmapping.
    """
    word = memoryview(buf)[ITEMS_OFFSET : ITEMS_OFFSET + 4].cast("I")
    assert word.itemsize == 4, "C unsigned int is not 32 bits on this platform"
    return word


def _swap32(value: int) -> int:
    return int.from_bytes(value.to_bytes(4, "little"), "big")


def load_items(word: memoryview) -> int:
    """The items-added count (0 <= count <= MAX_ITEMS) held by an :func:`items_word`
    view, in one 4-byte load. Raises ValueError if the view was released (handle closed)."""
    value: int = word[0]
    return value if _NATIVE_LITTLE else _swap32(value)


def store_items(word: memoryview, count: int) -> None:
    """Store ``count`` (0 <= count <= MAX_ITEMS) through an :func:`items_word` view, in
    one 4-byte store. The caller holds the write lock. Raises ValueError for a count
    outside that range or if the view was released (handle closed)."""
    word[0] = count if _NATIVE_LITTLE else _swap32(count)


@dataclass(frozen=True)
class Header:
    """A decoded, validated header. ``strategy`` is the registered strategy it names."""

    magic: bytes
    strategy: HashStrategy
    num_bits: int
    num_hashes: int
    items_added: int
    #: Bits per cell: 1 for BLM1, the counter width (4 or 8) for BLC1.
    cell_bits: int = 1
    header_size: int = HEADER_SIZE

    @property
    def total_size(self) -> int:
        """Bytes of the whole file or byte string: header + ``ceil(m * cell_bits / 8)``."""
        return self.header_size + body_size(self.num_bits, self.cell_bits)


def body_size(num_bits: int, cell_bits: int = 1) -> int:
    """Bytes of the cell array, ``ceil(num_bits * cell_bits / 8)``."""
    return (num_bits * cell_bits + 7) >> 3


def pack_header(strategy: str, num_bits: int, num_hashes: int, items_added: int, magic: bytes = MAGIC) -> bytes:
    """The 24 header bytes for the given fields (see the module table)."""
    return HEADER.pack(magic, strategy.encode("ascii"), num_bits, num_hashes, min(items_added, MAX_ITEMS))


def pack_counting_header(strategy: str, num_bits: int, num_hashes: int, items: int, width: int) -> bytes:
    """The 32 BLC1 header bytes (see the module table)."""
    return pack_header(strategy, num_bits, num_hashes, items, COUNTING_MAGIC) + COUNTING_EXT.pack(width, bytes(7))


def parse_header(data: bytes, *, source: str = "<bytes>", magic: bytes = MAGIC) -> Header:
    """Decode and validate the header of a filter of the kind with ``magic``.

    Args:
        data: at least the header (24 bytes for BLM1, 32 for BLC1; more is ignored).
        source: a path or ``"<bytes>"``, used in error messages.
        magic: the magic expected: :data:`MAGIC` or :data:`COUNTING_MAGIC`. A file of the
            other known kind is refused with a message naming both kinds.

    Raises:
        BadHeaderError: a short header, m = 0, k = 0, or (BLC1) a counter width other
            than 4 or 8 or non-zero reserved bytes.
        BadMagicError: wrong magic.
        UnknownStrategyError: a strategy name that is not registered.
        (all ``FormatError``, a ``ValueError``)
    """
    kind = KINDS[magic]
    need = COUNTING_HEADER_SIZE if magic == COUNTING_MAGIC else HEADER_SIZE
    if len(data) < HEADER_SIZE:
        raise BadHeaderError(
            f"truncated header: expected at least {need} bytes, got {len(data)}",
            source=source,
            expected=need,
            actual=len(data),
        )
    got_magic, strategy, m, k, items = HEADER.unpack_from(data, 0)
    if got_magic != magic:
        known = KINDS.get(got_magic)
        what = f" (a {known}, not a {kind})" if known else ""
        raise BadMagicError(
            f"bad magic: expected {magic!r} ({kind}), got {got_magic!r}{what}",
            source=source,
            expected=magic,
            actual=got_magic,
        )
    try:
        name = strategy.decode("ascii")
    except UnicodeDecodeError:
        name = strategy.decode("latin-1")
    strategy = get_strategy(name, source=source)
    if m == 0:
        raise BadHeaderError("num_bits is 0: expected at least 1", source=source, expected=">= 1", actual=0)
    if k == 0:
        raise BadHeaderError("num_hashes is 0: expected at least 1", source=source, expected=">= 1", actual=0)
    if k > MAX_NUM_HASHES:
        # Every operation costs O(k): a forged k must not make each call take minutes.
        raise BadHeaderError(
            f"num_hashes is {k}: expected at most {MAX_NUM_HASHES} (the supported maximum)",
            source=source,
            expected=f"<= {MAX_NUM_HASHES}",
            actual=k,
        )
    try:
        strategy.check_num_bits(m)
    except ValueError as exc:
        raise BadHeaderError(
            f"num_bits {m} is not valid for strategy {name}: {exc}",
            source=source,
            expected=f"num_bits valid for {name}",
            actual=m,
        ) from None
    if magic != COUNTING_MAGIC:
        return Header(got_magic, strategy, m, k, items)
    if len(data) < COUNTING_HEADER_SIZE:
        raise BadHeaderError(
            f"truncated header: expected at least {need} bytes, got {len(data)}",
            source=source,
            expected=need,
            actual=len(data),
        )
    width, reserved = COUNTING_EXT.unpack_from(data, HEADER_SIZE)
    if width not in COUNTER_WIDTHS:
        raise BadHeaderError(
            f"counter width must be 4 or 8 bits, got {width}", source=source, expected=COUNTER_WIDTHS, actual=width
        )
    if reserved != bytes(7):
        raise BadHeaderError(
            f"reserved header bytes 25..31 must be 0, got {reserved.hex()}",
            source=source,
            expected="00" * 7,
            actual=reserved.hex(),
        )
    return Header(got_magic, strategy, m, k, items, width, COUNTING_HEADER_SIZE)


def check_length(header_total: int, actual: int, *, source: str = "<bytes>") -> None:
    """Refuse a body that is truncated or over-long.

    Raises:
        LengthMismatchError (a ``FormatError``): ``actual != header_total``.
    """
    if actual != header_total:
        word = "truncated" if actual < header_total else "over-long"
        raise LengthMismatchError(
            f"{word} filter: header says {header_total} bytes in all, got {actual}",
            source=source,
            expected=header_total,
            actual=actual,
        )


def padding_mask(used_bits: int) -> int:
    """Mask of the padding bits in the last byte of an array of ``used_bits`` bits
    (``m`` for BLM1, ``m * width`` for BLC1; 0 when that is a multiple of 8)."""
    used = used_bits & 7
    return 0 if used == 0 else (0xFF << used) & 0xFF


def check_padding(last_byte: int, num_bits: int, *, source: str = "<bytes>", cell_bits: int = 1) -> None:
    """Refuse a set padding bit past the last cell.

    Raises:
        PaddingError (a ``FormatError``): a padding bit is set.
    """
    mask = padding_mask(num_bits * cell_bits)
    if last_byte & mask:
        raise PaddingError(
            f"padding bits past num_bits {num_bits} must be 0, last byte is 0x{last_byte:02x}",
            source=source,
            expected=0,
            actual=last_byte & mask,
        )


def header_size(magic: bytes = MAGIC) -> int:
    """Bytes of the header of the kind with ``magic``: 24 (BLM1) or 32 (BLC1)."""
    return COUNTING_HEADER_SIZE if magic == COUNTING_MAGIC else HEADER_SIZE


#: ``read(offset, count) -> bytes``: at most ``count`` bytes of an image from ``offset``
#: (``os.pread`` on a file, a slice of a buffer in memory).
Reader = Callable[[int, int], bytes]


def validate_image(read: Reader, size: int, *, source: str = "<bytes>", magic: bytes = MAGIC) -> Header:
    """Validate an image (a file or a byte string) from its header, its total length and
    its last byte: the one validator of every reader (``open`` before anything is mapped,
    ``from_bytes`` before anything is allocated, ``check`` on an open handle, the shard
    merger before any shard is combined). Reads at most two small pieces, whatever m.

    Args:
        read: ``read(offset, count) -> bytes`` over the image (``os.pread`` on a file
            descriptor, a slice in memory); a short read is treated as a short image.
        size: the image's real total length in bytes (``fstat`` for a file).
        source: a path or ``"<bytes>"``, used in error messages.
        magic: the kind expected, :data:`MAGIC` or :data:`COUNTING_MAGIC`.

    Returns:
        The decoded :class:`Header` (its ``total_size`` equals ``size``).

    Raises:
        BadMagicError, UnknownStrategyError, BadHeaderError: as :func:`parse_header`.
        LengthMismatchError: ``size`` differs from the header's total (checked before
            the last byte is read, so nothing past a short image is touched).
        PaddingError: a padding bit of the last byte is set.
        (all ``FormatError``, a ``ValueError``)
    """
    header = parse_header(read(0, header_size(magic)), source=source, magic=magic)
    check_length(header.total_size, size, source=source)
    last = read(size - 1, 1)
    if not last:  # the image shrank after its size was taken
        check_length(header.total_size, size - 1, source=source)
    check_padding(last[0], header.num_bits, source=source, cell_bits=header.cell_bits)
    return header


# -- CKF1: the cuckoo filter (Fan, Andersen, Kaminsky, Mitzenmacher, CoNEXT 2014) --------------

CUCKOO_MAGIC = b"CKF1"
#: The one cuckoo hashing scheme (index, fingerprint, alternate index and kick choices, see
#: :mod:`mmapbloom.cuckoo_kernels` and docs/FORMAT.md). Another name is UnknownStrategyError.
CUCKOO_STRATEGY = "M3C1"
#: magic, strategy, num_buckets, fingerprint_bits, bucket_size, kick counter u16, items,
#: max_kicks, victim fingerprint, victim bucket index, design capacity (u32), design
#: fp_rate (f32); capacity and fp_rate both 0: not recorded (a file written before they were).
CUCKOO_HEADER = struct.Struct("<4s4sQBBHIIIQIf")
CUCKOO_HEADER_SIZE = CUCKOO_HEADER.size  # 48
#: Byte offsets of the victim slot's two fields (each one aligned store).
CUCKOO_VICTIM_FP_OFFSET = 28
CUCKOO_VICTIM_INDEX_OFFSET = 32
#: Byte offset of the kick sequence counter (u16; odd while a writer moves fingerprints,
#: any value valid: a writer killed mid path leaves it odd).
CUCKOO_KICK_SEQ_OFFSET = 18
#: Byte offsets of the recorded design capacity (u32) and fp_rate (f32).
CUCKOO_CAPACITY_OFFSET = 40
CUCKOO_FP_RATE_OFFSET = 44
#: The capacity field's largest value; a larger design capacity is stored as this value,
#: meaning "at least 2**32 - 1: derived from the geometry".
CUCKOO_MAX_RECORDED_CAPACITY = 2**32 - 1
#: Supported fingerprint widths in bits (inclusive) and bucket sizes.
CUCKOO_MIN_FP_BITS = 4
CUCKOO_MAX_FP_BITS = 32
CUCKOO_BUCKET_SIZES = (1, 2, 4, 8)
#: Largest max_kicks a header may hold (a forged value must not make an insert take minutes).
CUCKOO_MAX_KICKS = 1 << 16
#: Largest bucket count: num_buckets * bucket_size slots must fit 2**56 (so slot bit
#: offsets fit 64 bits at any width).
CUCKOO_MAX_BUCKETS = 1 << 53

assert CUCKOO_HEADER_SIZE == 48 and ITEMS_OFFSET == 20


@dataclass(frozen=True)
class CuckooHeader:
    """A decoded, validated CKF1 header (see docs/FORMAT.md). ``header_size`` and
    ``total_size`` are what :class:`~mmapbloom.storage.FileStorage` needs of any header."""

    num_buckets: int
    fingerprint_bits: int
    bucket_size: int
    max_kicks: int
    items_added: int = 0
    victim_fp: int = 0
    victim_index: int = 0
    #: The design capacity as recorded (0: not recorded; 2**32 - 1: at least that many).
    capacity: int = 0
    #: The design fp_rate as recorded, the shortest decimal that round-trips to its float32
    #: (0.0: not recorded).
    fp_rate: float = 0.0
    magic: bytes = CUCKOO_MAGIC
    strategy_name: str = CUCKOO_STRATEGY
    header_size: int = CUCKOO_HEADER_SIZE

    @property
    def num_slots(self) -> int:
        """Slots in all: ``num_buckets * bucket_size``."""
        return self.num_buckets * self.bucket_size

    @property
    def body_bytes(self) -> int:
        """Bytes of the slot array: ``ceil(num_slots * fingerprint_bits / 8)``."""
        return body_size(self.num_slots, self.fingerprint_bits)

    @property
    def total_size(self) -> int:
        """Bytes of the whole image: 48 + :attr:`body_bytes`."""
        return self.header_size + self.body_bytes


def pack_cuckoo_header(header: CuckooHeader) -> bytes:
    """The 48 CKF1 header bytes of ``header`` (see the module docs and docs/FORMAT.md)."""
    return CUCKOO_HEADER.pack(
        CUCKOO_MAGIC,
        header.strategy_name.encode("ascii"),
        header.num_buckets,
        header.fingerprint_bits,
        header.bucket_size,
        0,
        min(header.items_added, MAX_ITEMS),
        header.max_kicks,
        header.victim_fp,
        header.victim_index,
        header.capacity,
        header.fp_rate,
    )


def cuckoo_f32(value: float) -> float:
    """``value`` (in (0, 1)) as the CKF1 fp_rate field reads it back: the nearest float32
    kept inside (0, 1) (values that round to 0 or 1 become the float32 next to them), given
    as the shortest decimal that round-trips to that float32 (so 0.01 reads back as 0.01).
    Plain Python: no numpy needed."""
    raw = struct.pack("<f", value)
    f32 = struct.unpack("<f", raw)[0]
    if f32 <= 0.0:
        raw = b"\x01\x00\x00\x00"  # the smallest float32 above 0
    elif f32 >= 1.0:
        raw = struct.pack("<I", 0x3F7FFFFF)  # the largest float32 below 1
    return _shortest_f32(raw)


def _shortest_f32(raw: bytes) -> float:
    for digits in range(1, 10):  # 9 significant digits always round-trip a float32
        text = f"{struct.unpack('<f', raw)[0]:.{digits}g}"
        if struct.pack("<f", float(text)) == raw:
            return float(text)
    return float(struct.unpack("<f", raw)[0])  # pragma: no cover - 9 digits always suffice


def _bad(message: str, source: str, expected: object, actual: object) -> BadHeaderError:
    return BadHeaderError(message, source=source, expected=expected, actual=actual)


def parse_cuckoo_header(data: bytes, *, source: str = "<bytes>") -> CuckooHeader:
    """Decode and validate a CKF1 header; each damage is refused with its own message.

    Raises:
        BadMagicError: not ``CKF1`` (a BLM1 or BLC1 file is named as such: both kinds).
        UnknownStrategyError: a scheme name other than ``M3C1``.
        BadHeaderError: a short header; num_buckets 0 or > 2**53; fingerprint_bits outside
            [4, 32]; bucket_size not 1, 2, 4 or 8 (the kick counter may hold any value); max_kicks 0 or > 65536; items above the
            slot count + 1; a victim fingerprint wider than fingerprint_bits, or a victim
            index >= num_buckets, or an index with no victim; a
            recorded capacity above the slot count, a recorded fp_rate not in (0, 1) (NaN
            included), or only one of capacity and fp_rate recorded.
        (all ``FormatError``, a ``ValueError``)
    """
    if len(data) < 4 or data[:4] != CUCKOO_MAGIC:
        got = bytes(data[:4])
        known = KINDS.get(got)
        what = f" (a {known}, not a cuckoo filter)" if known else ""
        raise BadMagicError(
            f"bad magic: expected {CUCKOO_MAGIC!r} (cuckoo filter), got {got!r}{what}",
            source=source,
            expected=CUCKOO_MAGIC,
            actual=got,
        )
    if len(data) < CUCKOO_HEADER_SIZE:
        raise _bad(
            f"truncated header: expected at least {CUCKOO_HEADER_SIZE} bytes, got {len(data)}",
            source,
            CUCKOO_HEADER_SIZE,
            len(data),
        )
    _, strategy, n, f, b, _seq, items, kicks, vfp, vindex, cap, _ = CUCKOO_HEADER.unpack_from(data, 0)
    fp_raw = bytes(data[CUCKOO_FP_RATE_OFFSET : CUCKOO_FP_RATE_OFFSET + 4])
    name = strategy.decode("latin-1")
    if name != CUCKOO_STRATEGY:
        raise UnknownStrategyError(
            f"unknown cuckoo hashing scheme {name!r}: expected {CUCKOO_STRATEGY!r}",
            source=source,
            expected=CUCKOO_STRATEGY,
            actual=name,
        )
    if n == 0 or n > CUCKOO_MAX_BUCKETS:
        raise _bad(f"num_buckets is {n}: expected 1 .. 2**53", source, "1 .. 2**53", n)
    if not CUCKOO_MIN_FP_BITS <= f <= CUCKOO_MAX_FP_BITS:
        raise _bad(f"fingerprint_bits is {f}: expected 4 .. 32", source, "4 .. 32", f)
    if b not in CUCKOO_BUCKET_SIZES:
        raise _bad(f"bucket_size is {b}: expected one of {CUCKOO_BUCKET_SIZES}", source, CUCKOO_BUCKET_SIZES, b)
    if kicks == 0 or kicks > CUCKOO_MAX_KICKS:
        raise _bad(f"max_kicks is {kicks}: expected 1 .. {CUCKOO_MAX_KICKS}", source, f"1 .. {CUCKOO_MAX_KICKS}", kicks)
    if items > n * b + 1 and items != MAX_ITEMS:
        raise _bad(f"items {items} exceeds the {n * b} slots and the victim", source, f"<= {n * b + 1}", items)
    if vfp >> f:
        raise _bad(f"victim fingerprint {vfp:#x} is wider than {f} bits", source, f"< 2**{f}", vfp)
    if vfp and vindex >= n:
        raise _bad(f"victim bucket index {vindex} >= num_buckets {n}", source, f"< {n}", vindex)
    if not vfp and vindex:
        raise _bad(f"victim bucket index {vindex} without a victim fingerprint", source, 0, vindex)
    fp_rate = 0.0
    if cap or fp_raw != bytes(4):
        if not cap or fp_raw == bytes(4):
            raise _bad(
                f"capacity {cap} and fp_rate bytes {fp_raw.hex()} must be both recorded or both 0",
                source,
                "both non-zero or both zero",
                (cap, fp_raw.hex()),
            )
        if cap > n * b and cap != CUCKOO_MAX_RECORDED_CAPACITY:
            raise _bad(f"recorded capacity {cap} exceeds the {n * b} slots", source, f"1 .. {n * b}", cap)
        value = struct.unpack("<f", fp_raw)[0]
        if not 0.0 < value < 1.0:  # NaN fails both
            raise _bad(f"recorded fp_rate {value!r} is not in (0, 1)", source, "(0, 1)", value)
        fp_rate = _shortest_f32(fp_raw)
    return CuckooHeader(n, f, b, kicks, items, vfp, vindex, cap, fp_rate)


def validate_cuckoo_image(read: Reader, size: int, *, source: str = "<bytes>") -> CuckooHeader:
    """Validate a CKF1 image from its header, its total length and its last byte (as
    :func:`validate_image` does for BLM1): reads two small pieces, whatever its size.

    Raises:
        As :func:`parse_cuckoo_header`; LengthMismatchError (truncated or over-long);
        PaddingError (a bit past the last slot is set).
    """
    header = parse_cuckoo_header(read(0, CUCKOO_HEADER_SIZE), source=source)
    check_length(header.total_size, size, source=source)
    last = read(size - 1, 1)
    if not last:
        check_length(header.total_size, size - 1, source=source)
    check_padding(last[0], header.num_slots, source=source, cell_bits=header.fingerprint_bits)
    return header
