"""Statistics over huge sparse filter files: read only the allocated extents, in bounded memory.

A filter created with ``sparse=True`` may be far larger than the data written to it: a
64 GiB file with 10^5 keys holds a few GiB of allocated blocks, the rest are holes. Counting
its set bits through the mapping touches every page of the file (and on tmpfs, reading a
hole through a shared mapping allocates it), so time and resident memory grow with the
file size. This module counts instead from the file descriptor:

* :func:`iter_data_extents` walks the data extents with ``lseek(SEEK_DATA)`` /
  ``lseek(SEEK_HOLE)`` (POSIX.1-2024; Linux >= 3.1 on ext4, XFS, Btrfs, tmpfs, ...). A
  hole reads as zeros, so it adds nothing to any count and is skipped. Where the file
  system or the platform has no ``SEEK_DATA`` (``EINVAL``, ``EOPNOTSUPP``, or no
  ``os.SEEK_DATA``), the whole range is reported as one data extent (a full read).
* :func:`count_set_bits` and :func:`count_cells` read those extents with ``os.preadv``
  into ONE reused buffer of :data:`BUFFER_BYTES` (extents are packed one after another,
  so thousands of 4 KiB extents cost one numpy call, not thousands) and count with numpy
  (``np.bitwise_count`` for bits; nibble or byte tests for counters). Memory is the buffer
  plus a few temporaries of its size, whatever the file size; nothing is mapped, so the
  process's resident memory does not grow with the file, and holes are never read.
* :func:`count_filter_cells` applies them to an open filter handle (the seam used by
  ``BloomFilter.count_ones`` and the counting filter's statistics).

Cost: two ``lseek`` calls per data extent (a few microseconds each on ext4) plus reading
the allocated bytes once (page cache or disk). Time and memory grow with the allocated
data and the number of extents, not with the file size.

Concurrency: these functions take no lock. A bit set by another thread or process while
the scan runs may or may not be counted (in particular when its page was a hole when the
walk passed it), so counts on a filter being written are estimates, as every statistic of
a live filter is; they never count a bit that was never set. Thread-safe and process-safe
(each call uses ``pread``, which has no shared file offset).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt
from ._lazy import numpy_loaded


__all__ = [
    "BUFFER_BYTES",
    "PROGRESS_MIN_BYTES",
    "Progress",
    "count_cells",
    "count_filter_cells",
    "count_nonzero_cells",
    "count_set_bits",
    "iter_data_extents",
]

#: Bytes read per step into the reused buffer (memory is about 4 times this for 4-bit
#: counters, 1.2 times for bits).
BUFFER_BYTES = 8 * 2**20
#: Up to this many bytes, while numpy is not imported, :func:`count_set_bits` counts with
#: ``int.bit_count`` (about 2.4 ms per MiB measured here) rather than import numpy (60-90 ms)
#: for ``numpy.bitwise_count`` (0.2 ms per MiB): ``mmapbloom info`` of a filter of a few
#: million keys then never imports numpy. Same count either way.
SMALL_SCAN_BYTES = 16 * 2**20

#: ``progress=True`` shows a bar only when more than this many bytes are allocated in the
#: scanned range (256 MiB: about a quarter of a second to several seconds of reading).
PROGRESS_MIN_BYTES = 256 * 2**20

#: What a ``progress`` argument may be: False/None (nothing), True (a tqdm bar on a
#: terminal for long scans), or a callable receiving the bytes read after each step.
Progress = Union[None, bool, Callable[[int], Any]]

# lseek errors meaning "this file system cannot tell data from holes": read everything.
_NO_SEEK_DATA = frozenset({errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)})


def iter_data_extents(fd: int, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, length)`` of the data extents of ``fd`` within ``[start, stop)``,
    in increasing order, non-overlapping, each with ``length > 0``.

    Bytes of ``[start, stop)`` not covered by a yielded extent are holes and read as
    zeros. The extents come from ``lseek(fd, off, SEEK_DATA)`` and ``lseek(fd, off,
    SEEK_HOLE)``, so their granularity is the file system's (a block or a page); a file
    system may report a hole as data (never the reverse), which only costs reading zeros.
    A region's first block (``st_blksize``, at most 64 KiB) is found with one ``SEEK_DATA``
    call and the rest with ``SEEK_HOLE`` only when the region is longer, so an isolated
    block (the common case in a huge sparse filter) costs one ``lseek``, not two; adjacent
    pieces are joined before they are yielded.

    Fallback: if ``os.SEEK_DATA`` does not exist, or the first ``lseek`` fails with
    ``EINVAL``/``EOPNOTSUPP`` (no support), the whole range is yielded as one extent. If a
    later ``lseek`` fails that way, the rest of the range is yielded as data. ``ENXIO``
    from ``SEEK_DATA`` means no data at or past the offset (the walk ends).

    The walk moves the descriptor's file offset (``lseek``); other users of ``fd`` must
    not rely on it (the package uses ``pread``/``mmap`` only).

    Args:
        fd: an open descriptor of a regular file.
        start, stop: byte range, ``0 <= start <= stop``; ``stop`` may exceed the file
            size (nothing is yielded past the end of the file).

    Raises:
        ValueError: ``start < 0`` or ``stop < start``.
        OSError: from ``lseek`` other than the cases above (EBADF for a closed fd ...).
    """
    if start < 0 or stop < start:
        raise ValueError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
    if start == stop:
        return
    seek_data = getattr(os, "SEEK_DATA", None)
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        yield start, stop - start
        return
    block = _block_size(fd)
    first = last = start  # the data region being collected: [first, last)
    off = start
    while off < stop:
        try:
            data = os.lseek(fd, off, seek_data)
            if data >= stop:
                break
            if data == off:  # the data continues at off (or the range starts in data): find its end
                end = os.lseek(fd, data, seek_hole)
            else:
                # A data region starts at ``data``; regions are whole blocks, so its first
                # block is data: take it without a SEEK_HOLE call. The next SEEK_DATA
                # returns its end if the region goes on, and then SEEK_HOLE finds the rest.
                # An isolated block (random bits in a huge sparse filter) costs one lseek.
                end = data + block - data % block
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or after off
                break
            if exc.errno not in _NO_SEEK_DATA:
                raise
            data, end = off, stop  # no SEEK_DATA here: the rest is data
        end = min(end, stop)
        if end <= data:  # pragma: no cover - a file system reporting nonsense: read the rest
            data, end = off, stop
        if data != last:
            if last > first:
                yield first, last - first
            first = data
        last = end
        off = end
    if last > first:
        yield first, last - first


