"""What the directory kinds (scalable, expiring) share: building a directory under a
temporary name and publishing it by rename, the JSON manifest replaced atomically, the
16-byte lock file and its one word read with ``pread`` and stored with ``pwrite``, and the
access bits every new file copies so that several users sharing a directory keep access.

A directory kind is a set of BLM1 files plus two files this module writes:

* ``manifest.json``: a JSON object with ``format`` and ``version`` fields and the kind's
  own fields, replaced atomically (temporary file, fsync, rename, directory fsync): a
  reader sees the old or the new manifest, never a mix;
* ``lock``: 16 bytes, little-endian: a 4-byte magic of the kind, version u32, one word
  u32 (scalable: the committed layer count; expiring: the committed generation),
  reserved u32 (0). Every writer holds an exclusive ``flock`` on it (the directory-wide
  write lock, :class:`mmapbloom.locking.WriteLock`); every handle reads the word with one
  ``pread`` to see changes committed by other processes. The word is never read through
  a mapping: a lock file truncated by another program reads short and is reported as
  :class:`~mmapbloom.errors.ManifestError` instead of a SIGBUS.

The order of a change is always: new files complete (published atomically), then the
manifest, then the word (``pwrite`` + ``fsync``), the commit point. A process killed
before the word is stored leaves a directory whose committed state is the previous one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import struct
from typing import Any, Callable, Optional

from .keys import PathLike
from .errors import ManifestError
from .files import about_destination, absolute_path, atomic_file, fsync_directory, temporary_directory

__all__ = [
    "LOCK_NAME",
    "LOCK_SIZE",
    "MANIFEST_NAME",
    "WORD_OFFSET",
    "apply_shared_mode",
    "build_directory",
    "check_file_mode",
    "check_lock_image",
    "lock_image",
    "manifest_field",
    "publish_json",
    "read_json",
    "read_word",
    "shared_mode",
    "store_word",
    "strip_path",
]


MANIFEST_NAME = "manifest.json"
LOCK_NAME = "lock"
#: The lock file: magic, version, word, reserved (u32 little-endian).
LOCK = struct.Struct("<4sIII")
LOCK_SIZE = LOCK.size  # 16
WORD_OFFSET = 8
_WORD = struct.Struct("<I")

#: A manifest larger than this is refused before it is read.
MAX_MANIFEST_BYTES = 1 << 24


def strip_path(path: PathLike) -> str:
    """The absolute path without trailing slashes (``/`` stays ``/``)."""
    p = absolute_path(path)
    stripped = p.rstrip("/")
    return stripped or p


def check_file_mode(mode: Optional[int]) -> Optional[int]:
    """``mode`` checked as permission bits in [0, 0o777], or None. Raises TypeError."""
    if mode is None:
        return None
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
        raise TypeError(f"mode must be permission bits (an int in [0, 0o777]) or None, got {mode!r}")
    return mode


def build_directory(path: PathLike, fill: Callable[[str], None], file_mode: Optional[int]) -> str:
    """Create directory ``path`` whole: ``fill(tmp)`` writes every file into a new
    temporary directory ``.mmapbloom-<pid>-<random>.tmp`` next to ``path``, which is then
    given ``file_mode`` (plus ``x`` where ``r`` is set, keeping an inherited setgid bit),
    fsynced and renamed into place. Of several processes creating the same path one wins
    and the others get FileExistsError; a builder killed midway leaves the temporary,
    which the next build in the same parent removes once its pid is gone. Returns the
    stripped absolute path.

    Raises FileExistsError, NoSpaceError, OSError (naming ``path``, never the temporary),
    and whatever ``fill`` raises."""
    dest = strip_path(path)
    parent = os.path.dirname(dest) or "."
    if os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "file exists", dest)
    tmp = ""
    try:
        with temporary_directory(parent) as (tmp, _):
            try:
                fill(tmp)
                if file_mode is not None:  # keep a setgid bit inherited from a shared parent
                    inherited = stat.S_IMODE(os.stat(tmp).st_mode) & stat.S_ISGID
                    os.chmod(tmp, file_mode | ((file_mode & 0o444) >> 2) | inherited)
                fsync_directory(tmp)
                try:
                    os.rename(tmp, dest)
                except OSError as exc:
                    if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                        raise FileExistsError(errno.EEXIST, "file exists", dest) from None
                    raise
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    except OSError as exc:
        renamed = about_destination(exc, tmp or os.path.join(parent, ".mmapbloom-"), dest, what="directory")
        if renamed is exc:
            raise
        raise renamed from None
    fsync_directory(parent)
    return dest


# -- the manifest -----------------------------------------------------------------------------
def publish_json(directory: str, doc: dict[str, Any], *, mode: Optional[int] = None) -> None:
    """Replace ``directory/manifest.json`` with ``doc`` (ASCII JSON, indent 1) atomically:
    temporary file, fsync, rename, directory fsync.

    Args:
        mode: exact permission bits of the new manifest (``fchmod``, not masked by the
            umask); None leaves the umask's.

    Raises:
        NoSpaceError: the disk is full (the old manifest is unchanged).
        OSError: any other OS error.
    """
    data = (json.dumps(doc, indent=1) + "\n").encode("ascii")
    with atomic_file(os.path.join(directory, MANIFEST_NAME), replace=True) as fd:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def manifest_field(doc: dict[str, Any], name: str, kind: Any, source: str) -> Any:
    """``doc[name]``, which must exist and be of type ``kind`` (a bool is never a number).

    Raises ManifestError."""
    if name not in doc:
        raise ManifestError(f"manifest has no field {name!r}", source=source, expected=name, actual=sorted(doc))
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ManifestError(
            f"manifest field {name!r} has type {type(value).__name__}, expected {kind}",
            source=source,
            expected=kind,
            actual=value,
        )
    return value


def read_json(directory: str, format_name: str, version: int, what: str) -> dict[str, Any]:
    """Read ``directory/manifest.json``: a regular file of at most 16 MiB holding a JSON
    object whose ``format`` is ``format_name`` and ``version`` is ``version``. ``what``
    names the kind in the message for a missing manifest ("scalable filter").

    Raises ManifestError (also for a missing manifest)."""
    source = os.path.join(directory, MANIFEST_NAME)
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ManifestError(
            f"the manifest is missing (not a {what} directory, or damaged)",
            source=source,
            expected=MANIFEST_NAME,
            actual=None,
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(
                "the manifest is not a regular file",
                source=source,
                expected="regular file",
                actual=stat.filemode(st.st_mode),
            )
        if st.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(
                f"the manifest is {st.st_size} bytes, more than {MAX_MANIFEST_BYTES}",
                source=source,
                expected=MAX_MANIFEST_BYTES,
                actual=st.st_size,
            )
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(
            f"the manifest is not valid JSON ({exc})", source=source, expected="JSON object", actual=raw[:40]
        ) from None
    if not isinstance(doc, dict):
        raise ManifestError(
            "the manifest is not a JSON object", source=source, expected="object", actual=type(doc).__name__
        )
    fmt_name = manifest_field(doc, "format", str, source)
    if fmt_name != format_name:
        raise ManifestError(
            f"manifest format is {fmt_name!r}, expected {format_name!r}",
            source=source,
            expected=format_name,
            actual=fmt_name,
        )
    got = manifest_field(doc, "version", int, source)
    if got != version:
        raise ManifestError(
            f"manifest version is {got}, expected {version}", source=source, expected=version, actual=got
        )
    return doc


# -- the lock file ----------------------------------------------------------------------------
def lock_image(magic: bytes, version: int, word: int) -> bytes:
    """The lock file's 16 bytes."""
    return LOCK.pack(magic, version, word, 0)


