/* mmapbloom/_handle_multi.c: the native handle's methods over several handles of one
 * geometry (strategy, m, k, cell width), each key hashed once and its staged words used
 * against every handle: the expiring filter's live periods (mmapbloom/expiring.py).
 *
 *   add_many_unless(others, keys, out=None)  per chunk: stage the keys once (outside the
 *                  lock, GIL released for large chunks), compare the files' sizes, take
 *                  self's write lock, probe every other handle for the chunk's keys, then
 *                  test-and-set in self only the keys no other may hold (mb_cells_commit
 *                  with the found keys masked as nulls).  add_many's rules: every key
 *                  validated first, committed_items on every exception, signals between
 *                  chunks.
 *   contains_many_any(others, keys, out)     out[i] = key i may be in self or in another:
 *                  per chunk self first through the single-filter query kernel, then the
 *                  others for the keys self did not hold (those are hashed a second time).
 *   add_unless(others, key), contains_any(others, key): the same for one key;
 *                  contains_any(others, key, word, expected) first loads a watched word
 *                  (the expiring filter's generation, through a mapping of its lock file)
 *                  under the guard and answers None when it is not `expected`.
 *
 * Every touch of a mapping is a guarded section of its own handle (_guard.h); an absent
 * answer of a file whose probed cells may lie in its last page is followed by its size
 * check (_lastpage.h), as in _handle.c and _handle_batch.c. */
#include "_handle_impl.h"

#include <string.h>

#include "_cells.h"
#include "_guard.h"
#include "_pykeys.h"

#define STAGE_POSITIONS (1 << 20)   /* as _handle_batch.c */

/* The other handles: a list or tuple of open Handles of self's geometry (a new reference
 * kept for the call).  0, or -1 with TypeError / ValueError / FilterClosedError. */
static int get_others(Handle *h, PyObject *obj, PyObject **fast)
{
    Py_ssize_t i, n;
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "others must be a list or tuple of Handles, got %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    if ((*fast = PySequence_Fast(obj, "others")) == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(*fast);
    for (i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(*fast, i);
        Handle *x = (Handle *)o;
        if (Py_TYPE(o) != &mb_Handle_Type) {
            PyErr_Format(PyExc_TypeError, "others[%zd] must be a Handle, got %.100s", i, Py_TYPE(o)->tp_name);
            goto fail;
        }
        if (x->g.strategy != h->g.strategy || x->g.m != h->g.m || x->g.k != h->g.k || x->width != h->width) {
            PyErr_Format(PyExc_ValueError,
                         "others[%zd] has geometry (strategy %d, m %llu, k %u, width %d), expected (%d, %llu, %u, %d)",
                         i, x->g.strategy, (unsigned long long)x->g.m, x->g.k, x->width, h->g.strategy,
                         (unsigned long long)h->g.m, h->g.k, h->width);
            goto fail;
        }
        if (x->closed) {
            mb_h_refuse(x, 0);
            goto fail;
        }
    }
    return 0;
fail:
    Py_CLEAR(*fast);
    return -1;
}

#define OTHER(fast, i) ((Handle *)PySequence_Fast_GET_ITEM((fast), (i)))

static void enter_all(PyObject *fast)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast);
    for (i = 0; i < n; i++)
        OTHER(fast, i)->busy++;
}

static void leave_all(PyObject *fast)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast);
    for (i = 0; i < n; i++)
        mb_h_leave(OTHER(fast, i));
}

/* Any other handle closed (by another thread while Python ran): raise through its hook. */
static int others_open(PyObject *fast)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast);
    for (i = 0; i < n; i++)
        if (OTHER(fast, i)->closed) {
            mb_h_refuse(OTHER(fast, i), 0);
            return -1;
        }
    return 0;
}

/* Every file (self and others) still covers its mapping: 0, else -1 raised. */
static int check_sizes(Handle *h, PyObject *fast)
{
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast);
    if (mb_h_check_size(h) < 0)
        return -1;
    for (i = 0; i < n; i++)
        if (mb_h_check_size(OTHER(fast, i)) < 0)
            return -1;
    return 0;
}

#define GROUP 64   /* bodies probed together (mb_cells_any_rows' mask) */

/* One guarded section over the bodies of hs[0..nb) (nb <= GROUP): the guard's range spans
 * every mapping of the group (nothing else is touched inside it). 0, or -1 faulted. */
