"""The BLM1 format: golden header bytes and one test per kind of damage."""

from __future__ import annotations

import os
import struct
from typing import Callable
from pathlib import Path
import time

import pytest

from mmapbloom import format as fmt
from mmapbloom import (
    BadHeaderError,
    BadMagicError,
    BloomConfig,
    BloomFilter,
    FormatError,
    M3KM,
    LengthMismatchError,
    PaddingError,
    UnknownSchemeError,
    verify_file,
)
from mmapbloom.verify import open_any
from mmapbloom import CountingBloomFilter
from tests.cli_support import cli

# M3KM pinned: the golden bytes below were written by that strategy (still readable forever).
CFG = BloomConfig(num_bits=20, num_hashes=3, strategy=M3KM())


def test_golden_header_bytes() -> None:
    f = BloomFilter(CFG)
    f.add("x")
    data = f.to_bytes()
    assert data.hex() == "424c4d314d334b4d1400000000000000030000000100000000a800"
    assert data[:4] == b"BLM1" and data[4:8] == b"M3KM"
    assert struct.unpack("<QII", data[8:24]) == (20, 3, 1)
    assert len(data) == 24 + 3


def test_bit_layout() -> None:
    # bit i lives in byte 24 + (i >> 3) at mask 1 << (i & 7).
    f = BloomFilter(BloomConfig(num_bits=16, num_hashes=1))
    pos = f.strategy.positions(b"k", 1, 16)[0]
    f.add(b"k")
    data = f.to_bytes()
    assert data[24 + (pos >> 3)] == 1 << (pos & 7)
    assert sum(bin(b).count("1") for b in data[24:]) == 1


def test_file_equals_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "f.blm"
    with BloomFilter.create(path, CFG) as f:
        f.add("x")
        assert f.to_bytes() == path.read_bytes()
    assert os.path.getsize(path) == 27
    assert BloomFilter.from_bytes(path.read_bytes()).to_bytes() == path.read_bytes()


def good() -> bytearray:
    f = BloomFilter(CFG)
    f.update(["a", "b"])
    return bytearray(f.to_bytes())


def damaged() -> list[tuple[str, bytes, type]]:
    cases: list[tuple[str, bytes, type]] = []
    b = good()
    b[0:4] = b"XXXX"
    cases.append(("magic", bytes(b), BadMagicError))
    b = good()
    b[4:8] = b"ZZZZ"
    cases.append(("scheme", bytes(b), UnknownSchemeError))
    b = good()
    b[4:8] = b"\xff\xfe\x00\x01"
    cases.append(("scheme-nonascii", bytes(b), UnknownSchemeError))
    b = good()
    b[8:16] = bytes(8)
    cases.append(("m=0", bytes(b), BadHeaderError))
    b = good()
    b[16:20] = bytes(4)
    cases.append(("k=0", bytes(b), BadHeaderError))
    b = good()
    cases.append(("truncated", bytes(b[:-1]), LengthMismatchError))
    b = good()
    cases.append(("over-long", bytes(b) + b"\0", LengthMismatchError))
    b = good()
    cases.append(("short header", bytes(b[:10]), BadHeaderError))
    cases.append(("empty", b"", BadHeaderError))
    b = good()
    b[-1] |= 0x80
    cases.append(("padding", bytes(b), PaddingError))
    b = good()
    b[8:16] = struct.pack("<Q", 2**64 - 1)
    cases.append(("huge m", bytes(b), LengthMismatchError))
    return cases