def check_lock_image(
    head: bytes, size: int, source: str, *, magic: bytes, version: int, what: str, minimum: int
) -> int:
    """Validate the lock file's 16 bytes (``size`` is the file's length); return its word.
    ``what`` names the word in messages ("committed layer count").

    Raises ManifestError: wrong length, magic, version, reserved word, or a word below
    ``minimum``."""
    if size != LOCK_SIZE or len(head) != LOCK_SIZE:
        raise ManifestError(
            f"lock file is {size} bytes, expected {LOCK_SIZE}", source=source, expected=LOCK_SIZE, actual=size
        )
    got_magic, got_version, word, reserved = LOCK.unpack(head)
    if got_magic != magic:
        raise ManifestError(
            f"lock file magic is {got_magic!r}, expected {magic!r}", source=source, expected=magic, actual=got_magic
        )
    if got_version != version:
        raise ManifestError(
            f"lock file version is {got_version}, expected {version}",
            source=source,
            expected=version,
            actual=got_version,
        )
    if reserved != 0:
        raise ManifestError(
            f"lock file reserved word is {reserved}, expected 0", source=source, expected=0, actual=reserved
        )
    if word < minimum:
        raise ManifestError(
            f"{what} is {word}, expected at least {minimum}", source=source, expected=f">= {minimum}", actual=word
        )
    return int(word)


def read_word(fd: int, source: str, *, what: str, minimum: int) -> int:
    """The lock file's word: one ``pread`` of 4 bytes at offset 8.

    Raises:
        ManifestError: the lock file is shorter than 12 bytes (truncated under the handle)
            or holds a word below ``minimum``.
        OSError: from ``pread`` (EBADF once the handle is closed).
    """
    raw = os.pread(fd, 4, WORD_OFFSET)
    if len(raw) != 4:
        size = os.fstat(fd).st_size
        raise ManifestError(
            f"lock file is {size} bytes, expected {LOCK_SIZE} (truncated under the open handle)",
            source=source,
            expected=LOCK_SIZE,
            actual=size,
        )
    (word,) = _WORD.unpack(raw)
    if word < minimum:
        raise ManifestError(
            f"{what} is {word}, expected at least {minimum}", source=source, expected=f">= {minimum}", actual=word
        )
    return int(word)


def store_word(fd: int, word: int) -> None:
    """Commit: one 4-byte ``pwrite`` of the word, then ``fsync``. The caller holds the
    write lock.

    Raises OSError (ENOSPC cannot happen: the word exists)."""
    if os.pwrite(fd, _WORD.pack(word), WORD_OFFSET) != 4:  # pragma: no cover - a 4-byte write
        raise OSError(errno.EIO, "short write of the lock file's word")
    os.fsync(fd)


# -- sharing between users --------------------------------------------------------------------
def shared_mode(path: str) -> tuple[Optional[int], Optional[int]]:
    """The permission bits and group of ``path`` (a file every new file copies), or
    ``(None, None)`` if it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None, None
    return stat.S_IMODE(st.st_mode) & 0o777, st.st_gid


def apply_shared_mode(path: str, mode: Optional[int], gid: Optional[int]) -> None:
    """Give the new file ``path`` the bits ``mode`` and group ``gid`` (of
    :func:`shared_mode`), not the writing process's umask, so that another user sharing
    the directory can open it as the existing files. A group that is not ours is left
    (``chown`` refuses it); done before the change is committed, under the lock."""
    if mode is None:
        return
    os.chmod(path, mode)
    if gid is not None and gid != os.getegid():
        with contextlib.suppress(OSError):  # allowed only for a group of ours
            os.chown(path, -1, gid)
            os.chmod(path, mode)  # chown clears setgid bits on some systems
