/* mmapbloom/_lock.h: the write lock's C half: flock helpers and LockState.
 *
 * LockState is the C half of mmapbloom.locking.WriteLock (its base class): the handle's
 * thread-level lock (re-entrant: owner thread, recursion count) and the fields that the
 * uncontended write path reads without calling Python: the file-lock depth, the descriptor
 * to flock (-1 in memory) and the stale / closed flags.  WriteLock (Python) keeps the rest
 * of the protocol: waiting, SelfDeadlockError, LockTimeout, fork handling, recovery.
 *
 * The cross-process lock is the robust process-shared mutex of the file's side file
 * (_mutex.h; mutex mode, chosen by WriteLock at the first acquire) or flock(2) on the file's
 * descriptor (flock mode; none in memory).  Everything that knows which cross-process lock a
 * file uses is in _lock.c, behind the three calls below (try without waiting, release one
 * level, wait through Python's WriteLock.acquire); the handle does not know which. */
#ifndef MMAPBLOOM_LOCK_H
#define MMAPBLOOM_LOCK_H

#include <Python.h>

typedef struct mb_lock_state LockState;   /* fields private to _lock.c */

/* The type mmapbloom.locking.WriteLock derives from (the module adds it as LockState). */
extern PyTypeObject mb_LockState_Type;

enum { LOCK_HELD = 0, LOCK_TAKEN = 1, LOCK_SLOW = 2, LOCK_FAULTED = 3 };

/* The uncontended path, with the GIL and no Python call (in mutex mode it also waits for a
 * hold of another process, GIL released, signal handlers run): LOCK_TAKEN (this call took the
 * thread lock and the file lock: leave with mb_lock_release), LOCK_HELD (this thread is
 * inside its own write_lock(): nothing to take or release), LOCK_SLOW (a wait, a reopen or
 * the closed check is needed: call mb_lock_wait), -1 (OSError set). */
int mb_lock_try(LockState *L);

/* One write under the lock in one guarded section (issue 28: one sigsetjmp for the lock, the
 * write and the unlock, not three), with the GIL and no Python call.  Inside this thread's
 * own write_lock(): body(ctx) in a guarded section over [base, base + len); LOCK_HELD.  When
 * the file uses the mutex, this thread holds no level of L and L's thread lock and the mutex
 * are both free: take them, run body(ctx) and release both, in one guarded section over the
 * side file and [base, base + len); LOCK_TAKEN (nothing held now).  body touches only that
 * range (the filter's mapping), calls no Python API and allocates nothing (the rules of a
 * guarded section, _guard.h).  Otherwise LOCK_SLOW (body did not run, nothing held: take the
 * lock with mb_h_lock's path and write in a guarded section of the caller's),
 * LOCK_FAULTED (body's range faulted, body stopped there; nothing held: the caller raises
 * its fault error) or -1 (an exception set: the side file faulted, or a pthread error;
 * nothing held; when the unlock is what failed, body's write stands).  A busy mutex makes
 * the next mb_lock_try report a wait (mb_lock_waited), so the caller's size recheck runs. */
int mb_lock_run(LockState *L, const void *base, size_t len, void (*body)(void *), void *ctx);

/* 1 if the last LOCK_TAKEN of mb_lock_try waited for (or spun on) another process's hold
 * first, or followed an mb_lock_run that found the mutex busy; 0 if it found the lock free:
 * the caller then re-checks what a holder may have changed meanwhile (the file's size). */
int mb_lock_waited(LockState *L);

/* Release one level taken by mb_lock_try / mb_lock_wait, as WriteLock.release; -1 with OSError. */
int mb_lock_release(LockState *L);

/* The slow path: WriteLock.acquire() waits (interruptibly) or raises; on an exception
 * WriteLock.recover leaves nothing held that this call took.  0 (taken: release with
 * mb_lock_release) or -1. */
int mb_lock_wait(LockState *L);

#ifndef _WIN32
/* The module functions flock_try(fd) and flock_unlock(fd) (METH_O): flock without
 * releasing the GIL, for WriteLock. */
PyObject *mb_flock_try(PyObject *module, PyObject *arg);
PyObject *mb_flock_unlock(PyObject *module, PyObject *arg);
extern const char mb_flock_try_doc[], mb_flock_unlock_doc[];
#endif

#endif /* MMAPBLOOM_LOCK_H */
