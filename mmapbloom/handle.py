"""The handle of an open filter: one object bound once to the image, through which every
hot operation goes (add, contains, add_many, contains_many, and the counting filter's
remove and count), with the write lock and the items counter included.

:func:`attach` makes it when a filter attaches its storage:

* native backend: ``mmapbloom._kernels.Handle``, a C object holding the image buffer
  (exported once), the cells, the items word, m, k, strategy, cell width and the
  :class:`~mmapbloom.locking.WriteLock`'s state. A write takes a free lock in C (thread
  lock, ``flock(LOCK_EX | LOCK_NB)``), sets the cells, bumps the items word and unlocks
  with the GIL held; only a real wait calls :meth:`WriteLock.acquire`. A batch resolves
  its keys once, hashes each chunk before taking the lock (without the GIL for large
  chunks), then tests-and-sets the chunk and bumps the counter once under the lock.
  Every touch of the mapping runs under a SIGBUS guard (``_guard.h``): a file that
  another program truncated under the handle raises LengthMismatchError (``hooks.faulted``).
  A cut inside the mapping's last page does not fault (the rest of the page reads as
  zeros): each guarded section first touches the mapping's last byte, and an op whose
  cells lie in the last page (or a batch chunk) compares the file's size first
  (``hooks.check_size``, through ``mmap.size()``).
* pure path: :class:`PyHandle` below, the reference with the same semantics over
  :mod:`mmapbloom.kernels`' Python functions (and the only path for custom strategies).
  It checks the file's size (``hooks.check_size``: one ``fstat``) before each per-item operation
  and each batch chunk, so a file truncated under the handle raises LengthMismatchError;
  a truncation landing between that check and the touch can still end in SIGBUS.

Both answer and write identically (tests/test_backends.py). Either handle raises and warns
through the filter's :class:`Hooks` (the warnings after the lock is released, pointing at
the user's frame: :func:`mmapbloom._warn.user_stacklevel`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, NoReturn, Optional, Sequence


from . import format as fmt
from . import kernels
from .batches import KeysWithNulls
from .hashing import kernel_keys
from .items import ItemsCounter
from .locking import WriteLock, deferred_signals

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = ["CHUNK_KEYS", "FilterBase", "Geometry", "Hooks", "Layout", "PyFilterBase", "PyHandle", "attach"]

#: Keys per write-lock acquisition in the batch writers (``add_many``, ``update``): other
#: writers interleave between chunks, never inside one (the native handle uses the same
#: number, fewer keys for a very large k so that a chunk's positions stay within 8 MiB).
CHUNK_KEYS = 1 << 16


class Layout(NamedTuple):
    """Where a filter's cells are in its image and what they are."""

    config: Any  #: the BloomConfig: m (num_bits), k (num_hashes), strategy
    cell_bits: int  #: 1 (Bloom bits), 4 or 8 (counters)
    header_size: int  #: where the cells start (the items word is at format.ITEMS_OFFSET)


class Geometry(NamedTuple):
    """The native Handle's geometry argument (built by :func:`attach`)."""

    strategy_id: int
    m: int
    k: int
    width: int
    header_size: int
    items_offset: int


class Hooks(NamedTuple):
    """What a handle calls on its filter's behalf. None may reference the filter (the C
    handle holds them: no reference cycle)."""

    closed: Callable[[], NoReturn]  #: raise FilterClosedError
    readonly: Callable[[], NoReturn]  #: raise the write refusal of a read-only handle
    check_size: Callable[[], None]  #: the pure handle, before each touch: LengthMismatchError if truncated
    faulted: Callable[[], NoReturn]  #: a touch of the mapping faulted (the native SIGBUS guard)
    over: Callable[[int], None]  #: ``over(count)``: the native handle's over-capacity warning
    saturated: Optional[Callable[[], None]]  #: the counting filter's saturation warning, or None


class PyFilterBase:
    """The filters' base class on the pure path: the hot API straight to the handle.

    On the native backend the base is ``mmapbloom._kernels.FilterBase``, the same three
    entries in C, so ``x in f`` and ``f.add(x)`` cost no Python frame at all."""

    __slots__ = ("_h",)

    _h: Any

    def add(self, item: Any) -> bool:
        """Add one item (str, hashed as UTF-8, bytes-like, or int: the rule of
        :func:`~mmapbloom.hashing.encode_key`); return True if it was new
        (some bit was 0; for a counting filter, some counter was 0).

        An atomic test-and-set across threads and processes: when several add the same
        new item at once, exactly one gets True. Cost: one hash and k cell operations under
        the write lock (one ``flock`` pair unless the caller holds ``write_lock()``); the
        items counter is bumped under the same lock. Counting filters: saturated counters
        stay at their maximum (SaturationWarning once per handle). OverCapacityWarning
        once per handle past the design point.

        Raises:
            TypeError (another item type), KeyEncodingError (a str with lone
            surrogates), ReadOnlyFilterError, FilterClosedError, SelfDeadlockError (this
            thread holds the file's lock through another handle), LengthMismatchError
            (the file was truncated under the open handle).
        """
        return bool(self._h.add(item))

    def might_contain(self, item: Any) -> bool:
        """True if ``item`` (str, bytes-like or int) may have been added; False only if it
        certainly was not (no false negatives). Same as ``item in f``. Takes no lock;
        stops at the first zero cell: one hash and at most k cell reads (fewer for most
        absent items).

        Raises TypeError (an item of another type, bool, float, None), OverflowError (an
        int outside [-2**63, 2**64)), FilterClosedError, LengthMismatchError (the file was
        truncated under the open handle).
        """
        return bool(self._h.contains(item))

    __contains__ = might_contain


