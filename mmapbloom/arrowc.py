"""The pure path's Arrow reader: the keys of an Arrow column through the Arrow C Data
Interface, in ctypes and numpy (no pyarrow), as a list of ``bytes`` with ``None`` for nulls.

It reads what the compiled reader (``mmapbloom/_columns.c``) reads, by the same rules:
utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary,
int8..int64 and uint8..uint64 (each integer as the 8 little-endian bytes of its value mod
2^64), dictionaries of those, chunked streams, slices (offsets) and streams of one-column
record batches; a null column (format ``n``) is all nulls. It creates Python objects per key,
so it is the reference, not the fast path: each check of a malformed array, and its
``ValueError("malformed Arrow array of format ...")``, is the compiled reader's too (what
the interface does not carry, the sizes of the validity, data and offsets buffers, is
trusted to match the array's length and offsets, as every Arrow consumer trusts its
producer).

Structs and the move semantics follow the Arrow C Data Interface and its PyCapsule
interface (https://arrow.apache.org/docs/format/CDataInterface.html); the capsule's
struct is moved out (its release set to NULL) and released here when the keys are read.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import numpy as np
else:
    from ._lazy import np


__all__ = ["KeyColumn", "read_keys"]


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


class ArrowArrayStream(ctypes.Structure):
    pass


ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))),
    ("private_data", ctypes.c_void_p),
]
ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))),
    ("private_data", ctypes.c_void_p),
]
ArrowArrayStream._fields_ = [
    ("get_schema", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ArrowArrayStream), ctypes.POINTER(ArrowSchema))),
    ("get_next", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ArrowArrayStream), ctypes.POINTER(ArrowArray))),
    ("get_last_error", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(ArrowArrayStream))),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArrayStream))),
    ("private_data", ctypes.c_void_p),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_INTS = {"c": "<i1", "C": "<u1", "s": "<i2", "S": "<u2", "i": "<i4", "I": "<u4", "l": "<i8", "L": "<u8"}
_NAMES = {
    "n": "null",
    "b": "bool",
    "e": "float16",
    "f": "float32",
    "g": "float64 (double)",
    "tdD": "date32",
    "tdm": "date64",
    "+l": "list",
    "+L": "large_list",
    "+s": "struct",
    "+m": "map",
}
_INT32_MAX = 2**31 - 1
_KEY_TYPES = (
    "utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary, int8..int64, "
    "uint8..uint64, or a dictionary of those"
)


def _moved(capsule: Any, name: bytes, struct: Any, check: bool = True) -> Any:
    """Copy the struct out of the capsule and mark the capsule's copy released (moved)."""
    src = struct.from_address(_capsule_pointer(capsule, name))
    out = struct()
    ctypes.pointer(out)[0] = src
    src.release = type(src.release)()
    if check and not out.release:
        raise ValueError(f"the Arrow {name.decode()} was already consumed")
    return out


def read_keys(obj: Any) -> list[Optional[bytes]]:
    """The keys of an object with ``__arrow_c_stream__`` (preferred) or
    ``__arrow_c_array__``: a list of ``bytes``, ``None`` for a null.

    Raises:
        TypeError: a type other than the key types (the message names it), or a record
            batch of more than one column (the message gives the count).
        ValueError: a malformed array or a failing stream.
    """
    t = type(obj)
    schema = ArrowSchema()
    arrays: list[ArrowArray] = []
    try:
        if hasattr(t, "__arrow_c_stream__"):
            stream = _moved(obj.__arrow_c_stream__(), b"arrow_array_stream", ArrowArrayStream)
            try:
                if stream.get_schema(ctypes.byref(stream), ctypes.byref(schema)) != 0:
                    raise ValueError(f"Arrow stream get_schema failed: {_last_error(stream)}")
                while True:
                    arr = ArrowArray()
                    if stream.get_next(ctypes.byref(stream), ctypes.byref(arr)) != 0:
                        raise ValueError(f"Arrow stream get_next failed: {_last_error(stream)}")
                    if not arr.release:
                        break
                    arrays.append(arr)
            finally:
                stream.release(ctypes.byref(stream))
        else:
            pair = obj.__arrow_c_array__()
            if type(pair) is not tuple or len(pair) != 2:
                raise TypeError("__arrow_c_array__ must return (schema capsule, array capsule)")
            schema = _moved(pair[0], b"arrow_schema", ArrowSchema, check=False)
            arrays.append(_moved(pair[1], b"arrow_array", ArrowArray, check=False))
            if not schema.release or not arrays[0].release:
                raise ValueError("the Arrow array was already consumed")
        out: list[Optional[bytes]] = []
        record = schema.format == b"+s"
        if record and schema.n_children != 1:
            raise TypeError(f"an Arrow key batch must have one column, got {schema.n_children} columns")
        child_schema = _record_child(schema) if record else schema
        for arr in arrays:
            if record:
                child = _record_column(arr)
                out.extend(_keys(child_schema, child, arr.offset, arr.length))
            else:
                out.extend(_keys(schema, arr, 0, max(arr.length, 0)))
        return out
    finally:  # each imported struct released exactly once, whatever was raised
        for arr in arrays:
            if arr.release:
                arr.release(ctypes.byref(arr))
        if schema.release:
            schema.release(ctypes.byref(schema))


