"""mmapbloom.scans, the whole-range reads and writes of a filter's image, against numpy
references: every combine operation (copy, OR, AND, saturating 8-bit and 4-bit sums) on
sizes that are not multiples of 8 and in several chunks, equality, reads and chunks, and
the refusals (a range outside the image; a file truncated under the handle raises
LengthMismatchError before anything is touched). On both backends (the suite runs once per
backend)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, LengthMismatchError
from mmapbloom import scans
from mmapbloom.storage import FileStorage, MemoryStorage

RNG = np.random.default_rng(25)
SIZE = 1000 + 3  # not a multiple of 8


def image() -> bytes:
    return bytes(RNG.integers(0, 256, SIZE, dtype=np.uint8))


def reference(a: Any, b: Any, op: int) -> Any:
    if op == scans.OP_COPY:
        return b.copy()
    if op == scans.OP_OR:
        return a | b
    if op == scans.OP_AND:
        return a & b
    if op == scans.OP_ADD8:
        return np.minimum(a.astype(np.int32) + b, 255).astype(np.uint8)
    lo = np.minimum((a & 15).astype(np.int32) + (b & 15), 15)
    hi = np.minimum((a >> 4).astype(np.int32) + (b >> 4), 15)
    return (lo | (hi << 4)).astype(np.uint8)


OPS = {"copy": scans.OP_COPY, "or": scans.OP_OR, "and": scans.OP_AND, "add8": scans.OP_ADD8, "add4": scans.OP_ADD4}


@pytest.mark.parametrize("op", OPS.values(), ids=list(OPS))
@pytest.mark.parametrize("step", [1 << 24, 7, 64])
def test_combine_matches_numpy(op: int, step: int) -> None:
    a, b = image(), image()
    dst = MemoryStorage(a, 0)
    scans.combine(dst, 3, b, 5, SIZE - 8, op, step=step)
    want = np.frombuffer(a, dtype=np.uint8).copy()
    want[3 : SIZE - 5] = reference(want[3 : SIZE - 5], np.frombuffer(b, dtype=np.uint8)[5 : SIZE - 3], op)
    assert bytes(dst.buf) == want.tobytes()


@pytest.mark.parametrize("step", [1 << 24, 10])
def test_equal_finds_the_one_differing_byte(step: int) -> None:
    a = image()
    b = bytearray(a)
    x, y = MemoryStorage(a, 0), MemoryStorage(b, 0)
    assert scans.equal(x, 0, y, 0, SIZE, step=step)
    y.buf[SIZE - 2] ^= 1
    assert not scans.equal(x, 0, y, 0, SIZE, step=step)
    assert scans.equal(x, 0, y, 0, SIZE - 2, step=step)


def test_read_and_chunks_of_memory() -> None:
    a = image()
    s = MemoryStorage(a, 0)
    assert scans.read(s, 10, 20) == a[10:30]
    with pytest.raises(ValueError, match=f"range \\[{SIZE - 1}, {SIZE + 1}\\) is outside the image of {SIZE} bytes"):
        scans.read(s, SIZE - 1, 2)
    parts = [bytes(c) for c in scans.chunks(s, 4, SIZE, 100)]
    assert b"".join(parts) == a[4:] and [len(p) for p in parts[:-1]] == [100] * (len(parts) - 1)


def file_storage(tmp_path: Path) -> tuple[str, FileStorage]:
    path = str(tmp_path / "f.blm")
    with BloomFilter.create(path, BloomConfig(num_bits=8 * 65536, num_hashes=3)) as f:
        f.update([f"k{i}" for i in range(100)])
    return path, FileStorage.open(path, readonly=False, validate=BloomFilter._validate)  # the kind's validation hook


def test_scans_of_a_file_match_its_bytes(tmp_path: Path) -> None:
    path, s = file_storage(tmp_path)
    try:
        data = open(path, "rb").read()
        assert scans.read(s, 0, len(data)) == data
        assert b"".join(bytes(c) for c in scans.chunks(s, 24, len(data), 4096)) == data[24:]
        other = MemoryStorage(data, 24)
        assert scans.equal(s, 24, other, 24, len(data) - 24)
        ones = b"\xff" * (len(data) - 24)
        scans.combine(s, 24, ones, 0, len(ones), scans.OP_OR, step=8192)
        assert open(path, "rb").read()[24:] == ones
    finally:
        s.close()


def test_a_truncated_file_is_refused_before_any_touch(tmp_path: Path) -> None:
    path, s = file_storage(tmp_path)
    try:
        size = os.path.getsize(path)
        os.truncate(path, 4096)
        for call in (
            lambda: scans.read(s, 0, 16),
            lambda: next(iter(scans.chunks(s, 0, size, 4096))),
            lambda: scans.combine(s, 24, bytes(16), 0, 16, scans.OP_OR),
            lambda: scans.equal(s, 0, MemoryStorage(bytes(size), 24), 0, size),
        ):
            with pytest.raises(LengthMismatchError, match="truncated under the open handle") as info:
                call()
            assert info.value.expected == size and info.value.actual == 4096
        os.truncate(path, size)  # long again: the scans work
        assert len(scans.read(s, 0, size)) == size
    finally:
        s.close()