if TYPE_CHECKING:  # the compiled FilterBase has the same interface (_kernels.pyi)
    FilterBase = PyFilterBase
else:
    FilterBase = kernels.native_module().FilterBase if kernels.native_module() is not None else PyFilterBase


def attach(
    image: Any,
    layout: Layout,
    lock: WriteLock,
    counter: ItemsCounter,
    hooks: Hooks,
    *,
    writable: bool,
    pure: bool = False,
) -> Any:
    """The handle of a filter over ``image`` (header + cells; a bytearray or an mmap).

    Args:
        layout: the cells' geometry. lock: the storage's write lock. counter: the items
            counter over the same image. hooks: the filter's errors and warnings.
        writable: False for a read-only handle (writes call ``hooks.readonly``).
        pure: the pure-Python handle even where the native one is available (tests).
    """
    native = kernels.native_module()
    config = layout.config
    kernel_id = config.strategy.kernel_id
    if native is not None and kernel_id is not None and not pure:
        geometry = Geometry(
            kernel_id, config.num_bits, config.num_hashes, layout.cell_bits, layout.header_size, fmt.ITEMS_OFFSET
        )
        return native.Handle(image, geometry, lock, hooks, writable, counter.limit)
    body = memoryview(image)[layout.header_size :]
    bound = kernels.bind_pure(body, config.strategy, config.num_bits, config.num_hashes, layout.cell_bits)
    return PyHandle(bound, body, layout.cell_bits, lock, counter, writable, hooks)