def _last_error(stream: ArrowArrayStream) -> str:
    got = stream.get_last_error(ctypes.byref(stream))
    return str(got.decode("utf-8", "replace")) if got else "(no message)"


def _record_child(schema: ArrowSchema) -> ArrowSchema:
    """The column's schema of a one-column record batch (struct) schema."""
    if not schema.children:
        raise _malformed("+s", "struct schema has 1 child, but its children pointer is NULL")
    if not schema.children[0]:
        raise _malformed("+s", "struct schema has 1 child, but child 0 is NULL")
    return schema.children[0].contents  # type: ignore[no-any-return]


def _record_column(arr: ArrowArray) -> ArrowArray:
    """The column of a one-column record batch (struct array), every check of the compiled
    reader's column_index()."""
    if arr.length < 0 or arr.offset < 0:
        raise _malformed("+s", f"negative length or offset (length {arr.length}, offset {arr.offset})")
    if arr.n_buffers != 1:
        raise _malformed("+s", f"expected 1 buffers, got {arr.n_buffers}")
    if not arr.buffers:
        raise _malformed("+s", "the buffers pointer is NULL")
    if arr.n_children != 1:
        raise _malformed("+s", f"expected 1 child array, got {arr.n_children}")
    if not arr.children or not arr.children[0]:
        raise _malformed("+s", "record batch without its column (a NULL child pointer)")
    if arr.null_count != 0 and arr.buffers[0]:
        raise _malformed("+s", "a record batch with null rows")
    child = arr.children[0].contents
    if child.length < arr.offset + arr.length:
        raise _malformed(
            "+s",
            f"its column has {child.length} elements, expected at least {arr.offset + arr.length} "
            f"(the batch's offset {arr.offset} + length {arr.length})",
        )
    return child  # type: ignore[no-any-return]


def _bytes_at(address: Optional[int], n: int) -> bytes:
    return ctypes.string_at(address, n) if n > 0 and address else b""


def _bad_type(fmt: str, in_dict: bool) -> TypeError:
    name = _NAMES.get(fmt, "unknown")
    if fmt.startswith("ts"):
        name = "timestamp"
    elif fmt.startswith("d:"):
        name = "decimal"
    return TypeError(
        f"an Arrow key column must be {_KEY_TYPES}; got {'a dictionary of ' if in_dict else ''}{name} (format '{fmt}')"
    )


def _malformed(fmt: str, what: str) -> ValueError:
    return ValueError(f"malformed Arrow array of format '{fmt}': {what}")


def _fixed_width(fmt: str) -> int:
    """The width of a fixed_size_binary format ``w:N``: N decimal digits only, in [0, 2**31)."""
    digits = fmt[2:]
    if not (0 < len(digits) <= 10 and digits.isascii() and digits.isdigit()) or int(digits) > _INT32_MAX:
        raise _malformed(fmt, f"fixed_size_binary width must be a decimal number in [0, 2**31), got '{digits}'")
    return int(digits)


def _format(schema: ArrowSchema) -> str:
    raw = schema.format
    if raw is None:
        raise _malformed("?", "no format")
    return str(raw.decode("utf-8", "replace"))


def _kind(fmt: str, has_dictionary: bool, in_dict: bool) -> str:
    """The layout of a key array of format ``fmt``: 'null', 'int', 'off32', 'off64', 'view',
    'fixed' or 'dict' (the same decisions and messages as decode() in _columns.c)."""
    if has_dictionary:
        if fmt not in _INTS:
            raise _malformed(fmt, f"dictionary indices must be an integer type, got format '{fmt}'")
        return "dict"
    if fmt == "n":
        return "null"
    if fmt in _INTS:
        return "int"
    if fmt in ("u", "z"):
        return "off32"
    if fmt in ("U", "Z"):
        return "off64"
    if fmt in ("vu", "vz"):
        return "view"
    if fmt.startswith("w:"):
        _fixed_width(fmt)
        return "fixed"
    raise _bad_type(fmt, in_dict)


