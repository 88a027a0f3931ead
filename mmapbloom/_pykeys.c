/* mmapbloom/_pykeys.c: Python keys to bytes (interface and rule in _pykeys.h). */
#include "_pykeys.h"

#include "_columns.h"
#include "_positions.h"

/* mmapbloom.hashing.encode_key(o): the one key-encoding rule (and its error messages),
 * used for every key this binding does not resolve in place.  New reference or NULL. */
static PyObject *encode_key_py(PyObject *o)
{
    PyObject *mod = PyImport_ImportModule("mmapbloom.hashing"), *fn, *res;
    if (mod == NULL)
        return NULL;
    fn = PyObject_GetAttrString(mod, "encode_key");
    Py_DECREF(mod);
    if (fn == NULL)
        return NULL;
    res = PyObject_CallFunctionObjArgs(fn, o, NULL);
    Py_DECREF(fn);
    return res;
}

/* encode_key's result (a new reference or NULL), checked to be bytes: the same reference,
 * or NULL with TypeError (a replaced encode_key returning something else). */
static PyObject *encoded_bytes(PyObject *enc)
{
    if (enc != NULL && !PyBytes_Check(enc)) {
        Py_DECREF(enc);
        PyErr_SetString(PyExc_TypeError, "mmapbloom.hashing.encode_key must return bytes");
        return NULL;
    }
    return enc;
}

/* 1 for the keys resolve_key takes in place: str, bytes, bytearray, C-contiguous memoryview. */
static int is_fast_key(PyObject *o)
{
    return PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
           (PyMemoryView_Check(o) && PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(o), 'C'));
}

/* An exact int key -> its 8 little-endian bytes (value mod 2^64); out of [-2^63, 2^64):
 * encode_key's OverflowError. */
static int int_key_bytes(PyObject *o, uint8_t b[8])
{
    int overflow, i;
    uint64_t u;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow == 0) {
        u = (uint64_t)v;
    } else {
        unsigned long long w = overflow > 0 ? PyLong_AsUnsignedLongLong(o) : (unsigned long long)-1;
        if (overflow < 0 || (w == (unsigned long long)-1 && PyErr_Occurred())) {
            PyObject *enc;
            PyErr_Clear();
            enc = encode_key_py(o);   /* raises the OverflowError naming the value */
            if (enc == NULL)
                return -1;
            Py_DECREF(enc);
            PyErr_Format(PyExc_OverflowError, "integer key out of range: %R", o);
            return -1;
        }
        u = (uint64_t)w;
    }
    for (i = 0; i < 8; i++, u >>= 8)
        b[i] = (uint8_t)(u & 0xFF);
    return 0;
}

/* The bytes of one key.  Returns -1 with an exception set, 0 (no buffer taken) or 1 (a
 * buffer was taken into *view: release it when done with r).  A str gives its UTF-8
 * bytes, cached inside the str object by CPython (no copy for ASCII strings); lone
 * surrogates raise encode_key's KeyEncodingError (a UnicodeEncodeError). */
static int resolve_key(PyObject *o, mb_key *r, Py_buffer *view)
{
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s;
        if (PyUnicode_IS_COMPACT_ASCII(o)) {   /* the common case: its bytes are its UTF-8 */
            r->ptr = (const char *)PyUnicode_DATA(o);
            r->len = PyUnicode_GET_LENGTH(o);
            return 0;
        }
        s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                PyObject *enc;   /* lone surrogate: encode_key's KeyEncodingError names the rule */
                PyErr_Clear();
                enc = encode_key_py(o);
                if (enc == NULL)
                    return -1;
                Py_DECREF(enc);
                PyErr_SetString(PyExc_ValueError, "str key is not valid UTF-8");
            }
            return -1;
        }
        r->ptr = s;
        r->len = n;
        return 0;
    }
    if (PyBytes_Check(o)) {
        r->ptr = PyBytes_AS_STRING(o);
        r->len = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyByteArray_Check(o) || (PyMemoryView_Check(o) && PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(o), 'C'))) {
        /* PyBUF_SIMPLE: C-contiguous bytes (BufferError otherwise).  The export also keeps
         * a bytearray from being resized while we hold it. */
        if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0)
            return -1;
        r->ptr = (const char *)view->buf;
        r->len = view->len;
        return 1;
    }
    PyErr_BadInternalCall();   /* callers pass only the keys is_fast_key accepts */
    return -1;
}

/* Validate a key and hash it: str and contiguous bytes-likes in place, an exact int in
 * [-2^63, 2^64) as its 8 little-endian bytes, anything else through encode_key_py (the
 * one rule, in Python, with its messages). */
