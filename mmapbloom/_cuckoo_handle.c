/* mmapbloom/_cuckoo_handle.c: the cuckoo filter's native handle (interface in
 * _cuckoo_handle.h).  The same call shape as _handle.c's Handle, over _cuckoo.c's cells:
 *
 *   per item   hash the key (_pykeys.h), then insert / remove with the items word bumped,
 *              under the write lock: inside write_lock() or on the uncontended mutex in
 *              one guarded section with the lock (mb_lock_run), else take the lock
 *              (mb_lock_try, else mb_lock_wait), write in a guarded section, release;
 *              lookups and counts are guarded and lock-free.
 *   batches    resolve the keys once (every key validated before any slot changes), then
 *              per chunk of CK_CHUNK_KEYS keys (cuckoo_kernels.CHUNK_KEYS): hash outside
 *              the lock (GIL released from GIL_MIN_KEYS keys on), lock, test-and-set the
 *              chunk in order, bump the items word once, unlock.  A full insert stops the
 *              batch at that key: the keys before it stay committed and the exception
 *              (hooks.full) carries committed_items, as every exception leaving a batch.
 *
 * A file truncated inside the mapping's last page reads zeros there instead of faulting
 * (_lastpage.h): a per-item operation whose header words or buckets reach into the last
 * page checks the file's size first (one fstat), a write whose kick path or victim
 * re-homing moved fingerprints (the kick counter changed) checks it after (the lock
 * released: the write stands or falls with the file's size either way), a batch
 * checks it once per call or chunk, and a write that had to wait for the lock checks it
 * after the wait (the holder may have truncated the file meanwhile), whatever it touches;
 * each raises LengthMismatchError (hooks.check_size).
 *
 * Every field is read and written with the GIL held; `busy` counts calls that let go of
 * the GIL or call Python, so close() while one is in flight defers releasing the image. */
#include "_cuckoo_handle.h"

#include "_cells.h"
#include "_cuckoo.h"
#include "_guard.h"
#include "_lastpage.h"
#include "_lock.h"
#include "_murmur3.h"
#include "_pykeys.h"

#define CK_CHUNK_KEYS (1 << 14) /* keys per lock acquisition (cuckoo_kernels.CHUNK_KEYS) */
#define CK_AHEAD 16             /* keys hashed and prefetched ahead in a batch query */

typedef struct {
    PyObject_HEAD
    Py_buffer image; /* the whole image (header + slots), exported once */
    int have_image;
    mb_ck_geom g;
    uint8_t *items;  /* the header's items word */
    uint64_t *path;  /* kick-path scratch: max_kicks slot numbers (used under the lock) */
    int writable, closed;
    Py_ssize_t busy;
    LockState *lock;
    PyObject *closed_hook, *readonly_hook, *faulted_hook, *full_hook;
    mb_lastpage lp;  /* the size check of the mapping's last page (a file's only) */
    int header_last; /* the header (items, victim, kick counter) is in the last page */
} CkHandle;

static void ck_release_image(CkHandle *h)
{
    if (h->have_image) {
        h->have_image = 0;
        PyBuffer_Release(&h->image);
    }
}

static int ck_traverse(CkHandle *h, visitproc visit, void *arg)
{
    Py_VISIT(h->lock);
    Py_VISIT(h->closed_hook);
    Py_VISIT(h->readonly_hook);
    Py_VISIT(h->faulted_hook);
    Py_VISIT(h->full_hook);
    return mb_lastpage_traverse(&h->lp, visit, arg);
}

static int ck_clear(CkHandle *h)
{
    h->closed = 1;
    Py_CLEAR(h->lock);
    Py_CLEAR(h->closed_hook);
    Py_CLEAR(h->readonly_hook);
    Py_CLEAR(h->faulted_hook);
    Py_CLEAR(h->full_hook);
    mb_lastpage_clear(&h->lp);
    return 0;
}

