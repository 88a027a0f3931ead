/* mmapbloom/_handle_batch.c: the native handle's batch methods, add_many and
 * contains_many (the handle object and its per-item ops: _handle.c; shared fields and
 * helpers: _handle_impl.h).
 *
 *   add_many       resolve every key once (mb_keys_begin: all validated before any cell
 *                  changes), then per chunk of at most MB_CHUNK_KEYS keys: stage two hash
 *                  words a key outside the lock (GIL released from GIL_MIN_KEYS keys on),
 *                  compare the file's size (_lastpage.h), take the lock, test-and-set the
 *                  chunk (mb_cells_commit) and bump the items word once in one guarded
 *                  section, unlock, let signals run.  Every exception carries
 *                  committed_items.
 *   contains_many  resolve and pin the keys, then hash and probe without the GIL in one
 *                  guarded section (chunk by chunk for a Column); an absent answer on a
 *                  file is followed by the size check. */
#include "_handle_impl.h"

#include <string.h>

#include "_cells.h"
#include "_guard.h"
#include "_pykeys.h"

#define STAGE_POSITIONS (1 << 20)    /* staged positions per chunk at most (8 MiB) */

/* A chunk's commit and its count (the lock is held): 0, or -1 the mapping faulted (cells
 * of the chunk may be set, its count is not bumped). */
static int g_commit(Handle *h, const mb_key *refs, size_t n, uint64_t *rows, uint8_t *out, int *sat,
                    Py_ssize_t *fresh, int *over, uint32_t *stored)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    *fresh = mb_cells_commit(h->body, h->width, &h->g, refs, n, rows, rows + 2 * n, out, sat);
    *over = *fresh ? mb_h_items_bump(h, *fresh, stored) : 0;
    GUARD_END();
    return 0;
}

/* The batch writer over resolved keys: chunks of MB_CHUNK_KEYS keys (fewer for a
 * large k), each hashed outside the lock (GIL released for large chunks), then committed
 * under one lock acquisition with one bump of the items word.  out (n bytes) or NULL.
 * Returns the number of new keys, or -1 with an exception carrying committed_items. */
static Py_ssize_t h_add_keys(Handle *h, keyset *ks, uint8_t *out)
{
    const Py_ssize_t n = ks->n;
    const unsigned k = h->g.k;
    Py_ssize_t chunk = STAGE_POSITIONS / k, start, total = 0, committed = 0;
    uint64_t *rows;
    int over = 0, sat = 0;
    uint32_t stored = 0;
    if (chunk > MB_CHUNK_KEYS)
        chunk = MB_CHUNK_KEYS;
    if (chunk < 1)
        chunk = 1;
    if (chunk > n)
        chunk = n ? n : 1;
    /* two staged words a key (mb_cells_stage), then the commit's ring of AHEAD * k */
    rows = PyMem_Malloc(((size_t)chunk * 2 + (size_t)AHEAD * k) * sizeof *rows);
    if (rows == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    h->busy++;
    for (start = 0; start < n; start += chunk) {
        const Py_ssize_t c = n - start < chunk ? n - start : chunk;
        const mb_key *refs;
        Py_ssize_t fresh;
        int state, o;
        uint32_t s = 0;
        if (c >= GIL_MIN_KEYS) {
            Py_BEGIN_ALLOW_THREADS
            refs = mb_keys_chunk(ks, start, c);
            mb_cells_stage(&h->g, refs, (size_t)c, rows);
            Py_END_ALLOW_THREADS
        } else {
            refs = mb_keys_chunk(ks, start, c);
            mb_cells_stage(&h->g, refs, (size_t)c, rows);
        }
        if (h->closed) {
            mb_h_refuse(h, 0);
            goto fail;
        }
        if (mb_h_check_size(h) < 0)   /* per chunk: a truncation inside the last page raises */
            goto fail;
        state = mb_h_lock(h);
        if (state < 0)
            goto fail;
        /* Per chunk: a Python SIGBUS handler set since (a large chunk also asks sigaction,
         * which sees the very handler the guard chains to set again: _guard.h). */
        if (mb_guard_rearm(c) < 0) {
            if (state == LOCK_TAKEN)
                mb_lock_release(h->lock);
            goto fail;
        }
        fresh = 0;
        o = 0;
        if (g_commit(h, refs, (size_t)c, rows, out ? out + start : NULL, &sat, &fresh, &o, &s) < 0) {
            if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
                goto fail;
            mb_h_faulted(h);
            goto fail;
        }
        if (o) {
            over = 1;
            stored = s;
        }
        committed = start + c;
        total += fresh;
        if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
            goto fail;
        /* An interrupt lands between chunks (or after the last one, still inside this call,
         * so the exception carries committed_items), never between a chunk's cells and
         * its count. */
        if (PyErr_CheckSignals() < 0)
            goto fail;
    }
    mb_h_leave(h);
    PyMem_Free(rows);
    if ((over || sat) && mb_h_warn(h, over, stored, sat) < 0) {
        mb_note_committed(n);   /* a warning made an error: every key was committed */
        return -1;
    }
    return total;
fail:
    mb_note_committed(committed);
    mb_h_leave(h);
    PyMem_Free(rows);
    if (over) {
        /* The warning of the committed chunks goes now, not with the next (unrelated) add;
         * one turned into an error (-W error) never replaces the exception in flight. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (mb_h_warn(h, over, stored, 0) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return -1;
}

const char mb_h_add_many_doc[] = PyDoc_STR(
"add_many(keys, out=None, /)\n--\n\n"
"Add every key of keys (any iterable, or a Column: read in place chunk by chunk, a null key\n"
"never added and answered 0) in order, as sequential add() calls; returns the\n"
"number of new keys, and out (a writable buffer of len(keys) bytes) gets 1 where a key was\n"
"new.  Every key is validated before any cell changes.  The write lock is taken once per\n"
"chunk of up to 65536 keys, hashed before the lock is taken; an exception leaving it\n"
"carries committed_items (how many leading keys were committed).");

PyObject *mb_h_add_many(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    int have_out = 0;
    Py_ssize_t fresh;
    /* Every exception out of here carries committed_items (0 before the first chunk). */
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "add_many() takes 1 or 2 arguments (%zd given)", nargs);
        goto refused;
    }
    if (h->closed || !h->writable) {
        mb_h_refuse(h, 1);
        goto refused;
    }
    if (mb_keys_begin(&ks, args[0], 1) < 0)   /* a bad key, or an interrupt in encode_key */
        goto refused;
    if (nargs == 2 && args[1] != Py_None) {
        if (mb_get_out(args[1], ks.n, &out) < 0) {
            mb_keys_end(&ks);
            goto refused;
        }
        have_out = 1;
    }
    fresh = h_add_keys(h, &ks, have_out ? out.buf : NULL);
    if (have_out)
        PyBuffer_Release(&out);
    fresh = mb_keys_end_written(&ks, fresh, ks.n);
    return fresh < 0 ? NULL : PyLong_FromSsize_t(fresh);
refused:
    mb_note_committed(0);
    return NULL;
}

