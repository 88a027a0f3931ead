"""The exception and warning hierarchy of mmapbloom.

Every exception raised on purpose by the package derives from :class:`MmapBloomError`
and also from the matching built-in, so callers may catch either::

    MmapBloomError
    ├── ConfigError(ValueError)              bad sizing input (n, p, m, k)
    ├── KeyEncodingError(UnicodeEncodeError) a str key with a lone surrogate (a ValueError)
    ├── FormatError(ValueError)              a file or byte string is not a sound filter
    │   ├── BadMagicError                    the first four bytes are not the expected magic
    │   ├── UnknownStrategyError             the hash-strategy name is not registered
    │   ├── BadHeaderError                   m = 0, k = 0 or another impossible header field
    │   ├── LengthMismatchError              truncated or over-long body
    │   ├── PaddingError                     a padding bit past m is set
    │   ├── ManifestError                    a scalable filter's manifest or lock file is damaged
    │   ├── MissingLayerError                a committed layer file of a scalable filter is missing
    │   └── LayerMismatchError               a layer file's shape differs from the manifest
    ├── IncompatibleFiltersError(ValueError) union/intersection/merge of different m, k or strategy
    ├── MergeError(ValueError)               a merge request that cannot be carried out as asked
    ├── ConfigMismatchError(ValueError)      open_or_create found a file with another m, k or strategy
    ├── FilterClosedError(ValueError)        use of a filter after close()
    ├── ReadOnlyFilterError(PermissionError) a write on a filter opened read-only
    ├── NoSpaceError(OSError)                errno ENOSPC: a filter that cannot fit (path, needed, available)
    ├── FilterFullError(RuntimeError)        a cuckoo filter found no slot for a new fingerprint
    ├── LockTimeout(TimeoutError)            write_lock(timeout=...) expired before the lock was free
    └── SelfDeadlockError(RuntimeError)      a write through a second handle while this thread
                                             holds the same file's lock through another

Warnings: ``OverCapacityWarning``, ``SaturationWarning`` and ``SparseFileWarning``
(all ``UserWarning``).

Operating-system errors (``FileNotFoundError``, ``IsADirectoryError``, ``OSError`` with
``ENOSPC`` ...) are raised unchanged, as the built-in ``OSError`` subclasses.

All exceptions carry the values they report as attributes and pickle, so they cross
process boundaries (``multiprocessing``) intact.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Optional

__all__ = [
    "BadHeaderError",
    "BadMagicError",
    "ConfigError",
    "ConfigMismatchError",
    "FilterClosedError",
    "FilterFullError",
    "FormatError",
    "IncompatibleFiltersError",
    "KeyEncodingError",
    "LayerMismatchError",
    "LengthMismatchError",
    "LockTimeout",
    "ManifestError",
    "MergeError",
    "MissingLayerError",
    "MmapBloomError",
    "NoSpaceError",
    "OverCapacityWarning",
    "PaddingError",
    "ReadOnlyFilterError",
    "SaturationWarning",
    "SelfDeadlockError",
    "SparseFileWarning",
    "UnknownSchemeError",
    "UnknownStrategyError",
]


class MmapBloomError(Exception):
    """Root of every exception mmapbloom raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword-free positional arguments; keep their attributes on
        # unpickling by restoring ``__dict__`` after ``Exception.__init__(*args)``.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[MmapBloomError], args: tuple[Any, ...], state: dict[str, Any]) -> MmapBloomError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class ConfigError(MmapBloomError, ValueError):
    """A sizing input (capacity, false-positive rate, num_bits, num_hashes) is out of range."""