static int g_any_group(Handle *const *hs, unsigned nb, const mb_key *refs, size_t n, const uint64_t *rows,
                       uint8_t *found)
{
    const uint8_t *bodies[GROUP], *lo = NULL, *hi = NULL;
    unsigned j;
    for (j = 0; j < nb; j++) {
        const uint8_t *b = hs[j]->image.buf, *e = b + hs[j]->image.len;
        bodies[j] = hs[j]->body;
        if (lo == NULL || b < lo)
            lo = b;
        if (hi == NULL || e > hi)
            hi = e;
    }
    {
        GUARD_DECL(gd);
        GUARD_BEGIN(gd, lo, (size_t)(hi - lo))
            return -1;
        for (j = 0; j < nb; j++)
            TOUCH_LAST(hs[j]);
        mb_cells_any_rows(bodies, nb, hs[0]->width, &hs[0]->g, refs, n, rows, found);
        GUARD_END();
    }
    return 0;
}

/* found[i] |= staged key i may be in self (if not NULL) or one of the others, each key's
 * positions computed once for all of them.  Needs no GIL.  0, or -1 faulted (which
 * mapping: the caller compares the files' sizes). */
static int any_rows(Handle *self, PyObject *fast, const mb_key *refs, size_t n, const uint64_t *rows, uint8_t *found)
{
    Handle *hs[GROUP];
    Py_ssize_t i, m = PySequence_Fast_GET_SIZE(fast);
    unsigned nb = 0;
    if (self != NULL) {   /* alone first: the newest period holds most of the keys found */
        hs[0] = self;
        if (g_any_group(hs, 1, refs, n, rows, found) < 0)
            return -1;
    }
    for (i = 0; i < m; i++) {
        hs[nb++] = OTHER(fast, i);
        if (nb == GROUP) {
            if (g_any_group(hs, nb, refs, n, rows, found) < 0)
                return -1;
            nb = 0;
        }
    }
    return nb ? g_any_group(hs, nb, refs, n, rows, found) : 0;
}

/* After a faulted any_rows (the GIL held): raise LengthMismatchError for the file that
 * shrank (through its own hooks), else through self's.  NULL. */
static PyObject *any_faulted(Handle *h, PyObject *fast)
{
    if (check_sizes(h, fast) < 0)
        return NULL;
    return mb_h_faulted(h);
}