static void ck_dealloc(CkHandle *h)
{
    PyObject_GC_UnTrack(h);
    ck_clear(h);
    ck_release_image(h);
    PyMem_Free(h->path);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* CuckooHandle(image, geometry, lock, hooks, writable): geometry = (num_buckets,
 * bucket_size, fingerprint_bits, max_kicks), hooks has closed, readonly, faulted, full. */
static PyObject *ck_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"image", "geometry", "lock", "hooks", "writable", NULL};
    PyObject *image, *geometry, *lock, *hooks;
    unsigned long long n;
    unsigned int b, f, kicks;
    int writable;
    CkHandle *h;
    uint64_t need;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!Op:CuckooHandle", names, &image, &PyTuple_Type, &geometry,
                                     &mb_LockState_Type, &lock, &hooks, &writable))
        return NULL;
    if (!PyArg_ParseTuple(geometry, "KIII:CuckooHandle geometry (num_buckets, bucket_size, fingerprint_bits, max_kicks)",
                          &n, &b, &f, &kicks))
        return NULL;
    if (n < 1 || n > (1ULL << 40) || (b != 1 && b != 2 && b != 4 && b != 8) || f < 4 || f > 32 || kicks < 1 ||
        kicks > MB_CK_MAX_KICKS)
        return PyErr_Format(PyExc_ValueError,
                            "bad cuckoo geometry: num_buckets %llu (1..2**40), bucket_size %u (1, 2, 4, 8), "
                            "fingerprint_bits %u (4..32), max_kicks %u (1..%d)",
                            n, b, f, kicks, MB_CK_MAX_KICKS);
    if (mb_guard_install() < 0)
        return NULL;
    h = (CkHandle *)type->tp_alloc(type, 0);
    if (h == NULL)
        return NULL;
    h->closed_hook = PyObject_GetAttrString(hooks, "closed");
    h->readonly_hook = h->closed_hook ? PyObject_GetAttrString(hooks, "readonly") : NULL;
    h->faulted_hook = h->readonly_hook ? PyObject_GetAttrString(hooks, "faulted") : NULL;
    h->full_hook = h->faulted_hook ? PyObject_GetAttrString(hooks, "full") : NULL;
    if (h->full_hook == NULL)
        goto fail;
    if (PyObject_GetBuffer(image, &h->image, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        goto fail;
    h->have_image = 1;
    need = MB_CK_HEADER_SIZE + (n * b * f + 7) / 8;
    if ((uint64_t)h->image.len < need) {
        PyErr_Format(PyExc_ValueError, "image has %zd bytes, expected at least %llu", h->image.len,
                     (unsigned long long)need);
        goto fail;
    }
    if (((uintptr_t)h->image.buf & 7) != 0) { /* the victim words and 16-/32-bit slots are aligned stores */
        PyErr_SetString(PyExc_ValueError, "image is not 8-byte aligned");
        goto fail;
    }
    h->path = PyMem_Malloc((size_t)kicks * sizeof *h->path);
    if (h->path == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    h->g.image = (uint8_t *)h->image.buf;
    h->g.num_buckets = n;
    h->g.bucket_size = b;
    h->g.fp_bits = f;
    h->g.max_kicks = kicks;
    h->g.body_bytes = need - MB_CK_HEADER_SIZE;
    h->items = (uint8_t *)h->image.buf + MB_CK_ITEMS_OFFSET;
    h->writable = writable;
    if (mb_lastpage_init(&h->lp, image, &h->image, hooks) < 0)
        goto fail;
    h->header_last = mb_lastpage_touches(&h->lp, h->image.buf, MB_CK_HEADER_SIZE);
    Py_INCREF(lock);
    h->lock = (LockState *)lock;
    return (PyObject *)h;
fail:
    Py_DECREF(h);
    return NULL;
}

/* Call a hook that raises; NULL with its exception (or a RuntimeError if it returned). */
static PyObject *ck_raise(PyObject *hook)
{
    PyObject *r = PyObject_CallNoArgs(hook);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "a cuckoo handle hook returned instead of raising");
    return NULL;
}

static PyObject *ck_refuse(CkHandle *h, int write)
{
    return ck_raise(write && !h->closed ? h->readonly_hook : h->closed_hook);
}

static void ck_leave(CkHandle *h)
{
    if (--h->busy == 0 && h->closed)
        ck_release_image(h);
}

/* Add delta to the items word (cuckoo_kernels.CuckooPyHandle._bump): clamped to
 * [0, 2**32 - 1], never moving again once saturated.  The caller holds the lock. */
static void ck_bump(CkHandle *h, long long delta)
{
    const uint32_t count = mb_items_load(h->items);
    long long total;
    if (count == MAX_ITEMS || delta == 0)
        return;
    total = (long long)count + delta;
    total = total < 0 ? 0 : total > (long long)MAX_ITEMS ? (long long)MAX_ITEMS : total;
    mb_items_store(h->items, (uint32_t)total);
}

static int ck_check_size(CkHandle *h);

/* After a real wait for the lock (taken: LOCK_TAKEN): a truncation made meanwhile (say by
 * the holder) must not take this write unseen, wherever its key's buckets lie, as in
 * _handle.c's h_recheck_size: check the file's size again (a file's handle only).
 * LOCK_TAKEN, or -1 with the size error set and the lock released. */
static int ck_recheck_size(CkHandle *h)
{
    if (h->lp.size_fn != NULL && ck_check_size(h) < 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (mb_lock_release(h->lock) < 0)
            PyErr_Clear(); /* the size error is the one to raise */
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    return LOCK_TAKEN;
}

/* The write lock: LOCK_HELD or LOCK_TAKEN, or -1 with an exception set (the lock not
 * held).  After a real wait (mb_lock_wait, or a mutex hold of another process waited out
 * inside mb_lock_try) the file's size is checked again. */
static int ck_lock(CkHandle *h)
{
    int state = mb_lock_try(h->lock);
    if (state == LOCK_TAKEN && mb_lock_waited(h->lock))
        return ck_recheck_size(h);
    if (state != LOCK_SLOW)
        return state;
    h->busy++;
    state = mb_lock_wait(h->lock);
    h->busy--;
    if (state < 0) {
        if (h->busy == 0 && h->closed)
            ck_release_image(h);
        return -1;
    }
    if (h->closed) {
        mb_lock_release(h->lock);
        if (h->busy == 0)
            ck_release_image(h);
        ck_refuse(h, 0);
        return -1;
    }
    return ck_recheck_size(h);
}

static int ck_unlock(CkHandle *h, int state)
{
    return state == LOCK_TAKEN ? mb_lock_release(h->lock) : 0;
}

/* A key's (i1, fp, r); -1 with the key's error. */
static int ck_hash(CkHandle *h, PyObject *key, mb_ck_key *k)
{
    uint64_t hv[2];
    if (mb_hash_object(key, hv) < 0)
        return -1;
    *k = mb_ck_key_from_hash(&h->g, hv[0], hv[1]);
    return 0;
}

/* 1 if bucket i's bytes (and the 8-byte loads that read them) reach the last page. */
static int ck_bucket_last(const CkHandle *h, uint64_t i)
{
    const uint64_t bits = (uint64_t)h->g.bucket_size * h->g.fp_bits;
    return mb_lastpage_touches(&h->lp, h->g.image + MB_CK_HEADER_SIZE + ((i * bits) >> 3), ((bits + 7) >> 3) + 8);
}

/* 1 if an operation on key k reads or writes the mapping's last page (a file's). */
static int ck_in_last_page(const CkHandle *h, const mb_ck_key *k)
{
    if (h->lp.size_fn == NULL)
        return 0;
    return h->header_last || ck_bucket_last(h, k->i1) || ck_bucket_last(h, mb_ck_alt(&h->g, k->i1, k->fp));
}

/* The file still covers the mapping: 0; else -1 with LengthMismatchError (or, when
 * another thread closed the mapping meanwhile, FilterClosedError). */
static int ck_check_size(CkHandle *h)
{
    const int r = mb_lastpage_check(&h->lp);
    if (r == -1 && h->closed) {
        PyErr_Clear();
        ck_refuse(h, 0);
    }
    return r < 0 ? -1 : 0;
}

/* ---- guarded sections (_guard.h): every touch of the mapping ------------------------- */

/* One write under the lock, inside a guarded section: op 0 insert (res 0 present, 1
 * inserted, -1 full), op 1 remove (res 0 / 1); moved 1 if fingerprints moved (a kick path, a
 * re-homing). */
typedef struct {
    CkHandle *h;
    const mb_ck_key *k;
    int op, res;
    uint32_t moved;
} ck_write_t;

static void ck_write_body(void *ctx)
{
    ck_write_t *w = ctx;
    CkHandle *h = w->h;
    uint32_t seq;
    MB_TOUCH_LAST(h->image.buf, h->image.len);
    seq = mb_ck_seq(&h->g);
    if (w->op == 0) {
        w->res = mb_ck_insert(&h->g, w->k->i1, w->k->fp, w->k->r, h->path);
        if (w->res > 0)
            ck_bump(h, 1);
    } else {
        w->res = mb_ck_remove(&h->g, w->k->i1, w->k->fp);
        if (w->res > 0)
            ck_bump(h, -1);
    }
    w->moved = seq != mb_ck_seq(&h->g);
}

/* op 0 lookup, op 1 count, into *res; 0, or -1 faulted. */
static int g_read(CkHandle *h, const mb_ck_key *k, int op, int *res)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    MB_TOUCH_LAST(h->image.buf, h->image.len);
    *res = op == 0 ? mb_ck_lookup(&h->g, k->i1, k->fp) : mb_ck_count(&h->g, k->i1, k->fp);
    GUARD_END();
    return 0;
}

static PyObject *ck_write_one(CkHandle *h, PyObject *key, int op)
{
    mb_ck_key k;
    ck_write_t w = {h, &k, op, 0, 0};
    int state;
    if (h->closed || !h->writable)
        return ck_refuse(h, 1);
    if (ck_hash(h, key, &k) < 0)
        return NULL;
    if (h->closed)   /* the key's encoding ran Python: another thread may have closed */
        return ck_refuse(h, 0);
    if ((ck_in_last_page(h, &k) && ck_check_size(h) < 0) || mb_guard_rearm(1) < 0)
        return NULL;
    /* inside write_lock(), or the uncontended mutex: the lock and the write in one guarded
     * section (no Python runs between the checks above and the write) */
    state = mb_lock_run(h->lock, h->image.buf, h->image.len, ck_write_body, &w);
    if (state == LOCK_FAULTED)
        return ck_raise(h->faulted_hook);
    if (state < 0)
        return NULL;
    if (state == LOCK_SLOW) {
        state = ck_lock(h);   /* checks closed and the size after a wait */
        if (state < 0)
            return NULL;
        if (state == LOCK_TAKEN && mb_guard_rearm(1) < 0) {   /* taking it may have run Python */
            ck_unlock(h, state);
            return NULL;
        }
        if (mb_guard_run(h->image.buf, h->image.len, ck_write_body, &w) < 0) {
            if (ck_unlock(h, state) < 0)
                return NULL;
            return ck_raise(h->faulted_hook);
        }
        if (ck_unlock(h, state) < 0)
            return NULL;
    }
    /* a path may have reached the last page: the write stands or falls with the file's size */
    if (w.moved && h->lp.size_fn != NULL && ck_check_size(h) < 0)
        return NULL;
    if (w.res < 0)
        return ck_raise(h->full_hook);
    return PyBool_FromLong(w.res > 0);
}

PyDoc_STRVAR(ck_add_doc, "add(key, /)\n--\n\n"
                         "Test-and-set one key under the write lock: True if inserted, False if its fingerprint\n"
                         "was present (nothing changed); hooks.full() raises when there is no place.");

static PyObject *ck_add(CkHandle *h, PyObject *key)
{
    return ck_write_one(h, key, 0);
}

PyDoc_STRVAR(ck_remove_doc, "remove(key, /)\n--\n\n"
                            "Remove one matching fingerprint under the write lock: True if one was removed.");

static PyObject *ck_remove(CkHandle *h, PyObject *key)
{
    return ck_write_one(h, key, 1);
}

static PyObject *ck_read_one(CkHandle *h, PyObject *key, int op)
{
    mb_ck_key k;
    int res = 0;
    if (h->closed)
        return ck_refuse(h, 0);
    if (ck_hash(h, key, &k) < 0)
        return NULL;
    if (h->closed)
        return ck_refuse(h, 0);
    if ((ck_in_last_page(h, &k) && ck_check_size(h) < 0) || mb_guard_rearm(1) < 0)
        return NULL;
    if (g_read(h, &k, op, &res) < 0)
        return ck_raise(h->faulted_hook);
    return op == 0 ? PyBool_FromLong(res) : PyLong_FromLong(res);
}

PyDoc_STRVAR(ck_contains_doc, "contains(key, /)\n--\n\n"
                              "True if the key's fingerprint is in one of its two buckets or the victim.  No lock.");

static PyObject *ck_contains(CkHandle *h, PyObject *key)
{
    return ck_read_one(h, key, 0);
}

PyDoc_STRVAR(ck_count_doc, "count(key, /)\n--\n\n"
                           "Matching fingerprints in the key's two buckets, plus a matching victim.  No lock.");

static PyObject *ck_count(CkHandle *h, PyObject *key)
{
    return ck_read_one(h, key, 1);
}

/* ---- batches ---------------------------------------------------------------------------- */

/* Hash c resolved keys into st (fp 0: a null key).  Needs no GIL. */
static void ck_stage(const mb_ck_geom *g, const mb_key *refs, Py_ssize_t c, mb_ck_key *st)
{
    for (Py_ssize_t i = 0; i < c; i++) {
        if (refs[i].ptr == NULL) {
            st[i].fp = 0;
            continue;
        }
        uint64_t hv[2];
        mmb_murmur3_x64_128(refs[i].ptr, (size_t)refs[i].len, 0, hv);
        st[i] = mb_ck_key_from_hash(g, hv[0], hv[1]);
    }
}

/* A chunk under the lock, in order: *used keys handled (the full one excluded), *done
 * inserted / removed, *full set at a full insert; the items word bumped once.  0, or -1
 * faulted (slots of the chunk may be set, the count is not bumped). */
static int g_commit(CkHandle *h, const mb_ck_key *st, Py_ssize_t c, int insert, uint8_t *out, Py_ssize_t *used,
                    Py_ssize_t *done, int *full)
{
    Py_ssize_t i, d = 0;
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    MB_TOUCH_LAST(h->image.buf, h->image.len);
    for (i = 0; i < c; i++) {
        int got;
        if (st[i].fp == 0) { /* a null: never added nor removed */
            if (out)
                out[i] = 0;
            continue;
        }
        if (insert) {
            got = mb_ck_insert(&h->g, st[i].i1, st[i].fp, st[i].r, h->path);
            if (got < 0) {
                *full = 1;
                break;
            }
        } else {
            got = mb_ck_remove(&h->g, st[i].i1, st[i].fp);
        }
        if (out)
            out[i] = (uint8_t)(got > 0);
        d += got;
    }
    ck_bump(h, insert ? d : -d);
    GUARD_END();
    *used = i;
    *done = d;
    return 0;
}

/* The batch writer: returns the keys inserted / removed, or -1 with an exception carrying
 * committed_items. */
static Py_ssize_t ck_write_keys(CkHandle *h, keyset *ks, uint8_t *out, int insert)
{
    const Py_ssize_t n = ks->n;
    Py_ssize_t chunk = n < CK_CHUNK_KEYS ? (n ? n : 1) : CK_CHUNK_KEYS, start, total = 0, committed = 0;
    mb_ck_key *st = PyMem_Malloc((size_t)chunk * sizeof *st);
    if (st == NULL) {
        PyErr_NoMemory();
        mb_note_committed(0);
        return -1;
    }
    h->busy++;
    for (start = 0; start < n; start += chunk) {
        const Py_ssize_t c = n - start < chunk ? n - start : chunk;
        Py_ssize_t used = 0, done = 0;
        int state, full = 0;
        if (c >= GIL_MIN_KEYS) {
            Py_BEGIN_ALLOW_THREADS
            ck_stage(&h->g, mb_keys_chunk(ks, start, c), c, st);
            Py_END_ALLOW_THREADS
        } else {
            ck_stage(&h->g, mb_keys_chunk(ks, start, c), c, st);
        }
        if (h->closed) {
            ck_refuse(h, 0);
            goto fail;
        }
        state = ck_lock(h);
        if (state < 0)
            goto fail;
        if ((h->lp.size_fn != NULL && ck_check_size(h) < 0) || mb_guard_rearm(c) < 0) { /* once per chunk */
            ck_unlock(h, state);
            goto fail;
        }
        if (g_commit(h, st, c, insert, out ? out + start : NULL, &used, &done, &full) < 0) {
            if (ck_unlock(h, state) < 0)
                goto fail;
            ck_raise(h->faulted_hook);
            goto fail;
        }
        committed = start + used;
        total += done;
        if (ck_unlock(h, state) < 0)
            goto fail;
        if (full) {
            ck_raise(h->full_hook);
            goto fail;
        }
        if (PyErr_CheckSignals() < 0) /* between chunks, never inside one */
            goto fail;
    }
    ck_leave(h);
    PyMem_Free(st);
    return total;
fail:
    mb_note_committed(committed);
    ck_leave(h);
    PyMem_Free(st);
    return -1;
}

static PyObject *ck_write_many(CkHandle *h, PyObject *keys, PyObject *out_obj, int insert)
{
    keyset ks;
    Py_buffer out;
    int have_out = 0;
    Py_ssize_t done;
    if (h->closed || !h->writable) {
        ck_refuse(h, 1);
        mb_note_committed(0);
        return NULL;
    }
    if (mb_keys_begin(&ks, keys, 1) < 0) {
        mb_note_committed(0);
        return NULL;
    }
    if (out_obj != NULL && out_obj != Py_None) {
        if (mb_get_out(out_obj, ks.n, &out) < 0) {
            mb_keys_end(&ks);
            mb_note_committed(0);
            return NULL;
        }
        have_out = 1;
    }
    done = ck_write_keys(h, &ks, have_out ? out.buf : NULL, insert);
    if (have_out)
        PyBuffer_Release(&out);
    done = mb_keys_end_written(&ks, done, ks.n);
    return done < 0 ? NULL : PyLong_FromSsize_t(done);
}

PyDoc_STRVAR(ck_add_many_doc,
             "add_many(keys, out=None, /)\n--\n\n"
             "Insert every key (any iterable or a Column; nulls skipped) in order, as sequential add()\n"
             "calls; returns how many were inserted, out (len(keys) writable bytes) gets 1 where one was.\n"
             "The lock is taken once per chunk of 16384 keys; an exception carries committed_items.");

static PyObject *ck_add_many(CkHandle *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "add_many() takes 1 or 2 arguments (%zd given)", nargs);
    return ck_write_many(h, args[0], nargs == 2 ? args[1] : NULL, 1);
}

