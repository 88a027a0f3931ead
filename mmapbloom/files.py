"""Files: creating a filter file or directory under a temporary name and publishing it
whole, the temporary names and their cleanup, and the checks of a destination's room
(free space) and backing (sparse files on tmpfs). The mapping itself is
:mod:`mmapbloom.storage`'s.

Files are created without ever exposing a partial file at the destination: the image is
built in a temporary file created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``) in the
destination's directory, space is reserved with ``posix_fallocate`` (unless ``sparse``),
it is fsynced, then published with ``link`` (never replaces an existing file) or
``replace`` (atomic rename over it), and the directory is fsynced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import warnings
from typing import Iterator, Optional, Union

from ._warn import user_stacklevel
from .errors import MmapBloomError, NoSpaceError, SparseFileWarning
from .units import format_bytes

__all__ = [
    "DEFAULT_FILE_MODE",
    "ALLOCATE_ON_READ",
    "about_destination",
    "absolute_path",
    "atomic_file",
    "check_backing",
    "check_space",
    "create_file",
    "file_system_type",
    "fsync_directory",
    "publish_file",
    "remove_stale_temporaries",
    "reserve_space",
    "temporary_directory",
    "temporary_path",
]

#: Files are created with this mode, masked by the process umask (like ``open()``).
DEFAULT_FILE_MODE = 0o666


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


#: File systems that allocate memory for a hole of a shared mapping even when it is only
#: read (so a sparse file larger than the free space dies with SIGBUS on reads too).
ALLOCATE_ON_READ = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"})


def file_system_type(fd: int) -> Optional[str]:
    """The type (``"ext4"``, ``"tmpfs"`` ...) of the file system holding ``fd``, from the
    mount whose device is the file's ``st_dev`` in ``/proc/self/mountinfo``; ``None`` where
    that is unknown (no ``/proc``). Cost: one read of the mount table."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    try:
        with open("/proc/self/mountinfo", "rb") as table:
            for raw in table:
                fields = raw.split()
                if len(fields) > 2 and fields[2].decode() == dev and b"-" in fields:
                    after = fields[fields.index(b"-") + 1 :]
                    if after:
                        return after[0].decode(errors="replace")
    except OSError:
        return None
    return None


def _free_bytes(fd: int) -> int:
    """Bytes free for an unprivileged process on ``fd``'s file system: ``f_bavail *
    f_frsize``. The blocks reserved for root (``f_bfree - f_bavail``, 5% of an ext4 disk by
    default) are never counted, even for root: a filter sized into them is one that the
    same job run as an ordinary user (or another process filling the disk) cannot write,
    and reporting them as free overstated the room (240.4 GB "free" where 78.7 GB were
    usable)."""
    vfs = os.fstatvfs(fd)
    return vfs.f_bavail * vfs.f_frsize


def check_backing(fd: int, path: str, size: int, *, readonly: bool) -> None:
    """Refuse to map a sparse file whose holes cannot be backed on a file system that
    allocates on read (:data:`ALLOCATE_ON_READ`, e.g. tmpfs): touching a hole through the
    mapping there allocates memory even for a read, and once the file system is full the
    process dies with SIGBUS. O(1) (one ``fstat``) for a fully allocated file.

    Raises:
        NoSpaceError: the unallocated part exceeds the free space and ``readonly`` is
            False (any write, and any read, may need a new page).
    Warns:
        SparseFileWarning: the same, read-only (a few queries touch few pages; statistics
            or a full scan may not fit).
    """
    st = os.fstat(fd)
    missing = size - st.st_blocks * 512
    if missing <= 0:
        return  # fully allocated: nothing to back (the common case, no mount table read)
    fstype = file_system_type(fd)
    if fstype not in ALLOCATE_ON_READ:
        return
    free = _free_bytes(fd)
    if missing <= free:
        return
    message = (
        f"{path}: sparse filter on {fstype}, which allocates memory for a hole even when it is "
        f"only read through the mapping: {missing:,} bytes of holes need backing but only {free:,} "
        f"bytes are free; using it would end in SIGBUS. Copy it to a disk file system or make room"
    )
    if readonly:
        warnings.warn(message, SparseFileWarning, stacklevel=user_stacklevel())
        return
    raise NoSpaceError(message, path=path, needed=missing, available=free)