/* A chunk's commit of the keys not found (masked as nulls), and its count: 0, or -1. */
static int g_commit_masked(Handle *h, const mb_key *refs, size_t n, uint64_t *rows, uint8_t *out, int *sat,
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

/* add_many_unless over resolved keys (the caller counted self busy; others are busy). */
static Py_ssize_t add_unless_keys(Handle *h, PyObject *fast, keyset *ks, uint8_t *out)
{
    const Py_ssize_t n = ks->n;
    const unsigned k = h->g.k;
    Py_ssize_t chunk = STAGE_POSITIONS / k, start, total = 0, committed = 0;
    uint64_t *rows = NULL;
    mb_key *masked = NULL;
    uint8_t *found = NULL;
    int over = 0, sat = 0;
    uint32_t stored = 0;
    if (chunk > MB_CHUNK_KEYS)
        chunk = MB_CHUNK_KEYS;
    if (chunk < 1)
        chunk = 1;
    if (chunk > n)
        chunk = n ? n : 1;
    rows = PyMem_Malloc(((size_t)chunk * 2 + (size_t)AHEAD * k) * sizeof *rows);
    masked = PyMem_Malloc((size_t)chunk * sizeof *masked);
    found = PyMem_Malloc((size_t)chunk);
    if (rows == NULL || masked == NULL || found == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (start = 0; start < n; start += chunk) {
        const Py_ssize_t c = n - start < chunk ? n - start : chunk;
        const mb_key *refs;
        Py_ssize_t fresh = 0, i;
        int state, o = 0;
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
        if (mb_guard_rearm(c) < 0 || others_open(fast) < 0 || check_sizes(h, fast) < 0)
            goto fail;
        state = mb_h_lock(h);
        if (state < 0)
            goto fail;
        memset(found, 0, (size_t)c);
        if (any_rows(NULL, fast, refs, (size_t)c, rows, found) < 0) {
            if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
                goto fail;
            any_faulted(h, fast);
            goto fail;
        }
        for (i = 0; i < c; i++) {
            masked[i] = refs[i];
            if (found[i])
                masked[i].ptr = NULL;
        }
        if (g_commit_masked(h, masked, (size_t)c, rows, out ? out + start : NULL, &sat, &fresh, &o, &s) < 0) {
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
        if (PyErr_CheckSignals() < 0)
            goto fail;
    }
    PyMem_Free(rows);
    PyMem_Free(masked);
    PyMem_Free(found);
    if ((over || sat) && mb_h_warn(h, over, stored, sat) < 0) {
        mb_note_committed(n);   /* a warning made an error: every key was committed */
        return -1;
    }
    return total;
fail:
    mb_note_committed(committed);
    PyMem_Free(rows);
    PyMem_Free(masked);
    PyMem_Free(found);
    if (over) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (mb_h_warn(h, over, stored, 0) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return -1;
}

const char mb_h_add_many_unless_doc[] = PyDoc_STR(
"add_many_unless(others, keys, out=None, /)\n--\n\n"
"Test-and-set each key in self unless one of others (a list or tuple of open Handles of\n"
"self's geometry: strategy, m, k, cell width) may hold it, in order, as sequential\n"
"add_unless() calls; returns the number of keys new in self, and out (a writable buffer of\n"
"len(keys) bytes) gets 1 where a key was.  Each key is hashed once per chunk for every\n"
"handle.  add_many's rules: every key validated before any cell changes, self's write\n"
"lock taken once per chunk of up to 65536 keys (others are probed under it), every\n"
"exception carries committed_items.");

PyObject *mb_h_add_many_unless(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    int have_out = 0;
    Py_ssize_t fresh;
    PyObject *fast = NULL;
    if (nargs < 2 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "add_many_unless() takes 2 or 3 arguments (%zd given)", nargs);
        goto refused;
    }
    if (h->closed || !h->writable) {
        mb_h_refuse(h, 1);
        goto refused;
    }
    if (get_others(h, args[0], &fast) < 0)
        goto refused;
    if (mb_keys_begin(&ks, args[1], 1) < 0)
        goto refused;
    if (nargs == 3 && args[2] != Py_None) {
        if (mb_get_out(args[2], ks.n, &out) < 0) {
            mb_keys_end(&ks);
            goto refused;
        }
        have_out = 1;
    }
    h->busy++;
    enter_all(fast);
    fresh = add_unless_keys(h, fast, &ks, have_out ? out.buf : NULL);
    leave_all(fast);
    mb_h_leave(h);
    if (have_out)
        PyBuffer_Release(&out);
    fresh = mb_keys_end_written(&ks, fresh, ks.n);
    Py_DECREF(fast);
    return fresh < 0 ? NULL : PyLong_FromSsize_t(fresh);
refused:
    Py_XDECREF(fast);
    mb_note_committed(0);
    return NULL;
}

/* self alone through the single-filter query kernel (mb_cells_query: hashed, staged and
 * prefetched as in contains_many), in a guarded section of its own.  0, or -1 faulted. */
static int g_query_self(Handle *h, const mb_key *refs, size_t n, uint64_t *ring, uint8_t *out)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    mb_cells_query(h->body, h->width, &h->g, refs, n, ring, out);
    GUARD_END();
    return 0;
}

/* contains_many_any's probes without the GIL, per chunk: self alone first with the
 * single-filter kernel (the newest period, where a batch of recent keys is found: about
 * half the cost of the mask kernel for those), then, only if some key was not found
 * there, the keys staged once and the others probed for the keys still not found (a key
 * absent from self is hashed twice).  0, or -1 faulted. */
static int any_keys(Handle *h, PyObject *fast, keyset *ks, uint64_t *rows, uint64_t *ring, Py_ssize_t chunk,
                    uint8_t *out)
{
    const Py_ssize_t n = ks->n;
    Py_ssize_t start;
    for (start = 0; start < n; start += chunk) {
        const Py_ssize_t c = n - start < chunk ? n - start : chunk;
        const mb_key *refs = mb_keys_chunk(ks, start, c);
        if (g_query_self(h, refs, (size_t)c, ring, out + start) < 0)
            return -1;
        if (PySequence_Fast_GET_SIZE(fast) == 0 || memchr(out + start, 0, (size_t)c) == NULL)
            continue;
        mb_cells_stage(&h->g, refs, (size_t)c, rows);
        if (any_rows(NULL, fast, refs, (size_t)c, rows, out + start) < 0)
            return -1;
    }
    return 0;
}

const char mb_h_contains_many_any_doc[] = PyDoc_STR(
"contains_many_any(others, keys, out, /)\n--\n\n"
"out[i] = 1 if key i may be present in self or in one of others (a list or tuple of open\n"
"Handles of self's geometry), else 0; each key hashed once.  keys: any iterable, or a\n"
"Column (null keys answer 0).  No lock; hashing and probing run without the GIL (from 256\n"
"keys on).");

PyObject *mb_h_contains_many_any(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    uint64_t *rows, *ring = NULL;
    Py_ssize_t chunk;
    int bad;
    PyObject *fast = NULL;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "contains_many_any() takes 3 arguments (%zd given)", nargs);
    if (h->closed)
        return mb_h_refuse(h, 0);
    if (get_others(h, args[0], &fast) < 0)
        return NULL;
    if (mb_keys_begin(&ks, args[1], 0) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    if (mb_get_out(args[2], ks.n, &out) < 0) {
        mb_keys_end(&ks);
        Py_DECREF(fast);
        return NULL;
    }
    chunk = ks.n < MB_CHUNK_KEYS ? (ks.n ? ks.n : 1) : MB_CHUNK_KEYS;
    rows = PyMem_Malloc((size_t)chunk * 2 * sizeof *rows);
    ring = PyMem_Malloc((size_t)AHEAD * h->g.k * sizeof *ring);
    if (rows == NULL || ring == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (h->closed) {
        mb_h_refuse(h, 0);
        goto done;
    }
    if (mb_guard_rearm(ks.n) < 0 || others_open(fast) < 0)
        goto done;
    h->busy++;
    enter_all(fast);
    if (ks.n >= GIL_MIN_KEYS) {
        Py_BEGIN_ALLOW_THREADS
        bad = any_keys(h, fast, &ks, rows, ring, chunk, out.buf);
        Py_END_ALLOW_THREADS
    } else {
        bad = any_keys(h, fast, &ks, rows, ring, chunk, out.buf);
    }
    leave_all(fast);
    mb_h_leave(h);
    if (bad < 0) {
        any_faulted(h, fast);
        goto done;
    }
    /* An absent answer may be a zero read past a truncation inside a last page. */
    if (memchr(out.buf, 0, (size_t)ks.n) != NULL && check_sizes(h, fast) < 0)
        goto done;
    PyMem_Free(rows);
    PyMem_Free(ring);
    PyBuffer_Release(&out);
    mb_keys_end(&ks);
    Py_DECREF(fast);
    Py_RETURN_NONE;
done:
    PyMem_Free(rows);
    PyMem_Free(ring);
    PyBuffer_Release(&out);
    mb_keys_end(&ks);
    Py_DECREF(fast);
    return NULL;
}

/* ---- one key ----------------------------------------------------------------------- */

/* One key in the bodies of hs[0..nb) (nb <= GROUP) in one guarded section: the mask of
 * those that may hold it into *alive, the suspects (a zero read in a last page) into
 * *suspect.  0, or -1 faulted. */
static int g_any_one(Handle *const *hs, unsigned nb, const uint64_t row[2], uint64_t *alive, uint64_t *suspect)
{
    const uint8_t *bodies[GROUP], *lo = NULL, *hi = NULL;
    uint64_t last = UINT64_MAX;
    unsigned j;
    for (j = 0; j < nb; j++) {
        const uint8_t *b = hs[j]->image.buf, *e = b + hs[j]->image.len;
        bodies[j] = hs[j]->body;
        if (lo == NULL || b < lo)
            lo = b;
        if (hi == NULL || e > hi)
            hi = e;
        if (hs[j]->lp.size_fn != NULL && hs[j]->last_cell < last)
            last = hs[j]->last_cell;
    }
    {
        GUARD_DECL(gd);
        GUARD_BEGIN(gd, lo, (size_t)(hi - lo))
            return -1;
        for (j = 0; j < nb; j++)
            TOUCH_LAST(hs[j]);
        *alive = mb_cells_any_one(bodies, nb, hs[0]->width, &hs[0]->g, row, last, suspect);
        GUARD_END();
    }
    return 0;
}

/* Group result: 1 found, 0 absent (suspects' file sizes compared: the absence is real),
 * -1 raised. */
static int any_one_group(Handle *h, PyObject *fast, Handle *const *hs, unsigned nb, const uint64_t row[2])
{
    uint64_t alive = 0, suspect = 0;
    unsigned j;
    if (g_any_one(hs, nb, row, &alive, &suspect) < 0) {
        any_faulted(h, fast);
        return -1;
    }
    if (alive)
        return 1;
    for (j = 0; j < nb; j++)
        if ((suspect >> j) & 1 && hs[j]->lp.size_fn != NULL && mb_h_check_size(hs[j]) < 0)
            return -1;
    return 0;
}

/* 1 if some handle of (h unless skip_self, others) may hold the key (hash halves hv), 0
 * if none, -1 raised.  Each position is computed once for all the handles. */
static int any_hashed(Handle *h, PyObject *fast, const uint64_t hv[2], int skip_self)
{
    Handle *hs[GROUP];
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(fast);
    uint64_t row[2];
    unsigned nb = 0;
    int r;
    mb_cells_stage_hashed(&h->g, hv, row);
    if (!skip_self)
        hs[nb++] = h;
    for (i = 0; i < n; i++) {
        hs[nb++] = OTHER(fast, i);
        if (nb == GROUP) {
            if ((r = any_one_group(h, fast, hs, nb, row)) != 0)
                return r;
            nb = 0;
        }
    }
    return nb ? any_one_group(h, fast, hs, nb, row) : 0;
}

static uint64_t *room(const Handle *h, uint64_t *small)
{
    uint64_t *pos = small;
    if (h->g.k > SMALL_K && (pos = PyMem_Malloc(h->g.k * sizeof *pos)) == NULL)
        PyErr_NoMemory();
    return pos;
}

/* The 4-byte little-endian word at p (aligned), in a guarded section of its own: 0, or -1
 * faulted (its file was truncated under the mapping). */
static int g_load_word(const uint8_t *p, uint32_t *word)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, p, 4)
        return -1;
    *word = mb_items_load(p);
    GUARD_END();
    return 0;
}

/* contains_any's and add_unless's watch: 1 if the word viewed by obj (a 4-byte buffer: the expiring
 * filter's committed generation, through a read-only mapping of its lock file) is not
 * `expected` or cannot be read (a truncated file: the caller re-reads it with pread, which
 * raises), 0 if it is, -1 raised. */
static int word_moved(PyObject *obj, PyObject *expected)
{
    Py_buffer b;
    uint32_t word = 0;
    unsigned long want = PyLong_AsUnsignedLong(expected);
    int moved;
    if (want == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0)
        return -1;
    if (b.len != 4 || ((uintptr_t)b.buf & 3) != 0) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "the watched word must be 4 aligned bytes");
        return -1;
    }
    moved = g_load_word(b.buf, &word) < 0 || word != want;
    PyBuffer_Release(&b);
    return moved;
}

