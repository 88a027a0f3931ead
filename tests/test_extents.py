"""Statistics on sparse files: only allocated extents are read, counts equal a full read."""

from __future__ import annotations

import errno
import itertools
import os
import warnings
from typing import Any

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, FilterClosedError, SaturationWarning, get_strategy
from mmapbloom import extents
from mmapbloom.extents import count_cells, count_nonzero_cells, count_set_bits, iter_data_extents

MIB = 2**20
STRATEGY = get_strategy("M3KM")  # pinned: the tests compare with positions computed here


def _supports_holes(directory: Any) -> bool:
    """True when the file system of ``directory`` reports holes through SEEK_DATA."""
    if not hasattr(os, "SEEK_DATA"):
        return False
    path = os.path.join(str(directory), "probe.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        os.ftruncate(fd, 8 * MIB)
        os.pwrite(fd, b"\x01", 4 * MIB)
        found = list(iter_data_extents(fd, 0, 8 * MIB))
        return sum(length for _, length in found) < 8 * MIB
    finally:
        os.close(fd)
        os.unlink(path)


@pytest.fixture
def holes(tmp_path: Any) -> Any:
    if not _supports_holes(tmp_path):
        pytest.skip("the temporary directory's file system does not report holes (SEEK_DATA)")
    return tmp_path


class ReadCounter:
    """Wraps os.preadv to count the bytes the scan reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.bytes = 0
        self.calls = 0
        real = os.preadv

        def counting(fd: int, buffers: Any, offset: int, *rest: Any) -> int:
            got = real(fd, buffers, offset, *rest)
            self.bytes += got
            self.calls += 1
            return got

        monkeypatch.setattr(os, "preadv", counting)


def _sparse_file(path: str, size: int, writes: dict[int, bytes]) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.ftruncate(fd, size)
    for off, data in writes.items():
        os.pwrite(fd, data, off)
    return fd


def _full_popcount(fd: int, start: int, stop: int) -> int:
    data = np.frombuffer(os.pread(fd, stop - start, start), dtype=np.uint8)
    return int(np.bitwise_count(data).sum())


WRITES = {
    0: b"\xff\x01",
    3 * MIB + 5: b"\x80" * 100,
    17 * MIB - 1: b"\x0f",
    30 * MIB: b"\x01" * 3 * 65536,
    40 * MIB - 3: b"\x11\x22\x33",
}


def test_counts_equal_full_read_and_holes_are_skipped(holes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fd = _sparse_file(str(holes / "s.bin"), 40 * MIB, WRITES)
    try:
        found = list(iter_data_extents(fd, 0, 40 * MIB))
        assert found == sorted(found)
        assert all(length > 0 for _, length in found)
        data = sum(length for _, length in found)
        assert data <= 7 * 64 * 1024  # small extents (block granularity), not 40 MiB
        for off, written in WRITES.items():  # every written byte lies in a yielded extent
            assert any(a <= off < a + n for a, n in found)
            assert any(a <= off + len(written) - 1 < a + n for a, n in found)
        # A multi-block region comes back whole (its first block and the rest joined).
        assert any(a <= 30 * MIB and 30 * MIB + 3 * 65536 <= a + n for a, n in found)
        assert all(a + n < b for (a, n), (b, _) in itertools.pairwise(found))  # sorted, not even adjacent
        expected = _full_popcount(fd, 0, 40 * MIB)
        reads = ReadCounter(monkeypatch)
        assert count_set_bits(fd, 0, 40 * MIB) == expected
        assert reads.bytes == data  # exactly the data extents, nothing of the holes
        # Sub-ranges cut through extents and holes.
        for start, stop in [(1, 40 * MIB), (3 * MIB, 3 * MIB + 50), (3 * MIB + 60, 17 * MIB), (17 * MIB, 17 * MIB)]:
            assert count_set_bits(fd, start, stop) == _full_popcount(fd, start, stop)
        # Past the end of the file counts as zeros; a small buffer packs and splits extents.
        assert count_set_bits(fd, 0, 41 * MIB) == expected
        assert count_set_bits(fd, 0, 40 * MIB, buffer_bytes=7) == expected
    finally:
        os.close(fd)


def test_counters_nibbles_and_bytes(holes: Any) -> None:
    fd = _sparse_file(str(holes / "c.bin"), 9 * MIB, {10: b"\x10\x01\xff\x00", 8 * MIB: b"\xf0\x0f\x00\x07"})
    try:
        raw = np.frombuffer(os.pread(fd, 9 * MIB, 0), dtype=np.uint8)
        lo, hi = raw & 0x0F, raw >> 4
        assert count_nonzero_cells(fd, 0, 9 * MIB, 4) == int(np.count_nonzero(lo) + np.count_nonzero(hi)) == 7
        assert count_nonzero_cells(fd, 0, 9 * MIB, 8) == int(np.count_nonzero(raw)) == 6
        assert count_cells(fd, 0, 9 * MIB, 4, lambda v: v == 15) == 4
        with pytest.raises(ValueError, match="zero counter"):
            count_cells(fd, 0, 9 * MIB, 4, lambda v: v == 0)
        with pytest.raises(ValueError, match="cell_bits"):
            count_cells(fd, 0, 9 * MIB, 2, lambda v: v != 0)
        with pytest.raises(ValueError, match="start"):
            list(iter_data_extents(fd, 5, 4))
    finally:
        os.close(fd)


@pytest.mark.parametrize("err", [errno.EINVAL, errno.EOPNOTSUPP])
def test_falls_back_to_a_full_read_without_seek_data(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    fd = _sparse_file(str(tmp_path / "f.bin"), 20 * MIB, WRITES)
    try:
        expected = _full_popcount(fd, 0, 20 * MIB)
        real = os.lseek

        def no_seek_data(fd_: int, off: int, how: int) -> int:
            if how in (os.SEEK_DATA, os.SEEK_HOLE):
                raise OSError(err, os.strerror(err))
            return real(fd_, off, how)

        monkeypatch.setattr(os, "lseek", no_seek_data)
        assert list(iter_data_extents(fd, 100, 20 * MIB)) == [(100, 20 * MIB - 100)]
        reads = ReadCounter(monkeypatch)
        assert count_set_bits(fd, 0, 20 * MIB) == expected
        assert reads.bytes == 20 * MIB
        monkeypatch.delattr(os, "SEEK_DATA")  # a platform without SEEK_DATA at all
        assert list(iter_data_extents(fd, 0, 10)) == [(0, 10)]
        assert count_set_bits(fd, 0, 20 * MIB) == expected
    finally:
        os.close(fd)


def test_other_lseek_errors_propagate(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fd = _sparse_file(str(tmp_path / "e.bin"), MIB, {})
    try:

        def broken(*_: Any) -> int:
            raise OSError(errno.EIO, "I/O error")

        monkeypatch.setattr(os, "lseek", broken)
        with pytest.raises(OSError) as info:
            count_set_bits(fd, 0, MIB)
        assert info.value.errno == errno.EIO
    finally:
        os.close(fd)


def _keys(n: int, tag: str = "k") -> list[str]:
    return [f"https://{tag}{i}.example/{i * 7919}" for i in range(n)]


def test_bloom_statistics_match_in_memory_and_skip_holes(holes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = BloomConfig(num_bits=2**28, num_hashes=7, strategy=STRATEGY)  # 32 MiB of bits
    keys = _keys(100)
    mem = BloomFilter(cfg)
    mem.update(keys)
    with BloomFilter.create(str(holes / "b.blm"), cfg, sparse=True) as f:
        f.update(keys)  # through the mapping, not flushed: dirty pages must be counted too
        reads = ReadCounter(monkeypatch)
        assert f.count_ones() == mem.count_ones() > 650  # 700 bits, a few shared
        assert 0 < reads.bytes < 32 * MIB // 2  # at most 700 pages of 8192
        assert f.fill_ratio() == mem.fill_ratio()
        assert f.observed_fp_rate() == mem.observed_fp_rate()
        assert f.approx_items() == mem.approx_items()
        one_scan = reads.bytes // 4  # four scans so far, the same bytes each
        calls: list[int] = []
        assert f.count_ones(progress=calls.append) == mem.count_ones()
        assert calls and sum(calls) == one_scan
    with BloomFilter.open(str(holes / "b.blm"), readonly=True) as r:
        assert r.count_ones() == mem.count_ones()
    r.close()
    with pytest.raises(FilterClosedError):
        r.count_ones()


def test_progress_true_off_a_terminal_prints_nothing(holes: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = BloomConfig(num_bits=2**20, num_hashes=3, strategy=STRATEGY)
    with BloomFilter.create(str(holes / "p.blm"), cfg, sparse=True) as f:
        f.update(_keys(10))
        assert f.count_ones(progress=True) == f.count_ones(progress=False) > 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("bits", [4, 8])
def test_counting_statistics_match_in_memory(holes: Any, monkeypatch: pytest.MonkeyPatch, bits: int) -> None:
    cfg = BloomConfig(num_bits=2**25, num_hashes=5, strategy=STRATEGY)  # 16 or 32 MiB of counters
    keys = _keys(80)
    mem = CountingBloomFilter(cfg, counter_bits=bits)
    with CountingBloomFilter.create(str(holes / "c.blc"), cfg, sparse=True, counter_bits=bits) as f:
        for target in (mem, f):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SaturationWarning)  # the 4-bit case saturates
                target.update(keys)
                for _ in range(20):  # saturate one key's counters (4-bit: 15, 8-bit: not yet)
                    target.add(keys[0])
            target.remove(keys[1])
        reads = ReadCounter(monkeypatch)
        assert f.nonzero_counters() == mem.nonzero_counters() > 0
        assert reads.bytes < (2**25 * bits // 8) // 2
        assert f.count_ones() == mem.count_ones()
        assert f.saturated_counters() == mem.saturated_counters() == (5 if bits == 4 else 0)
        assert f.fill_ratio() == mem.fill_ratio()
        assert f.approx_items() == mem.approx_items()


def test_huge_sparse_filter_reads_only_its_data(holes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 GiB sparse filter: through the mapping this would read 64 GiB; from the
    extents it reads a few pages."""
    m = 2**39
    cfg = BloomConfig(num_bits=m, num_hashes=7, strategy=STRATEGY)
    keys = _keys(10, "huge")
    try:
        f = BloomFilter.create(str(holes / "huge.blm"), cfg, sparse=True)
    except OSError as exc:  # a file system with a smaller maximum file size
        pytest.skip(f"cannot create a 64 GiB sparse file here: {exc}")
    with f:
        f.update(keys)
        expected = len({p for key in keys for p in STRATEGY.positions(key.encode(), 7, m)})
        reads = ReadCounter(monkeypatch)
        assert f.count_ones() == expected
        assert reads.bytes <= 70 * 64 * 1024
        assert f.approx_items() == pytest.approx(10, abs=0.01)


def test_progress_true_on_a_terminal_shows_a_bar_for_long_scans(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    fd = _sparse_file(str(tmp_path / "t.bin"), 4 * MIB, {MIB: b"\x03" * 5000})
    try:
        term = Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        assert count_set_bits(fd, 0, 4 * MIB, progress=True) == 10000
        assert term.getvalue() == ""  # a short scan: no bar
        monkeypatch.setattr(extents, "PROGRESS_MIN_BYTES", 0)
        assert count_set_bits(fd, 0, 4 * MIB, progress=True) == 10000
        assert "count bits" in term.getvalue()
    finally:
        os.close(fd)


def test_small_scans_without_numpy_count_the_same(holes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """While numpy is not imported, a range of at most SMALL_SCAN_BYTES is counted with
    int.bit_count (no numpy import for ``mmapbloom info``); the counts are the same."""
    fd = _sparse_file(str(holes / "small.bin"), 40 * MIB, WRITES)
    used: list[int] = []
    real = extents._popcount_bytes

    def spy(chunk: Any) -> int:
        used.append(len(chunk))
        return real(chunk)

    monkeypatch.setattr(extents, "numpy_loaded", lambda: False)
    monkeypatch.setattr(extents, "_popcount_bytes", spy)
    try:
        for start, stop in [(0, 16 * MIB), (1, 3 * MIB + 77), (3 * MIB + 60, 17 * MIB), (17 * MIB, 17 * MIB)]:
            assert count_set_bits(fd, start, stop) == _full_popcount(fd, start, stop), (start, stop)
            assert count_set_bits(fd, start, stop, buffer_bytes=7) == _full_popcount(fd, start, stop)
        assert used  # the small path ran ...
        used.clear()
        assert count_set_bits(fd, 0, 40 * MIB) == _full_popcount(fd, 0, 40 * MIB)
        assert not used  # ... and a range past SMALL_SCAN_BYTES still takes numpy
    finally:
        os.close(fd)