class KeyEncodingError(MmapBloomError, UnicodeEncodeError):
    """A ``str`` key holds a lone surrogate (U+D800..U+DFFF unpaired, as ``os.fsdecode``
    and ``surrogateescape`` decoding make for undecodable bytes). The key-encoding rule is
    strict UTF-8 for ``str`` keys, so such a key has no bytes and is refused on every path
    (``add``, ``in``, ``discard``, ``remove``, ``count``, batches, the CLI never makes one)
    and both backends, before anything is changed. Pass the bytes you mean instead, for
    example ``os.fsencode(key)`` or ``key.encode("utf-8", "surrogateescape")``.

    A ``UnicodeEncodeError`` (so a ``ValueError``), as ``str.encode`` raises.

    Attributes:
        object: the key; start, end: the index range of the first offending code points;
        encoding: ``"utf-8"``; reason: ``"surrogates not allowed"``.
    """

    def __init__(self, key: str, start: int, end: int):
        UnicodeEncodeError.__init__(self, "utf-8", key, start, end, "surrogates not allowed")

    def __str__(self) -> str:
        point = ord(self.object[self.start]) if 0 <= self.start < len(self.object) else 0
        return (
            f"str key {self.object!r} has a lone surrogate U+{point:04X} at index {self.start}: "
            "str keys are encoded as strict UTF-8, which has no bytes for it; pass bytes instead "
            "(e.g. os.fsencode(key) or key.encode('utf-8', 'surrogateescape'))"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.object, self.start, self.end))


class FormatError(MmapBloomError, ValueError):
    """A file or byte string is not a sound mmapbloom filter.

    Attributes:
        source: the path (``str``) or ``"<bytes>"`` the data came from.
        expected: what the format requires (any printable value).
        actual: what was found.
    """

    def __init__(self, message: str, *, source: str = "<bytes>", expected: Any = None, actual: Any = None):
        super().__init__(f"{source}: {message}")
        self.source = source
        self.expected = expected
        self.actual = actual


class BadMagicError(FormatError):
    """The first four bytes are not the magic of the expected kind of filter."""


class UnknownStrategyError(FormatError):
    """The header names a hash strategy that is not registered in this process."""


#: The former name of :class:`UnknownStrategyError` (kept so existing code keeps working).
UnknownSchemeError = UnknownStrategyError


class BadHeaderError(FormatError):
    """A header field is impossible: m = 0, k = 0, a header shorter than 24 bytes (32 for
    BLC1), or (BLC1) a counter width other than 4 or 8 or non-zero reserved bytes."""


class LengthMismatchError(FormatError):
    """The image is shorter or longer than the header says (``24 + ceil(m / 8)`` bytes for
    BLM1, ``32 + ceil(m * width / 8)`` for BLC1)."""


class PaddingError(FormatError):
    """A padding bit past num_bits in the last byte is set; the bit array is damaged."""


class ManifestError(FormatError):
    """A scalable filter directory's ``manifest.json`` or ``lock`` file is damaged:
    unreadable JSON, a missing or ill-typed field, layer shapes that do not follow the
    growth rule, fewer layers listed than committed, or a lock file with the wrong size,
    magic, version or layer count (see docs/SCALABLE.md). ``source`` is the file's path;
    ``expected`` and ``actual`` the values compared."""


class MissingLayerError(FormatError):
    """A layer file that the scalable filter's committed layer count covers is missing
    (``source`` is the missing path; ``expected`` the committed layer count, ``actual`` the
    index of the missing layer)."""


class LayerMismatchError(FormatError):
    """A layer file of a scalable filter is a sound BLM1 file but its num_bits, num_hashes
    or strategy differ from the manifest (``source`` is the layer's path), or it was replaced
    by another file since the handle opened it."""


class IncompatibleFiltersError(MmapBloomError, ValueError):
    """Two filters differ in num_bits, num_hashes or hash strategy and cannot be combined
    (raised by :meth:`mmapbloom.BloomConfig.check_compatible`, the one check).

    Attributes:
        field: ``"num_bits"``, ``"num_hashes"``, ``"strategy"`` or ``"counter_bits"``.
        left, right: the two differing values.
    """

    def __init__(self, field: str, left: Any, right: Any, *, where: str = ""):
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}incompatible filters: {field} differs ({left!r} != {right!r})")
        self.field = field
        self.left = left
        self.right = right


class MergeError(MmapBloomError, ValueError):
    """A merge (:mod:`mmapbloom.merge`) that cannot be carried out as asked: no shards, a
    shard named twice, the ``--into`` target among the shards, an in-place intersection,
    or a shard replaced or resized while it was being read. Raised before anything is
    published (see :func:`mmapbloom.merge.merge_into` for what an in-place merge that stops
    midway leaves behind).

    Attributes:
        path: the file concerned, or ``None``.
    """

    def __init__(self, message: str, *, path: Any = None):
        super().__init__(message)
        self.path = path


