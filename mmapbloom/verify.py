"""Verification: check a filter file without trusting its header (like ``zip -T``)."""

from __future__ import annotations

import os
from typing import Union

from . import format as fmt
from .errors import BadMagicError
from .base import MappedFilter
from .counting import CountingBloomFilter
from .filter import BloomFilter

__all__ = ["verify_file"]


def verify_file(path: Union[str, "os.PathLike[str]"]) -> MappedFilter:
    """Check that ``path`` is a sound filter file of either kind (BLM1 or BLC1, chosen by
    its magic): a known magic, a registered scheme, m >= 1, k >= 1, a length of exactly
    header + cells (checked with ``fstat`` before mapping), zero padding bits and, for
    BLC1, a valid counter width and zero reserved bytes.

    Returns:
        The filter (a ``BloomFilter`` or ``CountingBloomFilter``), opened read-only; the
        caller closes it.
    Raises:
        FormatError subclasses (``ValueError``) naming what is wrong, with expected and
        actual values; OSError if the file cannot be read.
    """
    f: MappedFilter
    try:
        f = BloomFilter.open(path, readonly=True)
    except BadMagicError as exc:
        if exc.actual != fmt.COUNTING_MAGIC:
            raise
        f = CountingBloomFilter.open(path, readonly=True)
    try:
        f.check()
    except BaseException:
        f.close()
        raise
    return f
