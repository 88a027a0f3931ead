"""Type stub of the optional C extension ``mmapbloom._kernels`` (sources: mmapbloom/_*.c;
_module.c lists the units).

Keys are ``str`` (hashed as UTF-8), bytes-likes or ``int`` (mmapbloom.hashing.encode_key's
rule); images and ``out`` arrays are buffers (``out`` one byte per key, e.g. a numpy bool
array).  Strategy ids: 1 = M3KM, 2 = M3MX, 3 = M3BL, 4 = M3M2, 5 = M3B2; ``width`` is 1
(bits), 4 or 8 (counters).
"""

from typing import Any, Iterable, Optional, Protocol, Union

import numpy as np
from typing_extensions import Buffer

# numpy arrays are buffers, but numpy's stubs say so only for Python >= 3.12.
_Buf = Union[Buffer, np.ndarray[Any, Any]]

_Key = Union[str, bytes, bytearray, memoryview, int]

class Column:
    """Keys read in place from an Arrow column or a fixed-width buffer (_columns.h)."""
    def __len__(self) -> int: ...
    def __getitem__(self, index: slice, /) -> "Column": ...

class _HasFileno(Protocol):
    def fileno(self) -> int: ...

M3KM: int
M3MX: int
M3BL: int
M3M2: int
M3B2: int
MAX_K: int

def hash128(key: _Key, /) -> int: ...
def positions(strategy_id: int, key: _Key, m: int, k: int, /) -> list[int]: ...
def arrow_column(obj: Any, /) -> Column: ...
def fixed_column(buf: _Buf, width: int, strip_nul: bool, /) -> Column: ...
def scan(dst: _Buf, dst_offset: int, src: _Buf, src_offset: int, count: int, op: int, /) -> Optional[int]: ...
def scan_bytes(src: _Buf, offset: int, count: int, /) -> Optional[bytes]: ...
def flock_try(fd: Union[int, _HasFileno], /) -> bool: ...
def flock_unlock(fd: Union[int, _HasFileno], /) -> None: ...

class LockState:
    """The C half of ``mmapbloom.locking.WriteLock`` (its base class)."""

    _depth: int
    _flock_fd: int
    _stale: bool
    _closed: bool
    def __init__(self, *args: object) -> None: ...
    def _tacquire(self, timeout: float | None = -1.0, /) -> bool: ...
    def _trelease(self) -> None: ...
    def _towned(self) -> bool: ...
    def _treset(self) -> None: ...

class Handle:
    """One open filter bound once (see ``mmapbloom.handle``)."""

    closed: bool
    warned: bool
    backend: str
    def __init__(
        self,
        image: _Buf,
        header_size: int,
        items_offset: int,
        strategy_id: int,
        m: int,
        k: int,
        width: int,
        writable: bool,
        lock: LockState,
        warn_at: float,
        fail: Any,
        over: Any,
        saturated: Any,
    ) -> None: ...
    def add(self, key: _Key, /) -> bool: ...
    def contains(self, key: _Key, /) -> bool: ...
    def add_many(self, keys: Iterable[_Key] | Column, out: _Buf | None = None, /) -> int: ...
    def contains_many(self, keys: Iterable[_Key] | Column, out: _Buf, /) -> None: ...
    def remove(self, key: _Key, /) -> int: ...
    def count(self, key: _Key, /) -> int: ...
    def close(self) -> None: ...

class FilterBase:
    """Base class of the filters on the native backend (see ``mmapbloom.handle``)."""

    _h: Any
    def add(self, item: _Key, /) -> bool: ...
    def might_contain(self, item: _Key, /) -> bool: ...
    def __contains__(self, item: object, /) -> bool: ...