class ConfigMismatchError(MmapBloomError, ValueError):
    """``open_or_create`` found an existing file whose m, k or strategy differ from the config.

    Attributes:
        path: the file.
        field: ``"num_bits"``, ``"num_hashes"``, ``"strategy"`` or ``"counter_bits"``.
        expected: the value in the requested config.
        actual: the value in the file.
    """

    def __init__(self, path: str, field: str, expected: Any, actual: Any):
        super().__init__(f"{path}: existing filter has {field} {actual!r}, expected {expected!r}")
        self.path = path
        self.field = field
        self.expected = expected
        self.actual = actual


class FilterClosedError(MmapBloomError, ValueError):
    """The filter was used after ``close()``."""


class ReadOnlyFilterError(MmapBloomError, PermissionError):
    """A write (add, update, union, ...) on a filter opened with ``readonly=True``."""


class NoSpaceError(MmapBloomError, OSError):
    """A filter file cannot be backed by the free space of its file system (``errno`` is
    ``ENOSPC``): a new file that does not fit, or a sparse file on a file system that
    allocates memory for a hole even when it is read through the mapping (tmpfs), whose
    unallocated part exceeds the free space, where using it would end in SIGBUS.
    Raised before anything is published or mapped.

    Attributes:
        path: the file (also ``filename``).
        needed: bytes that would have to be allocated.
        available: bytes free for this user (``statvfs`` ``f_bavail * f_frsize``).
    """

    errno = _errno.ENOSPC

    def __init__(
        self, message: str, *, path: Optional[str] = None, needed: Optional[int] = None, available: Optional[int] = None
    ):
        super().__init__(message)
        self.path = path
        self.needed = needed
        self.available = available

    @property
    def filename(self) -> Optional[str]:
        return self.path

    @property
    def strerror(self) -> str:  # type: ignore[override]
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.strerror


class FilterFullError(MmapBloomError, RuntimeError):
    """A :class:`~mmapbloom.cuckoo.CuckooFilter` insert found no slot for a new
    fingerprint: both of the key's buckets are full, and either the victim slot is taken
    or a kick path of at most ``max_kicks`` moves found no empty slot. Nothing was changed
    by the failed insert (every key present before it is still found). Raised by a batch,
    it carries ``committed_items`` (how many leading keys were committed).

    Attributes:
        path: the filter file, or ``None`` in memory.
        items: the filter's item count when it was raised.
    """

    def __init__(self, message: str, *, path: Any = None, items: Any = None):
        super().__init__(message)
        self.path = path
        self.items = items


class LockTimeout(MmapBloomError, TimeoutError):
    """``write_lock(timeout=...)`` could not take the write lock within ``timeout`` seconds
    (another process, another handle, or another thread of this handle held it all along).
    Nothing is held when it is raised.

    Attributes:
        path: the filter file, or ``None`` for an in-memory filter.
        timeout: the timeout asked for, in seconds.
    """

    def __init__(self, message: str, *, path: Any = None, timeout: Any = None):
        super().__init__(message)
        self.path = path
        self.timeout = timeout


class SelfDeadlockError(MmapBloomError, RuntimeError):
    """A write (or ``write_lock()``) through one handle while the calling thread holds the
    write lock of the same file through *another* handle of this process. The file lock
    (``flock``) excludes the second handle too, so waiting would never end; this is raised
    at once instead, and nothing is changed. Write through the handle whose lock is held,
    or leave its ``with`` block first. (Snapshot reads such as ``copy``, ``to_bytes``,
    ``|`` and ``to_bloom`` never raise this: the held lock already excludes every writer.)

    Attributes:
        path: the filter file.
    """

    def __init__(self, message: str, *, path: Any = None):
        super().__init__(message)
        self.path = path


class OverCapacityWarning(UserWarning):
    """A filter is past its design point: its expected fill ratio exceeds 0.6.

    Emitted once per handle by ``add``/``update``; the false-positive rate grows quickly
    from here on. Size a new filter with more capacity and merge, or start a new one.
    """


class SparseFileWarning(UserWarning):
    """A sparse filter file whose holes may not all be backed by free space: ``create``
    with ``sparse=True`` beyond the free space (a write into a hole of a full disk kills
    the writer with SIGBUS), or a read-only open of a sparse file on a file system that
    allocates memory for a hole when it is read through the mapping (tmpfs)."""


class SaturationWarning(UserWarning):
    """A counter of a counting filter reached its maximum and will never be decremented."""