int mb_hash_object(PyObject *o, uint64_t h[2])
{
    mb_key r;
    Py_buffer view;
    int got;
    if (PyUnicode_CheckExact(o) && PyUnicode_IS_COMPACT_ASCII(o)) {   /* the common key: resolve_key's bytes */
        r.ptr = (const char *)PyUnicode_DATA(o);
        r.len = PyUnicode_GET_LENGTH(o);
        mb_hash_key(&r, h);
        return 0;
    }
    if (PyLong_CheckExact(o)) {
        uint8_t b[8];
        if (int_key_bytes(o, b) < 0)
            return -1;
        r.ptr = (const char *)b;
        r.len = 8;
        mb_hash_key(&r, h);
        return 0;
    }
    if (is_fast_key(o)) {
        got = resolve_key(o, &r, &view);
        if (got < 0)
            return -1;
        mb_hash_key(&r, h);
        if (got)
            PyBuffer_Release(&view);
        return 0;
    }
    {
        PyObject *enc = encoded_bytes(encode_key_py(o));
        if (enc == NULL)
            return -1;
        r.ptr = PyBytes_AS_STRING(enc);
        r.len = PyBytes_GET_SIZE(enc);
        mb_hash_key(&r, h);
        Py_DECREF(enc);
        return 0;
    }
}


/* ---- batches over resolved keys ------------------------------------------------------- */

/* A batch's keys.  From a Python sequence they are resolved once, every key validated by
 * encode_key's rule before any cell changes: refs[i] is key i's bytes, every object pinned
 * until keys_end (the tuple holds the items; bytearray / memoryview keys of a query hold
 * buffer exports; an exact int's 8 bytes are in scratch; the bytes of any other key, and
 * of a bytearray / memoryview key of an add batch, are new bytes objects held by owned).
 * From a Column (see _columns.h; it pins its numpy / Arrow buffers and is referenced until
 * keys_end) they are read in place one chunk at a time by keys_chunk, into refs (room for
 * MB_CHUNK_KEYS keys) and scratch (8 bytes a key, for integer keys); a null key has
 * ptr == NULL: never added, never found. */


/* Keys this far ahead of the one a pass over a large batch's objects reads (the resolve
 * loop, unpin) are prefetched: each object is a cache miss of its own once the batch is
 * larger than the caches, and these loops do little else a key. */
#define OBJ_AHEAD 16

/* Release the references the batch's loop took to a list's items (ks->pins), the object
 * OBJ_AHEAD keys on prefetched (each is a cache miss of its own in a large batch). */
static void unpin(keyset *ks)
{
    Py_ssize_t i;
    PyObject **pins = ks->pins;
    const Py_ssize_t n = ks->npins;
    ks->pins = NULL;   /* a deallocation below may run Python code: nothing here is reachable then */
    ks->npins = 0;
    for (i = 0; i < n; i++) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MMB_NO_PREFETCH)
        if (i + OBJ_AHEAD < n)
            __builtin_prefetch(pins[i + OBJ_AHEAD], 1, 3);
#endif
        Py_DECREF(pins[i]);
    }
    PyMem_Free(pins);
}

void mb_keys_end(keyset *ks)
{
    while (ks->nviews > 0)
        PyBuffer_Release(&ks->views[--ks->nviews]);
    PyMem_Free(ks->views);
    PyMem_Free(ks->refs);
    PyMem_Free(ks->scratch);
    unpin(ks);
    Py_XDECREF(ks->tuple);
    Py_XDECREF(ks->column);
    Py_XDECREF(ks->owned);
    Py_XDECREF(ks->encode);
    ks->views = NULL;
    ks->refs = NULL;
    ks->scratch = NULL;
    ks->tuple = NULL;
    ks->column = NULL;
    ks->owned = NULL;
    ks->encode = NULL;
}

Py_ssize_t mb_keys_end_written(keyset *ks, Py_ssize_t done, Py_ssize_t committed)
{
    mb_keys_end(ks);
    if (done >= 0 && PyErr_CheckSignals() < 0) {
        mb_note_committed(committed);
        return -1;
    }
    return done;
}

/* The keys [start, start + c) of the batch (c <= MB_CHUNK_KEYS for a column): a column
 * chunk is filled now (no GIL needed, never fails), valid until the next call. */
const mb_key *mb_keys_chunk(keyset *ks, Py_ssize_t start, Py_ssize_t c)
{
    if (ks->column == NULL)
        return ks->refs + start;
    if (c > 0)
        mb_column_fill(ks->column, start, c, ks->refs, ks->scratch);
    return ks->refs;
}

