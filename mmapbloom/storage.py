"""Storage: the bytes of a filter, in memory (``bytearray``) or in a memory-mapped file.

Both kinds expose the whole image, header included, as one writable buffer ``buf``
(an ``mmap.mmap`` or a ``bytearray``) so that the filter code is the same for both.

Creating and publishing files, and the checks of their room and backing, are
:mod:`mmapbloom.files`'.

Opening validates the header, the length and the padding (a ``pread`` of the header and
of the last byte, and ``fstat``; :func:`mmapbloom.format.validate_image`) before
anything is mapped, so a short or damaged file is refused, never mapped past its end
(which would raise SIGBUS at the first touch). Opening costs O(1) whatever the size.

SIGBUS, the other ways. A page of a mapping that the file system cannot supply kills the
process with SIGBUS at the first touch. Two causes are guarded against here:

* The file is truncated by another program under an open handle. :meth:`FileStorage.check_size`
  compares the file's real size (``fstat``) with the mapping; the filters call it before
  every scan of the mapping (``check``, ``to_bytes``/``copy``, statistics, batch calls)
  and raise ``LengthMismatchError`` instead. The per-item calls (``add``, ``in``,
  ``remove``, ``count``) stay O(k) without a system call on the native backend: its
  handle runs every touch of the mapping (batch loops included) under a SIGBUS guard
  (``mmapbloom/_kernels.c``) and raises ``LengthMismatchError`` through this check when
  a touch faults; the pure handle calls this check before each per-item call and batch
  chunk. The scans of the whole cell array (union, intersection, the counting sum,
  ``to_bloom``, block statistics, ``to_bytes``, ``==``, ``check``, ``merge_into``) go
  through :mod:`mmapbloom.scans`: on the native backend they run in guarded C sections
  too, so a truncation *during* the scan raises ``LengthMismatchError``; ``count_ones``
  and the counter statistics of a file read with ``pread`` and check the size after.
  What remains on the pure backend (Python cannot catch SIGBUS): a truncation that lands
  between a check and the touch it precedes (inside one per-item call, one batch chunk,
  or one 16 MiB scan chunk) still kills the process with SIGBUS. On both backends, the
  items word read by ``items_added`` (after its check) is one 4-byte load outside any
  guard, a window of a few instructions. Truncating a mapped filter file is not
  supported; it is reported wherever the race allows.
* Holes that cannot be backed. tmpfs (and ramfs, hugetlbfs) allocate memory for a hole
  even when it is only *read* through a shared mapping, so a sparse file larger than the
  free space dies on reads too. :func:`~mmapbloom.files.check_backing` (found by the file's ``st_dev`` in
  ``/proc/self/mountinfo``, read only for sparse files) refuses to map such a file
  read-write (:class:`~mmapbloom.errors.NoSpaceError`) and warns for a read-only one
  (:class:`~mmapbloom.errors.SparseFileWarning`: a few queries touch few pages).
  :func:`~mmapbloom.files.check_space` refuses a new file that does not fit before allocating anything.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import TYPE_CHECKING, Callable, Optional, Union

from .errors import FilterClosedError, LengthMismatchError
from .files import absolute_path, check_backing
from .format import Header, Reader
from .locking import WriteLock

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

#: ``validate(read, file_size, source) -> Header``: see :meth:`FileStorage.open`.
Validator = Callable[[Reader, int, str], Header]

__all__ = [
    "FileStorage",
    "MemoryStorage",
    "Storage",
]

Buffer = Union[mmap.mmap, bytearray]

_CLOSED = memoryview(b"")
_CLOSED.release()  # any use raises ValueError


class Storage:
    """Base class: a header+bits image in ``buf`` and the handle's write lock.

    The package's whole-file tools (merge, extents) reach a filter's bytes through these
    methods: :attr:`fd`, :meth:`duplicate_fd`, :meth:`check_size`, :meth:`body_range` and
    :meth:`body`; the filter's items counter is its own (:func:`mmapbloom.base.add_items`)."""

    buf: Buffer
    readonly: bool
    path: Optional[str]
    lock: WriteLock
    header_size: int
    #: The mapped file's descriptor, or None in memory. Valid only while open: a reader
    #: racing a close() in another thread uses :meth:`duplicate_fd`.
    fd: Optional[int] = None

    def check_open(self) -> None:
        """Raise FilterClosedError once closed."""
        if self.closed:
            raise FilterClosedError(f"{self.path or '<memory>'}: filter is closed")

    def body_range(self) -> tuple[int, int]:
        """``(start, stop)``: the cells are bytes ``[start, stop)`` of the image (and of
        the file). FilterClosedError once closed."""
        buf = self.buf
        self.check_open()
        return self.header_size, len(buf)

    def body(self) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of the cells (no copy; read-only when the storage is),
        after :meth:`check_size` (a truncated file raises LengthMismatchError, not SIGBUS
        when the view is scanned). FilterClosedError once closed."""
        start, stop = self.body_range()
        self.check_size()
        try:
            return self.view(start, stop - start)
        except ValueError:  # closed by another thread since the check
            self.check_open()
            raise

    def duplicate_fd(self) -> Optional[int]:
        """A duplicate (``os.dup``) of the file's descriptor, which the caller closes, or
        None in memory. A ``close()`` by another thread cannot make reads through it reach
        another file: the storage is found open after the duplicate was taken (``close``
        marks it closed before closing its descriptor).

        Raises:
            FilterClosedError, LengthMismatchError (the file was truncated), OSError.
        """
        self.check_open()
        fd = self.fd
        if fd is None:
            return None
        self.check_size()
        try:
            mine = os.dup(fd)
        except OSError:
            self.check_open()  # closed meanwhile: FilterClosedError
            raise
        try:
            self.check_open()
        except BaseException:
            os.close(mine)
            raise
        return mine

    def view(self, offset: int = 0, count: int = -1) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of ``count`` bytes from ``offset`` (zero-copy).

        Read-only when the storage is. The caller must drop the view before ``close()``.
        """
        return np.frombuffer(self.buf, dtype=np.uint8, count=count, offset=offset)

    def flush(self) -> None:
        """Write dirty pages to the file (``msync``); no-op in memory."""

    def check_size(self) -> None:
        """Raise if the file behind the mapping was truncated (no-op in memory); see
        :meth:`FileStorage.check_size`."""

    def close(self, before_unmap: Optional[Callable[[], None]] = None) -> None:
        """Mark the storage closed (``closed`` is True from here on), call
        ``before_unmap`` (the owner drops its buffer views), then release the buffer.
        Idempotent."""
        self.buf = _CLOSED  # type: ignore[assignment]
        self.lock.close()  # writers still waiting for the lock get FilterClosedError
        if before_unmap is not None:
            before_unmap()

    @property
    def closed(self) -> bool:
        return self.buf is _CLOSED  # type: ignore[comparison-overlap]