def check_space(fd: int, path: str, size: int, *, sparse: bool) -> None:
    """Before allocating a new file of ``size`` bytes on ``fd``'s file system, refuse one
    that cannot fit, naming the user's path, the bytes needed and the bytes free (instead
    of a bare ``ENOSPC`` midway, or SIGBUS later).

    With ``sparse=False`` the whole size must fit. With ``sparse=True`` nothing is
    allocated now: on a disk file system a size beyond the free space only warns
    (a write into a hole once the disk is full kills the writer with SIGBUS); on a file
    system that allocates on read (tmpfs) it is refused, since reads allocate too.

    Raises:
        NoSpaceError: as described. Warns: SparseFileWarning.
    """
    free = _free_bytes(fd)
    if size <= free:
        return
    if not sparse:
        raise NoSpaceError(
            f"{path}: not enough space for a filter of {size:,} bytes ({format_bytes(size)}): "
            f"only {free:,} bytes ({format_bytes(free)}) are free on its file system",
            path=path,
            needed=size,
            available=free,
        )
    fstype = file_system_type(fd)
    if fstype in ALLOCATE_ON_READ:
        raise NoSpaceError(
            f"{path}: a sparse filter of {size:,} bytes does not fit on {fstype}, which allocates "
            f"memory for a hole even when it is only read through the mapping: only {free:,} bytes "
            "are free; using it would end in SIGBUS",
            path=path,
            needed=size,
            available=free,
        )
    warnings.warn(
        f"{path}: sparse filter of {size:,} bytes ({format_bytes(size)}) is larger than the {free:,} bytes "
        f"({format_bytes(free)}) free on its file system: a write into a hole once the disk is full kills "
        "the writer with SIGBUS",
        SparseFileWarning,
        stacklevel=user_stacklevel(),
    )


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
    # Short, so that any legal destination name works (NAME_MAX); the writer's pid makes a
    # leftover recognisable as stale once that process is gone (remove_stale_temporaries).
    # os.urandom is what secrets.token_hex reads (without importing hashlib and hmac).
    return os.path.join(directory, f".mmapbloom-{os.getpid()}-{os.urandom(8).hex()}.tmp")


def temporary_path(directory: str) -> str:
    """A fresh name ``.mmapbloom-<pid>-<random>.tmp`` in ``directory`` for a file built
    there and published under its real name when complete (:func:`publish_file`). The
    builder must hold an exclusive ``flock`` on it while it builds (a filter handle's
    ``write_lock()`` does), or :func:`remove_stale_temporaries` in another pid namespace
    could take it for a dead process's leftover."""
    return _temp_name(directory)


_STALE_TEMP = re.compile(r"\.mmapbloom-([0-9]{1,10})-[0-9a-f]{16}\.tmp\Z")


@contextlib.contextmanager
def temporary_directory(directory: str) -> Iterator[tuple[str, int]]:
    """A new empty directory ``.mmapbloom-<pid>-<random>.tmp`` in ``directory``, for
    building a tree that is published by renaming it (a scalable filter) or that is
    removed at the end (Dask shards). Yields ``(path, fd)``: the directory carries an
    exclusive ``flock`` on ``fd`` until the block ends, so :func:`remove_stale_temporaries`
    leaves it alone while its builder lives (even one in another pid namespace), and
    removes it, whole, once the builder is gone (SIGKILL, power loss). Stale temporaries
    of ``directory`` are removed first. The caller removes the directory itself on error
    (or renames it away); the descriptor is closed when the block ends.

    Raises OSError (from ``mkdir``: the parent is missing or not writable)."""
    remove_stale_temporaries(directory)
    path = _temp_name(directory)
    os.mkdir(path, 0o777)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except BaseException:
        os.rmdir(path)
        raise
    try:
        _try_flock(fd)
        yield path, fd
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (any owner) and is not a zombie (a killed process
    its parent has not reaped yet: it holds no lock and will never finish its file).
    Unknown counts as alive."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists but is someone else's, or cannot be asked: leave its file alone
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True
    return state != [b"Z"]


