/* mmapbloom/_handle.c: the native handle (interface in _handle.h): the object, its per-item
 * ops and close; its batch methods are in _handle_batch.c (fields shared: _handle_impl.h).
 *
 * Handle binds one open filter: the image buffer (exported once), the cells, the items
 * word, m, k, strategy, cell width and the LockState.  A write takes the lock in C when it
 * is free (thread lock, then the side file's mutex or flock(LOCK_EX | LOCK_NB)), sets the
 * cells, bumps the items word and unlocks, all with the GIL held (on the mutex, and inside
 * write_lock(), in one guarded section with the lock: mb_lock_run); only a real wait calls
 * WriteLock.acquire (Python, which waits interruptibly).  A batch resolves its keys once (mb_key array, objects pinned),
 * hashes a chunk with the GIL released (large chunks), then locks, tests-and-sets the
 * chunk, bumps the counter once and unlocks.  Warnings are emitted through Python
 * callables after the lock is released.
 *
 * Every field of both objects is read and written with the GIL held (no free-threaded
 * build support).  `busy` counts a handle's calls that let go of the GIL or call Python;
 * close() while one is in flight defers releasing the image export to its end, so a
 * handle (or a call in flight) that outlives its filter never touches unmapped memory.
 */
#include "_handle_impl.h"

#include <structmember.h>
#ifndef _WIN32
#include <unistd.h>
#endif

#include "_cells.h"
#include "_guard.h"
#include "_pykeys.h"






static void h_release_image(Handle *h)
{
    if (h->have_image) {
        h->have_image = 0;
        PyBuffer_Release(&h->image);
    }
}

static int h_traverse(Handle *h, visitproc visit, void *arg)
{
    Py_VISIT(h->lock);
    Py_VISIT(h->closed_hook);
    Py_VISIT(h->readonly_hook);
    Py_VISIT(h->faulted_hook);
    Py_VISIT(h->over);
    Py_VISIT(h->saturated);
    return mb_lastpage_traverse(&h->lp, visit, arg);
}

static int h_clear(Handle *h)
{
    h->closed = 1;
    Py_CLEAR(h->lock);
    Py_CLEAR(h->closed_hook);
    Py_CLEAR(h->readonly_hook);
    Py_CLEAR(h->faulted_hook);
    Py_CLEAR(h->over);
    Py_CLEAR(h->saturated);
    mb_lastpage_clear(&h->lp);
    return 0;
}