const char mb_h_contains_any_doc[] = PyDoc_STR(
"contains_any(others, key, /) or contains_any(others, key, word, expected, /)\n\n"
"True if the key may be present in self or in one of others (a list or tuple of open\n"
"Handles of self's geometry); the key is hashed once.  No lock.  With word (a 4-byte\n"
"buffer, e.g. a memoryview of a mapping): None, without probing, if the little-endian\n"
"word it views is not expected or cannot be read (read first, under the SIGBUS guard).");

PyObject *mb_h_contains_any(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t hv[2];
    PyObject *fast = NULL;
    int present = -1;
    if (nargs != 2 && nargs != 4)
        return PyErr_Format(PyExc_TypeError, "contains_any() takes 2 or 4 arguments (%zd given)", nargs);
    if (h->closed)
        return mb_h_refuse(h, 0);
    if (get_others(h, args[0], &fast) < 0)
        return NULL;
    if (mb_hash_object(args[1], hv) < 0)
        goto done;
    if (h->closed) {   /* encode_key may have run Python */
        mb_h_refuse(h, 0);
        goto done;
    }
    if (mb_guard_rearm(1) < 0 || others_open(fast) < 0)
        goto done;
    if (nargs == 4 && args[2] != Py_None) {   /* the word first, then the probes */
        int moved = word_moved(args[2], args[3]);
        if (moved < 0)
            goto done;
        if (moved) {
            Py_DECREF(fast);
            Py_RETURN_NONE;
        }
        if (h->closed) {   /* the buffer's export may have run Python */
            mb_h_refuse(h, 0);
            goto done;
        }
        if (others_open(fast) < 0)
            goto done;
    }
    /* busy: a close by another thread while a size check runs Python defers the unmap */
    h->busy++;
    enter_all(fast);
    present = any_hashed(h, fast, hv, 0);
    leave_all(fast);
    mb_h_leave(h);
done:
    Py_DECREF(fast);
    return present < 0 ? NULL : PyBool_FromLong(present);
}