PyDoc_STRVAR(ck_remove_many_doc, "remove_many(keys, /)\n--\n\n"
                                 "Remove one matching fingerprint of every key that has one, in order; returns how\n"
                                 "many were removed.  An exception carries committed_items.");

static PyObject *ck_remove_many(CkHandle *h, PyObject *keys)
{
    return ck_write_many(h, keys, NULL, 0);
}

/* Lookups of c keys into out, pipelined: the keys of one group of CK_AHEAD are hashed and
 * both their buckets prefetched while the group before them is looked up, so each lookup
 * runs CK_AHEAD .. 2 CK_AHEAD keys after its prefetch.  Needs no GIL. */
static void ck_query(CkHandle *h, const mb_key *refs, Py_ssize_t c, uint8_t *out)
{
    const mb_ck_geom *g = &h->g;
    const uint8_t *body = g->image + MB_CK_HEADER_SIZE;
    const uint64_t bucket_bits = (uint64_t)g->bucket_size * g->fp_bits;
    mb_ck_key ring[2][CK_AHEAD];
    uint64_t alt[2][CK_AHEAD];
    Py_ssize_t prev_m = 0, prev_base = 0;
    int cur = 0;
    for (Py_ssize_t base = 0; base < c || prev_m; base += CK_AHEAD) {
        Py_ssize_t m = 0;
        if (base < c) {
            m = c - base < CK_AHEAD ? c - base : CK_AHEAD;
            ck_stage(g, refs + base, m, ring[cur]);
            for (Py_ssize_t i = 0; i < m; i++) {
                if (ring[cur][i].fp == 0)
                    continue;
                alt[cur][i] = mb_ck_alt(g, ring[cur][i].i1, ring[cur][i].fp);
                __builtin_prefetch(body + ((ring[cur][i].i1 * bucket_bits) >> 3));
                __builtin_prefetch(body + ((alt[cur][i] * bucket_bits) >> 3));
            }
        }
        const int prev = cur ^ 1;
        for (Py_ssize_t i = 0; i < prev_m; i++) {
            const mb_ck_key *k = &ring[prev][i];
            out[prev_base + i] = k->fp ? (uint8_t)mb_ck_lookup2(g, k->i1, alt[prev][i], k->fp) : 0;
        }
        prev_m = m;
        prev_base = base;
        cur = prev;
    }
}