def remove_stale_temporaries(directory: str) -> list[str]:
    """Remove the temporary files (``.mmapbloom-<pid>-<random>.tmp``) that creates and
    merges killed with SIGKILL (or by power loss) left in ``directory``; return their paths.

    A temporary is removed only when all of these hold: its name carries a pid, no process
    with that pid exists, it is a regular file or a directory (never followed through a
    symlink; a directory of :func:`temporary_directory` is removed with its contents), and
    no one holds the ``flock`` every writer keeps on its temporary while it builds it (so a
    live writer in another pid namespace sharing the directory is never touched either).
    Temporaries of live processes, of other programs, and of older versions (no pid in the
    name) are left alone. Errors (permissions, races with another cleaner) are ignored.
    Cost: one directory listing, plus one open per candidate.
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory or "."))
    except OSError:
        return removed
    for entry in entries:
        match = _STALE_TEMP.match(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        path = os.path.join(directory, entry.name)
        try:
            fd = os.open(
                path,
                os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0),
            )
        except OSError:
            continue  # a symlink (ELOOP), gone already, or not ours to open
        try:
            st = os.fstat(fd)
            is_dir = stat.S_ISDIR(st.st_mode)
            if not (stat.S_ISREG(st.st_mode) or is_dir) or not _try_flock(fd):
                continue
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                if is_dir:
                    import shutil  # here, not at import: shutil pulls bz2 and lzma (issue 28 item 2)

                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
                removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _try_flock(fd: int) -> bool:
    """Take an exclusive flock without waiting; False if someone holds one."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock: rely on the pid alone
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unflock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return
    fcntl.flock(fd, fcntl.LOCK_UN)


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


def publish_file(tmp: str, dest: str, *, replace: bool) -> None:
    """Publish a complete file built at ``tmp`` (same directory) under ``dest``, then
    remove the name ``tmp`` and fsync the directory: ``link`` (an existing ``dest`` is
    never replaced: FileExistsError) or, with ``replace``, an atomic ``rename``. The caller
    has fsynced (or msynced) the file. Readers of ``dest`` see nothing or the whole file.

    Raises FileExistsError, OSError."""
    _publish(tmp, dest, replace=replace)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # after link(); rename already removed it
    fsync_directory(os.path.dirname(dest) or ".")


def about_destination(
    exc: OSError, tmp: str, dest: str, *, what: str = "file", needed: Optional[int] = None
) -> OSError:
    """An OS error met while building ``dest`` under its temporary name ``tmp`` (a file, or
    with ``what="directory"`` a directory tree: a scalable or expiring filter), reworded to
    name ``dest`` (the user's path), never the internal temporary. The one helper of every
    kind and tool that builds under a temporary name (:func:`atomic_file`,
    :func:`mmapbloom.directory.build_directory`, :mod:`mmapbloom.dask`'s shards).

    * ENOSPC (whatever file it names) becomes the package's
      :class:`~mmapbloom.errors.NoSpaceError`, the one wording of a full disk met while
      writing: ``"<dest>: No space left on device (while writing it; <n> bytes free)"``
      (``; no free inode`` when inodes ran out), with ``available`` the bytes free in
      ``dest``'s directory; given ``needed`` (bytes), ``"(while writing it; <needed> bytes
      (<n> MB) needed, <n> bytes free)"`` and the error's ``needed``.
    * A :class:`~mmapbloom.errors.NoSpaceError` already raised (by :func:`check_space`
      for a file inside the temporary) keeps its wording, with ``tmp`` replaced by
      ``dest``.
    * Another error naming the temporary (or a file inside it), or no file at all, is
      raised again naming ``dest``, with the parent directory in the message (missing,
      not a directory, or where the file or directory was being created).
    * Errors of the package, FileExistsError, and errors that name another file (a source,
      a shard) are returned unchanged.

    ``tmp`` may be a prefix (``<parent>/.mmapbloom-``) when the temporary's name is not
    known yet. Returns ``exc`` itself when nothing is reworded."""
    parent = os.path.dirname(dest) or "."
    if isinstance(exc, NoSpaceError):
        if tmp not in str(exc) and tmp not in str(exc.path or ""):
            return exc
        return NoSpaceError(
            str(exc).replace(tmp, dest),
            path=(exc.path or dest).replace(tmp, dest),
            needed=exc.needed,
            available=exc.available,
        )
    if isinstance(exc, (MmapBloomError, FileExistsError)) or exc.errno is None:
        return exc
    if exc.errno == errno.ENOSPC:  # full disk (or no inode) while writing: the package's error
        free: Optional[int] = None
        detail = ""
        try:
            vfs = os.statvfs(parent)
            free = vfs.f_bavail * vfs.f_frsize
            detail = "; no free inode" if vfs.f_files and not vfs.f_favail else f"; {free:,} bytes free"
        except OSError:  # pragma: no cover
            pass
        if needed is not None:
            detail = f"; {needed:,} bytes ({format_bytes(needed)}) needed{detail.replace(';', ',')}"
        return NoSpaceError(
            f"{dest}: {exc.strerror or 'No space left on device'} (while writing it{detail})",
            path=dest,
            needed=needed,
            available=free,
        )
    first, second = exc.filename, exc.filename2
    if first is None and second is None and tmp not in str(exc.strerror):
        return type(exc)(exc.errno, exc.strerror, dest)  # e.g. EIO from fsync: say which file
    if not (tmp in str(first) or tmp in str(exc.strerror)) or second not in (None, dest) and tmp not in str(second):
        return exc  # about another file (a source, a shard)
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, f"{exc.strerror} (directory {parent} does not exist)", dest)
    if exc.errno == errno.ENOTDIR:
        return NotADirectoryError(errno.ENOTDIR, f"{exc.strerror} ({parent} is not a directory)", dest)
    if exc.errno == errno.EISDIR and what == "file":
        return IsADirectoryError(errno.EISDIR, "is a directory; a filter path must name a file", dest)
    return type(exc)(exc.errno, f"{exc.strerror} (creating a {what} in {parent})", dest)


