"""The public types of what a filter takes: :data:`Key` (one key), :data:`Keys` (a batch)
and :data:`PathLike` (a file or directory path). Defined here once; every kind's methods
and the modules that take paths import them. Importing this module imports nothing
(numpy only for type checkers).

The runtime rule is :func:`mmapbloom.hashing.encode_key`: a ``str`` (UTF-8), bytes-like
(``bytes``, ``bytearray``, ``memoryview``), or an integer (``int`` or a numpy integer
scalar; its 8 bytes little-endian). ``None``, ``float`` and other types raise
``TypeError`` at run time, and :data:`Key` makes ``mypy`` refuse them before that
(``bool`` is an ``int`` to a type checker, so it passes ``mypy`` and raises ``TypeError``).

A batch (:data:`Keys`) is any iterable of keys, a numpy array, or an Arrow column (an
object with ``__arrow_c_stream__`` or ``__arrow_c_array__``: pyarrow, polars, pandas,
DuckDB, nanoarrow). A ``str`` or ``bytes`` given as the batch is refused at run time
(``TypeError``), though a type checker cannot tell it from an iterable of keys.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Union

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["ArrowArrayExportable", "ArrowStreamExportable", "Item", "Key", "Keys", "PathLike"]


class ArrowStreamExportable(Protocol):
    """An object of the Arrow PyCapsule interface that exports a stream (pyarrow's
    ``ChunkedArray`` and ``Table`` columns, polars' ``Series``, DuckDB relations)."""

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any: ...


class ArrowArrayExportable(Protocol):
    """An object of the Arrow PyCapsule interface that exports one array (pyarrow's
    ``Array``, nanoarrow)."""

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any: ...


#: One key: ``str``, ``bytes``, ``bytearray``, ``memoryview``, ``int`` or a numpy integer.
Key = Union[str, bytes, bytearray, memoryview, int, "np.integer[Any]"]
#: The old name of :data:`Key` inside the package (one definition: this alias).
Item = Key
#: A batch of keys: an iterable of :data:`Key`, a numpy array or an Arrow column.
Keys = Union[Iterable[Key], "npt.NDArray[Any]", ArrowStreamExportable, ArrowArrayExportable]
#: A path: ``str`` or ``os.PathLike[str]`` (``pathlib.Path``).
PathLike = Union[str, "os.PathLike[str]"]
