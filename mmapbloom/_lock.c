/* mmapbloom/_lock.c: LockState and the flock helpers (interface in _lock.h). */
#include "_lock.h"
#include "_lockcall.h"
#include "_mutex.h"
#include "_guard.h"

#include <structmember.h>

#include <errno.h>
#ifndef _WIN32
#include <sys/file.h>
#endif

#ifndef _WIN32
const char mb_flock_try_doc[] =
"flock_try($module, fd)\n--\n\n"
"Returns bool.  flock(fd, LOCK_EX | LOCK_NB) WITHOUT releasing the GIL: True if the lock was acquired,\n"
"False if another open file description holds it (EWOULDBLOCK).  fd: an int or an object\n"
"with fileno().  Retries on EINTR (after running signal handlers); OSError otherwise.\n"
"Unlike fcntl.flock, it never hands the interpreter to another thread.";

PyObject *mb_flock_try(PyObject *module, PyObject *arg)
{
    int fd;
    (void)module;
    if ((fd = PyObject_AsFileDescriptor(arg)) < 0)
        return NULL;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            Py_RETURN_TRUE;
        if (errno == EWOULDBLOCK || errno == EAGAIN)
            Py_RETURN_FALSE;
        if (errno != EINTR)
            return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

const char mb_flock_unlock_doc[] =
"flock_unlock($module, fd)\n--\n\n"
"Returns None.  flock(fd, LOCK_UN) without releasing the GIL.  OSError on failure.";

PyObject *mb_flock_unlock(PyObject *module, PyObject *arg)
{
    int fd;
    (void)module;
    if ((fd = PyObject_AsFileDescriptor(arg)) < 0)
        return NULL;
    for (;;) {
        if (flock(fd, LOCK_UN) == 0)
            Py_RETURN_NONE;
        if (errno != EINTR)
            return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}
#endif

#ifndef _WIN32
#include <time.h>
static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#else
#include <time.h>
static double mono_seconds(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}
#endif

/* The thread lock.  POSIX: a plain pthread mutex (an uncontended trylock + unlock is about 30
 * instructions; PyThread_acquire_lock(NOWAIT) reads the monotonic clock and costs about 130,
 * measured with callgrind), waited for in slices of at most 50 ms with the GIL released and
 * signal handlers run between slices.  Elsewhere: a PyThread lock (interruptible wait).
 * tl_timed is called with the GIL released.  Only its holder unlocks it (owner checked). */
#ifndef _WIN32
#include <pthread.h>
#include <stdlib.h>
typedef pthread_mutex_t *tlock_t;
static tlock_t tl_alloc(void)
{
    pthread_mutex_t *m = malloc(sizeof *m);
    if (m != NULL && pthread_mutex_init(m, NULL) != 0) {
        free(m);
        m = NULL;
    }
    return m;
}
static void tl_free(tlock_t lk, int held)
{
    if (!held)   /* destroying a locked mutex is undefined: a held one is only freed */
        pthread_mutex_destroy(lk);
    free(lk);
}
static int tl_try(tlock_t lk) { return pthread_mutex_trylock(lk) == 0; }
static void tl_release(tlock_t lk) { pthread_mutex_unlock(lk); }
#define TL_SLICE 0.05
/* 1 acquired, 0 not within `seconds`; never interrupted (the caller runs signal handlers). */
static int tl_timed(tlock_t lk, double seconds)
{
    struct timespec abs;
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ) && defined(__USE_GNU)
#if __GLIBC_PREREQ(2, 30)
#define MB_TL_CLOCKLOCK 1
#endif
#endif
#ifdef MB_TL_CLOCKLOCK
    clock_gettime(CLOCK_MONOTONIC, &abs);
#else
    clock_gettime(CLOCK_REALTIME, &abs);
#endif
    abs.tv_nsec += (long)(seconds * 1e9);
    abs.tv_sec += abs.tv_nsec / 1000000000L;
    abs.tv_nsec %= 1000000000L;
#ifdef MB_TL_CLOCKLOCK
    return pthread_mutex_clocklock(lk, CLOCK_MONOTONIC, &abs) == 0;
#else
    return pthread_mutex_timedlock(lk, &abs) == 0;
#endif
}
#else
typedef PyThread_type_lock tlock_t;
static tlock_t tl_alloc(void) { return PyThread_allocate_lock(); }
static void tl_free(tlock_t lk, int held)
{
    if (held)
        PyThread_release_lock(lk);
    PyThread_free_lock(lk);
}
static int tl_try(tlock_t lk) { return PyThread_acquire_lock(lk, NOWAIT_LOCK) != 0; }
static void tl_release(tlock_t lk) { PyThread_release_lock(lk); }
#endif

/* The calling thread's ident: PyThread_get_thread_ident's value (POSIX: pthread_self()),
 * without the call into libpython on the per-write path. */
#ifndef _WIN32
static inline unsigned long my_ident(void) { return (unsigned long)pthread_self(); }
#else
static inline unsigned long my_ident(void) { return PyThread_get_thread_ident(); }
#endif

struct mb_lock_state {
    PyObject_HEAD
    tlock_t tlock;
    unsigned long owner;   /* thread ident holding tlock, 0: nobody */
    Py_ssize_t count;      /* re-entry count of tlock */
    Py_ssize_t depth;      /* WriteLock._depth: nesting of the held write lock */
    int flock_fd;          /* WriteLock._flock_fd: the descriptor to flock, -1: none (in memory) */
    char stale, closed;    /* WriteLock._stale, WriteLock._closed */
    char pending;          /* WriteLock._pending: the lock mode (mutex or flock) is not chosen yet */
    char readonly;         /* WriteLock._readonly: a readonly handle (leaves mutex mode at release) */
    PyObject *mutex;       /* WriteLock._mutex: the side file's Mutex in mutex mode (used instead of
                            * flock_fd), NULL: flock mode */
    char waited;           /* the last LOCK_TAKEN of mb_lock_try found the mutex busy first */
    char seen_busy;        /* mb_lock_run found the mutex busy since the last mb_lock_try */
};

int mb_lock_waited(LockState *L)
{
    return L->waited;
}

static int ls_slots_installed;

static PyObject *ls_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    LockState *self;
    (void)args;
    (void)kwds;
    if (!ls_slots_installed) {
        ls_slots_installed = 1;
        mb_lockcall_install();
    }
    self = (LockState *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->flock_fd = -1;
    self->tlock = tl_alloc();
    if (self->tlock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void ls_dealloc(LockState *self)
{
    Py_CLEAR(self->mutex);
    if (self->tlock != NULL)
        tl_free(self->tlock, self->count > 0);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Wait for the thread lock like threading.Lock.acquire: interruptible (signal handlers run
 * between wait slices, an exception from one ends the wait: -1), GIL released while waiting.
 * timeout < 0: forever; otherwise seconds.  1: acquired, 0: timed out. */
#ifndef _WIN32
static int tlock_wait(tlock_t lk, double timeout)
{
    double deadline = 0.0;
    if (tl_try(lk))
        return 1;
    if (timeout == 0.0)
        return 0;
    if (timeout > 0.0)
        deadline = mono_seconds() + timeout;
    for (;;) {
        double slice = TL_SLICE;
        int got;
        if (timeout > 0.0) {
            const double left = deadline - mono_seconds();
            if (left <= 0.0)
                return tl_try(lk);
            if (left < slice)
                slice = left;
        }
        Py_BEGIN_ALLOW_THREADS
        got = tl_timed(lk, slice);
        Py_END_ALLOW_THREADS
        if (got)
            return 1;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}
#else
static int tlock_wait(tlock_t lk, double timeout)
{
    double deadline = 0.0;
    PyLockStatus r = PyThread_acquire_lock_timed(lk, 0, 0);
    if (r == PY_LOCK_ACQUIRED)
        return 1;
    if (timeout == 0.0)
        return 0;
    if (timeout > 0.0)
        deadline = mono_seconds() + timeout;
    for (;;) {
        PY_TIMEOUT_T us = -1;
        if (timeout > 0.0) {
            const double left = deadline - mono_seconds();
            if (left <= 0.0)
                return PyThread_acquire_lock_timed(lk, 0, 0) == PY_LOCK_ACQUIRED;
            us = left * 1e6 >= (double)PY_TIMEOUT_MAX ? PY_TIMEOUT_MAX : (PY_TIMEOUT_T)(left * 1e6) + 1;
        }
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(lk, us, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED)
            return 1;
        if (r == PY_LOCK_FAILURE)
            return 0;
        if (PyErr_CheckSignals() < 0)   /* PY_LOCK_INTR */
            return -1;
    }
}
#endif

PyDoc_STRVAR(ls_tacquire_doc,
"_tacquire(timeout=-1.0, /)\n--\n\n"
"Take the thread lock (re-entrant).  timeout: seconds, < 0 waits forever.  Returns True,\n"
"or False when the timeout expired.  The wait releases the GIL and is interruptible.");

static PyObject *ls_tacquire(LockState *self, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned long me = my_ident();
    double timeout = -1.0;
    int got;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "_tacquire() takes at most 1 argument (%zd given)", nargs);
    if (nargs == 1 && args[0] != Py_None) {
        timeout = PyFloat_AsDouble(args[0]);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
    }
    if (self->owner == me && self->count > 0) {
        self->count++;
        Py_RETURN_TRUE;
    }
    got = tlock_wait(self->tlock, timeout);
    if (got < 0)
        return NULL;
    if (!got)
        Py_RETURN_FALSE;
    self->owner = me;
    self->count = 1;
    Py_RETURN_TRUE;
}

static int tlock_release(LockState *self)
{
    if (self->count <= 0 || self->owner != my_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--self->count == 0) {
        self->owner = 0;
        tl_release(self->tlock);
    }
    return 0;
}

static PyObject *ls_trelease(LockState *self, PyObject *unused)
{
    (void)unused;
    if (tlock_release(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *ls_towned(LockState *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(self->count > 0 && self->owner == my_ident());
}

/* In a fork child: a fresh, free thread lock.  The old one may be held by a thread that
 * does not exist in the child; it is left allocated (never waited on again). */
static PyObject *ls_treset(LockState *self, PyObject *unused)
{
    tlock_t fresh = tl_alloc();
    (void)unused;
    if (fresh == NULL)
        return PyErr_NoMemory();
    self->tlock = fresh;
    self->owner = 0;
    self->count = 0;
    Py_RETURN_NONE;
}


PyDoc_STRVAR(ls_enter_doc,
"__enter__()\n--\n\n"
"Take the write lock (``with lock:``): the uncontended take (thread lock, then the mutex or a\n"
"non-blocking flock) and the re-entry of a held lock run in C; anything else (a wait, the\n"
"first choice of the mode, a reopen after fork, a closed lock) calls WriteLock.acquire().\n"
"Returns the lock.  Raises what acquire() raises.");
PyDoc_STRVAR(ls_exit_doc,
"__exit__(et, ev, tb, /)\n--\n\n"
"Release one level, as WriteLock.release(): in C when this thread holds the lock at depth >= 1\n"
"(and it is not a readonly handle's outermost mutex hold); otherwise release() is called.\n"
"Returns None (exceptions propagate).");

static PyMethodDef ls_methods[] = {
    {"__enter__", (PyCFunction)mb_lock_enter, METH_NOARGS, ls_enter_doc},
    {"__exit__", (PyCFunction)(void (*)(void))mb_lock_exit, METH_FASTCALL, ls_exit_doc},
    {"_tacquire", (PyCFunction)(void (*)(void))ls_tacquire, METH_FASTCALL, ls_tacquire_doc},
    {"_trelease", (PyCFunction)ls_trelease, METH_NOARGS, "Release one level of the thread lock."},
    {"_towned", (PyCFunction)ls_towned, METH_NOARGS, "True if the calling thread holds the thread lock."},
    {"_treset", (PyCFunction)ls_treset, METH_NOARGS, "A fresh thread lock (fork child)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *ls_get_mutex(LockState *self, void *c)
{
    (void)c;
    return Py_NewRef(self->mutex != NULL ? self->mutex : Py_None);
}

static int ls_set_mutex(LockState *self, PyObject *value, void *c)
{
    (void)c;
    if (value != NULL && value != Py_None && !PyObject_TypeCheck(value, &mb_Mutex_Type)) {
        PyErr_Format(PyExc_TypeError, "_mutex must be a Mutex or None, got %s", Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_XSETREF(self->mutex, value != NULL && value != Py_None ? Py_NewRef(value) : NULL);
    return 0;
}

static PyGetSetDef ls_getset[] = {
    {"_mutex", (getter)ls_get_mutex, (setter)ls_set_mutex,
     "the side file's Mutex (mutex mode: the cross-process lock instead of flock), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef ls_members[] = {
    {"_depth", T_PYSSIZET, offsetof(LockState, depth), 0, "nesting of the held write lock"},
    {"_flock_fd", T_INT, offsetof(LockState, flock_fd), 0, "descriptor to flock, -1: none"},
    {"_stale", T_BOOL, offsetof(LockState, stale), 0, "reopen before locking (fork child)"},
    {"_closed", T_BOOL, offsetof(LockState, closed), 0, "refuse acquisitions"},
    {"_pending", T_BOOL, offsetof(LockState, pending), 0, "lock mode not chosen yet (slow path)"},
    {"_readonly", T_BOOL, offsetof(LockState, readonly), 0, "a readonly handle's lock (snapshots only)"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject mb_LockState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.LockState",
    .tp_basicsize = sizeof(LockState),
    .tp_dealloc = (destructor)ls_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "LockState()\n--\n\nThe C half of mmapbloom.locking.WriteLock (its base class): a re-entrant\n"
              "thread lock and the fields the native handle's uncontended write path reads.",
    .tp_methods = ls_methods,
    .tp_members = ls_members,
    .tp_getset = ls_getset,
    .tp_new = ls_new,
};

/* ---- taking the lock from C ------------------------------------------------------------ */

#define MB_LOCK_SPINS 64
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The uncontended path (and, in mutex mode, a wait for another process's hold, in C with
 * the GIL released): LOCK_TAKEN (this call took the thread lock and the flock: leave
 * with lock_release), LOCK_HELD (this thread is inside its own write_lock(): the file lock
 * is held, nothing to take), LOCK_SLOW (taking it needs a wait, a reopen or the closed
 * check: WriteLock.acquire decides), -1 (OSError set). */
int mb_lock_try(LockState *L)
{
    const unsigned long me = my_ident();
    if (L->count > 0 && L->owner == me)
        return L->depth > 0 ? LOCK_HELD : LOCK_SLOW;
    if (L->closed || L->stale || L->pending || L->count > 0)
        return LOCK_SLOW;
    if (!tl_try(L->tlock))
        return LOCK_SLOW;
    L->owner = me;
    L->count = 1;
    if (L->mutex != NULL) {
        /* Another process's write holds it for about 100 ns: spin a little (a bounded number
         * of tries, about 2 us) before the slow path's futex wait, which costs microseconds. */
        int r = mb_mutex_trylock(L->mutex), spins;
        L->waited = r == 1 || L->seen_busy;
        L->seen_busy = 0;
        for (spins = 0; r == 1 && spins < MB_LOCK_SPINS; spins++) {
            cpu_relax();
            r = mb_mutex_trylock(L->mutex);
        }
        if (r == 1)   /* another process's: wait here (this thread holds L's thread lock, so
                       * L cannot be closed meanwhile); held in this process: slow path */
            r = mb_mutex_wait_other(L->mutex);
        if (r != 0) {
            L->owner = 0;
            L->count = 0;
            tl_release(L->tlock);
            return r < 0 ? -1 : LOCK_SLOW;
        }
    } else if (L->flock_fd >= 0) {
#ifndef _WIN32
        L->waited = 0;
        if (flock(L->flock_fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            L->owner = 0;
            L->count = 0;
            tl_release(L->tlock);
            if (err == EWOULDBLOCK || err == EAGAIN || err == EINTR)
                return LOCK_SLOW;
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
#else
        L->owner = 0;
        L->count = 0;
        tl_release(L->tlock);
        return LOCK_SLOW;
#endif
    }
    L->depth = 1;
    return LOCK_TAKEN;
}

/* The uncontended write in mutex mode, in one guarded section (interface in _lock.h). */
int mb_lock_run(LockState *L, const void *base, size_t len, void (*body)(void *), void *ctx)
{
    int r;
    if (L->count > 0) {   /* inside this thread's own write_lock(): nothing to take */
        if (L->owner == my_ident() && L->depth > 0)
            return mb_guard_run(base, len, body, ctx) == 0 ? LOCK_HELD : LOCK_FAULTED;
        return LOCK_SLOW;
    }
    if (L->mutex == NULL || L->closed || L->stale || L->pending)
        return LOCK_SLOW;
    if (!tl_try(L->tlock))
        return LOCK_SLOW;
    /* The thread lock's owner is set as mb_lock_try sets it; depth stays 0 (the file lock is
     * not "held" for a re-entry: an error path below runs Python, and a signal handler's
     * add there must take the slow path, not write as if inside write_lock()). */
    L->owner = my_ident();
    L->count = 1;
    r = mb_mutex_run(L->mutex, base, len, body, ctx);
    L->owner = 0;
    L->count = 0;
    tl_release(L->tlock);
    if (r == 1)   /* busy: the slow path's take counts as after a wait (its size recheck) */
        L->seen_busy = 1;
    return r == 0 ? LOCK_TAKEN : r == 1 ? LOCK_SLOW : r == 2 ? LOCK_FAULTED : -1;
}

/* Release one level, as WriteLock.release (the flock goes with the outermost level). */
int mb_lock_release(LockState *L)
{
    int rc = 0;
    if (L->depth == 1 && L->mutex != NULL) {
        if (mb_mutex_unlock(L->mutex) < 0)
            rc = -1;
        L->depth = 0;
    } else if (L->depth == 1 && L->flock_fd >= 0) {
#ifndef _WIN32
        while (flock(L->flock_fd, LOCK_UN) != 0) {
            if (errno != EINTR) {
                PyErr_SetFromErrno(PyExc_OSError);
                rc = -1;
                break;
            }
        }
#endif
        L->depth = 0;
    } else if (L->depth > 0) {
        L->depth--;
    }
    if (tlock_release(L) < 0)
        rc = -1;
    return rc;
}

/* The slow path: WriteLock.acquire() waits (interruptibly), or raises FilterClosedError,
 * SelfDeadlockError...  On any exception WriteLock.recover(held_before) leaves nothing
 * held that this call took. */
int mb_lock_wait(LockState *L)
{
    const int held = L->count > 0 && L->owner == my_ident();
    PyObject *r = PyObject_CallMethod((PyObject *)L, "acquire", NULL);
    PyObject *et, *ev, *tb;
    if (r != NULL) {
        Py_DECREF(r);
        return 0;
    }
    PyErr_Fetch(&et, &ev, &tb);
    r = PyObject_CallMethod((PyObject *)L, "recover", "O", held ? Py_True : Py_False);
    Py_XDECREF(r);
    if (r == NULL)
        PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return -1;
}


/* ---- the context manager (``with f.write_lock():``) ------------------------------------ */

PyObject *mb_lock_enter(PyObject *obj, PyObject *unused)
{
    LockState *self = (LockState *)obj;
    int state;
    (void)unused;
    if (self->count > 0 && self->owner == my_ident() && self->depth > 0 && !self->closed) {
        self->count++;   /* re-entry inside this thread's own write_lock(): as acquire() */
        self->depth++;
        return Py_NewRef(self);
    }
    state = mb_lock_try(self);
    if (state == LOCK_TAKEN)
        return Py_NewRef(self);
    if (state < 0)
        return NULL;
    /* LOCK_SLOW (LOCK_HELD was handled above, except closed): the Python protocol */
    if (mb_lock_wait(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

PyObject *mb_lock_exit(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    LockState *self = (LockState *)obj;
    PyObject *r;
    (void)args;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "__exit__() takes 3 arguments (%zd given)", nargs);
    if (self->count > 0 && self->owner == my_ident() && self->depth >= 1 &&
        !(self->depth == 1 && self->mutex != NULL && self->readonly)
#ifdef _WIN32
        && !(self->depth == 1 && self->flock_fd >= 0)   /* portalocker.unlock: release() */
#endif
    ) {
        if (mb_lock_release(self) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    r = PyObject_CallMethod((PyObject *)self, "release", NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}
