"""Opening filter files: a mapped, validated :class:`~mmapbloom.storage.FileStorage`
adopted by a filter kind, and the race of many processes on a new path.

A file is opened, validated (header, length, padding: the kind's validator, normally
:func:`mmapbloom.format.validate_image`) and its header parsed once, before anything is
mapped (:meth:`FileStorage.open`). The kind then adopts the storage: the header's shape
becomes the filter's :class:`~mmapbloom.config.BloomConfig`, after it is compared with a
requested config and options when there are some (``open_or_create``). On any error the
storage is closed, so a refused file leaves no descriptor or mapping behind.

The filter kinds live above this module: a kind is any class with the class-level
hooks of :class:`Openable` (``MappedFilter`` and its subclasses), and this module
imports none of them.
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Optional, Protocol, Sequence, TypeVar

from .config import BloomConfig
from .errors import ConfigMismatchError
from .format import Header, Reader
from .storage import FileStorage, Storage
from .keys import PathLike

__all__ = ["Openable", "adopt", "open_any", "open_file", "open_or_create"]

#: A filter kind's instances (``BloomFilter``, ``CountingBloomFilter``).
T = TypeVar("T", bound="Openable")


class Openable(Protocol):
    """What opening needs of a filter kind (``MappedFilter`` and its subclasses), all of
    it on the class: its magic, its image validator, its check of kind-specific options,
    and its constructor from a storage."""

    _magic: ClassVar[bytes]

    @classmethod
    def _validate(cls, read: Reader, size: int, source: str) -> Header: ...

    @classmethod
    def _check_options(cls, header: Header, options: dict[str, Any], source: str) -> None: ...

    @classmethod
    def _from_storage(cls: type[T], storage: Storage, config: BloomConfig, header: Header) -> T: ...


def open_file(
    kind: type[T],
    path: PathLike,
    *,
    readonly: bool,
    config: Optional[BloomConfig] = None,
    options: Optional[dict[str, Any]] = None,
) -> T:
    """Open ``path`` as a filter of ``kind``: one open, one validation and one parse of
    the header before mapping, then :func:`adopt`. O(1) whatever the file's size.

    Raises:
        OSError: from the OS (FileNotFoundError, PermissionError, IsADirectoryError; a
            FIFO or device is refused: only regular files are opened).
        FormatError: the file is not a sound filter of ``kind``.
        ConfigMismatchError, TypeError: as :func:`adopt`, when ``config`` is given.
    """
    storage = FileStorage.open(path, readonly=readonly, validate=kind._validate)
    return adopt(kind, storage, config, options)


def open_any(path: PathLike, readonly: bool, kinds: Sequence[type[T]]) -> T:
    """Open a file of one of ``kinds``, chosen by its magic, with one open, one
    validation and one parse of the header (``verify.open_any``). An unknown magic is
    refused by the first kind (its ``BadMagicError``).

    Raises as :func:`open_file` (without ``config``)."""
    by_magic = {kind._magic: kind for kind in kinds}
    chosen: list[type[T]] = []

    def validate(read: Reader, size: int, source: str) -> Header:
        kind = by_magic.get(read(0, 4), kinds[0])
        chosen.append(kind)
        return kind._validate(read, size, source)

    storage = FileStorage.open(path, readonly=readonly, validate=validate)
    return adopt(chosen[0], storage, None, None)


def adopt(kind: type[T], storage: FileStorage, config: Optional[BloomConfig], options: Optional[dict[str, Any]]) -> T:
    """A filter of ``kind`` over a validated file storage (``storage.header``, parsed when
    it was opened), closing the storage on any error. When ``config`` is given
    (``open_or_create``) the file's shape must equal it and the kind's ``options`` must
    match the header; the filter then keeps ``config`` (with its capacity and rate).

    Raises:
        ConfigMismatchError (a ``ValueError``): num_bits, num_hashes or strategy differ
            from ``config`` (the first that differs is named), or a kind-specific option
            (a counting filter's ``counter_bits``).
        TypeError: an option the kind does not take.
    """
    source = storage.path or ""
    own = getattr(kind, "_adopt", None)  # a kind with its own shape (CuckooFilter): its hook
    if own is not None:
        try:
            return own(storage, config, options)  # type: ignore[no-any-return]
        except BaseException:
            storage.close()
            raise
    try:
        header = storage.header  # validated (header, length, padding) before mapping
        found = BloomConfig(num_bits=header.num_bits, num_hashes=header.num_hashes, strategy=header.strategy)
        if config is not None:
            diff = config.difference(found)  # the one comparison of shapes (BloomConfig)
            if diff is not None:
                raise ConfigMismatchError(source, *diff)
            kind._check_options(header, options or {}, source)
            found = config
        return kind._from_storage(storage, found, header)
    except BaseException:
        storage.close()
        raise


def open_or_create(
    kind: type[T], path: PathLike, config: BloomConfig, options: dict[str, Any], create: Callable[[], T]
) -> T:
    """Open ``path`` as a filter of ``kind`` if it exists (checked against ``config`` and
    ``options`` as in :func:`adopt`), else ``create()`` it; safe when many processes race
    on the same new path: ``create`` publishes with ``link`` (FileExistsError when another
    process was first), and the loser opens the winner's complete file.

    Raises:
        FileExistsError: ``path`` is a dangling symlink (never created through), or the
            file kept appearing and disappearing for 100 rounds.
        And whatever :func:`open_file` and ``create`` raise.
    """
    for _ in range(100):
        try:
            return open_file(kind, path, readonly=False, config=config, options=options)
        except FileNotFoundError:
            pass
        try:
            return create()
        except FileExistsError:
            if os.path.islink(path) and not os.path.exists(path):
                raise  # a dangling symlink: never create through it
            continue  # another process published it first: open theirs
    raise FileExistsError(f"{path}: file keeps appearing and disappearing")  # pragma: no cover
