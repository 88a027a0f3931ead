"""Locking: the one place that takes a filter's write lock.

A write lock is a re-entrant thread lock (``threading.RLock``) plus, for file-backed
filters, a cross-process lock: the robust mutex of the file's side file (mutex mode, below)
where it can be used, else an exclusive ``flock`` on the filter file, taken through
portalocker's protocol (flock mode; what every version before had).

The robust mutex (mutex mode). A ``pthread_mutex_t`` with ``PTHREAD_PROCESS_SHARED`` and
``PTHREAD_MUTEX_ROBUST`` in a 256-byte side file ``PATH + ".mutex"`` mapped ``MAP_SHARED``
(``mmapbloom/_mutex.c``: layout, header checks, EOWNERDEAD recovery). Next to the file, not
in ``/dev/shm``: two containers that share a volume have different ``/dev/shm`` and would
get two mutexes. One side file serves one PID namespace, its creator's (recorded in its
header; ``_mutex.c``): robust futexes name their owner by a thread id local to its PID
namespace, so a waiter in another namespace whose tid equals the holder's would, SIGKILLed
while waiting, make the kernel mark the live holder dead (``list_op_pending``), or unlock it.
A process of another namespace finds the side file invalid and waits like any newcomer. Its header names the locked file's st_dev/st_ino, the side file's own
st_ino (a copy is refused), the libc and ``sizeof(pthread_mutex_t)``, with an initialised
word written last; a side file that does not match is never used. Used when the compiled
extension is there (also on the pure backend), the file system is a known local one
(``mutex_supported``), ``MMAPBLOOM_LOCK`` is not ``flock`` and the path is not a
``storage`` temporary. ``MMAPBLOOM_LOCK=mutex`` requires it: where it cannot be used (any
reason above but the temporary, or a side file that cannot be made or opened) the first
acquire raises ConfigError naming the file and the reason, holding nothing. An uncontended lock+unlock costs tens of ns instead of a ``flock``
pair's hundreds; a holder killed at any point leaves ``EOWNERDEAD`` to the next locker,
which makes the mutex consistent (counted in the header) and goes on: as after a SIGKILL
of a flock holder, the adds it acknowledged are in the bits, and ``items_added`` may lag
by the killed add (bits are set before the count).

Mixed locks are impossible, not unlikely. A lock in mutex mode holds ``flock(LOCK_SH)`` on
its own description of the file from its first acquire until close; a lock in flock mode
(forced, unsupported, side file impossible, an older mmapbloom) takes ``LOCK_EX`` per write.
SH and EX exclude each other, so no flock-mode write happens while a mutex-mode writer has
the file open, and the reverse. The side file is created (temporary name, the file's
permission bits, rename) only while this lock holds ``LOCK_EX``, when no mutex-mode writer
exists; it is used only once ``LOCK_SH`` is held and its path still names the inode mapped,
so every mutex-mode writer of a file uses the same mutex. A side file that is missing or
invalid while others hold ``LOCK_SH`` (deleted or replaced under running writers) cannot
be remade: the newcomer waits like a blocked writer (``LockTimeout`` naming the side file
when it has a timeout), never takes a second mutex. The mode is chosen lazily, at the
first acquire (the fast path goes slow until then: ``_pending``), so readonly opens and
readers never touch the side file; a readonly handle uses an existing side file and never
creates one (until it finds one, it chooses again at each acquire; one that cannot open the
side file read-write snapshots with ``LOCK_EX``, so it waits while mutex-mode writers have
the file open). Handles of one inode in one process share one ``Mutex`` (mapping): a write
through a second handle inside the first's ``write_lock()`` raises SelfDeadlockError as
with flock. In a fork child the lock forgets its mode and mutex (the inherited ``LOCK_SH``
goes with the replaced description, below) and chooses again at its first write.

Why ``flock``: it is what portalocker uses on POSIX (``portalocker.LOCKER`` is
``fcntl.flock``), it is released by the kernel when a process dies (a SIGKILLed writer
never leaves the file locked), and it belongs to the *open file description*, not the
process. That last point matters across ``fork()``: a child that inherits a descriptor
shares the parent's description, and so keeps the parent's lock alive after the parent
dies (the kernel drops a flock only when the last reference to its description goes).

So the lock is never taken on the descriptor that the storage maps (a mapping, and the
descriptor ``mmap`` duplicates internally, also reference that description). Each lock
opens a description of its own on the *same inode* (through ``/proc/self/fd/N``, or by
path with a st_dev/st_ino check, never a different file that now has the path) and flocks
only that one. In a fork child, the ``os.register_at_fork`` hook replaces the inherited
lock descriptor at once, with ``os.dup2`` of a fresh open of the same inode, whether or
not the child ever writes: after the fork no child references the parent's lock
description, so a SIGKILLed holder's lock is released even while its children live, and
the child's own writes are excluded by the parent's lock like any other process's. (Only
if the file cannot be reopened at all, e.g. a mode that denies the owner both read and
write, does the lock fall back to the storage descriptor; then a fork child reopens before
its first write, as before, and the holder's lock lives as long as the child.)

On POSIX, when portalocker's locker is ``fcntl.flock``, the hot path calls
``fcntl.flock`` directly: the same primitive, without portalocker's per-call validation
(about 1 us per lock/unlock pair instead of about 7 us, measured). Elsewhere
(Windows) ``portalocker.lock`` is used as is. The hot path first tries a non-blocking
``flock``; only when the lock is taken it goes to the slow path below.

Waiting (the slow path). Two handles of one file in one process have two descriptions,
so their flocks exclude each other even in one thread. Before waiting, the slow path looks
for another live lock of the same inode held by the *calling* thread: then waiting would
never end, and :class:`~mmapbloom.errors.SelfDeadlockError` is raised at once. Snapshot
reads (:meth:`WriteLock.snapshot`: ``to_bytes``, ``copy``, ``|``, ``to_bloom``) need no
lock at all in that case, since the held lock already excludes every writer, and so
proceed. A timed wait (``write_lock(timeout=...)``) polls with portalocker's public API,
``portalocker.lock(fd, LockFlags.EXCLUSIVE | LockFlags.NON_BLOCKING)``, catching
``portalocker.AlreadyLocked``, with a backoff of 1 ms up to 50 ms, and raises
:class:`~mmapbloom.errors.LockTimeout` at the deadline. (portalocker's own ``Lock`` class
cannot be used: it opens the file itself, and the lock must be on this lock's own
description.)

Thread locks held by other threads when ``fork()`` happens would stay held forever in the
child; the same at-fork hook gives every live lock a fresh thread lock in the child.

The state the uncontended write path needs (the re-entrant thread lock, the depth, the
descriptor to flock, the stale and closed flags) lives in the compiled
``mmapbloom._kernels.LockState``, WriteLock's base class, so that the native handle
(:mod:`mmapbloom.handle`) takes and releases a free lock in C, with the GIL held: thread
lock, ``flock(LOCK_EX | LOCK_NB)`` (mutex mode: ``pthread_mutex_trylock``), the write, unlock.
The lock's ``__enter__`` / ``__exit__`` (``with f.write_lock():``) are LockState's too, over
the same C calls: entering takes a free lock or re-enters a held one without a Python call,
leaving releases one level (a readonly handle's outermost mutex hold, and leaving a block
entered before fork, go through :meth:`WriteLock.release`).
Only a real wait (or a reopen after fork, the mode's first choice, or a closed lock) calls
:meth:`WriteLock.acquire`, the one slow path, here; except that in mutex mode a mutex held
by another *process* is waited for in C (a short spin, then ``pthread_mutex_timedlock`` in
50 ms slices with the GIL released and signal handlers run between them), since that wait
can be neither a self-deadlock nor a wait for a thread of this process. On the
pure path ``_PyLockState`` below holds the same fields around a ``threading.RLock``.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TypeVar, cast

from ._lazy import LazyModule
from .errors import ConfigError, FilterClosedError, LockTimeout, SelfDeadlockError
from .kernels import native_module

if TYPE_CHECKING:
    import portalocker
else:  # imported by the slow paths that call it (a timed wait, non-POSIX), not at import
    portalocker = LazyModule("portalocker")

try:  # POSIX
    import fcntl

    _FLOCK = fcntl.flock
    _LOCK_EX = fcntl.LOCK_EX
    _LOCK_EX_NB = fcntl.LOCK_EX | fcntl.LOCK_NB
    _LOCK_UN = fcntl.LOCK_UN
    # portalocker's POSIX LOCKER is fcntl.flock unless a program already importing it changed it
    _DIRECT_FLOCK = getattr(getattr(sys.modules.get("portalocker"), "portalocker", None), "LOCKER", _FLOCK) is _FLOCK
except ImportError:  # pragma: no cover - Windows
    _DIRECT_FLOCK = False

__all__ = ["TimedWriteLock", "WriteLock", "deferred_signals"]


def _try_flock_gil_released(fd: int) -> bool:
    try:
        _FLOCK(fd, _LOCK_EX_NB)
    except BlockingIOError:
        return False
    return True


def _unlock_flock_gil_released(fd: int) -> None:
    _FLOCK(fd, _LOCK_UN)


# Python's fcntl.flock releases the GIL on every call, even a non-blocking one, so next to a
# CPU-busy thread each lock pair waits for a GIL switch interval (measured: 43-150 us instead
# of 1 us). The compiled kernel's flock_try / flock_unlock keep the GIL for the
# non-blocking attempt and the unlock; only a real wait (the slow path) releases it.
_native_kernels = native_module()
if _DIRECT_FLOCK and _native_kernels is not None:
    _try_flock: Callable[[int], bool] = _native_kernels.flock_try
    _unlock_flock: Callable[[int], None] = _native_kernels.flock_unlock
else:
    _try_flock = _try_flock_gil_released
    _unlock_flock = _unlock_flock_gil_released

# The robust mutex is a lock, not a kernel: it is used on the pure-Python path too (so pure
# and native processes on one file share it), whenever the compiled extension exists.
_mutex_kernels: Any
try:
    from . import _kernels as _mutex_kernels
except ImportError:  # pragma: no cover - no compiled extension: flock only
    _mutex_kernels = None
_Mutex: Any = getattr(_mutex_kernels, "Mutex", None)

#: The environment variable that chooses the cross-process lock: ``"flock"`` forces the file
#: lock; ``"mutex"`` requires the robust mutex (a write lock that cannot use it raises
#: ConfigError naming the file and the reason, never falls back to flock); unset, empty or
#: ``"auto"`` uses the robust mutex where it can (module docstring). Any other value:
#: ConfigError at the first write lock.
LOCK_ENV = "MMAPBLOOM_LOCK"
#: The side file of a write lock in mutex mode: the locked file's path plus this suffix.
SIDE_SUFFIX = ".mutex"


def _is_temporary(path: str) -> bool:
    """A name of files.temporary_path (``.mmapbloom-<pid>-<random>.tmp``; files imports
    this module): never given a side file."""
    name = os.path.basename(path)
    return name.startswith(".mmapbloom-") and name.endswith(".tmp")


def _requested_mode() -> str:
    """``"auto"``, ``"flock"`` or ``"mutex"`` from :data:`LOCK_ENV` (read at each lock's first
    acquire). Raises ConfigError for any other value, naming the valid ones."""
    raw = os.environ.get(LOCK_ENV, "")
    value = raw.strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("flock", "mutex"):
        return value
    raise ConfigError(f"{LOCK_ENV}={raw!r}: expected 'auto', 'flock', 'mutex' or unset (empty)")


def _remove_stale_temporaries(side: str) -> None:
    """Remove the temporaries ``SIDE.<pid>.<tid>.tmp`` that creators of this side file killed
    mid-create left behind. Called by the creator, under ``LOCK_EX`` on the locked file: no
    other creator of this side file is mid-create then (each creates under ``LOCK_EX``), so
    every such name is stale. (A creator for *another* inode that had this path before a
    rename over it holds its own file's lock, not ours: if its temporary goes, its rename
    fails and it takes the path of a side file that cannot be made.) Errors are ignored:
    one left is only litter."""
    folder, prefix = os.path.split(side)
    prefix += "."
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix) : -len(".tmp")].split(".")
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


_Self = TypeVar("_Self", bound="_PyLockState")


class _PyLockState:
    """The pure-Python twin of ``mmapbloom._kernels.LockState`` (same fields and methods):
    a re-entrant thread lock, the file-lock depth, the descriptor to flock (-1: none), the
    stale and closed flags."""

    __slots__ = ("_rlock", "_depth", "_flock_fd", "_stale", "_closed", "_pending", "_mutex", "_readonly")

    def __init__(self, *args: object) -> None:
        self._rlock = threading.RLock()
        self._depth = 0
        self._flock_fd = -1
        self._stale = False
        self._closed = False
        self._pending = False
        self._mutex: Any = None
        self._readonly = False

    def __enter__(self: _Self) -> _Self:
        """Take the write lock (``WriteLock.acquire``); returns the lock."""
        cast(Any, self).acquire()
        return self

    def __exit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        """Release one level (``WriteLock.release``)."""
        cast(Any, self).release()

    def _tacquire(self, timeout: Optional[float] = -1.0) -> bool:
        return self._rlock.acquire(timeout=-1 if timeout is None else timeout)

    def _trelease(self) -> None:
        self._rlock.release()

    def _towned(self) -> bool:
        return self._rlock._is_owned()  # type: ignore[attr-defined,no-any-return]

    def _treset(self) -> None:
        self._rlock = threading.RLock()


if TYPE_CHECKING:  # the compiled LockState has the same fields and methods (_kernels.pyi)
    _LockState = _PyLockState
else:
    _LockState = _native_kernels.LockState if _native_kernels is not None else _PyLockState


class _ThreadLockView:
    """The in-process half of a WriteLock as a context manager (``WriteLock.thread_lock``)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: "WriteLock"):
        self._lock = lock

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._lock._tacquire(timeout if blocking else 0.0))

    def release(self) -> None:
        self._lock._trelease()

    def __enter__(self) -> "_ThreadLockView":
        self._lock._tacquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock._trelease()