class PyHandle:
    """The pure-Python handle: :mod:`mmapbloom.kernels`' reference functions behind the
    same interface and guarantees as ``mmapbloom._kernels.Handle`` (see the module
    docstring). Thread- and process-safe for writes (the write lock); queries take none."""

    __slots__ = ("_k", "_body", "_width", "_lock", "_counter", "_writable", "_hooks", "closed")

    backend = "python"

    def __init__(
        self,
        bound: kernels.Kernels,
        body: memoryview,
        width: int,
        lock: WriteLock,
        counter: ItemsCounter,
        writable: bool,
        hooks: Hooks,
    ):
        self._k = bound
        self._body = body
        self._width = width
        self._lock = lock
        self._counter = counter
        self._writable = writable
        self._hooks = hooks
        self.closed = False

    @property
    def warned(self) -> bool:
        return self._counter.warned

    def _refuse(self, write: bool) -> Any:
        (self._hooks.readonly if write and not self.closed else self._hooks.closed)()
        raise ValueError("operation on a closed filter")  # pragma: no cover - the hooks raise

    def _write(self, op: Callable[[Any], Any], key: Any) -> Any:
        """Run ``op(key)`` under the write lock (re-entered inside ``write_lock()``)."""
        if self.closed or not self._writable:
            self._refuse(True)
        lock = self._lock
        held = lock.owned()
        try:
            if held and lock.depth:  # inside this thread's write_lock(): the file lock is held
                return op(key)
            lock.acquire()
            try:
                return op(key)
            finally:
                lock.release()
        except ValueError:  # e.g. closed by another thread meanwhile
            if self.closed:
                self._refuse(False)
            raise
        except BaseException:  # a KeyboardInterrupt inside the lock code: never leave it held
            lock.recover(held)
            raise

    def _add_locked(self, key: Any) -> tuple[bool, bool]:
        self._hooks.check_size()  # a truncated file raises, never SIGBUS
        if self._width == 1:
            new, sat = self._k.add(key), False
        else:
            new, sat = self._k.add(key)
        if new:
            self._counter.bump(1)
        return new, sat

    def add(self, key: Any) -> bool:
        """Add one key; True if it was new (the lock taken around cells and counter)."""
        new, sat = self._write(self._add_locked, key)
        self._warn(sat)
        return bool(new)

    def _remove_locked(self, key: Any) -> int:
        self._hooks.check_size()  # a truncated file raises, never SIGBUS
        result: int = self._k.remove(key)
        if result > 0:
            self._counter.bump(-1)
        return result

    def remove(self, key: Any) -> int:
        """Counting: -1 (certainly absent, nothing changed), 1 (a counter returned to 0), 0."""
        if self._width == 1:
            raise TypeError("remove needs a counting handle")
        result: int = self._write(self._remove_locked, key)
        self._warn(False)
        return result

    def _warn(self, sat: bool) -> None:
        """The warnings of a write, after the lock is released, at the user's frame."""
        self._counter.flush()
        if sat and self._hooks.saturated is not None:
            self._hooks.saturated()

    def _warn_committed(self, sat: bool, committed: int) -> None:
        """:meth:`_warn` after a batch: a warning made an error (``-W error``) carries
        ``committed_items`` (every key was committed before it), as every exception
        leaving a batch writer does."""
        try:
            self._warn(sat)
        except BaseException as exc:
            exc.committed_items = committed  # type: ignore[attr-defined]
            raise

    def contains(self, key: Any) -> bool:
        """True if the key may be present; stops at the first zero cell. No lock."""
        if self.closed:
            self._refuse(False)
        try:
            self._hooks.check_size()  # a truncated file raises, never SIGBUS
            return bool(self._k.contains(key))
        except ValueError:
            if self.closed:
                self._refuse(False)
            raise

    def count(self, key: Any) -> int:
        """Counting: the minimum of the key's counters (0: certainly absent). No lock."""
        if self._width == 1:
            raise TypeError("count needs a counting handle")
        if self.closed:
            self._refuse(False)
        try:
            self._hooks.check_size()  # a truncated file raises, never SIGBUS
            return int(self._k.count(key))
        except ValueError:
            if self.closed:
                self._refuse(False)
            raise

    def add_many(self, keys: Iterable[Any], out: Optional[npt.NDArray[np.bool_]] = None) -> int:
        """Add every key in order (as sequential :meth:`add`); returns the number of new
        keys and sets ``out[i]`` where key i was new. Every key is validated first; the
        lock is taken once per chunk of :data:`CHUNK_KEYS` keys, with SIGINT, SIGTERM and
        SIGHUP held during each commit; an exception carries ``committed_items``."""
        if self.closed or not self._writable:
            self._refuse(True)
        committed = 0
        total = 0
        saturated = False
        try:
            # every item validated before any cell changes; a column (KeysWithNulls, from
            # batches.as_batch) is validated already, its nulls skipped by the kernels
            seq = keys if type(keys) is KeysWithNulls else kernel_keys(keys)
            if out is not None and len(out) != len(seq):
                raise ValueError(f"out has {len(out)} bytes, expected {len(seq)} (one per key)")
            add_many = self._k.add_many
            for start in range(0, len(seq), CHUNK_KEYS):
                chunk = seq[start : start + CHUNK_KEYS]
                with self._lock, deferred_signals():  # wait interruptibly; hold signals while committing
                    if self.closed:
                        self._refuse(False)
                    self._hooks.check_size()  # per chunk: a truncated file raises, never SIGBUS
                    flags, new, *sat = add_many(chunk)  # counting kernels add "saturated"
                    if new:
                        self._counter.bump(new)
                    committed = start + len(chunk)
                if out is not None:
                    out[start : start + len(chunk)] = flags
                total += new
                saturated = saturated or bool(sat and sat[0])
        except ValueError as exc:
            exc.committed_items = committed  # type: ignore[attr-defined]
            self._counter.flush_on_error()
            if self.closed:
                try:
                    self._refuse(False)
                except ValueError as closed:  # closed by another thread meanwhile
                    closed.committed_items = committed  # type: ignore[attr-defined]
                    raise
            raise
        except BaseException as exc:  # KeyboardInterrupt: tell the caller how far it got
            exc.committed_items = committed  # type: ignore[attr-defined]
            self._counter.flush_on_error()
            raise
        self._warn_committed(saturated, committed)
        return total

    def contains_many(self, keys: Sequence[Any], out: npt.NDArray[np.bool_]) -> None:
        """``out[i]`` = key i may be present. No lock."""
        if self.closed:
            self._refuse(False)
        try:
            self._hooks.check_size()  # a truncated file raises, never SIGBUS
            out[:] = self._k.contains_many(keys if isinstance(keys, (list, tuple)) else list(keys))
        except ValueError:
            if self.closed:
                self._refuse(False)
            raise

    # -- several handles of one geometry (the expiring filter's periods) ----------------
    def _others(self, others: Sequence["PyHandle"]) -> Sequence["PyHandle"]:
        """``others`` checked: a list or tuple of open pure handles of this one's cell width
        and body size (the native handle compares strategy, m, k and width)."""
        if not isinstance(others, (list, tuple)):
            raise TypeError(f"others must be a list or tuple of Handles, got {type(others).__name__}")
        for i, o in enumerate(others):
            if not isinstance(o, PyHandle):
                raise TypeError(f"others[{i}] must be a Handle, got {type(o).__name__}")
            if o.closed:
                o._refuse(False)
            if o._width != self._width or len(o._body) != len(self._body):
                raise ValueError(
                    f"others[{i}] has geometry (width {o._width}, {len(o._body)} body bytes), "
                    f"expected ({self._width}, {len(self._body)})"
                )
        return others

    def _found_in(self, others: Sequence["PyHandle"], keys: Sequence[Any]) -> npt.NDArray[np.bool_]:
        """Key i may be in one of ``others`` (each asked only about the keys not yet found)."""
        found = np.zeros(len(keys), dtype=np.bool_)
        for o in others:
            todo = np.flatnonzero(~found)
            if todo.size == 0:
                break
            o._hooks.check_size()
            sub = [keys[i] for i in todo.tolist()]
            found[todo] = o._k.contains_many(type(keys)(sub) if type(keys) is KeysWithNulls else sub)
        return found

    def add_many_unless(
        self, others: Sequence["PyHandle"], keys: Iterable[Any], out: Optional[npt.NDArray[np.bool_]] = None
    ) -> int:
        """Test-and-set each key in this handle unless one of ``others`` may hold it, in
        order (as sequential :meth:`add_unless`); returns the number of keys new here and
        sets ``out[i]`` where key i was. :meth:`add_many`'s rules: every key validated
        first, the lock taken once per chunk (``others`` probed under it), an exception
        carries ``committed_items``."""
        committed = 0
        total = 0
        saturated = False
        try:
            if self.closed or not self._writable:
                self._refuse(True)
            others = self._others(others)
            seq = keys if type(keys) is KeysWithNulls else kernel_keys(keys)
            if out is not None and len(out) != len(seq):
                raise ValueError(f"out has {len(out)} bytes, expected {len(seq)} (one per key)")
            add_many = self._k.add_many
            for start in range(0, len(seq), CHUNK_KEYS):
                chunk = seq[start : start + CHUNK_KEYS]
                with self._lock, deferred_signals():
                    if self.closed:
                        self._refuse(False)
                    self._hooks.check_size()
                    found = self._found_in(others, chunk)
                    where = np.flatnonzero(~found)
                    sub = [chunk[i] for i in where.tolist()]
                    flags, new, *sat = add_many(KeysWithNulls(sub) if type(chunk) is KeysWithNulls else sub)
                    if new:
                        self._counter.bump(new)
                    committed = start + len(chunk)
                if out is not None:
                    full = np.zeros(len(chunk), dtype=np.bool_)
                    full[where] = flags
                    out[start : start + len(chunk)] = full
                total += new
                saturated = saturated or bool(sat and sat[0])
        except BaseException as exc:
            exc.committed_items = committed  # type: ignore[attr-defined]
            self._counter.flush_on_error()
            raise
        self._warn_committed(saturated, committed)
        return total

    def contains_many_any(self, others: Sequence["PyHandle"], keys: Sequence[Any], out: npt.NDArray[np.bool_]) -> None:
        """``out[i]`` = key i may be in this handle or in one of ``others``. No lock."""
        others = self._others(others)
        self.contains_many(keys, out)
        if not others:
            return
        seq = keys if isinstance(keys, (list, tuple)) else list(keys)
        todo = np.flatnonzero(np.frombuffer(out, dtype=np.uint8) == 0)
        sub = [seq[i] for i in todo.tolist()]
        got = self._found_in(others, KeysWithNulls(sub) if type(seq) is KeysWithNulls else sub)
        for i in todo[got].tolist():
            out[i] = 1

    def contains_any(self, others: Sequence["PyHandle"], key: Any) -> bool:
        """True if ``key`` may be in this handle or in one of ``others``. No lock."""
        others = self._others(others)
        return self.contains(key) or any(o.contains(key) for o in others)

    def add_unless(self, others: Sequence["PyHandle"], key: Any) -> bool:
        """Under this handle's write lock: False if one of ``others`` may hold ``key``
        (nothing written), else add it here: True if it was new."""
        if self.closed or not self._writable:
            self._refuse(True)
        others = self._others(others)

        def op(k: Any) -> tuple[bool, bool]:
            if any(o.contains(k) for o in others):
                return False, False
            return self._add_locked(k)

        new, sat = self._write(op, key)
        self._warn(sat)
        return bool(new)

    def close(self) -> None:
        """Refuse every later call; release the view of the cells (idempotent). A view
        still exported to a call in flight in another thread is dropped instead: the
        mapping stays valid for it."""
        self.closed = True
        try:
            self._body.release()
        except BufferError:
            pass
