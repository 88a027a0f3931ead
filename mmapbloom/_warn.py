"""Warnings that point at the user's code: :func:`user_stacklevel` finds the first frame
outside the mmapbloom package, however many library frames (a filter method, the handle,
``open_or_create``, the CLI) or none (the compiled ``FilterBase`` calling a hook straight
from the user's ``f.add(x)``) lie between, so no caller counts frames or threads a depth.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["user_stacklevel", "warn_user"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function that calls this one that
    points at the first frame outside the mmapbloom package."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the user's frame."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