/* Set one key's cells in self and bump the count (the lock is held): 0, or -1 faulted. */
static int g_add_one(Handle *h, const uint64_t *pos, unsigned n, int *fresh, int *sat, int *over, uint32_t *stored)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    TOUCH_LAST(h);
    *fresh = mb_cells_add(h->body, h->width, pos, n, sat);
    if (*fresh)
        *over = mb_h_items_bump(h, 1, stored);
    GUARD_END();
    return 0;
}

const char mb_h_add_unless_doc[] = PyDoc_STR(
"add_unless(others, key, /) or add_unless(others, key, word, expected, /)\n\n"
"Under self's write lock: False if one of others (a list or tuple of open Handles of self's\n"
"geometry) may hold the key (nothing written), else add it to self: True if it was new\n"
"there.  The key is hashed once; atomic with respect to every writer of self.  With word\n"
"(a 4-byte buffer, e.g. a memoryview of a mapping): None, with nothing written and no lock\n"
"taken, if the little-endian word it views is not expected or cannot be read (read first,\n"
"under the SIGBUS guard; the caller keeps the word from moving meanwhile, e.g. by holding\n"
"the lock whose holders alone change it).");

PyObject *mb_h_add_unless(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t hv[2], small[SMALL_K], *pos = NULL;
    PyObject *fast = NULL, *result = NULL;
    int state, fresh = 0, sat = 0, over = 0, held;
    uint32_t stored = 0;
    uint64_t top;
    unsigned n;
    if (nargs != 2 && nargs != 4)
        return PyErr_Format(PyExc_TypeError, "add_unless() takes 2 or 4 arguments (%zd given)", nargs);
    if (h->closed || !h->writable)
        return mb_h_refuse(h, 1);
    if (get_others(h, args[0], &fast) < 0)
        return NULL;
    if (mb_hash_object(args[1], hv) < 0)
        goto done;
    if (h->closed || !h->writable) {
        mb_h_refuse(h, 1);
        goto done;
    }
    if (others_open(fast) < 0)
        goto done;
    if ((pos = room(h, small)) == NULL)
        goto done;
    mb_positions(&h->g, hv, pos);
    for (top = 0, n = 0; n < h->g.k; n++)
        if (pos[n] > top)
            top = pos[n];
    n = mb_cells_distinct(h->width, pos, h->g.k);   /* sorts pos: top stays the largest */
    if (h->lp.size_fn != NULL && (h->items_last || top >= h->last_cell) && mb_h_check_size(h) < 0)
        goto done;
    if (mb_guard_rearm(1) < 0)
        goto done;
    if (nargs == 4 && args[2] != Py_None) {   /* the word before the lock: a moved one writes nothing */
        const int moved = word_moved(args[2], args[3]);
        if (moved < 0)
            goto done;
        if (moved) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (h->closed || !h->writable) {   /* the buffer's export may have run Python */
            mb_h_refuse(h, 1);
            goto done;
        }
    }
    state = mb_h_lock(h);
    if (state < 0)
        goto done;
    /* busy (as in contains_any): a close by another thread while a size check runs
     * Python defers the unmap of self and of the others until this call ends */
    h->busy++;
    held = others_open(fast);
    if (held == 0) {
        enter_all(fast);
        held = any_hashed(h, fast, hv, 1);
        leave_all(fast);
    }
    if (held == 0 && h->closed) {   /* closed meanwhile: nothing written */
        mb_h_refuse(h, 0);
        held = -1;
    }
    if (held == 0 && g_add_one(h, pos, n, &fresh, &sat, &over, &stored) < 0) {
        mb_h_leave(h);
        if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
            goto done;
        mb_h_faulted(h);
        goto done;
    }
    mb_h_leave(h);
    if (state == LOCK_TAKEN && mb_lock_release(h->lock) < 0)
        goto done;
    if (held < 0)
        goto done;
    if ((over || sat) && mb_h_warn(h, over, stored, sat) < 0)
        goto done;
    result = PyBool_FromLong(held == 0 && fresh);
done:
    if (pos != NULL && pos != small)
        PyMem_Free(pos);
    Py_DECREF(fast);
    return result;
}