@pytest.mark.parametrize("name, data, error", damaged(), ids=[c[0] for c in damaged()])
def test_damaged_bytes(name: str, data: bytes, error: type) -> None:
    with pytest.raises(error) as info:
        BloomFilter.from_bytes(data)
    assert isinstance(info.value, FormatError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("name, data, error", damaged(), ids=[c[0] for c in damaged()])
@pytest.mark.parametrize("readonly", [False, True])
def test_damaged_files(tmp_path, name: str, data: bytes, error: type, readonly: bool) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.blm"
    path.write_bytes(data)
    with pytest.raises(error) as info:
        BloomFilter.open(path, readonly=readonly)
    assert str(path) in str(info.value)
    with pytest.raises(error):
        verify_file(path)


def test_messages_show_expected_and_actual(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = good()
    with pytest.raises(LengthMismatchError, match=r"header says 27 bytes in all, got 26") as info:
        BloomFilter.from_bytes(bytes(b[:-1]))
    assert (info.value.expected, info.value.actual) == (27, 26)
    b[0:4] = b"NOPE"
    with pytest.raises(BadMagicError, match=r"expected b'BLM1' \(Bloom filter\), got b'NOPE'"):
        BloomFilter.from_bytes(bytes(b))


def test_not_a_regular_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IsADirectoryError):
        BloomFilter.open(tmp_path)
    with pytest.raises(IsADirectoryError):
        BloomFilter.open(tmp_path, readonly=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        BloomFilter.open(fifo, readonly=True)  # must not hang
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    with pytest.raises(OSError):
        BloomFilter.open(loop)
    with pytest.raises(FileNotFoundError):
        BloomFilter.open(tmp_path / "missing.blm")


def test_errors_pickle() -> None:
    import pickle

    try:
        BloomFilter.from_bytes(bytes(good()[:-1]))
    except LengthMismatchError as exc:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is LengthMismatchError
        assert str(again) == str(exc) and again.expected == 27 and again.actual == 26


def test_items_field_store_is_little_endian_golden() -> None:
    """store_items writes the field little-endian at bytes 20-23 on any host, load_items
    reads it back, and the byte swap used on big-endian hosts is its own inverse."""
    buf = bytearray(fmt.pack_header("M3KM", 20, 3, 0)) + bytearray(3)
    word = fmt.items_word(buf)
    fmt.store_items(word, 0x01020304)
    assert bytes(buf[20:24]) == b"\x04\x03\x02\x01" and bytes(buf[:20]) == fmt.pack_header("M3KM", 20, 3, 0)[:20]
    assert fmt.load_items(word) == 0x01020304
    fmt.store_items(word, fmt.MAX_ITEMS)
    assert bytes(buf[20:24]) == b"\xff\xff\xff\xff" and fmt.load_items(word) == fmt.MAX_ITEMS
    word.release()
    assert fmt._swap32(0x01020304) == 0x04030201 and fmt._swap32(fmt._swap32(0xA1B2C3D4)) == 0xA1B2C3D4


# -- the one image validator: format.validate_image -------------------------------------
class RecordingReader:
    """``read(offset, count)`` over bytes, recording what was asked."""

    def __init__(self, data: bytes):
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, offset: int, count: int) -> bytes:
        self.calls.append((offset, count))
        return self.data[offset : offset + count]


def test_validate_image_reads_only_the_header_and_the_last_byte() -> None:
    data = bytes(good())
    read = RecordingReader(data)
    header = fmt.validate_image(read, len(data), source="x")
    assert (header.num_bits, header.num_hashes, header.strategy.name, header.items_added) == (20, 3, "M3KM", 2)
    assert header.total_size == len(data)
    assert read.calls == [(0, fmt.HEADER_SIZE), (len(data) - 1, 1)]


@pytest.mark.parametrize("name, data, error", damaged(), ids=[c[0] for c in damaged()])
def test_validate_image_refuses_every_damage(name: str, data: bytes, error: type) -> None:
    read = RecordingReader(data)
    with pytest.raises(error) as info:
        fmt.validate_image(read, len(data), source="<here>")
    assert "<here>" in str(info.value)
    # Nothing proportional to m is read, and nothing past a wrong length.
    assert all(count <= fmt.HEADER_SIZE for _, count in read.calls) and len(read.calls) <= 2
    if error is LengthMismatchError:
        assert read.calls == [(0, fmt.HEADER_SIZE)]


def test_validate_image_a_short_last_read_is_a_truncation() -> None:
    data = bytes(good())
    with pytest.raises(LengthMismatchError, match="truncated"):  # shrank after fstat
        fmt.validate_image(lambda offset, count: data[offset : offset + count] if offset == 0 else b"", len(data))


@pytest.mark.parametrize("name, data, error", damaged(), ids=[c[0] for c in damaged()])
def test_every_reader_reports_damage_alike(tmp_path, name: str, data: bytes, error: type) -> None:  # type: ignore[no-untyped-def]
    """open, from_bytes and the shard merger validate through the one function: the same
    error type and the same message (the source aside) for every kind of damage."""
    from mmapbloom.merge import inspect_shards

    path = tmp_path / "bad.blm"
    path.write_bytes(data)
    messages = []
    for call in (lambda: BloomFilter.open(path), lambda: inspect_shards([path]), lambda: BloomFilter.from_bytes(data)):
        with pytest.raises(error) as info:
            call()
        messages.append(str(info.value).replace(str(path), "SOURCE").replace("<bytes>", "SOURCE"))
    assert messages[0] == messages[1] == messages[2]


@pytest.mark.parametrize("counting", [False, True])
def test_open_parses_the_header_once(tmp_path, monkeypatch, counting: bool) -> None:  # type: ignore[no-untyped-def]
    from mmapbloom import CountingBloomFilter

    kind = CountingBloomFilter if counting else BloomFilter
    path = tmp_path / "f.blm"
    kind.create(path, CFG).close()
    parsed: list[str] = []
    real = fmt.parse_header

    def counting_parse(data: bytes, **kw):  # type: ignore[no-untyped-def]
        parsed.append(kw.get("source", ""))
        return real(data, **kw)

    monkeypatch.setattr(fmt, "parse_header", counting_parse)
    with kind.open(path) as f:
        assert parsed == [str(path)]  # validated once, before mapping, and not parsed again
        f.check()  # an explicit re-validation of the open image
        assert len(parsed) == 2
    parsed.clear()
    with open_any(path) as g:  # the kind chosen by magic, still one open and one parse
        assert type(g) is kind and parsed == [str(path)]


# -- work proportional to a header field (moved from test_edge_cases.py) --
@pytest.mark.parametrize("kind", ["bloom", "counting"])
def test_forged_huge_k_is_refused_at_open(tmp_path: Path, kind: str) -> None:
    """A forged file with k = 2**32 - 1 made each add take 45 s under the write lock."""
    m = 2**20
    path = tmp_path / "k.blm"
    if kind == "bloom":
        path.write_bytes(struct.pack("<4s4sQII", b"BLM1", b"M3KM", m, 2**32 - 1, 0))
        os.truncate(path, 24 + m // 8)
        opener: Callable[..., object] = BloomFilter.open
    else:
        path.write_bytes(struct.pack("<4s4sQIIB7s", b"BLC1", b"M3KM", m, 2**32 - 1, 0, 4, bytes(7)))
        os.truncate(path, 32 + m // 2)
        opener = CountingBloomFilter.open
    t0 = time.perf_counter()
    with pytest.raises(BadHeaderError, match="num_hashes is 4294967295: expected at most 4096"):
        opener(path)
    assert time.perf_counter() - t0 < 1
    result = cli("info", str(path))
    assert result.returncode == 2 and b"at most 4096" in result.stderr
