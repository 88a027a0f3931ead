"""Verification: check a filter file without trusting its header (like ``zip -T``)."""

from __future__ import annotations

import os
from typing import Union

from .filter import BloomFilter

__all__ = ["verify_file"]


def verify_file(path: Union[str, "os.PathLike[str]"]) -> BloomFilter:
    """Check that ``path`` is a sound filter file: magic, a registered scheme, m >= 1,
    k >= 1, a length of exactly ``24 + ceil(m / 8)`` bytes (checked with ``fstat`` before
    mapping) and zero padding bits.

    Returns:
        The filter, opened read-only (the caller closes it).
    Raises:
        FormatError subclasses (``ValueError``) naming what is wrong, with expected and
        actual values; OSError if the file cannot be read.
    """
    f = BloomFilter.open(path, readonly=True)
    try:
        f.check()
    except BaseException:
        f.close()
        raise
    return f
