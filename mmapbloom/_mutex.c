/* mmapbloom/_mutex.c: the side file's robust process-shared mutex (interface in _mutex.h). */
#include "_mutex.h"
#include "_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

const char mb_mutex_supported_doc[] =
"mutex_supported($module, fd)\n--\n\n"
"Returns str: \"\" if the file open as fd (an int) may carry a robust process-shared mutex\n"
"(this build has them, pthread_mutexattr_setrobust works at run time, and fstatfs names a\n"
"local file system: ext2/3/4, xfs, btrfs, tmpfs, ramfs, f2fs, zfs, overlayfs, bcachefs;\n"
"/proc/self/ns/pid names this process's pid namespace, which the side file records),\n"
"else the reason it may not (network and unknown file systems use flock only).";

#ifdef MB_HAVE_MUTEX
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define SIDE_SIZE 256
#define MUTEX_OFF 128
static const char MAGIC[8] = {'M', 'B', 'M', 'U', 'T', 'E', 'X', '1'};

typedef struct {
    char magic[8];
    uint32_t version, mutex_size;
    char libc[16];
    uint64_t locked_dev, locked_ino, own_ino, recoveries;
    uint32_t initialised;
    uint64_t pidns;   /* the creator's pid namespace (st_ino of /proc/self/ns/pid) */
} side_header;

_Static_assert(sizeof(side_header) <= MUTEX_OFF, "header fits before the mutex");
_Static_assert(MUTEX_OFF + sizeof(pthread_mutex_t) <= SIDE_SIZE, "mutex fits the side file");

static void libc_id(char out[16])
{
    memset(out, 0, 16);
#ifdef __GLIBC__
    snprintf(out, 16, "glibc %d.%d", __GLIBC__, 0);   /* the ABI of the mutex, not the minor */
#else
    snprintf(out, 16, "musl");
#endif
}

typedef struct {
    PyObject_HEAD
    unsigned char *map;   /* SIDE_SIZE bytes, MAP_SHARED; NULL once unmapped */
    long held_here;       /* holds by threads of this process (changed with the GIL held) */
    unsigned long long side_ino;
    unsigned long long locked_dev, locked_ino;   /* the inode whose write lock it is (messages) */
    int broken;           /* its mapping faulted (side file truncated under us): refuse every op */
    PyObject *path;       /* the side file's path (set by locking.py; messages), or NULL */
} MutexObject;


/* One wait slice of at most `seconds`: pthread_mutex_clocklock on CLOCK_MONOTONIC where the
 * libc has it (glibc >= 2.30, checked at build time: MB_SLICE_CLOCK), so a wall-clock step
 * (NTP, settimeofday) neither stretches nor cuts a slice; else pthread_mutex_timedlock on
 * CLOCK_REALTIME (musl, older glibc).  Call with the GIL released.  Returns the pthread code. */
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 30) && defined(__USE_GNU)
#define MB_HAVE_CLOCKLOCK 1
#endif
#endif
#ifdef MB_HAVE_CLOCKLOCK
#define MB_SLICE_CLOCK CLOCK_MONOTONIC
#else
#define MB_SLICE_CLOCK CLOCK_REALTIME
#endif

static int lock_slice(pthread_mutex_t *mx, double seconds)
{
    struct timespec abs;
    clock_gettime(MB_SLICE_CLOCK, &abs);
    abs.tv_nsec += (long)(seconds * 1e9);
    abs.tv_sec += abs.tv_nsec / 1000000000L;
    abs.tv_nsec %= 1000000000L;
#ifdef MB_HAVE_CLOCKLOCK
    return pthread_mutex_clocklock(mx, CLOCK_MONOTONIC, &abs);
#else
    return pthread_mutex_timedlock(mx, &abs);
#endif
}

/* The side file truncated (or overwritten shorter) under this process: its mapping faults
 * (SIGBUS) at the next touch.  Every touch of the mapping by a lock operation runs in a
 * guarded section (_guard.h: sigsetjmp without a system call, a thread-local store), so the
 * fault becomes this error and the Mutex refuses every later operation (broken). */
enum { OP_TRY, OP_UNLOCK, OP_SLICE };
#define MB_FAULTED (-1)