static int g_query(CkHandle *h, keyset *ks, uint8_t *out)
{
    const Py_ssize_t n = ks->n, step = ks->column != NULL ? MB_CHUNK_KEYS : (n ? n : 1);
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    MB_TOUCH_LAST(h->image.buf, h->image.len);
    for (Py_ssize_t start = 0; start < n; start += step) {
        const Py_ssize_t c = n - start < step ? n - start : step;
        ck_query(h, mb_keys_chunk(ks, start, c), c, out + start);
    }
    GUARD_END();
    return 0;
}

PyDoc_STRVAR(ck_contains_many_doc, "contains_many(keys, out, /)\n--\n\n"
                                   "out[i] = 1 if key i may be present, else 0 (nulls 0).  No lock; hashing and\n"
                                   "lookups run without the GIL from 256 keys on.");

static PyObject *ck_contains_many(CkHandle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    int faulted;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "contains_many() takes 2 arguments (%zd given)", nargs);
    if (h->closed)
        return ck_refuse(h, 0);
    if (mb_keys_begin(&ks, args[0], 0) < 0)
        return NULL;
    if (mb_get_out(args[1], ks.n, &out) < 0) {
        mb_keys_end(&ks);
        return NULL;
    }
    if (h->closed) {
        PyBuffer_Release(&out);
        mb_keys_end(&ks);
        return ck_refuse(h, 0);
    }
    if ((ks.n > 0 && ck_check_size(h) < 0) || mb_guard_rearm(ks.n) < 0) { /* once per call (0 at once in memory) */
        PyBuffer_Release(&out);
        mb_keys_end(&ks);
        return NULL;
    }
    h->busy++;
    if (ks.n >= GIL_MIN_KEYS) {
        Py_BEGIN_ALLOW_THREADS
        faulted = g_query(h, &ks, out.buf);
        Py_END_ALLOW_THREADS
    } else {
        faulted = g_query(h, &ks, out.buf);
    }
    ck_leave(h);
    PyBuffer_Release(&out);
    mb_keys_end(&ks);
    if (faulted < 0)
        return ck_raise(h->faulted_hook);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(ck_close_doc, "close()\n--\n\n"
                           "Refuse every later call and release the image export (at once, or when the calls in\n"
                           "flight end).  Idempotent.");

