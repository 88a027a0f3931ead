"""Verification: check a filter file without trusting its header (like ``zip -T``)."""

from __future__ import annotations

import os
from typing import Union

from .base import MappedFilter
from .counting import CountingBloomFilter
from .filter import BloomFilter

__all__ = ["open_any", "verify_file"]


def open_any(path: Union[str, "os.PathLike[str]"], readonly: bool = False) -> MappedFilter:
    """Open a filter file of either kind, chosen by its magic: a ``BloomFilter`` for BLM1,
    a ``CountingBloomFilter`` for BLC1.

    The file is opened, validated and its header parsed once (the kind is chosen inside
    the validation, from the magic).

    Raises:
        As ``BloomFilter.open``; ``BadMagicError`` (expecting BLM1) when the magic is
        neither kind's.
    """
    return MappedFilter._open_any(path, readonly, (BloomFilter, CountingBloomFilter))


def verify_file(path: Union[str, "os.PathLike[str]"]) -> MappedFilter:
    """Check that ``path`` is a sound filter file of either kind (BLM1 or BLC1, chosen by
    its magic): a known magic, a registered strategy, m >= 1, k >= 1, a length of exactly
    header + cells (checked with ``fstat`` before mapping), zero padding bits and, for
    BLC1, a valid counter width and zero reserved bytes.

    Returns:
        The filter (a ``BloomFilter`` or ``CountingBloomFilter``), opened read-only; the
        caller closes it.
    Raises:
        FormatError subclasses (``ValueError``) naming what is wrong, with expected and
        actual values; OSError if the file cannot be read.
    """
    f = open_any(path, readonly=True)
    try:
        f.check()
    except BaseException:
        f.close()
        raise
    return f