def create_file(
    path: Union[str, "os.PathLike[str]"],
    header: bytes,
    size: int,
    *,
    sparse: bool,
    replace: bool,
    mode: int = DEFAULT_FILE_MODE,
) -> tuple[int, str]:
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
        dest = absolute_path(path)
        check_space(fd, dest, size, sparse=sparse)
        try:
            reserve_space(fd, size, sparse=sparse)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise about_destination(exc, dest, dest, needed=size) from None
        os.pwrite(fd, header, 0)
    return fd, absolute_path(path)


@contextlib.contextmanager
def atomic_file(
    path: Union[str, os.PathLike[str]], *, replace: bool, mode: int = DEFAULT_FILE_MODE, keep_open: bool = False
) -> Iterator[int]:
    """Build a file under a temporary name and publish it at ``path`` only when complete.

    Yields a read-write descriptor of an empty temporary file created exclusively in the
    destination directory (so it never follows a pre-planted symlink, and the final
    rename/link stays on one file system). On normal exit the file is fsynced and
    published: with ``replace=False`` by ``os.link`` (raises ``FileExistsError`` and leaves
    the existing file alone if ``path`` exists), with ``replace=True`` by ``os.replace``
    (atomic). The directory is then fsynced. On any exception, or if the process dies,
    nothing appears at ``path``; the temporary file is removed (a SIGKILLed process can
    leave a ``.mmapbloom-<pid>-<random>.tmp`` file behind, never a torn file at ``path``;
    the next create or merge in that directory removes it once that pid is gone, see
    :func:`remove_stale_temporaries`). The temporary carries an exclusive ``flock`` while
    it is built.

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
    try:
        is_dir = stat.S_ISDIR(os.lstat(dest).st_mode)
    except OSError:
        is_dir = False  # missing (the common case), or reported by the OS below
    if is_dir:  # fail now, not after building the whole file
        raise IsADirectoryError(errno.EISDIR, "is a directory; a filter path must name a file", dest)
    if not replace and os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "file exists", dest)
    remove_stale_temporaries(directory)  # leftovers of writers killed with SIGKILL
    tmp = _temp_name(directory)
    try:
        fd = os.open(tmp, _CREATE_FLAGS, mode)
    except OSError as exc:
        raise about_destination(exc, tmp, dest) from None
    published = False
    try:
        _try_flock(fd)  # "a live writer builds this": remove_stale_temporaries leaves it alone
        try:
            yield fd
            os.fsync(fd)
            _unflock(fd)  # the published file must carry no lock (the creator keeps this fd)
            _publish(tmp, dest, replace=replace)
            fsync_directory(directory or ".")
        except OSError as exc:
            renamed = about_destination(exc, tmp, dest)
            if renamed is exc:
                raise
            raise renamed from None
        published = True
    finally:
        if not (published and keep_open):
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
