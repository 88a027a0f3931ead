"""The lifecycle every filter handle shares: closing once (waiting for writes in flight),
refusing use after close, the context manager, closing at garbage collection, and what
``copy.copy`` / ``copy.deepcopy`` do (never a second handle on the same files).

A handle kind provides ``closed`` (a property), ``_describe()`` (its path, for messages),
``_close_lock()`` (the thread lock its writers hold) and ``_release()`` (refuse writes
first, then unmap and close its files; called once, under that lock). :class:`MappedFilter
<mmapbloom.base.MappedFilter>` and :class:`ScalableBloomFilter
<mmapbloom.scalable.ScalableBloomFilter>` are the two kinds.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar, Union

from .errors import FilterClosedError

__all__ = ["Lifecycle"]

H = TypeVar("H", bound="Lifecycle")


class Lifecycle:
    """Mixin: ``close()`` (idempotent, thread-safe), ``_check_open()``, ``with`` and
    ``__del__``. Thread safety: ``close()`` takes the handle's thread lock, so a write in
    flight in another thread finishes first; later calls raise :class:`FilterClosedError`."""

    __slots__ = ()

    @property
    def closed(self) -> bool:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def _describe(self) -> str:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def _close_lock(self) -> Union[threading.Lock, threading.RLock, Any]:  # pragma: no cover
        raise NotImplementedError

    def _release(self) -> None:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def close(self) -> None:
        """Close the handle (idempotent). Does not flush. Waits for this handle's writes in
        flight in other threads; later use raises FilterClosedError (a ``ValueError``)."""
        if self.closed:
            return
        with self._close_lock():
            if self.closed:
                return
            self._release()

    def _check_open(self) -> None:
        if self.closed:
            raise FilterClosedError(f"{self._describe()}: filter is closed")

    def __enter__(self: H) -> H:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __copy__(self: H) -> H:
        """``copy.copy(f)``: :meth:`_stdlib_copy` (an independent filter, or TypeError)."""
        return self._stdlib_copy("copy.copy")

    def __deepcopy__(self: H, memo: dict[int, Any]) -> H:
        """``copy.deepcopy(f)``: as ``copy.copy(f)`` (a filter holds no Python objects to
        copy deeper)."""
        out = self._stdlib_copy("copy.deepcopy")
        memo[id(self)] = out
        return out

    def _stdlib_copy(self: H, how: str) -> H:
        """What the stdlib copies give. The default (a kind with no in-memory form, such as
        :class:`~mmapbloom.scalable.ScalableBloomFilter`) refuses: the copy the pickle
        protocol would make is a second handle on the same files, whose writes the
        original sees. A kind with ``copy()`` returns that (:class:`MappedFilter
        <mmapbloom.base.MappedFilter>`)."""
        raise TypeError(
            f"{how}() of a {type(self).__name__} ({self._describe()}) is refused: it would be a second "
            f"handle on the same files, not an independent filter. Use {type(self).__name__}.open(path) "
            f"for a second handle, or copy the directory while no one writes and open the copy"
        )

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (a finalizer must not raise)
            pass