/* Inside a guarded section over `map`: a lock call's code rc, with EOWNERDEAD (the holder
 * died holding it: bits before counts, as after a SIGKILL of a flock holder) made consistent
 * and counted: 0 then, or consistent's error. */
static int recovered(unsigned char *map, pthread_mutex_t *mx, int rc)
{
    if (rc == EOWNERDEAD) {
        rc = pthread_mutex_consistent(mx);
        if (rc == 0)
            ((side_header *)map)->recoveries++;
    }
    return rc;
}

/* Guarded: one operation on the mutex of `map` (a slice of `slice` seconds for OP_SLICE, with
 * the GIL released by the caller).  Returns the pthread code (EOWNERDEAD already made
 * consistent and counted: 0 then, or consistent's error), or MB_FAULTED.  No Python call. */
static int g_mutex_op(unsigned char *map, int op, double slice)
{
    GUARD_DECL(gd);
    int rc;
    GUARD_BEGIN(gd, map, SIDE_SIZE)
        return MB_FAULTED;
    {
        pthread_mutex_t *mx = (pthread_mutex_t *)(map + MUTEX_OFF);
        rc = op == OP_TRY ? pthread_mutex_trylock(mx) : op == OP_UNLOCK ? pthread_mutex_unlock(mx) : lock_slice(mx, slice);
        rc = recovered(map, mx, rc);
    }
    GUARD_END();
    return rc;
}

/* Set LengthMismatchError (mmapbloom.errors; a FormatError, a ValueError) for a fault. */
static int fault_error(MutexObject *m)
{
    PyObject *mod = PyImport_ImportModule("mmapbloom.errors"), *cls, *exc;
    m->broken = 1;
    if (mod == NULL)
        return -1;
    cls = PyObject_GetAttrString(mod, "LengthMismatchError");
    Py_DECREF(mod);
    if (cls == NULL)
        return -1;
    {
        PyObject *msg = PyUnicode_FromFormat(
            "truncated or overwritten under this process (expected %d bytes): the mapping of this "
            "mutex side file (inode %llu, the write lock of inode %llu:%llu) faulted (SIGBUS, caught) in a "
            "lock operation.  This handle's lock is unusable: close every handle of the file, remove the "
            "side file, reopen",
            SIDE_SIZE, m->side_ino, m->locked_dev, m->locked_ino);
        PyObject *args = msg != NULL ? PyTuple_Pack(1, msg) : NULL;
        PyObject *kw = args != NULL ? Py_BuildValue("{s:O,s:i}", "source",
                                                    m->path != NULL ? m->path : Py_None, "expected", SIDE_SIZE)
                                    : NULL;
        Py_XDECREF(msg);
        if (kw != NULL && m->path == NULL && PyDict_DelItemString(kw, "source") < 0)
            Py_CLEAR(kw);
        exc = kw != NULL ? PyObject_Call(cls, args, kw) : NULL;
        Py_XDECREF(args);
        Py_XDECREF(kw);
    }
    if (exc != NULL) {
        PyErr_SetObject(cls, exc);
        Py_DECREF(exc);
    }
    Py_DECREF(cls);
    return -1;
}

static int unusable(MutexObject *m)
{
    if (m->map == NULL) {
        PyErr_SetString(PyExc_ValueError, "mutex side file is unmapped");
        return 1;
    }
    if (m->broken) {
        fault_error(m);
        return 1;
    }
    return 0;
}

static int got_lock(MutexObject *m, int rc)
{
    if (rc == 0) {
        m->held_here++;
        return 0;
    }
    if (rc == MB_FAULTED)
        return fault_error(m);
    if (rc == EBUSY || rc == ETIMEDOUT)
        return 1;
    errno = rc;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
}

int mb_mutex_trylock(PyObject *obj)
{
    MutexObject *m = (MutexObject *)obj;
    if (unusable(m))
        return -1;
    return got_lock(m, g_mutex_op(m->map, OP_TRY, 0.0));
}

int mb_mutex_unlock(PyObject *obj)
{
    MutexObject *m = (MutexObject *)obj;
    int rc;
    if (unusable(m))
        return -1;
    rc = g_mutex_op(m->map, OP_UNLOCK, 0.0);
    if (rc == MB_FAULTED) {
        m->held_here--;   /* the hold went with the mapping */
        return fault_error(m);
    }
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    m->held_here--;
    return 0;
}

