"""The pure path's Arrow reader: the keys of an Arrow column through the Arrow C Data
Interface, in ctypes and numpy (no pyarrow), as a list of ``bytes`` with ``None`` for nulls.

It reads what the compiled reader (``mmapbloom/_columns.c``) reads, by the same rules:
utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary,
int8..int64 and uint8..uint64 (each integer as the 8 little-endian bytes of its value mod
2^64), dictionaries of those, chunked streams, slices (offsets) and streams of one-column
record batches. It creates Python objects per key, so it is the reference, not the fast path.

Structs and the move semantics follow the Arrow C Data Interface and its PyCapsule
interface (https://arrow.apache.org/docs/format/CDataInterface.html); the capsule's
struct is moved out (its release set to NULL) and released here when the keys are read.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any, Optional

import numpy as np

__all__ = ["read_keys"]


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
_KEY_TYPES = (
    "utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary, int8..int64, "
    "uint8..uint64, or a dictionary of those"
)


def _moved(capsule: Any, name: bytes, struct: Any) -> Any:
    """Copy the struct out of the capsule and mark the capsule's copy released (moved)."""
    src = struct.from_address(_capsule_pointer(capsule, name))
    out = struct()
    ctypes.pointer(out)[0] = src
    src.release = type(src.release)()
    if not out.release:
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
    if hasattr(t, "__arrow_c_stream__"):
        stream = _moved(obj.__arrow_c_stream__(), b"arrow_array_stream", ArrowArrayStream)
        try:
            schema = ArrowSchema()
            if stream.get_schema(ctypes.byref(stream), ctypes.byref(schema)) != 0:
                raise ValueError(f"Arrow stream get_schema failed: {stream.get_last_error(ctypes.byref(stream))!r}")
            arrays = []
            while True:
                arr = ArrowArray()
                if stream.get_next(ctypes.byref(stream), ctypes.byref(arr)) != 0:
                    raise ValueError(f"Arrow stream get_next failed: {stream.get_last_error(ctypes.byref(stream))!r}")
                if not arr.release:
                    break
                arrays.append(arr)
        finally:
            stream.release(ctypes.byref(stream))
    else:
        schema_cap, array_cap = obj.__arrow_c_array__()
        schema = _moved(schema_cap, b"arrow_schema", ArrowSchema)
        arrays = [_moved(array_cap, b"arrow_array", ArrowArray)]
    try:
        out: list[Optional[bytes]] = []
        record = schema.format == b"+s"
        if record and schema.n_children != 1:
            raise TypeError(f"an Arrow key batch must have one column, got {schema.n_children} columns")
        for arr in arrays:
            if record:
                if arr.null_count != 0 and arr.buffers[0]:
                    raise ValueError("malformed Arrow array of format '+s': a record batch with null rows")
                child = arr.children[0].contents
                out.extend(_keys(schema.children[0].contents, child, arr.offset, arr.length))
            else:
                out.extend(_keys(schema, arr, 0, arr.length))
        return out
    finally:
        for arr in arrays:
            arr.release(ctypes.byref(arr))
        if schema.release:
            schema.release(ctypes.byref(schema))


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


def _keys(
    schema: ArrowSchema, arr: ArrowArray, extra: int, length: int, in_dict: bool = False
) -> list[Optional[bytes]]:
    """Keys ``[0, length)`` of one array (``extra``: a parent record batch's offset)."""
    fmt = schema.format.decode()
    off = arr.offset + extra
    bufs = arr.buffers
    if length == 0:
        if schema.dictionary or fmt in _INTS or fmt in ("u", "U", "z", "Z", "vu", "vz") or fmt.startswith("w:"):
            return []
        raise _bad_type(fmt, in_dict)
    valid = None
    if arr.null_count != 0 and bufs[0]:
        bits = np.frombuffer(_bytes_at(bufs[0], (off + length + 7) // 8), dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[off : off + length].astype(np.bool_).tolist()
    keys: list[Optional[bytes]]
    if schema.dictionary:
        if in_dict:
            raise _bad_type(schema.dictionary.contents.format.decode(), True)
        index = np.frombuffer(_bytes_at(bufs[1], (off + length) * np.dtype(_INTS[fmt]).itemsize), dtype=_INTS[fmt])[
            off:
        ].tolist()
        dictionary = arr.dictionary.contents
        values = _keys(schema.dictionary.contents, dictionary, 0, dictionary.length, True)
        keys = [values[i] if 0 <= i < len(values) else None for i in index]
    elif fmt in _INTS:
        ints = np.frombuffer(_bytes_at(bufs[1], (off + length) * np.dtype(_INTS[fmt]).itemsize), dtype=_INTS[fmt])
        wide = ints[off:].astype("<i8" if fmt.islower() else "<u8").tobytes()
        keys = [wide[i : i + 8] for i in range(0, 8 * length, 8)]
    elif fmt in ("u", "z", "U", "Z"):
        dtype = "<i4" if fmt in ("u", "z") else "<i8"
        offsets = np.frombuffer(_bytes_at(bufs[1], (off + length + 1) * np.dtype(dtype).itemsize), dtype=dtype)
        offsets = offsets[off:].tolist()
        data = _bytes_at(bufs[2], offsets[-1])
        keys = [data[a:b] for a, b in itertools.pairwise(offsets)]
    elif fmt in ("vu", "vz"):
        views = _bytes_at(bufs[1], 16 * (off + length))
        ndata = arr.n_buffers - 3
        keys = []
        for i in range(off, off + length):
            v = views[16 * i : 16 * i + 16]
            n = int.from_bytes(v[:4], "little", signed=True)
            if n <= 12:
                keys.append(v[4 : 4 + n])
            else:
                buf = int.from_bytes(v[8:12], "little", signed=True)
                start = int.from_bytes(v[12:16], "little", signed=True)
                keys.append(ctypes.string_at(bufs[2 + buf] + start, n) if 0 <= buf < ndata else None)
    elif fmt.startswith("w:"):
        width = int(fmt[2:])
        data = _bytes_at(bufs[1], width * (off + length))
        keys = [data[i * width : (i + 1) * width] for i in range(off, off + length)]
    else:
        raise _bad_type(fmt, in_dict)
    if valid is not None:
        keys = [k if ok else None for k, ok in zip(keys, valid, strict=True)]
    return keys
