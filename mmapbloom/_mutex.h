/* mmapbloom/_mutex.h: the robust process-shared mutex of a write lock, in its side file.
 *
 * One job: the side file (PATH + ".mutex", next to the file whose write lock it is), its
 * layout, its initialisation, and lock / trylock / timed wait / unlock of the
 * pthread_mutex_t (PTHREAD_PROCESS_SHARED + PTHREAD_MUTEX_ROBUST) it holds, mapped
 * MAP_SHARED.  A holder that dies leaves EOWNERDEAD to the next locker, which calls
 * pthread_mutex_consistent and counts the recovery in the header.  Which processes may use
 * the mutex (the flock(LOCK_SH) protocol that makes mixed locks impossible) is decided in
 * mmapbloom/locking.py; this unit only refuses a side file whose header does not match.
 *
 * Layout (little-endian host order, 256 bytes):
 *   0  magic "MBMUTEX1"       8  u32 version (2)        12 u32 sizeof(pthread_mutex_t)
 *   16 char[16] libc id       32 u64 locked st_dev      40 u64 locked st_ino
 *   48 u64 the side file's own st_ino (a copy is detected)
 *   56 u64 recoveries (EOWNERDEAD seen)  64 u32 initialised (1, written last)
 *   72 u64 pid namespace of its creator (st_ino of /proc/self/ns/pid): only that namespace uses it
 *   128 pthread_mutex_t
 * Every touch of the mapping by a lock operation runs in a SIGBUS guarded section (_guard.h):
 * a side file truncated under this process makes that operation raise LengthMismatchError
 * (naming Mutex.path) and the Mutex refuse every later one, never a crash.
 * Built only where robust process-shared mutexes exist (MB_HAVE_MUTEX: Linux with
 * PTHREAD_MUTEX_ROBUST); elsewhere mutex_supported() says why not and Mutex cannot be made. */
#ifndef MMAPBLOOM_MUTEX_H
#define MMAPBLOOM_MUTEX_H

#include <Python.h>

#if defined(__linux__) && !defined(_WIN32)
#include <pthread.h>
#if defined(PTHREAD_MUTEX_ROBUST) || defined(PTHREAD_MUTEX_ROBUST_NP) || defined(__GLIBC__)
#define MB_HAVE_MUTEX 1
#endif
#endif

/* The type mmapbloom._kernels.Mutex (one mapping of one side file). */
extern PyTypeObject mb_Mutex_Type;

/* mutex_supported(fd): "" when fd's file system and this build can use the mutex, else why not. */
PyObject *mb_mutex_supported(PyObject *module, PyObject *arg);
extern const char mb_mutex_supported_doc[];

/* For _lock.c, with the GIL, no Python call: 0 taken (EOWNERDEAD recovered too), 1 busy,
 * -1 OSError set.  m must be a Mutex. */
int mb_mutex_trylock(PyObject *m);
/* 0 released, -1 OSError set (EPERM: not the owner). */
int mb_mutex_unlock(PyObject *m);
/* For _lock.c's mb_lock_run, with the GIL, no Python call: in ONE guarded section over the
 * side file and [base, base + len), trylock m, and when taken run body(ctx) (which touches
 * only that range, calls no Python API) and unlock (one sigsetjmp for the three, not three).
 * 0 body ran (nothing held after), 1 busy (body not run, nothing held), 2 body's range
 * faulted (body stopped there; unlocked, nothing held), -1 with an exception set and nothing
 * held: LengthMismatchError (the side file faulted, now or before), ValueError (unmapped),
 * OSError (a pthread error; if the unlock is what failed, body ran in full). */
int mb_mutex_run(PyObject *m, const void *base, size_t len, void (*body)(void *), void *ctx);
/* When no thread of this process holds m (so the holder is another process, and this wait
 * can be neither a self-deadlock nor wait for a thread that needs the GIL): wait for it with
 * the GIL released, in 50 ms slices with signal handlers run between them.  0 taken, 1 not
 * waited (held in this process: take the slow path), -1 exception set. */
int mb_mutex_wait_other(PyObject *m);

#endif /* MMAPBLOOM_MUTEX_H */