_BUFFERS = {"null": 0, "int": 2, "dict": 2, "fixed": 2, "off32": 3, "off64": 3}


def _ints(address: Optional[int], dtype: str, start: int, n: int) -> np.ndarray:
    """Elements ``[start, start + n)`` of the buffer at ``address`` read as ``dtype``."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(_bytes_at(address, (start + n) * size), dtype=dtype)[start:]


def _keys(
    schema: ArrowSchema, arr: ArrowArray, extra: int, length: int, in_dict: bool = False
) -> list[Optional[bytes]]:
    """Keys ``[0, length)`` of one array, from its element ``extra`` on (``extra``: a parent
    record batch's offset; ``length``: the parent's length, or the array's own). Each check
    and its message is the compiled reader's (decode() in _columns.c)."""
    fmt = _format(schema)
    if schema.dictionary and in_dict:
        raise _bad_type(_format(schema.dictionary.contents), True)
    kind = _kind(fmt, bool(schema.dictionary), in_dict)
    if arr.length < 0 or arr.offset < 0:
        raise _malformed(fmt, f"negative length or offset (length {arr.length}, offset {arr.offset})")
    want = _BUFFERS.get(kind, 3)
    if kind == "null":  # no buffers are read (the spec gives none; polars exports one)
        pass
    elif kind == "view" and arr.n_buffers < want:
        raise _malformed(fmt, f"expected at least {want} buffers, got {arr.n_buffers}")
    elif kind != "view" and arr.n_buffers != want:
        raise _malformed(fmt, f"expected {want} buffers, got {arr.n_buffers}")
    if want and not arr.buffers:
        raise _malformed(fmt, "the buffers pointer is NULL")
    values: list[Optional[bytes]] = []
    if kind == "dict":
        if not arr.dictionary:
            raise _malformed(fmt, "dictionary array missing")
        dictionary = arr.dictionary.contents
        values = _keys(schema.dictionary.contents, dictionary, 0, dictionary.length, True)
    if length == 0:
        return []
    if kind == "null":
        return [None] * length
    off = arr.offset + extra
    bufs = arr.buffers
    valid = None
    if arr.null_count != 0 and bufs[0]:
        bits = np.frombuffer(_bytes_at(bufs[0], (off + length + 7) // 8), dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[off : off + length].astype(np.bool_).tolist()
    keys: list[Optional[bytes]]
    if kind in ("int", "dict") and not bufs[1]:
        raise _malformed(fmt, "the data buffer is NULL")
    if kind == "dict":
        keys = []
        for i, v in enumerate(_ints(bufs[1], _INTS[fmt], off, length).tolist()):
            if valid is not None and not valid[i]:
                keys.append(None)
            elif 0 <= v < len(values):
                keys.append(values[v])
            else:
                raise _malformed(
                    fmt, f"dictionary index {v} at element {i} is outside the dictionary's {len(values)} values"
                )
        return keys
    if kind == "int":
        ints = _ints(bufs[1], _INTS[fmt], off, length)
        wide = ints.astype("<i8" if fmt.islower() else "<u8").tobytes()
        keys = [wide[i : i + 8] for i in range(0, 8 * length, 8)]
    elif kind in ("off32", "off64"):
        if not bufs[1]:
            raise _malformed(fmt, "the offsets buffer is NULL")
        offsets = _ints(bufs[1], "<i4" if kind == "off32" else "<i8", off, length + 1).tolist()
        if offsets[0] < 0:
            raise _malformed(fmt, f"offsets start negative ({offsets[0]})")
        for i, (a, b) in enumerate(itertools.pairwise(offsets)):
            if b < a:
                raise _malformed(fmt, f"offsets decrease at element {i} ({a} then {b})")
        if not bufs[2] and offsets[-1] > offsets[0]:
            raise _malformed(fmt, "the data buffer is NULL")
        data = _bytes_at(bufs[2], offsets[-1])
        keys = [data[a:b] for a, b in itertools.pairwise(offsets)]
    elif kind == "view":
        if not bufs[1]:
            raise _malformed(fmt, "the views buffer is NULL")
        views = _bytes_at(bufs[1], 16 * (off + length))
        ndata = arr.n_buffers - 3
        sizes_at = bufs[arr.n_buffers - 1]
        if ndata > 0 and not sizes_at:
            raise _malformed(fmt, "the variadic buffer sizes buffer is NULL")
        sizes = _ints(sizes_at, "<i8", 0, ndata).tolist() if ndata > 0 else []
        keys = []
        for i in range(length):
            if valid is not None and not valid[i]:
                keys.append(None)
                continue
            v = views[16 * (off + i) : 16 * (off + i) + 16]
            n = int.from_bytes(v[:4], "little", signed=True)
            if n < 0:
                raise _malformed(fmt, f"view {i} has a negative length ({n})")
            if n <= 12:
                keys.append(v[4 : 4 + n])
                continue
            buf = int.from_bytes(v[8:12], "little", signed=True)
            start = int.from_bytes(v[12:16], "little", signed=True)
            if not 0 <= buf < ndata:
                raise _malformed(fmt, f"view {i} names data buffer {buf}, but the array has {ndata} data buffers")
            if start < 0 or start + n > sizes[buf]:
                raise _malformed(
                    fmt,
                    f"view {i} reads bytes [{start}, {start + n}) of data buffer {buf}, which has {sizes[buf]} bytes",
                )
            if not bufs[2 + buf]:
                raise _malformed(fmt, f"data buffer {buf} is NULL")
            keys.append(ctypes.string_at(bufs[2 + buf] + start, n))
        return keys
    else:  # fixed
        width = _fixed_width(fmt)
        if width > 0 and not bufs[1]:
            raise _malformed(fmt, "the data buffer is NULL")
        data = _bytes_at(bufs[1], width * (off + length))
        keys = [data[i * width : (i + 1) * width] for i in range(off, off + length)]
    if valid is not None:
        keys = [k if ok else None for k, ok in zip(keys, valid, strict=True)]
    return keys


# ---- export: a column of keys with nulls, for the compiled reader --------------------------

_EXPORTED: dict[int, Any] = {}  # the buffers of each export, until its consumer releases it
_RELEASE_SCHEMA = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
_RELEASE_ARRAY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
_EXPORT_IDS = itertools.count(1)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


def _released(p: Any) -> None:
    """A release callback: the consumer's struct marked released; the export's buffers
    dropped once its schema and its array are both released."""
    key = p.contents.private_data
    p.contents.release = type(p.contents.release)()
    entry = _EXPORTED.get(key)
    if entry is not None:
        entry[0] -= 1
        if entry[0] == 0:
            del _EXPORTED[key]


# the callbacks live as long as the module (a consumer may release at any time)
_RELEASE_SCHEMA_CB = _RELEASE_SCHEMA(_released)
_RELEASE_ARRAY_CB = _RELEASE_ARRAY(_released)


class KeyColumn:
    """A large_binary Arrow array of ``keys`` (``bytes``, ``None`` for a null), exported
    through ``__arrow_c_array__`` (buffers made with numpy; the release callbacks run
    Python). It is how a batch with nulls from Python objects (a pandas object Series, a
    numpy masked array) reaches the compiled reader, which takes nulls only in columns."""

    def __init__(self, keys: list[Optional[bytes]]):
        present = [k if k is not None else b"" for k in keys]
        lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
        self.offsets = np.zeros(len(keys) + 1, dtype="<i8")
        np.cumsum(lengths, out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(present), dtype=np.uint8) if present else np.zeros(0, np.uint8)
        valid = np.fromiter((k is not None for k in keys), dtype=np.bool_, count=len(keys))
        self.null_count = len(keys) - int(valid.sum())
        self.validity = np.packbits(valid, bitorder="little")
        self.length = len(keys)

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        schema, array = ArrowSchema(), ArrowArray()
        schema.format = b"Z"
        schema.flags = 2  # nullable
        ptrs = (ctypes.c_void_p * 3)(
            self.validity.ctypes.data if self.null_count else None,
            self.offsets.ctypes.data,
            self.data.ctypes.data if self.data.size else None,
        )
        array.length, array.null_count, array.offset, array.n_buffers = self.length, self.null_count, 0, 3
        array.buffers = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
        key = next(_EXPORT_IDS)
        _EXPORTED[key] = [2, self, schema, array, ptrs]  # two structs left to release
        schema.private_data = array.private_data = key
        schema.release, array.release = _RELEASE_SCHEMA_CB, _RELEASE_ARRAY_CB
        return (
            _capsule_new(ctypes.addressof(schema), b"arrow_schema", None),
            _capsule_new(ctypes.addressof(array), b"arrow_array", None),
        )