static PyObject *ck_close(CkHandle *h, PyObject *unused)
{
    (void)unused;
    h->closed = 1;
    if (h->busy == 0)
        ck_release_image(h);
    Py_RETURN_NONE;
}

static PyObject *ck_get_closed(CkHandle *h, void *unused)
{
    (void)unused;
    return PyBool_FromLong(h->closed);
}

static PyObject *ck_get_backend(CkHandle *h, void *unused)
{
    (void)h;
    (void)unused;
    return PyUnicode_FromString("native");
}

static PyGetSetDef ck_getset[] = {
    {"closed", (getter)ck_get_closed, NULL, "True after close().", NULL},
    {"backend", (getter)ck_get_backend, NULL, "\"native\".", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef ck_methods[] = {
    {"add", (PyCFunction)ck_add, METH_O, ck_add_doc},
    {"contains", (PyCFunction)ck_contains, METH_O, ck_contains_doc},
    {"count", (PyCFunction)ck_count, METH_O, ck_count_doc},
    {"remove", (PyCFunction)ck_remove, METH_O, ck_remove_doc},
    {"add_many", (PyCFunction)(void (*)(void))ck_add_many, METH_FASTCALL, ck_add_many_doc},
    {"remove_many", (PyCFunction)ck_remove_many, METH_O, ck_remove_many_doc},
    {"contains_many", (PyCFunction)(void (*)(void))ck_contains_many, METH_FASTCALL, ck_contains_many_doc},
    {"close", (PyCFunction)ck_close, METH_NOARGS, ck_close_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mb_CuckooHandle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.CuckooHandle",
    .tp_basicsize = sizeof(CkHandle),
    .tp_dealloc = (destructor)ck_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "CuckooHandle(image, geometry, lock, hooks, writable)\n--\n\n"
              "One open CKF1 filter bound once: the image buffer (exported once, 8-byte aligned);\n"
              "geometry = (num_buckets, bucket_size, fingerprint_bits, max_kicks); the LockState of its\n"
              "WriteLock.  Methods: add, contains, count, remove, add_many, remove_many, contains_many,\n"
              "close.  hooks: closed(), readonly(), faulted() and full() raise the filter's errors.",
    .tp_traverse = (traverseproc)ck_traverse,
    .tp_clear = (inquiry)ck_clear,
    .tp_methods = ck_methods,
    .tp_getset = ck_getset,
    .tp_new = ck_new,
};