static void h_dealloc(Handle *h)
{
    PyObject_GC_UnTrack(h);
    h_clear(h);
    h_release_image(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* hooks.<name> -> *out (a new reference); -1 with AttributeError. */
static int get_hook(PyObject *hooks, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(hooks, name);
    return *out == NULL ? -1 : 0;
}

/* The last-page fields of a handle over image (an mmap: a file; anything else: none). */
static int h_last_page(Handle *h, PyObject *image, PyObject *hooks)
{
    h->last_cell = UINT64_MAX;
    if (mb_lastpage_init(&h->lp, image, &h->image, hooks) < 0)
        return -1;
    if (h->lp.size_fn != NULL) {
        const uintptr_t last = h->lp.last, body = (uintptr_t)h->body;
        h->last_cell = last <= body ? 0 : (uint64_t)(last - body) * (uint64_t)(8 / h->width);
        h->items_last = mb_lastpage_touches(&h->lp, h->items, 4);
    }
    return 0;
}

/* Handle(image, geometry, lock, hooks, writable, warn_at): geometry is mmapbloom.handle's
 * Geometry (strategy_id, m, k, width, header_size, items_offset), hooks its Hooks. */
static PyObject *h_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"image", "geometry", "lock", "hooks", "writable", "warn_at", NULL};
    PyObject *image, *geometry, *sid, *m, *k, *lock, *hooks;
    Py_ssize_t header_size, items_offset;
    int width, writable;
    double warn_at;
    Handle *h;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!Opd:Handle", names, &image, &PyTuple_Type, &geometry,
                                     &mb_LockState_Type, &lock, &hooks, &writable, &warn_at))
        return NULL;
    if (!PyArg_ParseTuple(geometry, "OOOinn:Handle geometry (strategy_id, m, k, width, header_size, items_offset)",
                          &sid, &m, &k, &width, &header_size, &items_offset))
        return NULL;
    if (width != 1 && width != 4 && width != 8)
        return PyErr_Format(PyExc_ValueError, "width must be 1, 4 or 8, got %d", width);
    if (mb_guard_install() < 0)   /* once per process: the handle's touches are guarded */
        return NULL;
    if (header_size < 0 || items_offset < 0 || items_offset > header_size - 4)
        return PyErr_Format(PyExc_ValueError, "items_offset %zd does not fit a header of %zd bytes", items_offset,
                            header_size);
    h = (Handle *)type->tp_alloc(type, 0);
    if (h == NULL)
        return NULL;
    if (mb_parse_geom(sid, m, k, &h->g) < 0)
        goto fail;
    h->width = width;
    if (get_hook(hooks, "closed", &h->closed_hook) < 0 || get_hook(hooks, "readonly", &h->readonly_hook) < 0 ||
        get_hook(hooks, "faulted", &h->faulted_hook) < 0 || get_hook(hooks, "over", &h->over) < 0 ||
        get_hook(hooks, "saturated", &h->saturated) < 0)
        goto fail;
    if (PyObject_GetBuffer(image, &h->image, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        goto fail;
    h->have_image = 1;
    if (h->image.len < header_size ||
        (uint64_t)(h->image.len - header_size) < mb_body_bytes(h->g.m, width)) {
        PyErr_Format(PyExc_ValueError, "image has %zd bytes, expected at least %zd + %llu", h->image.len, header_size,
                     (unsigned long long)mb_body_bytes(h->g.m, width));
        goto fail;
    }
    h->body = (uint8_t *)h->image.buf + header_size;
    h->items = (uint8_t *)h->image.buf + items_offset;
    if (h_last_page(h, image, hooks) < 0)
        goto fail;
    h->writable = writable;
    h->warn_at = warn_at;
    Py_INCREF(lock);
    h->lock = (LockState *)lock;
    return (PyObject *)h;
fail:
    Py_DECREF(h);
    return NULL;
}

/* Call a hook that raises (closed, readonly, faulted); NULL with its exception, or with
 * `otherwise` if it returned. */
static PyObject *h_raise(PyObject *hook, PyObject *exc, const char *otherwise)
{
    if (hook != NULL) {
        PyObject *r = PyObject_CallNoArgs(hook);
        Py_XDECREF(r);
    }
    if (!PyErr_Occurred())
        PyErr_SetString(exc, otherwise);
    return NULL;
}

/* Raise for a closed handle, or (write) for a refused write, which is also
 * FilterClosedError while the handle closes, through the filter's own errors. */
PyObject *mb_h_refuse(Handle *h, int write)
{
    return h_raise(write && !h->closed ? h->readonly_hook : h->closed_hook, PyExc_ValueError,
                   "operation on a closed filter");
}

PyObject *mb_handle_write_lock(mb_handle *h)
{
    return h->closed || !h->writable ? NULL : (PyObject *)h->lock;
}

/* End of a call counted in busy: the image export goes once the handle is closed and no
 * call is in flight. */
void mb_h_leave(Handle *h)
{
    if (--h->busy == 0 && h->closed)
        h_release_image(h);
}

/* Add delta to the items word by the rule of mmapbloom.items.items_update: clamped to
 * [0, 2**32 - 1], never moving again once saturated.  Returns 1 (and the stored count)
 * when the count is past the design point and this handle has not warned yet.  The caller
 * holds the write lock. */
int mb_h_items_bump(Handle *h, long long delta, uint32_t *stored)
{
    const uint32_t count = mb_items_load(h->items);
    long long total;
    if (count == MAX_ITEMS || delta == 0)
        return 0;
    total = (long long)count + delta;
    total = total < 0 ? 0 : total > (long long)MAX_ITEMS ? (long long)MAX_ITEMS : total;
    mb_items_store(h->items, (uint32_t)total);
    *stored = (uint32_t)total;
    return !h->warned && (double)total > h->warn_at;
}

/* The warnings of a write, after the lock is released (the hooks find the user's frame). */
int mb_h_warn(Handle *h, int over, uint32_t stored, int sat)
{
    PyObject *r;
    if (over && !h->warned && h->over != NULL) {
        h->warned = 1;
        r = PyObject_CallFunction(h->over, "k", (unsigned long)stored);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (sat && h->saturated != NULL && h->saturated != Py_None) {
        r = PyObject_CallNoArgs(h->saturated);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* After a real wait for the lock (taken: LOCK_TAKEN): the caller's size check ran before
 * it, so a truncation inside the last page made meanwhile (say by the holder) would take
 * this write unseen: check again.  LOCK_TAKEN, or -1 with the lock released. */
static int h_recheck_size(Handle *h)
{
    if (h->lp.size_fn != NULL && mb_h_check_size(h) < 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (mb_lock_release(h->lock) < 0)
            PyErr_Clear();   /* the size error is the one to raise */
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    return LOCK_TAKEN;
}

/* Take the write lock for a write: the uncontended path in C, else WriteLock.acquire,
 * then the file's size checked again (mb_h_check_size).  Returns LOCK_HELD or LOCK_TAKEN,
 * or -1 with an exception set (the lock not held). */
int mb_h_lock(Handle *h)
{
    int state = mb_lock_try(h->lock);
    if (state == LOCK_TAKEN && mb_lock_waited(h->lock))
        return h_recheck_size(h);
    if (state != LOCK_SLOW)
        return state;
    h->busy++;
    state = mb_lock_wait(h->lock);
    h->busy--;
    if (state < 0) {
        if (h->busy == 0 && h->closed)
            h_release_image(h);
        return -1;
    }
    if (h->closed) {   /* closed while this thread waited (WriteLock saw it first, normally) */
        mb_lock_release(h->lock);
        if (h->busy == 0)
            h_release_image(h);
        mb_h_refuse(h, 0);
        return -1;
    }
    return h_recheck_size(h);
}

/* Raise for a fault of the mapping inside a guarded section (the file was truncated under
 * the open handle): LengthMismatchError through the faulted hook, which compares the file's
 * size with the mapping.  The caller released what it held. */
PyObject *mb_h_faulted(Handle *h)
{
    return h_raise(h->faulted_hook, PyExc_OSError,
                   "a touch of the filter's mapping faulted (SIGBUS): the file was truncated under the open handle");
}

int mb_h_check_size(Handle *h)
{
    const int r = mb_lastpage_check(&h->lp);
    if (r == -1 && h->closed) {   /* size() failed: closed by another thread meanwhile */
        PyErr_Clear();
        mb_h_refuse(h, 0);
    }
    return r < 0 ? -1 : 0;
}

/* 1 if a write (items: it bumps the items word) or a read of the cells pos[0..n) touches
 * the mapping's last page (where a truncation reads zeros instead of faulting). */
static int h_in_last_page(const Handle *h, const uint64_t *pos, unsigned n, int items)
{
    unsigned i;
    if (h->lp.size_fn == NULL)
        return 0;
    if (items && h->items_last)
        return 1;
    for (i = 0; i < n; i++)
        if (pos[i] >= h->last_cell)
            return 1;
    return 0;
}

/* ---- guarded sections: every touch of the mapping (_guard.h) -------------- */

/* One write's cells and items word (the lock is held), inside a guarded section: op 0 adds
 * (n = k positions), op 1 removes (n distinct positions); the results into the struct. */
typedef struct {
    Handle *h;
    const uint64_t *pos;
    unsigned n;
    int op, fresh, sat, removed, over;
    uint32_t stored;
} write_one_t;

static void write_one_body(void *ctx)
{
    write_one_t *w = ctx;
    Handle *h = w->h;
    TOUCH_LAST(h);
    if (w->op == 0) {
        w->fresh = mb_cells_add(h->body, h->width, w->pos, w->n, &w->sat);
        if (w->fresh)
            w->over = mb_h_items_bump(h, 1, &w->stored);
    } else {
        w->removed = mb_cells_remove(h->body, h->width, w->pos, w->n);
        if (w->removed > 0)
            w->over = mb_h_items_bump(h, -1, &w->stored);
    }
}

/* The probes of one query (pos has room for k; its head is computed): 1 present, 0
 * absent (stops at the first zero cell; the rest of the positions lazily), -1 faulted. */
static int g_contains(Handle *h, const uint64_t hv[2], uint64_t *pos, unsigned head)
{
    const unsigned k = h->g.k;
    int present;
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    present = mb_cells_probe(h->body, h->width, pos, 0, head);
    if (present && head < k) {
        mb_positions_n(&h->g, hv, pos, head, k);
        present = mb_cells_probe(h->body, h->width, pos, head, k);
    }
    GUARD_END();
    return present;
}

/* The minimum of a key's counters into *low: 0, or -1 faulted. */
static int g_count_min(Handle *h, const uint64_t *pos, unsigned *low)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    *low = mb_cells_min(h->body, h->width, pos, h->g.k);
    GUARD_END();
    return 0;
}

/* A key's positions into pos (k values; pos has SMALL_K room, else heap in *heap). */
static uint64_t *h_positions(Handle *h, PyObject *key, uint64_t *small)
{
    uint64_t hv[2], *pos = small;
    if (mb_hash_object(key, hv) < 0)   /* the one key rule: str, bytes-like, int, else encode_key */
        return NULL;
    if (h->g.k > SMALL_K && (pos = PyMem_Malloc(h->g.k * sizeof *pos)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    mb_positions(&h->g, hv, pos);
    return pos;
}

PyDoc_STRVAR(h_add_doc,
"add(key, /)\n--\n\n"
"Add one key under the write lock; True if it was new (some bit was 0 / some counter was 0).\n"
"Atomic across threads and processes; the items word is bumped under the same lock.");

/* op: 0 add, 1 remove (counting).  Inside this thread's write_lock(), and on the uncontended
 * mutex-mode path, mb_lock_run writes in one guarded section with the lock; every other case
 * (the file lock, a busy lock, the first acquire) takes the lock apart (mb_h_lock). */
PyObject *mb_handle_write_one(Handle *h, PyObject *key, int op)
{
    uint64_t small[SMALL_K], *pos;
    write_one_t w = {h, NULL, 0, op, 0, 0, 0, 0, 0};
    int state;
    if (h->closed || !h->writable)
        return mb_h_refuse(h, 1);
    if ((pos = h_positions(h, key, small)) == NULL)
        return NULL;
    w.pos = pos;
    w.n = h->width == 1 ? h->g.k : mb_cells_distinct(h->width, pos, h->g.k);   /* bits: no dedup */
    if (h_in_last_page(h, pos, w.n, 1) && mb_h_check_size(h) < 0)
        goto fail;
    if (mb_guard_check() < 0)   /* a Python SIGBUS handler set since the last op: re-arm over it */
        goto fail;
    state = mb_lock_run(h->lock, h->image.buf, h->image.len, write_one_body, &w);
    if (state == LOCK_FAULTED) {
        mb_h_faulted(h);
        goto fail;
    }
    if (state < 0)
        goto fail;
    if (state == LOCK_SLOW) {
        state = mb_h_lock(h);
        if (state < 0)
            goto fail;
        /* taking it may have run Python code (a wait runs signal handlers): check again */
        if (state == LOCK_TAKEN && mb_guard_check() < 0) {
            mb_lock_release(h->lock);
            goto fail;
        }
        if (mb_guard_run(h->image.buf, h->image.len, write_one_body, &w) < 0) {
            if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
                goto fail;
            mb_h_faulted(h);
            goto fail;
        }
        if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
            goto fail;
    }
    if (pos != small)
        PyMem_Free(pos);
    if ((w.over || w.sat) && mb_h_warn(h, w.over, w.stored, w.sat) < 0)
        return NULL;
    if (op == 0)
        return PyBool_FromLong(w.fresh);
    return PyLong_FromLong(w.removed);
fail:
    if (pos != small)
        PyMem_Free(pos);
    return NULL;
}

static PyObject *h_add(Handle *h, PyObject *key)
{
    return mb_handle_write_one(h, key, 0);
}

PyDoc_STRVAR(h_remove_doc,
"remove(key, /)\n--\n\n"
"Counting handles: decrement the key's distinct counters under the write lock.  Returns -1\n"
"(a counter is 0: certainly absent, nothing changed), 1 (some counter returned to 0; the\n"
"items word is decremented) or 0.");

static PyObject *h_remove(Handle *h, PyObject *key)
{
    if (h->width == 1)
        return PyErr_Format(PyExc_TypeError, "remove needs a counting handle");
    return mb_handle_write_one(h, key, 1);
}

PyDoc_STRVAR(h_contains_doc,
"contains(key, /)\n--\n\n"
"True if every bit (counter) of the key is set (non-zero); stops at the first 0.  No lock.");

/* 1: the key may be present, 0: certainly absent, -1: error. */
int mb_handle_contains(Handle *h, PyObject *key)
{
    const unsigned k = h->g.k, head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    uint64_t hv[2], small[SMALL_K], *pos = small;
    int present;
    if (h->closed) {
        mb_h_refuse(h, 0);
        return -1;
    }
    if (mb_hash_object(key, hv) < 0)   /* the one key rule: str, bytes-like, int, else encode_key */
        return -1;
    if (h->closed) {   /* encode_key ran Python: another thread may have closed (and unmapped) */
        mb_h_refuse(h, 0);
        return -1;
    }
    /* Room for k positions before the guarded probes (which allocate nothing). */
    if (k > SMALL_K && (pos = PyMem_Malloc(k * sizeof *pos)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Lazily: the head positions first; an absent key usually stops there. */
    mb_positions_n(&h->g, hv, pos, 0, head);
    present = mb_guard_check() < 0 ? -2 : g_contains(h, hv, pos, head);
    if (present == 0 && h->lp.size_fn != NULL) {   /* a zero read past a truncation in the last page? */
        int last = h_in_last_page(h, pos, head, 0);
        if (!last && head < k) {   /* the rest: computed in g_contains only if the head was set */
            mb_positions_n(&h->g, hv, pos, head, k);
            last = h_in_last_page(h, pos + head, k - head, 0);
        }
        if (last && mb_h_check_size(h) < 0)
            present = -2;
    }
    if (pos != small)
        PyMem_Free(pos);
    if (present == -1)
        mb_h_faulted(h);
    return present < 0 ? -1 : present;
}

static PyObject *h_contains(Handle *h, PyObject *key)
{
    const int present = mb_handle_contains(h, key);
    return present < 0 ? NULL : PyBool_FromLong(present);
}

PyDoc_STRVAR(h_count_doc,
"count(key, /)\n--\n\n"
"Counting handles: the minimum of the key's counters (0: certainly absent).  No lock.");

static PyObject *h_count(Handle *h, PyObject *key)
{
    uint64_t small[SMALL_K], *pos;
    unsigned low = 0;
    int faulted;
    if (h->width == 1)
        return PyErr_Format(PyExc_TypeError, "count needs a counting handle");
    if (h->closed)
        return mb_h_refuse(h, 0);
    if ((pos = h_positions(h, key, small)) == NULL)
        return NULL;
    if (h->closed) {   /* the key's encoding may have run Python, and another thread closed */
        if (pos != small)
            PyMem_Free(pos);
        return mb_h_refuse(h, 0);
    }
    if (h_in_last_page(h, pos, h->g.k, 0) && mb_h_check_size(h) < 0) {
        if (pos != small)
            PyMem_Free(pos);
        return NULL;
    }
    if (mb_guard_check() < 0) {
        if (pos != small)
            PyMem_Free(pos);
        return NULL;
    }
    faulted = g_count_min(h, pos, &low);
    if (pos != small)
        PyMem_Free(pos);
    if (faulted < 0)
        return mb_h_faulted(h);
    return PyLong_FromUnsignedLong(low);
}

PyDoc_STRVAR(h_close_doc,
"close()\n--\n\n"
"Refuse every later call (FilterClosedError through hooks.closed) and release the image export, at\n"
"once or when the calls in flight end.  Idempotent.");

static PyObject *h_close(Handle *h, PyObject *unused)
{
    (void)unused;
    h->closed = 1;
    if (h->busy == 0)
        h_release_image(h);
    Py_RETURN_NONE;
}

static PyObject *h_get_closed(Handle *h, void *unused)
{
    (void)unused;
    return PyBool_FromLong(h->closed);
}

static PyObject *h_get_warned(Handle *h, void *unused)
{
    (void)unused;
    return PyBool_FromLong(h->warned);
}

static int h_set_warned(Handle *h, PyObject *v, void *unused)
{
    int t;
    (void)unused;
    if (v == NULL || (t = PyObject_IsTrue(v)) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cannot delete warned");
        return -1;
    }
    h->warned = t;
    return 0;
}

static PyObject *h_get_backend(Handle *h, void *unused)
{
    (void)h;
    (void)unused;
    return PyUnicode_FromString("native");
}

static PyGetSetDef h_getset[] = {
    {"closed", (getter)h_get_closed, NULL, "True after close().", NULL},
    {"warned", (getter)h_get_warned, (setter)h_set_warned, "The over-capacity warning was emitted.", NULL},
    {"backend", (getter)h_get_backend, NULL, "\"native\".", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef h_methods[] = {
    {"add", (PyCFunction)h_add, METH_O, h_add_doc},
    {"contains", (PyCFunction)h_contains, METH_O, h_contains_doc},
    {"add_many", (PyCFunction)(void (*)(void))mb_h_add_many, METH_FASTCALL, mb_h_add_many_doc},
    {"contains_many", (PyCFunction)(void (*)(void))mb_h_contains_many, METH_FASTCALL, mb_h_contains_many_doc},
    {"add_many_unless", (PyCFunction)(void (*)(void))mb_h_add_many_unless, METH_FASTCALL, mb_h_add_many_unless_doc},
    {"contains_many_any", (PyCFunction)(void (*)(void))mb_h_contains_many_any, METH_FASTCALL,
     mb_h_contains_many_any_doc},
    {"add_unless", (PyCFunction)(void (*)(void))mb_h_add_unless, METH_FASTCALL, mb_h_add_unless_doc},
    {"contains_any", (PyCFunction)(void (*)(void))mb_h_contains_any, METH_FASTCALL, mb_h_contains_any_doc},
    {"remove", (PyCFunction)h_remove, METH_O, h_remove_doc},
    {"count", (PyCFunction)h_count, METH_O, h_count_doc},
    {"close", (PyCFunction)h_close, METH_NOARGS, h_close_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mb_Handle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)h_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Handle(image, geometry, lock, hooks, writable, warn_at)\n--\n\n"
              "One open filter bound once: the image buffer (exported once); geometry = (strategy_id, m, k,\n"
              "width, header_size, items_offset): the cells at header_size (width 1 bits, 4 or 8 counters),\n"
              "the items word at items_offset; the LockState of its WriteLock.  Its methods are the hot API\n"
              "(add, contains, add_many, contains_many, remove, count).  hooks (mmapbloom.handle.Hooks):\n"
              "closed(), readonly() and faulted() raise the filter's errors, over(count) and saturated()\n"
              "emit its warnings (warn_at: the design point).",
    .tp_traverse = (traverseproc)h_traverse,
    .tp_clear = (inquiry)h_clear,
    .tp_methods = h_methods,
    .tp_getset = h_getset,
    .tp_new = h_new,
};