/* Guarded over the side file and the caller's mapping [base, base + len): trylock, and
 * when taken body(ctx), then unlock.  Returns the trylock's pthread code (0: body ran and
 * the unlock's code is in *urc), MB_FAULTED (the side file faulted: in the trylock or the
 * unlock) or MB_BODY_FAULTED (body's mapping faulted: the mutex is still held).  No Python call. */
#define MB_BODY_FAULTED (-2)
static int g_mutex_run(unsigned char *map, const void *base, size_t len, void (*body)(void *), void *ctx, int *urc)
{
    GUARD_DECL(gd);
    int rc;
    GUARD_BEGIN2(gd, map, SIDE_SIZE, base, len)
        return GUARD_FAULTED_IN(gd, map, SIDE_SIZE) ? MB_FAULTED : MB_BODY_FAULTED;
    {
        pthread_mutex_t *mx = (pthread_mutex_t *)(map + MUTEX_OFF);
        rc = recovered(map, mx, pthread_mutex_trylock(mx));
        if (rc == 0) {
            body(ctx);
            *urc = pthread_mutex_unlock(mx);
        }
    }
    GUARD_END();
    return rc;
}

int mb_mutex_run(PyObject *obj, const void *base, size_t len, void (*body)(void *), void *ctx)
{
    MutexObject *m = (MutexObject *)obj;
    int rc, urc = 0;
    if (unusable(m))
        return -1;
    /* held_here is not counted: between the trylock and the unlock no Python code runs and
     * the GIL is kept, so no thread that reads it (with the GIL) can look meanwhile. */
    rc = g_mutex_run(m->map, base, len, body, ctx, &urc);
    if (rc == EBUSY)
        return 1;
    if (rc == MB_BODY_FAULTED) {   /* the mutex is held: unlock it (its own guarded section) */
        urc = g_mutex_op(m->map, OP_UNLOCK, 0.0);
        if (urc == MB_FAULTED)
            return fault_error(m);
    } else if (rc != 0) {   /* MB_FAULTED, or a pthread error (ENOTRECOVERABLE...): as got_lock */
        return got_lock(m, rc) == 1 ? 1 : -1;
    }
    if (urc != 0) {   /* the unlock failed */
        errno = urc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return rc == MB_BODY_FAULTED ? 2 : 0;
}

int mb_mutex_wait_other(PyObject *obj)
{
    MutexObject *m = (MutexObject *)obj;
    int r;
    if (m->map == NULL || m->held_here > 0)
        return 1;
    if (unusable(m))
        return -1;
    for (;;) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = g_mutex_op(m->map, OP_SLICE, 0.05);
        Py_END_ALLOW_THREADS
        if (rc == EINTR)
            rc = ETIMEDOUT;
        if ((r = got_lock(m, rc)) <= 0)
            return r;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

/* This process's pid namespace: st_ino of /proc/self/ns/pid; 0 if it cannot be told.
 * A robust futex names its owner by a tid local to the owner's pid namespace, and the kernel
 * marks it dead when a thread with that tid *as seen in the exiting thread's namespace* dies
 * holding or waiting for it (list_op_pending): between pid namespaces tids collide (each
 * container's first process is pid 1), so one side file serves one pid namespace only. */
static unsigned long long pidns_id(void)
{
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0)
        return 0;
    return (unsigned long long)st.st_ino;
}

/* Check the header against what this process expects; NULL if it matches, else why not. */
static PyObject *mismatch(const side_header *h, unsigned long long dev, unsigned long long ino,
                          unsigned long long own)
{
    char libc[16];
    libc_id(libc);
    if (__atomic_load_n(&h->initialised, __ATOMIC_ACQUIRE) != 1)
        return PyUnicode_FromFormat("not initialised (word %u, expected 1)", (unsigned)h->initialised);
    if (memcmp(h->magic, MAGIC, 8) != 0)
        return PyUnicode_FromString("bad magic (expected MBMUTEX1)");
    if (h->version != 2)
        return PyUnicode_FromFormat("version %u, expected 2", (unsigned)h->version);
    if (h->mutex_size != sizeof(pthread_mutex_t))
        return PyUnicode_FromFormat("sizeof(pthread_mutex_t) %u, expected %u", (unsigned)h->mutex_size,
                                    (unsigned)sizeof(pthread_mutex_t));
    if (memcmp(h->libc, libc, 16) != 0)
        return PyUnicode_FromFormat("libc %.16s, expected %.16s", h->libc, libc);
    if (h->locked_dev != dev || h->locked_ino != ino)
        return PyUnicode_FromFormat("made for inode %llu:%llu, expected %llu:%llu", (unsigned long long)h->locked_dev,
                                    (unsigned long long)h->locked_ino, dev, ino);
    if (h->pidns != pidns_id())
        return PyUnicode_FromFormat("made in pid namespace %llu, this process is in %llu (tids of two pid "
                                    "namespaces collide: one side file serves one namespace)",
                                    (unsigned long long)h->pidns, pidns_id());
    if (h->own_ino != own)
        return PyUnicode_FromFormat("a copy: made as inode %llu, this file is inode %llu",
                                    (unsigned long long)h->own_ino, own);
    return NULL;
}

static int parse3(PyObject *args, int *fd, unsigned long long *dev, unsigned long long *ino)
{
    return PyArg_ParseTuple(args, "iKK", fd, dev, ino);
}

static PyObject *mutex_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int fd;
    unsigned long long dev, ino;
    struct stat st;
    void *map;
    PyObject *why;
    MutexObject *self;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Mutex() takes no keyword arguments");
        return NULL;
    }
    if (!parse3(args, &fd, &dev, &ino))
        return NULL;
    if (fstat(fd, &st) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (!S_ISREG(st.st_mode) || st.st_size != SIDE_SIZE)
        return PyErr_Format(PyExc_ValueError, "mutex side file: size %lld bytes, expected %d (or not a regular file)",
                            (long long)st.st_size, SIDE_SIZE);
    map = mmap(NULL, SIDE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    why = mismatch((const side_header *)map, dev, ino, (unsigned long long)st.st_ino);
    if (why != NULL) {
        munmap(map, SIDE_SIZE);
        PyErr_Format(PyExc_ValueError, "mutex side file: %U", why);
        Py_DECREF(why);
        return NULL;
    }
    self = (MutexObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        munmap(map, SIDE_SIZE);
        return NULL;
    }
    self->map = map;
    self->side_ino = (unsigned long long)st.st_ino;
    self->locked_dev = dev;
    self->locked_ino = ino;
    if (mb_guard_install() < 0) {   /* the pure path makes a Mutex without any Handle */
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void mutex_dealloc(MutexObject *self)
{
    Py_CLEAR(self->path);
    /* Still held by a thread of this process: keep the 256 bytes mapped, for the kernel's
     * robust-list walk at that thread's exit (it marks the mutex's owner dead). */
    if (self->map != NULL && self->held_here == 0)
        munmap(self->map, SIDE_SIZE);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(mutex_create_doc,
"create(fd, dev, ino, /)\n--\n\n"
"Static.  Lay out a new side file on fd (an empty regular file, open read-write, not yet\n"
"visible at its final name): header for the locked inode dev:ino, the robust process-shared\n"
"mutex, the initialised word last.  Returns None; OSError on failure.");

static PyObject *mutex_create(PyObject *unused, PyObject *args)
{
    int fd, rc;
    unsigned long long dev, ino;
    struct stat st;
    unsigned char *map;
    side_header *h;
    pthread_mutexattr_t attr;
    (void)unused;
    if (!parse3(args, &fd, &dev, &ino))
        return NULL;
    if (fstat(fd, &st) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    /* Allocate the blocks now (ENOSPC here), never by storing through the mapping: a page
     * the file system cannot back (a full tmpfs) is SIGBUS on the first store. */
    if ((rc = posix_fallocate(fd, 0, SIDE_SIZE)) != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    map = mmap(NULL, SIDE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    memset(map, 0, SIDE_SIZE);
    h = (side_header *)map;
    memcpy(h->magic, MAGIC, 8);
    h->version = 2;
    h->mutex_size = sizeof(pthread_mutex_t);
    libc_id(h->libc);
    h->locked_dev = dev;
    h->locked_ino = ino;
    h->own_ino = (unsigned long long)st.st_ino;
    h->pidns = pidns_id();
    if ((rc = pthread_mutexattr_init(&attr)) == 0) {
        if ((rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED)) == 0 &&
            (rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST)) == 0)
            rc = pthread_mutex_init((pthread_mutex_t *)(map + MUTEX_OFF), &attr);
        pthread_mutexattr_destroy(&attr);
    }
    if (rc == 0)
        __atomic_store_n(&h->initialised, 1u, __ATOMIC_RELEASE);
    munmap(map, SIDE_SIZE);
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

PyDoc_STRVAR(mutex_try_doc,
"try_acquire()\n--\n\nReturns bool: True if the mutex was free and is now held by the calling thread\n"
"(also after its holder died: EOWNERDEAD, made consistent, counted in recoveries), False if\n"
"another thread holds it.  Keeps the GIL.  OSError otherwise (ENOTRECOVERABLE).");

static PyObject *mutex_try(MutexObject *self, PyObject *unused)
{
    int r;
    (void)unused;
    if ((r = mb_mutex_trylock((PyObject *)self)) < 0)
        return NULL;
    return PyBool_FromLong(r == 0);
}

PyDoc_STRVAR(mutex_acquire_doc,
"acquire(timeout=-1.0, /)\n--\n\nWait for the mutex: timeout in seconds (< 0: forever), on the monotonic clock.\n"
"The wait is pthread_mutex_clocklock(CLOCK_MONOTONIC) (glibc >= 2.30; else pthread_mutex_timedlock) in slices of at most 50 ms with the GIL released; signal handlers\n"
"run between slices (an exception from one ends the wait, nothing held).  Returns True\n"
"(held; a dead holder is recovered as in try_acquire) or False (timed out).");

static PyObject *mutex_acquire(MutexObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    double timeout = -1.0, deadline = 0.0;
    int rc, r;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "acquire() takes at most 1 argument (%zd given)", nargs);
    if (nargs == 1 && args[0] != Py_None) {
        timeout = PyFloat_AsDouble(args[0]);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
    }
    if ((r = mb_mutex_trylock((PyObject *)self)) <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_True);
    if (timeout >= 0.0)
        deadline = mono_now() + timeout;
    for (;;) {
        double slice = 0.05;
        if (timeout >= 0.0) {
            const double left = deadline - mono_now();
            if (left <= 0.0)
                Py_RETURN_FALSE;
            if (left < slice)
                slice = left;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = g_mutex_op(self->map, OP_SLICE, slice);
        Py_END_ALLOW_THREADS
        if (rc == EINTR)
            rc = ETIMEDOUT;
        if ((r = got_lock(self, rc)) < 0)
            return NULL;
        if (r == 0)
            Py_RETURN_TRUE;
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

PyDoc_STRVAR(mutex_release_doc,
"release()\n--\n\nUnlock (the calling thread must hold it).  OSError (EPERM) if it does not.");

static PyObject *mutex_release(MutexObject *self, PyObject *unused)
{
    (void)unused;
    if (mb_mutex_unlock((PyObject *)self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mutex_get_recoveries(MutexObject *self, void *c)
{
    (void)c;
    if (self->map == NULL)
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong(((volatile side_header *)self->map)->recoveries);
}

static PyObject *mutex_get_side_ino(MutexObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->side_ino);
}

static PyMethodDef mutex_methods[] = {
    {"create", (PyCFunction)mutex_create, METH_VARARGS | METH_STATIC, mutex_create_doc},
    {"try_acquire", (PyCFunction)mutex_try, METH_NOARGS, mutex_try_doc},
    {"acquire", (PyCFunction)(void (*)(void))mutex_acquire, METH_FASTCALL, mutex_acquire_doc},
    {"release", (PyCFunction)mutex_release, METH_NOARGS, mutex_release_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *mutex_get_wait_clock(MutexObject *self, void *c)
{
    (void)self;
    (void)c;
    return PyUnicode_FromString(MB_SLICE_CLOCK == CLOCK_MONOTONIC ? "monotonic" : "realtime");
}

static PyObject *mutex_get_path(MutexObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->path != NULL ? self->path : Py_None);
}

static int mutex_set_path(MutexObject *self, PyObject *value, void *c)
{
    (void)c;
    if (value != NULL && value != Py_None && !PyUnicode_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "path must be a str or None");
        return -1;
    }
    Py_XSETREF(self->path, value != NULL && value != Py_None ? Py_NewRef(value) : NULL);
    return 0;
}

static PyGetSetDef mutex_getset[] = {
    {"path", (getter)mutex_get_path, (setter)mutex_set_path,
     "the side file's path (str, set by mmapbloom.locking; named by errors), or None", NULL},
    {"wait_clock", (getter)mutex_get_wait_clock, NULL,
     "the clock of the wait slices: \"monotonic\" (pthread_mutex_clocklock, glibc >= 2.30) or \"realtime\"", NULL},
    {"recoveries", (getter)mutex_get_recoveries, NULL, "times a dead holder was recovered (EOWNERDEAD)", NULL},
    {"side_ino", (getter)mutex_get_side_ino, NULL, "st_ino of the side file mapped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mb_Mutex_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.Mutex",
    .tp_basicsize = sizeof(MutexObject),
    .tp_dealloc = (destructor)mutex_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Mutex(fd, dev, ino)\n--\n\nMap the side file open as fd (read-write) and check its header was made\n"
              "for the locked inode dev:ino, in this very file (not a copy), by this libc ABI; ValueError\n"
              "saying what differs otherwise.  The mapping lives as long as the object.  Thread- and\n"
              "process-safe: it is the lock.",
    .tp_methods = mutex_methods,
    .tp_getset = mutex_getset,
    .tp_new = mutex_new,
};

/* Local file systems (statfs f_type) whose shared mappings are coherent between processes. */
static const unsigned long LOCAL_FS[] = {
    0xEF53UL,      /* ext2/3/4 */
    0x58465342UL,  /* xfs */
    0x9123683EUL,  /* btrfs */
    0x01021994UL,  /* tmpfs */
    0x858458F6UL,  /* ramfs */
    0xF2F52010UL,  /* f2fs */
    0x2FC12FC1UL,  /* zfs */
    0x794C7630UL,  /* overlayfs */
    0xCA451A4EUL,  /* bcachefs */
};

PyObject *mb_mutex_supported(PyObject *module, PyObject *arg)
{
    int fd, rc;
    struct statfs sf;
    pthread_mutexattr_t attr;
    size_t i;
    (void)module;
    if ((fd = PyObject_AsFileDescriptor(arg)) < 0)
        return NULL;
    if ((rc = pthread_mutexattr_init(&attr)) == 0) {
        rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
        if (rc == 0)
            rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_destroy(&attr);
    }
    if (rc != 0)
        return PyUnicode_FromFormat("robust process-shared mutexes unavailable at run time (error %d)", rc);
    if (pidns_id() == 0)
        return PyUnicode_FromString("cannot tell this process's pid namespace (/proc/self/ns/pid)");
    if (fstatfs(fd, &sf) != 0)
        return PyUnicode_FromFormat("fstatfs failed (errno %d)", errno);
    for (i = 0; i < sizeof(LOCAL_FS) / sizeof(LOCAL_FS[0]); i++)
        if ((unsigned long)sf.f_type == LOCAL_FS[i])
            return PyUnicode_FromString("");
    return PyUnicode_FromFormat("file system type 0x%lx is not a known local one", (unsigned long)sf.f_type);
}

#else /* no robust process-shared mutexes in this build */

PyTypeObject mb_Mutex_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.Mutex",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Unavailable in this build (no robust process-shared mutexes): mutex_supported() says so.",
};

int mb_mutex_trylock(PyObject *m)
{
    (void)m;
    PyErr_SetString(PyExc_OSError, "no robust mutexes in this build");
    return -1;
}

int mb_mutex_unlock(PyObject *m)
{
    (void)m;
    PyErr_SetString(PyExc_OSError, "no robust mutexes in this build");
    return -1;
}

int mb_mutex_wait_other(PyObject *m)
{
    (void)m;
    return 1;
}

int mb_mutex_run(PyObject *m, const void *base, size_t len, void (*body)(void *), void *ctx)
{
    (void)m;
    (void)base;
    (void)len;
    (void)body;
    (void)ctx;
    PyErr_SetString(PyExc_OSError, "no robust mutexes in this build");
    return -1;
}

PyObject *mb_mutex_supported(PyObject *module, PyObject *arg)
{
    (void)module;
    (void)arg;
    return PyUnicode_FromString("this build has no robust process-shared mutexes (Linux only)");
}
#endif