const char mb_h_contains_many_doc[] = PyDoc_STR(
"contains_many(keys, out, /)\n--\n\n"
"out[i] = 1 if key i may be present, else 0 (out: a writable buffer of len(keys) bytes;\n"
"keys: any iterable, or a Column, whose null keys answer 0).\n"
"No lock; the keys are resolved and pinned first, then hashing and probing run without the\n"
"GIL (from 256 keys on).");

/* query_run over a batch: at once for resolved Python keys, chunk by chunk for a Column.
 * Needs no GIL. */
static void query_keys(Handle *h, keyset *ks, uint64_t *ring, uint8_t *out)
{
    const Py_ssize_t n = ks->n, step = ks->column != NULL ? MB_CHUNK_KEYS : (n ? n : 1);
    Py_ssize_t start;
    for (start = 0; start < n; start += step) {
        const Py_ssize_t c = n - start < step ? n - start : step;
        mb_cells_query(h->body, h->width, &h->g, mb_keys_chunk(ks, start, c), (size_t)c, ring, out + start);
    }
}

/* query_keys in a guarded section (with or without the GIL): 0, or -1 faulted. */
static int g_query(Handle *h, keyset *ks, uint64_t *ring, uint8_t *out)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    query_keys(h, ks, ring, out);
    GUARD_END();
    return 0;
}

PyObject *mb_h_contains_many(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    uint64_t *ring;
    int faulted;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "contains_many() takes 2 arguments (%zd given)", nargs);
    if (h->closed)
        return mb_h_refuse(h, 0);
    if (mb_keys_begin(&ks, args[0], 0) < 0)
        return NULL;
    if (mb_get_out(args[1], ks.n, &out) < 0) {
        mb_keys_end(&ks);
        return NULL;
    }
    ring = PyMem_Malloc((size_t)AHEAD * h->g.k * sizeof *ring);
    if (ring == NULL) {
        PyBuffer_Release(&out);
        mb_keys_end(&ks);
        return PyErr_NoMemory();
    }
    if (h->closed) {   /* keys_begin / get_out may have run Python, and another thread closed */
        PyMem_Free(ring);
        PyBuffer_Release(&out);
        mb_keys_end(&ks);
        return mb_h_refuse(h, 0);
    }
    if (mb_guard_rearm(ks.n) < 0) {   /* as in add_many */
        PyMem_Free(ring);
        PyBuffer_Release(&out);
        mb_keys_end(&ks);
        return NULL;
    }
    h->busy++;
    if (ks.n >= GIL_MIN_KEYS) {
        Py_BEGIN_ALLOW_THREADS
        faulted = g_query(h, &ks, ring, out.buf);
        Py_END_ALLOW_THREADS
    } else {
        faulted = g_query(h, &ks, ring, out.buf);
    }
    mb_h_leave(h);
    PyMem_Free(ring);
    /* An absent answer may be a zero read past a truncation inside the last page. */
    if (faulted == 0 && h->lp.size_fn != NULL && memchr(out.buf, 0, (size_t)ks.n) != NULL && mb_h_check_size(h) < 0)
        faulted = -2;
    PyBuffer_Release(&out);
    mb_keys_end(&ks);
    if (faulted == -1)
        return mb_h_faulted(h);
    if (faulted < 0)
        return NULL;
    Py_RETURN_NONE;
}
