"""Storage: the bytes of a filter, in memory (``bytearray``) or in a memory-mapped file.

Both kinds expose the whole image, header included, as one writable buffer ``buf``
(an ``mmap.mmap`` or a ``bytearray``) so that the filter code is the same for both.

Files are created without ever exposing a partial file at the destination: the image is
built in a temporary file created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``) in the
destination's directory, space is reserved with ``posix_fallocate`` (unless ``sparse``),
it is fsynced, then published with ``link`` (never replaces an existing file) or
``replace`` (atomic rename over it), and the directory is fsynced.

Opening validates the header and the length from a 24-byte ``pread`` and ``fstat`` before
anything is mapped, so a short or damaged file is refused, never mapped past its end
(which would raise SIGBUS at the first touch). Opening costs O(1) whatever the size.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import stat
from typing import Callable, Iterator, Optional, Union

import numpy as np
import numpy.typing as npt

from .errors import FilterClosedError
from .locking import WriteLock

__all__ = [
    "DEFAULT_FILE_MODE",
    "absolute_path",
    "create_file",
    "reserve_space",
    "FileStorage",
    "MemoryStorage",
    "Storage",
    "atomic_file",
    "fsync_directory",
]

#: Files are created with this mode, masked by the process umask (like ``open()``).
DEFAULT_FILE_MODE = 0o666

Buffer = Union[mmap.mmap, bytearray]

_CLOSED = memoryview(b"")
_CLOSED.release()  # any use raises ValueError


class Storage:
    """Base class: a header+bits image in ``buf`` and the handle's write lock."""

    buf: Buffer
    readonly: bool
    path: Optional[str]
    lock: WriteLock
    header_size: int

    def view(self, offset: int = 0, count: int = -1) -> npt.NDArray[np.uint8]:
        """A numpy ``uint8`` view of ``count`` bytes from ``offset`` (zero-copy).

        Read-only when the storage is. The caller must drop the view before ``close()``.
        """
        return np.frombuffer(self.buf, dtype=np.uint8, count=count, offset=offset)

    def flush(self) -> None:
        """Write dirty pages to the file (``msync``); no-op in memory."""

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

    @classmethod
    def open(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        readonly: bool,
        header_size: int,
        validate: Callable[[bytes, int, str], int],
    ) -> "FileStorage":
        """Open and map ``path`` after validating its header and length.

        Args:
            path: the file.
            readonly: map read-only (``PROT_READ``); writes are refused by the filter.
            header_size: bytes of header passed to ``validate``.
            validate: ``validate(header_bytes, file_size, source) -> total_size``; raises a
                ``FormatError`` if the header or size is wrong. It is called before mapping.

        Raises:
            OSError: the file cannot be opened (FileNotFoundError, PermissionError,
                IsADirectoryError, ELOOP ...), or is not a regular file.
            FormatError: whatever ``validate`` raises.
        """
        apath = absolute_path(path)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0)
        # O_NONBLOCK: opening a FIFO must not hang; it has no effect on regular files.
        fd = os.open(apath, flags | getattr(os, "O_NONBLOCK", 0))
        return cls.from_fd(fd, apath, readonly=readonly, header_size=header_size, validate=validate)

    @classmethod
    def from_fd(cls, fd: int, path: str, *, readonly: bool, header_size: int,
                validate: Callable[[bytes, int, str], int]) -> "FileStorage":
        """Map an open descriptor (taking ownership of it: it is closed on error and by
        :meth:`close`) after the checks of :meth:`open`. ``path`` is for messages."""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a directory, not a filter file", path)
                raise OSError(errno.EINVAL, "not a regular file", path)
            head = os.pread(fd, header_size, 0)
            total = validate(head, st.st_size, path)
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            mm = mmap.mmap(fd, total, access=access)
        except BaseException:
            os.close(fd)
            raise
        self = cls.__new__(cls)
        self.fd = fd
        self.buf = mm
        self.readonly = readonly
        self.path = path
        self.header_size = header_size
        self.lock = WriteLock(fd, path)
        return self

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