static int keys_from_python(keyset *ks, PyObject *keys, int copy_mutable);

/* Pin the items [from, n) of list (the rest of the snapshot the batch's loop is taking; the
 * list has not changed since it began), before the loop runs code that could change it.
 * Returns the pins, where the loop then reads the items. */
static PyObject **pin_rest(keyset *ks, PyObject *list, Py_ssize_t from)
{
    for (; from < ks->n; from++)
        ks->pins[from] = Py_NewRef(PyList_GET_ITEM(list, from));
    ks->npins = ks->n;
    return ks->pins;
}

/* Any batch: a Column (read in place by chunks) or a Python iterable (keys_from_python;
 * copy_mutable: an add batch, whose bytearray / memoryview keys are copied). */
int mb_keys_begin(keyset *ks, PyObject *keys, int copy_mutable)
{
    Py_ssize_t room;
    if (!mb_column_check(keys))
        return keys_from_python(ks, keys, copy_mutable);
    ks->tuple = NULL;
    ks->pins = NULL;
    ks->npins = 0;
    ks->views = NULL;
    ks->owned = NULL;
    ks->encode = NULL;
    ks->nviews = 0;
    Py_INCREF(keys);
    ks->column = keys;
    ks->n = mb_column_len(keys);
    room = ks->n < MB_CHUNK_KEYS ? (ks->n ? ks->n : 1) : MB_CHUNK_KEYS;
    ks->refs = PyMem_Malloc((size_t)room * sizeof *ks->refs);
    ks->scratch = PyMem_Malloc((size_t)room * 8);
    if (ks->refs == NULL || ks->scratch == NULL) {
        mb_keys_end(ks);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Key o of a batch that is neither str, bytes nor an exact int (nor, in a query, a
 * contiguous bytearray / memoryview, taken in place): its bytes as a new bytes object,
 * pinned in ks->owned, into *r.  A contiguous bytearray / memoryview of an add batch is
 * copied here (bytes(o), as encode_key does), so that no other thread can change a key
 * while the batch is hashed without the GIL; anything else goes through encode_key itself
 * (the one rule, with its messages: TypeError, OverflowError, KeyEncodingError). */
static int key_owned(keyset *ks, PyObject *o, mb_key *r)
{
    PyObject *enc;
    if (is_fast_key(o)) {
        enc = PyBytes_FromObject(o);
    } else {
        if (ks->encode == NULL) {
            PyObject *mod = PyImport_ImportModule("mmapbloom.hashing");
            if (mod == NULL)
                return -1;
            ks->encode = PyObject_GetAttrString(mod, "encode_key");
            Py_DECREF(mod);
            if (ks->encode == NULL)
                return -1;
        }
        enc = encoded_bytes(PyObject_CallOneArg(ks->encode, o));
    }
    if (enc == NULL)
        return -1;
    if (ks->owned == NULL && (ks->owned = PyList_New(0)) == NULL) {
        Py_DECREF(enc);
        return -1;
    }
    if (PyList_Append(ks->owned, enc) < 0) {
        Py_DECREF(enc);
        return -1;
    }
    Py_DECREF(enc);   /* the list holds it until keys_end */
    r->ptr = PyBytes_AS_STRING(enc);
    r->len = PyBytes_GET_SIZE(enc);
    return 0;
}

/* Resolve a Python iterable of keys, validating every one by encode_key's rule (its
 * errors and messages), before the
 * caller changes any cell.  str and bytes are read in place, an exact int is encoded here
 * (int_key_bytes), a contiguous bytearray / memoryview is read in place by a query and
 * copied by an add batch (copy_mutable), anything else is encode_key's bytes (key_owned).
 * A list's items are pinned as they are read (ks->pins), a tuple is pinned whole and any
 * other iterable made a tuple, so no key can go away under a GIL-released stage. */
static int keys_from_python(keyset *ks, PyObject *keys, int copy_mutable)
{
    Py_ssize_t i, cap = 0;
    PyObject *list = NULL;   /* a list whose items the loop pins (ks->pins) as it reads them */
    PyObject **items;        /* where the loop reads item i */
    ks->tuple = NULL;
    ks->pins = NULL;
    ks->npins = 0;
    ks->refs = NULL;
    ks->views = NULL;
    ks->nviews = 0;
    ks->column = NULL;
    ks->scratch = NULL;
    ks->owned = NULL;
    ks->encode = NULL;
    if (PyList_CheckExact(keys)) {
        /* The snapshot is taken by this loop itself, each item pinned as it is read: one
         * pass over the keys' objects, not PyList_AsTuple's and then this loop's (each a
         * cache miss a key in a large batch).  Until pin_rest, the loop runs no code that
         * could change the list: str, bytes, exact ints, exact bytearrays and memoryviews
         * are read in C (PyMem_* allocations run no collection); a bytearray subclass's
         * buffer (__buffer__, from Python 3.12 on) and key_owned's encode_key are Python code, so
         * they come after pin_rest; an error's encode_key call only precedes the exit. */
        list = keys;
        ks->n = PyList_GET_SIZE(keys);
        if ((ks->pins = PyMem_Malloc((size_t)(ks->n ? ks->n : 1) * sizeof *ks->pins)) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        items = PySequence_Fast_ITEMS(keys);
    } else {
        if (PyTuple_CheckExact(keys)) {
            Py_INCREF(keys);
            ks->tuple = keys;
        } else if ((ks->tuple = PySequence_Tuple(keys)) == NULL) {
            return -1;
        }
        ks->n = PyTuple_GET_SIZE(ks->tuple);
        items = PySequence_Fast_ITEMS(ks->tuple);
    }
    ks->refs = PyMem_Malloc((size_t)(ks->n ? ks->n : 1) * sizeof *ks->refs);
    if (ks->refs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < ks->n; i++) {
        PyObject *o = items[i];
        mb_key *r = &ks->refs[i];
        if (list != NULL) {
            ks->pins[i] = Py_NewRef(o);
            ks->npins = i + 1;
        }
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MMB_NO_PREFETCH)
        if (i + OBJ_AHEAD < ks->n)   /* the object header this loop reads a few keys on (and pins) */
            __builtin_prefetch(items[i + OBJ_AHEAD], 1, 3);
#endif
        if (PyUnicode_CheckExact(o) && PyUnicode_IS_COMPACT_ASCII(o)) {   /* the common key, inline */
            r->ptr = (const char *)PyUnicode_DATA(o);
            r->len = PyUnicode_GET_LENGTH(o);
            continue;
        }
        if (PyUnicode_Check(o) || PyBytes_Check(o)) {
            if (resolve_key(o, r, NULL) < 0)   /* takes no buffer for these */
                goto fail;
        } else if (PyLong_CheckExact(o)) {
            if (ks->scratch == NULL && (ks->scratch = PyMem_Malloc((size_t)ks->n * 8)) == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            if (int_key_bytes(o, (uint8_t *)ks->scratch + (size_t)i * 8) < 0)
                goto fail;
            r->ptr = ks->scratch + (size_t)i * 8;
            r->len = 8;
        } else if (!copy_mutable && is_fast_key(o)) {   /* a query reads it in place, pinned */
            int got;
            if (list != NULL && !PyByteArray_CheckExact(o) && !PyMemoryView_Check(o)) {
                items = pin_rest(ks, list, i + 1);   /* a subclass's buffer may be Python code */
                list = NULL;
            }
            if (ks->nviews == cap) {
                Py_ssize_t more_cap = cap ? cap * 2 : 4;
                Py_buffer *more = PyMem_Realloc(ks->views, (size_t)more_cap * sizeof *ks->views);
                if (more == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                ks->views = more;   /* Py_buffer structs may move: they hold no pointer to themselves */
                cap = more_cap;
            }
            got = resolve_key(o, r, &ks->views[ks->nviews]);
            if (got < 0)
                goto fail;
            ks->nviews += got;
        } else {
            if (list != NULL) {   /* key_owned may run Python code, which may change the list */
                items = pin_rest(ks, list, i + 1);
                list = NULL;
            }
            if (key_owned(ks, o, r) < 0)
                goto fail;
        }
    }
    return 0;
fail:
    mb_keys_end(ks);
    return -1;
}

void mb_note_committed(Py_ssize_t committed)
{
    PyObject *et, *ev, *tb, *n;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    n = PyLong_FromSsize_t(committed);
    if (ev != NULL && n != NULL && PyObject_SetAttrString(ev, "committed_items", n) < 0)
        PyErr_Clear();
    Py_XDECREF(n);
    PyErr_Restore(et, ev, tb);
}

int mb_get_out(PyObject *obj, Py_ssize_t n, Py_buffer *out)
{
    if (PyObject_GetBuffer(obj, out, PyBUF_WRITABLE) < 0)
        return -1;
    if (out->len != n) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes, expected %zd (one per key)", out->len, n);
        PyBuffer_Release(out);
        return -1;
    }
    return 0;
}
