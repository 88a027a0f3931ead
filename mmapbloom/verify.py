"""Opening a filter of any kind by what is on disk, and verification without trusting the
header (like ``zip -T``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Union


from . import opening
from .base import MappedFilter
from .counting import CountingBloomFilter
from .filter import BloomFilter
from . import format as fmt
from .errors import BadMagicError, ManifestError

if TYPE_CHECKING:
    from .expiring import ExpiringBloomFilter
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["AnyFilter", "open_any", "open_filter", "verify_file"]


class AnyFilter(Protocol):
    """What every filter kind offers (``BloomFilter``, ``CountingBloomFilter``,
    ``ScalableBloomFilter``), and all the ``mmapbloom`` command line uses: batch add and
    query, a JSON-ready record, the checks, and the handle's lifecycle. See each class
    for the costs, errors and concurrency guarantees."""

    @property
    def path(self) -> Any: ...
    def update(self, items: Iterable[Any]) -> int: ...
    def contains_many(self, items: Iterable[Any]) -> npt.NDArray[np.bool_]: ...
    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]: ...
    def check(self) -> None: ...
    def verify(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


def open_filter(path: Union[str, "os.PathLike[str]"], readonly: bool = False) -> AnyFilter:
    """Open a filter of any kind: a directory is an expiring filter when its lock file has
    the expiring magic (:meth:`ExpiringBloomFilter.open`), else a scalable filter
    (:meth:`ScalableBloomFilter.open`); a file a ``BloomFilter`` or ``CountingBloomFilter``
    chosen by its magic (:func:`open_any`).

    Args:
        path: a filter file, or a scalable filter's directory.
        readonly: open for queries only.

    Raises:
        ManifestError: ``path`` is a directory that is not a scalable filter's (no
            manifest and no lock file), or as :meth:`ScalableBloomFilter.open` for a
            damaged one (a missing or damaged lock file or manifest).
        As :func:`open_any` for anything else (``FileNotFoundError``, ``BadMagicError``, ...).
    """
    if os.path.isdir(path):
        # the directory kinds are imported here: opening a file loads neither
        from .expiring import ExpiringBloomFilter, is_expiring
        from .scalable import LOCK_NAME, MANIFEST_NAME, ScalableBloomFilter

        names = (MANIFEST_NAME, LOCK_NAME)
        if not any(os.path.lexists(os.path.join(path, name)) for name in names):
            raise ManifestError(
                f"a directory, and not a scalable filter's (it has no {' and no '.join(names)})",
                source=os.fspath(path),
                expected=names,
                actual=None,
            )
        if is_expiring(path):
            return ExpiringBloomFilter.open(path, readonly=readonly)
        return ScalableBloomFilter.open(path, readonly=readonly)
    return open_any(path, readonly=readonly)


def open_any(path: Union[str, "os.PathLike[str]"], readonly: bool = False) -> Union[MappedFilter, ExpiringBloomFilter]:
    """Open a filter of any kind, chosen by its magic: a ``BloomFilter`` for BLM1, a
    ``CountingBloomFilter`` for BLC1, a ``CuckooFilter`` for CKF1; or an expiring filter's
    directory (its lock file has the magic ``BLEX``): an :class:`~mmapbloom.ExpiringBloomFilter`.

    The file is opened, validated and its header parsed once (the kind is chosen inside
    the validation, from the magic).

    Raises:
        As ``BloomFilter.open``; ``BadMagicError`` (expecting BLM1) when the magic is
        none of the kinds'.
    """
    if os.path.isdir(path):  # is_expiring is False for anything else: expiring is imported only here
        from .expiring import ExpiringBloomFilter, is_expiring

        if is_expiring(path):
            return ExpiringBloomFilter.open(path, readonly=readonly)
    try:
        return opening.open_any(path, readonly, (BloomFilter, CountingBloomFilter))
    except BadMagicError as exc:
        if exc.actual != fmt.CUCKOO_MAGIC:
            raise
    # a cuckoo file: its module is imported only now (opened and validated again, whole)
    from .cuckoo import CuckooFilter

    return opening.open_any(path, readonly, (BloomFilter, CountingBloomFilter, CuckooFilter))  # type: ignore[return-value, type-var]


def verify_file(path: Union[str, "os.PathLike[str]"]) -> Union[MappedFilter, ExpiringBloomFilter]:
    """Check that ``path`` is a sound filter of any kind (BLM1, BLC1 or CKF1, chosen by its
    magic; for CKF1 also the items counter against the slots; or an expiring directory): a
    known magic, a registered strategy, m >= 1, k >= 1, a length of exactly
    header + cells (checked with ``fstat`` before mapping), zero padding bits and, for
    BLC1, a valid counter width and zero reserved bytes.

    An expiring filter's directory is verified whole
    (:meth:`ExpiringBloomFilter.verify <mmapbloom.ExpiringBloomFilter.verify>`: lock file,
    manifest, every period file opened afresh).

    Returns:
        The filter (a ``BloomFilter``, ``CountingBloomFilter``, ``CuckooFilter`` or
        ``ExpiringBloomFilter``), opened read-only; the caller closes it.
    Raises:
        FormatError subclasses (``ValueError``) naming what is wrong, with expected and
        actual values; OSError if the file cannot be read.
    """
    f = open_any(path, readonly=True)
    try:
        if type(f).__name__ == "ExpiringBloomFilter" and type(f).__module__ == "mmapbloom.expiring":
            f.verify()
        else:
            f.check()
    except BaseException:
        f.close()
        raise
    return f
