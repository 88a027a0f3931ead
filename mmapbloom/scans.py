"""Whole-range reads and writes of a filter's image that a truncated file cannot crash.

A page of a shared mapping past the end of its file (another program truncated the file
under the open handle) raises SIGBUS when touched, which kills the process. The handle's
per-item and batch calls are guarded in C (``_kernels.c``, "the SIGBUS guard"); this module
does the same for the scans over the whole cell array that run outside the handle: block
histograms (``observed_fp_rate``, ``approx_items`` of blocked strategies), ``union`` and
``intersection``, the counting sum, ``to_bloom``, ``to_bytes`` (``copy``, pickling),
``__eq__``, ``check``'s reads and ``merge_into``'s writes. (``count_ones``, ``fill_ratio``
and the counting filter's counter statistics of a file read it with ``pread``, see
:mod:`mmapbloom.extents`: a short file gives a short read there, never a fault.)

* Native backend: the bytes move in the compiled module's guarded sections
  (``_kernels.scan``: copy, OR, AND, saturating 8-bit or 4-bit sums; ``_kernels.scan_bytes``:
  a new ``bytes``), with the GIL released. A truncation before or *during* the scan makes
  the call raise :class:`~mmapbloom.errors.LengthMismatchError` (``expected`` the mapped
  size, ``actual`` the file's size), never SIGBUS. numpy works on the private copies
  (:func:`chunks`: one reused buffer of at most ``step`` bytes).
* Pure-Python backend (``MMAPBLOOM_PURE=1``, or no compiler): Python cannot catch SIGBUS.
  The file's size is checked (``fstat``) before each chunk of at most ``step`` bytes
  (16 MiB in the filters), so a file truncated before the scan, or between two chunks,
  raises LengthMismatchError; a truncation that lands *inside* a chunk, between the check
  and numpy's touch of the missing pages, still kills the process with SIGBUS. That race
  is not closed on this backend.
* In memory (``MemoryStorage``: a ``bytearray`` that never shrinks) nothing can fault: the
  data is used in place, with no copy and no check.

Thread safety: the functions take no lock (the callers hold the write lock where they
write); they read or write the buffers as they are at that moment.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator, NoReturn, Optional


from .errors import LengthMismatchError, NoSpaceError
from .kernels import native_module
from .storage import Storage

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = [
    "CACHE_STEP",
    "OP_ADD4",
    "OP_ADD8",
    "OP_AND",
    "OP_COPY",
    "OP_OR",
    "chunks",
    "combine",
    "equal",
    "raise_faulted",
    "read",
]

#: Operations of :func:`combine` (the compiled ``scan``'s op codes; 5 compares).
OP_COPY, OP_OR, OP_AND, OP_ADD8, OP_ADD4 = range(5)
_OP_EQ = 5

#: A :func:`chunks` step for numpy work that reads each copy once (block statistics): 1 MiB
#: copies stay in the CPU's cache between the copy and numpy's read, where 16 MiB ones go
#: to memory twice (measured: a 100 MiB blocked ``observed_fp_rate`` costs about 1.15x the
#: unguarded numpy scan at 1 MiB, 1.3x at 16 MiB; see tools/bench_scans.py).
CACHE_STEP = 1 << 20

_native = native_module()


def raise_faulted(storage: Storage, *others: Storage) -> NoReturn:
    """Raise the error of a touch of ``storage``'s mapping (or of one of ``others``, the
    other buffers of the same scan) that faulted: LengthMismatchError from
    :meth:`~mmapbloom.storage.Storage.check_size` (the file is shorter than the mapping:
    "truncated under the open handle", ``expected`` the mapped size, ``actual`` the file's
    size) or FilterClosedError; if every file is long enough again (re-extended since the
    fault), NoSpaceError when the file system has less than a page free (a write into a
    hole of a sparse file on a full disk), else a LengthMismatchError saying that the touch
    faulted, with both sizes."""
    for each in (*others, storage):
        each.check_size()
    # Long enough again (or no check saw it): name the first file now shorter than its
    # mapping, else ``storage``.
    shorter = (each for each in (storage, *others) if each.fd is not None and os.fstat(each.fd).st_size < len(each.buf))
    storage = next(shorter, storage)
    mapped = len(storage.buf)
    size = os.fstat(storage.fd).st_size if storage.fd is not None else mapped
    if storage.fd is not None and size >= mapped:
        st = os.fstatvfs(storage.fd)
        available = st.f_bavail * st.f_frsize
        if available < (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096):
            raise NoSpaceError(
                f"{storage.path}: a touch of the mapping faulted (SIGBUS) though the file has all its "
                f"{mapped} bytes: a hole of this sparse file could not be allocated, and its file "
                f"system has {available} bytes free (the cells of this call may be partly set; "
                "free space, or create the filter without sparse=True to reserve it)",
                path=storage.path,
                needed=os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096,
                available=available,
            )
    raise LengthMismatchError(
        f"truncated under the open handle: a touch of the mapping faulted (SIGBUS); {mapped} bytes "
        f"are mapped and the file now has {size}",
        source=storage.path or "<memory>",
        expected=mapped,
        actual=size,
    )


def read(storage: Storage, offset: int, count: int) -> bytes:
    """``bytes`` of the image's ``[offset, offset + count)`` (a copy, O(count)).

    Raises:
        LengthMismatchError: the file was truncated under the handle (before or, on the
            native backend, during the copy). FilterClosedError. ValueError: the range is
            outside the image.
    """
    storage.check_size()
    buf = storage.buf
    if _native is None or storage.fd is None:
        if offset < 0 or count < 0 or offset + count > len(buf):
            raise ValueError(f"range [{offset}, {offset + count}) is outside the image of {len(buf)} bytes")
        return bytes(buf[offset : offset + count])
    out: Optional[bytes] = _native.scan_bytes(buf, offset, count)
    if out is None:
        raise_faulted(storage)
    return out


def chunks(storage: Storage, start: int, stop: int, step: int) -> Iterator[npt.NDArray[np.uint8]]:
    """The image's ``[start, stop)`` as successive ``uint8`` arrays of ``step`` bytes (the
    last one shorter), for read-only numpy work.

    A file-backed image on the native backend yields copies in ONE reused buffer (each is
    valid until the next one is taken); otherwise read-only views of the buffer (see the
    module docstring for the pure backend's per-chunk size check and its remaining race).

    Raises:
        LengthMismatchError: the file was truncated under the handle (native: before or
            during the scan; pure: before a chunk). FilterClosedError.
    """
    storage.check_size()
    buf = storage.buf
    if _native is None or storage.fd is None:
        view = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
        for s in range(0, stop - start, step):
            if s:
                storage.check_size()  # pure backend: the size again before each chunk
            yield view[s : s + step]
        return
    scratch = np.empty(min(step, stop - start), dtype=np.uint8)
    for s in range(start, stop, step):
        n = min(step, stop - s)
        if not _native.scan(scratch, 0, buf, s, n, OP_COPY):
            raise_faulted(storage)
        yield scratch[:n]


def _numpy_op(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8], op: int) -> None:
    """``a op= b`` in numpy (the pure backend's twin of the compiled ``scan``)."""
    if op == OP_COPY:
        a[:] = b
    elif op in (OP_OR, OP_AND):
        fn = np.bitwise_or if op == OP_OR else np.bitwise_and
        whole = a.size & ~7
        if whole:
            fn(a[:whole].view(np.uint64), b[:whole].view(np.uint64), out=a[:whole].view(np.uint64))
        if whole != a.size:
            fn(a[whole:], b[whole:], out=a[whole:])
    elif op == OP_ADD8:
        a[:] = np.minimum(a.astype(np.uint16) + b, 255).astype(np.uint8)
    else:  # OP_ADD4: two saturating 4-bit counters per byte
        lo = np.minimum((a & 0x0F) + (b & 0x0F), 15)
        hi = np.minimum((a >> 4) + (b >> 4), 15)
        a[:] = lo | (hi << 4)


def combine(
    dst: Storage,
    dst_offset: int,
    src: Any,
    src_offset: int,
    count: int,
    op: int,
    *,
    src_storage: Optional[Storage] = None,
    step: int = 1 << 24,
) -> None:
    """``dst``'s image ``[dst_offset, dst_offset + count)`` op= ``src[src_offset:][:count]``,
    ``op`` one of :data:`OP_COPY`, :data:`OP_OR`, :data:`OP_AND`, :data:`OP_ADD8` (bytes,
    saturating at 255), :data:`OP_ADD4` (two 4-bit counters per byte, saturating at 15).
    ``src`` is a C-contiguous byte buffer: another filter's image (then ``src_storage`` is
    its storage, checked as ``dst``) or private memory. The caller holds ``dst``'s write
    lock. Native: one guarded pass with the GIL released; pure: numpy in chunks of
    ``step`` bytes, the sizes checked before each.

    Raises:
        LengthMismatchError: a file was truncated under its handle (``dst`` may then be
            partly combined, as a write cut off by a crash). FilterClosedError.
    """
    storages = (dst,) if src_storage is None else (dst, src_storage)
    for each in storages:
        each.check_size()
    if _native is not None:
        if not _native.scan(dst.buf, dst_offset, src, src_offset, count, op):
            raise_faulted(dst, *storages[1:])
        return
    mine = np.frombuffer(dst.buf, dtype=np.uint8, count=count, offset=dst_offset)
    theirs = np.frombuffer(src, dtype=np.uint8, count=count, offset=src_offset)
    for s in range(0, count, step):
        if s:
            for each in storages:
                each.check_size()  # pure backend: the sizes again before each chunk
        _numpy_op(mine[s : s + step], theirs[s : s + step], op)


def equal(a: Storage, a_offset: int, b: Storage, b_offset: int, count: int, *, step: int = 1 << 24) -> bool:
    """True when ``a``'s image ``[a_offset, a_offset + count)`` equals ``b``'s from
    ``b_offset`` (O(count), no copy). Native, file-backed: one guarded ``memcmp`` with the
    GIL released; otherwise numpy in chunks of ``step`` bytes, the sizes checked before each.

    Raises:
        LengthMismatchError: a file was truncated under its handle. FilterClosedError.
    """
    a.check_size()
    b.check_size()
    if _native is not None and (a.fd is not None or b.fd is not None):
        same = _native.scan(a.buf, a_offset, b.buf, b_offset, count, _OP_EQ)
        if same is None:
            raise_faulted(a, b)
        return bool(same)
    mine = np.frombuffer(a.buf, dtype=np.uint8, count=count, offset=a_offset)
    theirs = np.frombuffer(b.buf, dtype=np.uint8, count=count, offset=b_offset)
    for s in range(0, count, step):
        if s:
            a.check_size()  # pure backend: the sizes again before each chunk
            b.check_size()
        if not np.array_equal(mine[s : s + step], theirs[s : s + step]):
            return False
    return True