_LIVE: "weakref.WeakSet[WriteLock]" = weakref.WeakSet()


def _before_fork() -> None:
    # Runs in the forking thread: remember how deep *it* holds each lock, so that in the
    # child it can still leave its ``with`` blocks (see WriteLock.release).
    for lock in list(_LIVE):
        lock._forker_depth = lock._depth if lock._towned() else 0


def _after_fork_in_child() -> None:
    for lock in list(_LIVE):
        lock._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


class WriteLock(_LockState):
    """Re-entrant exclusive write lock for one filter handle.

    Args:
        fd: the descriptor of the filter file, or ``None`` for an in-memory filter (then
            only the thread lock is used). The lock does not own ``fd`` (it never closes
            it), except for descriptors it reopens itself after a fork.
        path: the file's path, used to reopen after a fork where ``/proc`` is missing.

    Thread-safe; re-entrant within one thread (nested ``with`` blocks take the file lock
    once). Process-safe: two processes, or two handles in one process, exclude each other.
    Fork-safe as described in the module docstring.
    """

    __slots__ = (
        "_fd",
        "_own_fd",
        "_path",
        "_ino",
        "_forker_depth",
        "_inherited",
        "_mode",
        "_soft",
        "__weakref__",
    )

    # Fields of the base (LockState): _depth (nesting of the held lock), _flock_fd (the
    # descriptor flocked: _own_fd, else _fd; -1 in memory), _stale, _closed, _pending (the
    # mode is chosen at the first acquire: the fast path goes slow until then), _mutex (the
    # side file's Mutex in mutex mode, else None).

    def __init__(self, fd: Optional[int], path: Optional[str] = None):
        super().__init__()
        self._depth = 0
        self._fd = fd
        self._own_fd: Optional[int] = None
        self._stale = False
        self._forker_depth = 0
        self._inherited = 0
        self._path = path
        self._closed = False
        self._ino: Optional[tuple[int, int]] = None
        self._mode: Optional[str] = None  # "mutex" or "flock" once chosen (first acquire)
        self._mutex = None
        self._pending = fd is not None
        self._soft = False  # flock mode for a reason that may pass (_wait_soft)
        # A readonly handle locks only for snapshots: in mutex mode it holds LOCK_SH only
        # while it holds the mutex (_leave_mutex_mode), never keeping flock writers out.
        self._readonly = (
            fd is not None and _DIRECT_FLOCK and (fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE) == os.O_RDONLY
        )
        if fd is not None:
            st = os.fstat(fd)
            self._ino = (st.st_dev, st.st_ino)
            try:  # a description of our own, referenced by no mapping (module docstring)
                self._own_fd = self._open_same_inode()
            except OSError:
                self._own_fd = None  # fall back to the storage's descriptor
        self._sync_fd()
        _LIVE.add(self)

    @property
    def mode(self) -> Optional[str]:
        """The cross-process lock this handle uses: ``"mutex"`` (the robust mutex in the side
        file ``path + ".mutex"``, while holding ``flock(LOCK_SH)`` on the file), ``"flock"``
        (an exclusive ``flock`` per write), or ``None``: not chosen yet (no write lock taken
        since open or fork) or in memory."""
        return self._mode

    def owned(self) -> bool:
        """True if the calling thread holds the thread lock."""
        return bool(self._towned())

    @property
    def depth(self) -> int:
        """How many times the holder has entered the lock (0: not held by anyone). Read by
        the pure handles (``handle.PyHandle``, ``cuckoo_kernels``): with :meth:`owned`, a
        depth > 0 means the calling thread is inside its own block and holds the file lock."""
        return int(self._depth)

    def _sync_fd(self) -> None:
        """Publish the descriptor to flock to the base (the native fast path reads it)."""
        fd = self._own_fd if self._own_fd is not None else self._fd
        self._flock_fd = -1 if fd is None else fd  # in-memory filters too: their thread lock is reset after fork

    # -- fork handling --------------------------------------------------------------
    def _reset_after_fork(self) -> None:
        # Runs in the child right after fork(), when only the forking thread exists. The
        # child holds nothing: not the thread lock (a fresh one) and not the flock (it is the
        # parent's). The inherited lock descriptor is replaced right away by a fresh
        # description of the same inode (module docstring), so that the parent's lock dies
        # with the parent. If the forking thread was inside ``with lock:`` blocks, leaving
        # them in the child is a no-op (``_inherited``); a write inside them takes the lock
        # for real, waiting for the parent to leave its block.
        self._treset()
        self._depth = 0
        self._mutex = None  # the parent's: the child chooses again, on a description of its own
        self._mode = None
        self._soft = False
        self._pending = self._fd is not None and not self._closed
        self._inherited = self._forker_depth
        self._forker_depth = 0
        if self._fd is None or self._closed:
            return
        if self._own_fd is None:
            self._stale = True  # sharing the storage's description: reopen before locking
            return
        try:
            new = self._open_same_inode()
        except OSError:
            # Cannot reopen now: drop the parent's description anyway (never keep its lock
            # alive); the first write in the child reopens, or raises.
            os.close(self._own_fd)
            self._own_fd = None
            self._stale = True
            self._sync_fd()
            return
        try:
            os.dup2(new, self._own_fd, inheritable=False)
        finally:
            os.close(new)

    def _open_same_inode(self) -> int:
        """A new open file description of the file's inode (never another file that has
        taken its path). Raises OSError when it cannot be opened."""
        assert self._fd is not None and self._ino is not None
        last: Optional[OSError] = None
        for mode in (os.O_RDONLY, os.O_WRONLY):  # flock needs no particular access mode
            flags = mode | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
            proc = f"/proc/self/fd/{self._fd}"
            try:
                if os.path.exists(proc):
                    new = os.open(proc, flags)
                elif self._path is not None:
                    new = os.open(self._path, flags)
                else:  # pragma: no cover
                    raise OSError("cannot reopen the lock descriptor: no /proc and no path")
            except PermissionError as exc:
                last = exc
                continue
            st = os.fstat(new)
            if (st.st_dev, st.st_ino) != self._ino:
                os.close(new)
                raise OSError(
                    f"{self._path}: the path now names another file "
                    f"(inode {st.st_dev}:{st.st_ino}, expected {self._ino[0]}:{self._ino[1]}); "
                    "reopen the filter"
                )
            return new
        assert last is not None
        raise last

    def _reopen(self) -> None:
        """Open a new description of the same inode, so our flock excludes the parent's."""
        new = self._open_same_inode()
        old = self._own_fd
        self._own_fd = new
        self._stale = False
        self._sync_fd()
        if old is not None:
            os.close(old)  # our own reopened descriptor from a previous generation

    # -- lock / unlock --------------------------------------------------------------
    # These two run on every per-item add: keep them lean (measured by python -m tools.bench).
    def acquire(self, timeout: Optional[float] = None) -> None:
        """Block until this thread holds the lock (thread lock, then file lock).

        Args:
            timeout: ``None`` (default) waits as long as it takes; a number of seconds
                >= 0 waits at most that long in all (0: only if the lock is free now).

        Raises:
            FilterClosedError: the handle was closed (also while this thread waited): a
                write never proceeds without the file lock.
            SelfDeadlockError: this thread holds the same file's lock through another
                handle (waiting would never end); raised at once.
            LockTimeout: ``timeout`` expired; nothing is held.
        """
        if timeout is None:
            self._tacquire()
            deadline = None
        else:
            deadline = time.monotonic() + timeout
            if not self._tacquire(timeout):
                raise self._timeout_error(timeout)
        if self._closed:
            self._trelease()
            raise FilterClosedError(f"{self._path or '<memory>'}: filter is closed")
        if not self._depth and self._fd is not None:
            fd = None
            try:
                if self._stale:
                    self._reopen()
                if self._pending:
                    self._choose_mode(deadline, timeout)
                if self._mutex is not None:
                    mutex = self._mutex
                    if not mutex.try_acquire():
                        self._wait_mutex(mutex, deadline, timeout)
                    self._depth = 1
                    return
                fd = self._own_fd if self._own_fd is not None else self._fd
                if _DIRECT_FLOCK:
                    if not _try_flock(fd):
                        if self._soft and self._wait_soft(fd, deadline, timeout):
                            mutex = cast(Any, self._mutex)  # switched to mutex mode: LOCK_SH held
                            if not mutex.try_acquire():
                                self._wait_mutex(mutex, deadline, timeout)
                            self._depth = 1
                            return
                        if not self._soft:
                            self._wait_file_lock(fd, deadline, timeout)
                else:  # pragma: no cover - non-POSIX
                    if not self._try_lock(fd):
                        self._wait_file_lock(fd, deadline, timeout)
                self._depth = 1  # inside the try: an interrupt after the flock still unlocks
            except BaseException:
                # Whatever was interrupted (a KeyboardInterrupt can land right after the
                # flock call returned), this thread holds the thread lock at depth 0, so no
                # other thread of this process holds this description's flock: unlocking
                # unconditionally is safe, and never leaves the file locked.
                self._depth = 0
                if self._mutex is not None:
                    self._release_mutex_if_ours()
                    if self._readonly:
                        self._leave_mutex_mode()
                elif fd is not None:
                    with contextlib.suppress(OSError):
                        _unlock_flock(fd) if _DIRECT_FLOCK else portalocker.unlock(fd)
                self._trelease()
                raise
            return
        self._depth += 1

    # -- the slow path: the file lock is taken ----------------------------------------
    @staticmethod
    def _try_lock(fd: int) -> bool:
        try:
            portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.AlreadyLocked:
            return False
        return True

    def _refuse_self_deadlock(self) -> None:
        """Raise SelfDeadlockError if this thread holds the same file's lock through another
        handle: a wait here would never end."""
        holder = self._held_by_this_thread()
        if holder is not None:
            raise SelfDeadlockError(
                f"{self._path}: this thread already holds the write lock of this file through another "
                f"handle ({holder._path}); a write through this handle would wait for itself forever. "
                "Write through the handle whose write_lock() is held, or leave its block first",
                path=self._path,
            )

    def _wait_file_lock(self, fd: int, deadline: Optional[float], timeout: Optional[float]) -> None:
        self._refuse_self_deadlock()
        if deadline is None:
            if _DIRECT_FLOCK:
                _FLOCK(fd, _LOCK_EX)
            else:  # pragma: no cover - non-POSIX
                portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE)
            return
        delay = 0.001
        while not self._try_lock(fd):
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timeout_error(timeout)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)

    # -- the mode: mutex or flock (module docstring, "The robust mutex") ---------------
    def _side_path(self) -> str:
        """The side file's path: next to the file's real path (symlinks resolved), so every
        name of one file that is reached through symlinks finds the same side file."""
        assert self._path is not None
        return os.path.realpath(self._path) + SIDE_SUFFIX

    def _mutex_unusable(self) -> str:
        """Why this lock cannot use the mutex ("" if it can)."""
        if _requested_mode() == "flock":
            return f"{LOCK_ENV}=flock"
        if _Mutex is None or not _DIRECT_FLOCK:
            return "no robust mutex in this build"
        if self._path is None or self._own_fd is None:
            return "no path or no description of its own"
        if _is_temporary(self._path):  # one builder, then renamed: a side file would be left behind
            return "a temporary file (files.temporary_path)"
        links = os.fstat(self._own_fd).st_nlink
        if links != 1:  # two names in two places would find two side files: two mutexes
            return f"the file has {links} hard links"
        return str(_mutex_kernels.mutex_supported(self._own_fd))

    def _choose_mode(self, deadline: Optional[float], timeout: Optional[float]) -> None:
        """Choose the cross-process lock at the first acquire (under the thread lock, depth 0).

        Mutex mode needs ``flock(LOCK_SH)`` on this lock's description, held until close: a
        flock-mode writer (``LOCK_EX`` per write) then can never write at the same time. The
        side file is created only under ``LOCK_EX`` (no mutex-mode writer exists then), and
        used only once ``LOCK_SH`` is held and the path still names the inode mapped, so every
        mutex-mode writer of one file uses the same mutex. A missing or invalid side file while
        others hold ``LOCK_SH`` cannot be replaced: this waits like a blocked writer."""
        assert self._fd is not None and self._ino is not None
        why = self._mutex_unusable()
        required = _requested_mode() == "mutex"
        if why:
            if required and not (self._path is not None and _is_temporary(self._path)):
                raise self._mutex_required_error(why)
            self._set_mode("flock")
            return
        assert self._own_fd is not None and self._path is not None
        fd = self._own_fd
        side = self._side_path()
        readonly = (fcntl.fcntl(self._fd, fcntl.F_GETFL) & os.O_ACCMODE) == os.O_RDONLY
        delay = 0.001
        made = False  # True once this call made the side file
        try:
            while True:
                mutex = self._shared_mutex()  # held under LOCK_SH since it was checked: current
                shared = mutex is not None
                if mutex is None:
                    mutex, why = self._open_side(side)
                if mutex is not None:
                    self._take_shared(fd, deadline, timeout, side)
                    if shared or self._side_is(side, mutex):
                        self._mutex = mutex
                        self._set_mode("mutex")
                        return
                    _FLOCK(fd, _LOCK_UN)  # replaced between open and LOCK_SH: again
                    continue
                if readonly:  # a readonly handle never creates the side file; it looks again next
                    self._mode = "flock"  # time (_pending stays set), so once a writer made one
                    self._soft = True  # it joins the mutex instead of waiting with LOCK_EX for
                    return  # writers to close; a wait already under way polls for it (_wait_soft)
                if made:  # the side file this call made cannot be opened (EACCES, ...): never loop
                    if required:
                        raise self._mutex_required_error(f"its side file {side} cannot be used: {why}")
                    self._set_mode("flock")  # LOCK_EX per write, as when it cannot be made
                    self._soft = True
                    return
                if _try_flock(fd):  # no mutex-mode writer now: make (or remake) the side file
                    try:
                        made = True
                        self._create_side(side)
                    except OSError as exc:
                        _FLOCK(fd, _LOCK_UN)
                        if required:
                            raise self._mutex_required_error(f"its side file {side} cannot be made: {exc}") from exc
                        self._set_mode("flock")  # side file impossible: LOCK_EX per write
                        self._soft = True  # another user may make one: _wait_soft
                        return
                    _FLOCK(fd, _LOCK_UN)
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"{self._path}: could not take the write lock within {timeout} s: its side file "
                        f"{side} is unusable ({why}) while other writers hold the file in mutex mode; "
                        "it is remade once they close",
                        path=self._path,
                        timeout=timeout,
                    )
                time.sleep(delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.05)
        except BaseException:
            if self._mutex is None:
                with contextlib.suppress(OSError):
                    _FLOCK(fd, _LOCK_UN)  # no LOCK_SH / LOCK_EX left behind by a failed choice
            raise

    def _mutex_required_error(self, why: str) -> ConfigError:
        return ConfigError(
            f"{self._path}: {LOCK_ENV}=mutex requires the robust mutex, but this file cannot use it "
            f"({why}); unset {LOCK_ENV} (or set it to 'auto') to fall back to flock"
        )

    def _wait_soft(self, fd: int, deadline: Optional[float], timeout: Optional[float]) -> bool:
        """The wait of a lock in flock mode for a reason that may pass (a readonly handle that
        found no side file, or a side file this user could not make). ``LOCK_EX`` is busy: a
        flock-mode write is in progress, or writers in mutex mode hold ``LOCK_SH`` until they
        close (hours, for a crawler; forever if one is this very thread's other handle). So
        poll: take ``LOCK_EX`` when it frees (returns False), or, as soon as a valid side
        file is there, switch to mutex mode like :meth:`_choose_mode` (``LOCK_SH`` held,
        ``_mutex`` set; returns True). Raises SelfDeadlockError, LockTimeout."""
        self._refuse_self_deadlock()
        assert self._path is not None
        side = self._side_path()
        delay = 0.001
        while True:
            mutex = self._shared_mutex()
            shared = mutex is not None
            if mutex is None:
                mutex, _ = self._open_side(side)
            if mutex is not None:
                try:
                    _FLOCK(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # a flock-mode writer holds LOCK_EX for its write
                else:
                    if shared or self._side_is(side, mutex):
                        self._mutex = mutex
                        self._set_mode("mutex")
                        self._soft = False
                        return True
                    _FLOCK(fd, _LOCK_UN)  # replaced between open and LOCK_SH: again
            if _try_flock(fd):
                return False
            if deadline is not None and time.monotonic() >= deadline:
                raise self._timeout_error(timeout)
            time.sleep(delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.05)

    def _release_mutex_if_ours(self) -> None:
        """After an exception at depth 0: unlock the mutex if this lock took it. The mutex is
        shared by every handle of the file in this process; if another lock of this thread
        holds it (depth > 0), this one did not take it (its acquire raised
        SelfDeadlockError). Otherwise unlocking is safe: EPERM when this thread holds it not."""
        if self._held_by_this_thread() is None:
            with contextlib.suppress(OSError, ValueError):
                self._mutex.release()

    def _set_mode(self, mode: str) -> None:
        self._mode = mode
        self._pending = False

    def _shared_mutex(self) -> Any:
        """The Mutex of another live lock of the same inode in this process, if one is in mutex
        mode (not a readonly one: its LOCK_SH may go at any moment, _leave_mutex_mode)."""
        for lock in list(_LIVE):
            if (
                lock is not self
                and lock._ino == self._ino
                and not lock._closed
                and not lock._readonly
                and lock._mutex is not None
            ):
                return lock._mutex
        return None

    def _leave_mutex_mode(self) -> None:
        """A readonly handle, the mutex released: drop LOCK_SH too and choose again at the next
        acquire, so that a long-lived reader (a monitor calling ``to_bytes``) never keeps
        flock-mode writers (an older mmapbloom, ``MMAPBLOOM_LOCK=flock``) out of the file.
        :attr:`mode` keeps saying ``"mutex"``: the lock its snapshots take."""
        self._mutex = None
        self._pending = True
        fd = self._own_fd if self._own_fd is not None else self._fd
        if fd is not None:
            with contextlib.suppress(OSError):
                _FLOCK(fd, _LOCK_UN)

    def _open_side(self, side: str) -> tuple[Any, str]:
        assert self._ino is not None
        try:
            sfd = os.open(side, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, f"cannot open it: {exc}"
        try:
            mutex = _Mutex(sfd, self._ino[0], self._ino[1])
            mutex.path = side  # named by the error of a fault (a side file truncated under us)
            return mutex, ""
        except (ValueError, OSError) as exc:
            return None, str(exc)
        finally:
            os.close(sfd)

    @staticmethod
    def _side_is(side: str, mutex: Any) -> bool:
        try:
            return bool(os.stat(side, follow_symlinks=False).st_ino == mutex.side_ino)
        except OSError:
            return False

    def _create_side(self, side: str) -> None:
        """Write a new side file under a temporary name and rename it over ``side`` (the
        caller holds ``LOCK_EX``). Its group and permission bits are the locked file's
        (``& 0o666``), so every user who may write the file may open it whatever their umask
        and primary group (the group is kept when the creator may not give it: not a member)."""
        assert self._fd is not None and self._ino is not None
        _remove_stale_temporaries(side)
        tmp = f"{side}.{os.getpid()}.{threading.get_ident()}.tmp"
        sfd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            st = os.fstat(self._fd)
            if os.fstat(sfd).st_gid != st.st_gid:
                with contextlib.suppress(OSError):  # EPERM: not a member of the file's group
                    os.fchown(sfd, -1, st.st_gid)
            # Owner read-write always: the creator may write the file through the descriptor
            # it made although the file's bits say read-only (mode 0o444, umask 0o277).
            os.fchmod(sfd, (st.st_mode & 0o666) | 0o600)
            _Mutex.create(sfd, self._ino[0], self._ino[1])
            os.rename(tmp, side)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            os.close(sfd)

    def _take_shared(self, fd: int, deadline: Optional[float], timeout: Optional[float], side: str) -> None:
        try:
            _FLOCK(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        self._refuse_self_deadlock()
        if deadline is None:
            _FLOCK(fd, fcntl.LOCK_SH)  # a flock-mode writer is inside its write: wait for it
            return
        delay = 0.001
        while True:
            try:
                _FLOCK(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timeout_error(timeout)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)

    def _wait_mutex(self, mutex: Any, deadline: Optional[float], timeout: Optional[float]) -> None:
        self._refuse_self_deadlock()
        left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not mutex.acquire(left):
            raise self._timeout_error(timeout)

    def _timeout_error(self, timeout: Optional[float]) -> LockTimeout:
        return LockTimeout(
            f"{self._path or '<memory>'}: could not take the write lock within {timeout} s "
            "(another process, handle or thread held it all along)",
            path=self._path,
            timeout=timeout,
        )

    def _held_by_this_thread(self) -> "Optional[WriteLock]":
        """Another live lock of the same file whose file lock the calling thread holds."""
        if self._ino is None:
            return None
        for lock in list(_LIVE):
            if lock is not self and lock._ino == self._ino and lock._depth > 0 and not lock._closed and lock._towned():
                return lock
        return None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Hold the lock for a read that needs a consistent snapshot (``to_bytes``,
        ``to_bloom``), so that no write of any thread or process is half in it; except when
        the calling thread already holds the same file's lock through another handle: then
        every writer is already excluded, and no lock is taken (taking it would wait for
        this very thread forever)."""
        if self._fd is not None and not self._towned() and self._held_by_this_thread() is not None:
            yield
            return
        with self:
            yield

    def with_timeout(self, timeout: float) -> "TimedWriteLock":
        """This lock as a context manager that waits at most ``timeout`` seconds.

        Raises:
            ValueError: ``timeout`` is negative or not a finite number.
        """
        return TimedWriteLock(self, timeout)

    def release(self) -> None:
        """Release one level; the file lock is dropped when the outermost level is."""
        if not self._depth and self._inherited:
            self._inherited -= 1  # leaving a block entered before fork(), in the child
            return
        if self._depth == 1 and self._fd is not None:
            fd = self._own_fd if self._own_fd is not None else self._fd
            try:
                if self._mutex is not None:
                    self._mutex.release()
                    if self._readonly:
                        self._leave_mutex_mode()
                elif _DIRECT_FLOCK:
                    _unlock_flock(fd)
                else:  # pragma: no cover - non-POSIX
                    portalocker.unlock(fd)
            finally:
                self._depth = 0  # only once the flock is gone (or its unlock failed)
                self._trelease()
        else:
            self._depth -= 1
            self._trelease()

    def recover(self, held_before: bool) -> None:
        """Leave nothing held after an exception escaped a locked section that this thread
        entered without holding the lock (``held_before`` False).

        A KeyboardInterrupt can land between any two bytecodes of :meth:`acquire` or
        :meth:`release`, for example right after the flock call returned; without this, the
        file could stay locked for every other process as long as this one lives. Since this
        thread did not hold the lock before, whatever it holds now is this section's: the
        flock is unlocked (unconditionally: unlocking a description we do not hold is a
        no-op) and the thread lock fully released. Cheap when nothing is held."""
        if held_before or not self.owned():
            return
        fd = self._own_fd if self._own_fd is not None else self._fd
        if self._mutex is not None:
            self._release_mutex_if_ours()
        elif fd is not None:
            with contextlib.suppress(OSError, ValueError):
                if _DIRECT_FLOCK:
                    _unlock_flock(fd)
                else:  # pragma: no cover - non-POSIX
                    portalocker.unlock(fd)
        self._depth = 0
        while self._towned():
            self._trelease()

    @property
    def thread_lock(self) -> _ThreadLockView:
        """The in-process half of the lock alone (re-entrant), as a context manager.
        ``close`` takes it to wait for this handle's writes in flight without touching the
        file lock."""
        return _ThreadLockView(self)

    # __enter__ / __exit__ come from the base: in C (LockState: the uncontended take and
    # release, and re-entry, without a Python call; anything else calls acquire / release),
    # or _PyLockState's on the pure path.

    def close(self) -> None:
        """Refuse later acquisitions and close the descriptor this lock reopened after a
        fork, if any (idempotent). The owner calls it while holding :attr:`thread_lock`."""
        self._closed = True
        _LIVE.discard(self)
        if self._mutex is not None and self._depth > 0 and self._towned():
            # close() inside this handle's own write_lock(): unlock before dropping the
            # mutex, or it would stay locked (its owner's robust list no longer reaches it).
            with contextlib.suppress(OSError):
                self._mutex.release()
            self._depth = 0
        self._mutex = None  # closing _own_fd below drops the LOCK_SH of mutex mode
        self._mode = None
        self._soft = False
        self._fd = None  # the owner closes it; never flock a reused descriptor number
        if self._own_fd is not None:
            fd, self._own_fd = self._own_fd, None
            self._sync_fd()
            os.close(fd)
        self._sync_fd()


class TimedWriteLock:
    """A :class:`WriteLock` taken with a timeout: ``with f.write_lock(timeout=2.0): ...``.

    Entering waits at most ``timeout`` seconds in all (the thread lock, then the file lock)
    and raises :class:`~mmapbloom.errors.LockTimeout` if the lock is still taken, or
    :class:`~mmapbloom.errors.SelfDeadlockError` at once if the calling thread holds the
    same file's lock through another handle. Re-entrant like the lock itself: inside a
    block of the same handle it is taken at once. Thread-safe.
    """

    __slots__ = ("_lock", "timeout")

    def __init__(self, lock: WriteLock, timeout: float):
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout < 0
        ):
            raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        self._lock = lock
        self.timeout = float(timeout)

    def acquire(self) -> None:
        """Take the lock, waiting at most ``timeout`` seconds (raises ``LockTimeout``)."""
        self._lock.acquire(self.timeout)

    def release(self) -> None:
        """Release one level (as :meth:`WriteLock.release`)."""
        self._lock.release()

    def __enter__(self) -> "TimedWriteLock":
        self._lock.acquire(self.timeout)
        return self

    def __exit__(
        self, et: Optional[type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._lock.release()


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the duration of a batch commit (cells and items
    counter), then deliver them: an interrupt then lands between chunks, never between a
    chunk's cells and its count, so bits and ``items_added`` always agree.

    Only the main thread receives signals in Python, so elsewhere this does nothing. A
    signal that arrives inside is re-raised with ``signal.raise_signal`` once the original
    handlers are back, so it has exactly its usual effect (KeyboardInterrupt, the
    default action, or the program's own handler). Costs a few microseconds per call:
    used once per chunk of ``CHUNK_KEYS`` keys, never per item.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    saved = []
    try:
        for sig in _DEFERRED_SIGNALS:
            saved.append((sig, signal.signal(sig, hold)))
        yield
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


_DEFERRED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