def fsync_directory(path: str) -> None:
    """fsync a directory so that a rename or link in it survives power loss (POSIX)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def reserve_space(fd: int, size: int, *, sparse: bool) -> None:
    """Make the file ``size`` bytes long, all zero.

    With ``sparse=False`` the blocks are allocated now (``posix_fallocate``), so a full
    disk fails here with ``OSError(ENOSPC)`` rather than with SIGBUS at a later write
    through the mapping. With ``sparse=True`` only the length is set (``ftruncate``).
    """
    if sparse or size == 0 or not hasattr(os, "posix_fallocate"):
        os.ftruncate(fd, size)
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # pragma: no cover
            os.ftruncate(fd, size)
        else:
            raise


def absolute_path(path: Union[str, "os.PathLike[str]"]) -> str:
    """``path`` made absolute by prefixing the working directory, *without* normalising it:
    ``..`` and a trailing ``/`` are left for the OS to resolve, as ``open()`` would (a
    lexical ``os.path.abspath`` gets ``link/../f`` wrong when ``link`` is a symlink).
    The empty path stays empty (the OS then reports FileNotFoundError)."""
    p = os.fspath(path)
    if not p or os.path.isabs(p):
        return p
    return os.path.join(os.getcwd(), p)


def _temp_name(directory: str) -> str:
    # Short and fixed-length, so that any legal destination name works (NAME_MAX).
    return os.path.join(directory, f".mmapbloom-{secrets.token_hex(8)}.tmp")


_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _publish(tmp: str, dest: str, *, replace: bool) -> None:
    """Make the complete temporary file visible at ``dest``: ``os.replace`` (atomic) or
    ``os.link`` (never replaces: FileExistsError)."""
    if replace:
        os.replace(tmp, dest)
        return
    try:
        os.link(tmp, dest)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "file exists", dest) from None
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # File systems without hard links: fall back to a checked rename (a race with
        # another creator can then replace, but never tear, the file).
        if os.path.lexists(dest):  # pragma: no cover
            raise FileExistsError(errno.EEXIST, "file exists", dest) from None
        os.rename(tmp, dest)  # pragma: no cover


def create_file(path: Union[str, "os.PathLike[str]"], header: bytes, size: int, *, sparse: bool, replace: bool,
                mode: int = DEFAULT_FILE_MODE) -> tuple[int, str]:
    """Create a zero-filled file of ``size`` bytes starting with ``header``, atomically, and
    return ``(fd, absolute path)`` with ``fd`` open read-write on the published file.

    The creator keeps the descriptor it made, so it can write the file even when ``mode``
    leaves the owner no write permission, and never reopens a path that someone may have
    replaced meanwhile. Steps: a temporary file created exclusively in the destination's
    directory, space reserved (see :func:`reserve_space`), header written, fsync, publish
    (link, or replace when ``replace``), fsync of the directory. On any error nothing is
    left at ``path`` and the temporary file is removed.

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is False.
        OSError: ENOSPC and every other OS error.
    """
    with atomic_file(path, replace=replace, mode=mode, keep_open=True) as fd:
        reserve_space(fd, size, sparse=sparse)
        os.pwrite(fd, header, 0)
    return fd, absolute_path(path)


@contextlib.contextmanager
def atomic_file(path: Union[str, os.PathLike[str]], *, replace: bool, mode: int = DEFAULT_FILE_MODE,
                keep_open: bool = False) -> Iterator[int]:
    """Build a file under a temporary name and publish it at ``path`` only when complete.

    Yields a read-write descriptor of an empty temporary file created exclusively in the
    destination directory (so it never follows a pre-planted symlink, and the final
    rename/link stays on one file system). On normal exit the file is fsynced and
    published: with ``replace=False`` by ``os.link`` (raises ``FileExistsError`` and leaves
    the existing file alone if ``path`` exists), with ``replace=True`` by ``os.replace``
    (atomic). The directory is then fsynced. On any exception, or if the process dies,
    nothing appears at ``path``; the temporary file is removed (a SIGKILLed process can
    leave a ``.mmapbloom-*.tmp`` file behind, never a torn file at ``path``).

    Args:
        path: destination.
        replace: whether an existing file at ``path`` is atomically replaced.
        mode: permission bits for the new file, masked by the umask (default 0o666).
        keep_open: if True, the descriptor stays open after a successful publish and the
            caller owns it (it then refers to the published file); it is closed on error.
    """
    dest = absolute_path(path)
    directory, base = os.path.split(dest)
    if not base:
        raise IsADirectoryError(errno.EISDIR, "a filter path must name a file, not a directory", dest)
    if not replace and os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "file exists", dest)
    tmp = _temp_name(directory)
    fd = os.open(tmp, _CREATE_FLAGS, mode)
    published = False
    try:
        yield fd
        os.fsync(fd)
        _publish(tmp, dest, replace=replace)
        fsync_directory(directory or ".")
        published = True
    finally:
        if not (published and keep_open):
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