class MemoryStorage(Storage):
    """An image held in a ``bytearray``; thread-safe writes through a thread lock only."""

    def __init__(self, image: Union[bytes, bytearray, memoryview], header_size: int):
        self.buf = bytearray(image)
        self.readonly = False
        self.path = None
        self.header_size = header_size
        self.lock = WriteLock(None)


class FileStorage(Storage):
    """A memory-mapped filter file (``MAP_SHARED``): writes are visible to every process
    that maps the file as soon as they are made, and survive the writer being killed.

    Use :meth:`open` to construct.
    """

    fd: int
    #: The header as validated when the file was opened (its items field is stale at once;
    #: the shape fields never change).
    header: Header

    @classmethod
    def open(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        readonly: bool,
        validate: "Validator",
    ) -> "FileStorage":
        """Open and map ``path`` after validating its header, length and padding.

        Args:
            path: the file.
            readonly: map read-only (``PROT_READ``); writes are refused by the filter.
            validate: ``validate(read, file_size, source) -> Header``, normally
                :func:`mmapbloom.format.validate_image` for the filter's kind; ``read(offset,
                count)`` is ``os.pread`` on the descriptor. It raises a ``FormatError`` if
                the image is wrong, and is called before anything is mapped; the header it
                returns is kept as :attr:`header` (so the caller does not parse it again;
                its ``header_size`` becomes :attr:`header_size`) and its ``total_size``
                bytes are mapped.

        Raises:
            OSError: the file cannot be opened (FileNotFoundError, PermissionError,
                IsADirectoryError, ELOOP ...), or is not a regular file.
            FormatError: whatever ``validate`` raises.
        """
        apath = absolute_path(path)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0)
        # O_NONBLOCK: opening a FIFO must not hang; it has no effect on regular files.
        fd = os.open(apath, flags | getattr(os, "O_NONBLOCK", 0))
        return cls.from_fd(fd, apath, readonly=readonly, validate=validate)

    @classmethod
    def from_fd(cls, fd: int, path: str, *, readonly: bool, validate: "Validator") -> "FileStorage":
        """Map an open descriptor (taking ownership of it: it is closed on error and by
        :meth:`close`) after the checks of :meth:`open`. ``path`` is for messages."""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory, not a filter file", path)
                raise OSError(errno.EINVAL, "not a regular file", path)
            header = validate(lambda offset, count: os.pread(fd, count, offset), st.st_size, path)
            total = header.total_size
            check_backing(fd, path, total, readonly=readonly)
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            try:
                mm = mmap.mmap(fd, total, access=access)
            except OSError as exc:
                if exc.filename is not None or exc.errno is None:
                    raise
                raise type(exc)(exc.errno, f"{exc.strerror} (mapping {total:,} bytes)", path) from None
        except BaseException:
            os.close(fd)
            raise
        self = cls.__new__(cls)
        self.fd = fd
        self.buf = mm
        self.readonly = readonly
        self.path = path
        self.header_size = header.header_size
        self.header = header
        self.lock = WriteLock(fd, path)
        return self

    def check_size(self) -> None:
        """Compare the file's real size (``fstat``) with the mapping, so that a file
        truncated by another program is reported instead of killing the process with
        SIGBUS when the scan reaches the missing pages. One system call.

        Raises:
            LengthMismatchError: the file is now shorter than the mapping (``expected``
                the mapped size, ``actual`` the file's size).
            FilterClosedError: the storage is closed.
        """
        buf = self.buf
        if self.closed:
            raise FilterClosedError(f"{self.path}: filter is closed")
        try:
            size = os.fstat(self.fd).st_size
            mapped = len(buf)
        except (OSError, ValueError):  # closed by another thread meanwhile
            if self.closed:
                raise FilterClosedError(f"{self.path}: filter is closed") from None
            raise
        if size < mapped:
            if self.closed:  # closed meanwhile, and the descriptor number reused
                raise FilterClosedError(f"{self.path}: filter is closed")
            raise LengthMismatchError(
                f"truncated under the open handle: {mapped} bytes are mapped but the file now has {size} "
                "(another program truncated it; reading the missing pages would raise SIGBUS)",
                source=self.path or "",
                expected=mapped,
                actual=size,
            )

    def flush(self) -> None:
        if self.closed:
            raise FilterClosedError(f"{self.path}: filter is closed")
        if not self.readonly:
            assert isinstance(self.buf, mmap.mmap)
            self.buf.flush()  # msync(MS_SYNC)

    def close(self, before_unmap: Optional[Callable[[], None]] = None) -> None:
        if self.closed:
            return
        mm = self.buf
        Storage.close(self, before_unmap)
        try:
            assert isinstance(mm, mmap.mmap)
            mm.close()
        except BufferError:
            # Another thread still holds a numpy view (a batch query in flight). The
            # mapping stays valid for it and is unmapped when the last view is dropped and
            # the mmap object is collected; this handle is closed either way.
            pass
        finally:
            self.lock.close()
            os.close(self.fd)