def _block_size(fd: int) -> int:
    """Granularity assumed for data regions: ``st_blksize`` clamped to [512, 64 KiB] (a
    larger guess would only read some zeros; a smaller one costs more ``lseek`` calls)."""
    try:
        size = os.fstat(fd).st_blksize
    except (OSError, AttributeError):  # pragma: no cover
        size = 4096
    return min(max(int(size or 4096), 512), 65536)


def _allocated_estimate(fd: int, start: int, stop: int) -> int:
    """Upper bound of the bytes to read in ``[start, stop)``: the file's allocated bytes
    (``st_blocks * 512``, delayed allocations included on Linux), O(1)."""
    span = stop - start
    if getattr(os, "SEEK_DATA", None) is None:
        return span
    try:
        blocks = os.fstat(fd).st_blocks
    except (OSError, AttributeError):  # pragma: no cover
        return span
    return min(span, blocks * 512)


class _Reporter:
    """Turns a ``progress`` argument into a callable (or None) and closes any bar it made."""

    def __init__(self, progress: Progress, fd: int, start: int, stop: int, desc: str):
        self._bar: Any = None
        self.update: Optional[Callable[[int], Any]] = None
        if callable(progress) and not isinstance(progress, bool):
            self.update = progress
        elif progress:
            total = _allocated_estimate(fd, start, stop)
            if total > PROGRESS_MIN_BYTES and sys.stderr is not None and sys.stderr.isatty():
                from .units import progress_bar

                self._bar = progress_bar(total, desc, True)
                self.update = self._bar.update

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _scan(
    fd: int,
    start: int,
    stop: int,
    count: Callable[[npt.NDArray[np.uint8]], int],
    progress: Progress,
    desc: str,
    buffer_bytes: int,
) -> int:
    """Pack the data extents of ``[start, stop)`` into one reused buffer and sum
    ``count(filled part)`` over the buffer fills. ``count`` must return 0 for zero bytes
    (holes are skipped) and must not depend on where a byte sits in the file beyond its
    own value (extents are packed)."""
    if buffer_bytes < 1:
        raise ValueError(f"buffer_bytes must be positive, got {buffer_bytes}")
    buf: Any = bytearray(buffer_bytes) if count is _popcount_bytes else np.empty(buffer_bytes, dtype=np.uint8)
    view = memoryview(buf)
    reporter = _Reporter(progress, fd, start, stop, desc)
    total = 0
    fill = 0
    try:
        for off, length in iter_data_extents(fd, start, stop):
            eof = False
            while length and not eof:
                take = min(length, buffer_bytes - fill)
                got = _pread_into(fd, view[fill : fill + take], off)
                eof = got < take  # the file ends before stop: the rest reads as zeros
                fill += got
                off += got
                length -= got
                if fill == buffer_bytes:
                    total += count(buf)
                    if reporter.update is not None:
                        reporter.update(fill)
                    fill = 0
            if eof:
                break
        if fill:
            total += count(buf[:fill])
            if reporter.update is not None:
                reporter.update(fill)
    finally:
        reporter.close()
        view.release()
    return total


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Read ``len(view)`` bytes at ``offset`` (short only at end of file); return bytes read."""
    done = 0
    while done < len(view):
        if hasattr(os, "preadv"):
            got = os.preadv(fd, [view[done:]], offset + done)
        else:  # pragma: no cover - platforms without preadv: one copy more
            data = os.pread(fd, len(view) - done, offset + done)
            got = len(data)
            view[done : done + got] = data
        if got == 0:
            break
        done += got
    return done


def popcount_chunk(chunk: npt.NDArray[np.uint8]) -> int:
    """Number of set bits in a ``uint8`` array (``numpy.bitwise_count`` over 64-bit words
    where the length allows, then the tail bytes). Cost: O(len) at memory bandwidth; the
    caller bounds the chunk."""
    whole = chunk.shape[0] & ~7
    total = 0
    if whole:
        total += int(np.bitwise_count(chunk[:whole].view(np.uint64)).sum(dtype=np.uint64))
    if whole != chunk.shape[0]:
        total += int(np.bitwise_count(chunk[whole:]).sum(dtype=np.uint64))
    return total


def count_set_bits(
    fd: int, start: int, stop: int, progress: Progress = None, *, buffer_bytes: int = BUFFER_BYTES
) -> int:
    """Number of set bits in bytes ``[start, stop)`` of ``fd``, reading only data extents.

    Equal to the popcount of the whole range read byte by byte (holes are zeros). Memory:
    ``buffer_bytes`` plus an eighth of it; the file is not mapped.

    Args:
        fd: an open, readable descriptor of a regular file.
        start, stop: byte range (``0 <= start <= stop``); bytes past the end of the file
            count as zeros.
        progress: False/None for nothing; True for a tqdm bar on stderr when stderr is a
            terminal and more than :data:`PROGRESS_MIN_BYTES` are allocated in the file;
            or a callable called with the number of bytes read after each buffer fill.
        buffer_bytes: size of the reused read buffer (default :data:`BUFFER_BYTES`).

    Raises:
        ValueError: a bad range or buffer size.
        OSError: a read error (EIO ...) or a bad descriptor.
    """
    small = stop - start <= SMALL_SCAN_BYTES and not numpy_loaded()
    count = _popcount_bytes if small else popcount_chunk
    return _scan(fd, start, stop, count, progress, "count bits", buffer_bytes)


def _popcount_bytes(chunk: Any) -> int:
    """Number of set bits in a bytes-like ``chunk`` (``int.from_bytes(...).bit_count()``)."""
    return int.from_bytes(chunk, "little").bit_count()


def count_cells(
    fd: int,
    start: int,
    stop: int,
    cell_bits: int,
    test: Callable[[Any], Any],
    progress: Progress = None,
    *,
    buffer_bytes: int = BUFFER_BYTES,
) -> int:
    """Number of ``cell_bits``-wide counters in bytes ``[start, stop)`` whose value passes
    ``test``, reading only data extents.

    Cells are the BLC1 layout's: 8-bit cells are bytes; 4-bit cells are the low and the
    high nibble of each byte (the order does not matter to a count). ``test`` takes a
    ``uint8`` array of counter values and returns a boolean array of the same shape; it
    must be False for 0, since holes (and zero padding) are skipped or counted as zeros:
    ``ValueError`` otherwise.

    Args:
        fd, start, stop, progress, buffer_bytes: as :func:`count_set_bits`.
        cell_bits: 4 or 8.
        test: e.g. ``lambda v: v != 0`` or ``lambda v: v == 15``.

    Raises:
        ValueError: ``cell_bits`` not 4 or 8, ``test(0)`` true, a bad range.
        OSError: a read error or a bad descriptor.
    """
    if cell_bits not in (4, 8):
        raise ValueError(f"cell_bits must be 4 or 8, got {cell_bits!r}")
    if np.any(test(np.zeros(1, dtype=np.uint8))):
        raise ValueError("test must be False for a zero counter (holes are skipped)")

    if cell_bits == 8:

        def count(chunk: npt.NDArray[np.uint8]) -> int:
            return int(np.count_nonzero(test(chunk)))
    else:

        def count(chunk: npt.NDArray[np.uint8]) -> int:
            return int(np.count_nonzero(test(chunk & np.uint8(0x0F)))) + int(np.count_nonzero(test(chunk >> 4)))

    return _scan(fd, start, stop, count, progress, "count cells", buffer_bytes)


def count_nonzero_cells(
    fd: int, start: int, stop: int, cell_bits: int, progress: Progress = None, *, buffer_bytes: int = BUFFER_BYTES
) -> int:
    """Number of non-zero ``cell_bits``-wide counters (4 or 8) in ``[start, stop)``:
    :func:`count_cells` with ``test = v != 0``. Raises as :func:`count_cells`."""
    return count_cells(fd, start, stop, cell_bits, _nonzero, progress, buffer_bytes=buffer_bytes)


def _nonzero(values: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = values != 0
    return out


def count_filter_cells(
    storage: Any, cell_bits: int, progress: Progress = None, test: Optional[Callable[[Any], Any]] = None
) -> Optional[int]:
    """Count, from the file, the set bits (BLM1) or the counters passing ``test`` (BLC1;
    default: non-zero) of an open filter handle's storage; ``None`` if the storage is in
    memory (the caller then counts through its buffer).

    Reads through a duplicate of the handle's descriptor, so a ``close()`` of the handle
    by another thread during the scan cannot make it read another file; a handle closed
    before the duplicate was taken raises ``FilterClosedError``.

    Args:
        storage: the filter's :class:`~mmapbloom.storage.Storage` (a BloomFilter's or
            a CountingBloomFilter's, passed by the filter itself); only its interface is
            used (``duplicate_fd``, ``body_range``, ``check_size``).
        cell_bits: bits per cell: 1 (BLM1), 4 or 8 (BLC1).
        progress: as :func:`count_set_bits`.
        test: for counting filters, as :func:`count_cells`.

    Raises:
        FilterClosedError: the handle is closed. LengthMismatchError: the file was
        truncated under the handle (before or during the scan: its size is checked again
        after the reads). OSError: a read error.
    """
    mine = storage.duplicate_fd()
    if mine is None:
        return None
    try:
        start, stop = storage.body_range()
        if cell_bits == 1:
            found = count_set_bits(mine, start, stop, progress)
        else:
            found = count_cells(mine, start, stop, cell_bits, test or _nonzero, progress)
        # The reads count bytes past the end as zeros: a file truncated during the scan
        # raises LengthMismatchError here rather than giving a short count.
        storage.check_size()
        return found
    finally:
        os.close(mine)
