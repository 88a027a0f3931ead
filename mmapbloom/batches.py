"""Batches: what ``update``, ``add_many`` and ``contains_many`` accept, turned into what the
kernels take.

A batch is one of:

* a Python iterable of items (each encoded by the one rule,
  :func:`mmapbloom.hashing.encode_key`: str, bytes-like, int);
* a 1-dimensional numpy array: integer dtypes (int8 to uint64; each element widened, so 5 as
  int32 and 5 as int64 are one key), bytes (``'S'``), str (``'U'``), object and StringDType
  arrays. The answers equal those of the same call on ``arr.tolist()``. In a numpy masked
  array (``np.ma``) a masked element is a null (its hidden value is not a key);
* a pandas Series or Index of dtype object: its items, where each missing value (what
  ``pandas.isna`` calls missing: ``None``, ``NaN``, ``pd.NA``, ``NaT``) is a null;
* an Arrow column: any object with ``__arrow_c_stream__`` or ``__arrow_c_array__`` (the
  Arrow PyCapsule interface: pyarrow Array / ChunkedArray / RecordBatchReader of one column,
  polars Series, pandas Series, DuckDB relations, nanoarrow), read through the Arrow C Data
  Interface without pyarrow. Types: utf8, large_utf8, utf8_view, binary, large_binary,
  binary_view, fixed_size_binary, int8..int64, uint8..uint64 and dictionaries of those;
  chunked, sliced; an Arrow ``null`` column (format ``n``) is all nulls. Nulls are never added (``add_many`` answers False, ``update`` does not
  count them) and never found (``contains_many`` answers False).

Only these sources have nulls: a ``None`` (or NaN) item of a Python list, tuple or other
iterable, or of a numpy object array, raises ``TypeError`` as a bad item.

A malformed Arrow array raises ``ValueError("malformed Arrow array of format ...")``
naming what is wrong, on both backends. The readers check what the C Data Interface lets
them check (buffer counts, NULL buffers, offsets that decrease or start negative, view
lengths, buffer indices and ranges against the array's variadic buffer sizes, dictionary
indices, struct children and lengths); the sizes of the other buffers are not carried by
the interface, so those are trusted to match the array's length and offsets, as every
Arrow consumer trusts its producer.

A ``str``, ``bytes``, ``bytearray`` or ``memoryview`` given as the batch raises
``TypeError`` (it would otherwise be taken as a batch of characters or small ints).

On the native backend numpy and Arrow batches become a ``mmapbloom._kernels.Column``, read
in place by the C kernels (no Python object per key, GIL released while hashing and
probing). On the pure path they become lists of bytes, with ``None`` for a null
(:class:`KeysWithNulls`; the Arrow reader is :mod:`mmapbloom.arrowc`, ctypes and numpy).
Answers and bits are the same either way.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Iterable, Optional


from .hashing import encode_keys, kernel_keys, type_name

if TYPE_CHECKING:
    import numpy as np
else:
    from ._lazy import np
from ._lazy import is_ndarray, numpy_attr

__all__ = ["KeysWithNulls", "as_batch", "encoded_keys", "is_arrow"]

_NOT_BATCHES = (str, bytes, bytearray, memoryview)


class KeysWithNulls(list):  # type: ignore[type-arg]
    """A pure-path column: a list of ``bytes`` keys where ``None`` marks a null (never added,
    never found). Slicing keeps the type."""

    def __getitem__(self, index: Any) -> Any:
        got = list.__getitem__(self, index)
        return KeysWithNulls(got) if isinstance(index, slice) else got


def is_arrow(obj: object) -> bool:
    """True if ``obj`` offers the Arrow PyCapsule interface (a stream or an array)."""
    t = type(obj)
    return hasattr(t, "__arrow_c_stream__") or hasattr(t, "__arrow_c_array__")


def _check_not_scalar(items: object) -> None:
    if isinstance(items, _NOT_BATCHES):
        raise TypeError(
            f"a batch must be an iterable of items, a numpy array or an Arrow column, got "
            f"{type_name(items)} (a single item: use add() or might_contain(), or wrap it in a list)"
        )


def as_batch(items: Iterable[Any], native: Any, *, query: bool = False) -> Any:
    """The kernels' form of a batch (see the module docstring).

    Args:
        items: the batch.
        native: the compiled module (``mmapbloom._kernels``) when the kernels in use are
            native, else None (pure path).
        query: the batch is for ``contains_many``: bytearray and memoryview items may stay
            as they are (read in place). An add batch's bytearray and memoryview items are
            copied before its keys are hashed (on the native path by the handle, in C, as
            it resolves the batch), so the keys an add hashes cannot change under it while
            the GIL is released.
    Returns:
        native: the list or tuple of items as given (a list of them for another iterable),
        validated and encoded by the handle itself before any cell changes, or a
        ``Column``. Pure: a list (every item str or bytes-like, validated) or a
        :class:`KeysWithNulls` / list of bytes.
    Raises:
        TypeError: an unsupported numpy dtype or Arrow type, a multi-column Arrow batch, a
            str / bytes given as the batch; on the pure path also a bad item (message names
            its type).
        OverflowError, KeyEncodingError: on the pure path, an integer item outside
            [-2**63, 2**64) or a str with lone surrogates (the native handle raises these,
            with the same messages, when it is given the batch).
    """
    _check_not_scalar(items)
    if type(items) is not list and type(items) is not tuple and is_ndarray(items):  # lists: the common case
        return _numpy_batch(items, native, query)
    if _pandas_objects(items):
        # a pandas Series / Index of dtype object: its items are Python objects already,
        # and may mix str, bytes and int, which no single Arrow type holds; pandas'
        # missing values (pandas.isna: None, NaN, pd.NA, NaT) are its nulls.
        series: Any = items
        missing = np.asarray(series.isna(), dtype=np.bool_)
        if missing.any():
            return _with_nulls(series.tolist(), missing, native)
        return as_batch(list(items), native, query=query)
    if is_arrow(items) and _holds_objects(items):  # another Arrow producer of Python objects
        return as_batch(list(items), native, query=query)
    if is_arrow(items):
        if native is not None:
            return native.arrow_column(items)
        from . import arrowc

        return KeysWithNulls(arrowc.read_keys(items))
    if native is not None:
        # The native handle resolves every item itself, in C, by encode_key's rule and with
        # its messages, before any cell changes (str, bytes and ints in place or encoded
        # there, bytearray / memoryview items of an add batch copied, anything else through
        # encode_key): no Python pass over the keys here.
        return items if type(items) in (list, tuple) else list(items)
    seq = items if type(items) is list else list(items)
    # The pure path: the one batch rule, hashing.kernel_keys (encode_key's rule; C-level
    # passes for the common batches). A query also takes bytearray items in place.
    if query and set(map(type, seq)) <= {str, bytes, bytearray}:
        return seq
    return kernel_keys(seq)


def _holds_objects(items: Any) -> bool:
    dtype = getattr(items, "dtype", None)
    np_dtype = numpy_attr("dtype")  # no numpy dtype exists before numpy is imported
    return np_dtype is not None and isinstance(dtype, np_dtype) and dtype.kind == "O"


def _pandas_objects(items: Any) -> bool:
    """True for a pandas Series or Index of dtype object, or of any dtype where pandas
    exports no Arrow interface (pandas < 3, the newest on Python 3.10: its missing values
    are then found by ``isna`` as for object columns). pandas is not imported here."""
    pd = sys.modules.get("pandas")
    if pd is None or not isinstance(items, (pd.Series, pd.Index)):
        return False
    return _holds_objects(items) or not is_arrow(items)


def _with_nulls(values: list[Any], missing: np.ndarray, native: Any) -> Any:
    """A batch of ``values`` where ``missing[i]`` marks a null (never added, never found):
    the other values encoded by :func:`~mmapbloom.hashing.encode_key` (so a bad one raises
    its TypeError / OverflowError before any cell changes); on the pure path a
    :class:`KeysWithNulls`, on the native one a column (a large_binary Arrow array made
    by :class:`mmapbloom.arrowc.KeyColumn`)."""
    present = encode_keys([v for v, m in zip(values, missing.tolist(), strict=True) if not m])
    it = iter(present)
    keys: list[Optional[bytes]] = [None if m else next(it) for m in missing.tolist()]
    if native is None:
        return KeysWithNulls(keys)
    from .arrowc import KeyColumn

    return native.arrow_column(KeyColumn(keys))


def _numpy_batch(arr: np.ndarray, native: Any, query: bool) -> Any:
    if arr.ndim != 1:
        raise TypeError(f"a numpy batch must be 1-dimensional, got shape {arr.shape}")
    if isinstance(arr, np.ma.MaskedArray):  # a masked element is a null
        missing = np.ma.getmaskarray(arr)
        if missing.any():
            if arr.dtype.kind not in "iuSUOT":
                _numpy_batch(arr.data[:0], native, query)  # the refused dtype's TypeError
            return _with_nulls(arr.data.tolist(), missing, native)
        return _numpy_batch(arr.data, native, query)
    kind = arr.dtype.kind
    if kind in "iu":
        wide = np.ascontiguousarray(arr, dtype="<i8" if kind == "i" else "<u8")
        return _fixed(wide.view(np.uint8), 8, False, native)
    if kind == "S":
        if arr.dtype.itemsize == 0:
            return [b""] * len(arr)
        return _fixed(np.ascontiguousarray(arr).view(np.uint8), arr.dtype.itemsize, True, native)
    if kind == "U":
        if arr.dtype.itemsize == 0:
            return [b""] * len(arr)
        # UTF-8 as an 'S' array: trailing NUL code points become trailing NUL bytes, which
        # 'S' semantics drop, as tolist() drops them from the str.
        try:
            encoded = np.strings.encode(arr, "utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the item path raises KeyEncodingError
            return as_batch(arr.tolist(), native, query=query)
        return _fixed(np.ascontiguousarray(encoded).view(np.uint8), encoded.dtype.itemsize, True, native)
    if kind in "OT":  # object and StringDType: the elements are (or become) Python objects
        return as_batch(arr.tolist(), native, query=query)
    raise TypeError(
        f"a numpy batch must have an integer, bytes ('S'), str ('U'), object or StringDType dtype, "
        f"got dtype {arr.dtype}"
    )


def _fixed(raw: np.ndarray, width: int, strip: bool, native: Any) -> Any:
    """Keys of ``width`` bytes back to back in ``raw`` (uint8)."""
    if native is not None:
        return native.fixed_column(raw, width, strip)
    data = raw.tobytes()
    keys = [data[i : i + width] for i in range(0, len(data), width)]
    return [k.rstrip(b"\0") for k in keys] if strip else keys


def encoded_keys(items: Iterable[Any]) -> tuple[list[Any], Optional[np.ndarray], int]:
    """Any batch as a list of keys, for code that works on lists (the scalable filter):
    ``(keys, where, n)`` with ``keys`` the non-null keys in order (as
    :func:`~mmapbloom.hashing.kernel_keys` gives them: ASCII str and bytes), ``n`` the
    batch's length, ``where`` None when there were no nulls, else the batch positions of
    ``keys`` (an ``intp`` array). Columns are read by the pure reader (a Python object per
    key). Raises as :func:`as_batch`."""
    batch = as_batch(items, None)
    if type(batch) is KeysWithNulls:
        where = np.flatnonzero(np.fromiter((k is not None for k in batch), dtype=np.bool_, count=len(batch)))
        if where.size != len(batch):
            return [batch[i] for i in where.tolist()], where, len(batch)
        return list(batch), None, len(batch)
    return batch, None, len(batch)
