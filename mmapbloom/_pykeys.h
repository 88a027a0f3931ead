/* mmapbloom/_pykeys.h: Python keys to bytes, by the one rule of mmapbloom.hashing.encode_key.
 *
 * str gives its UTF-8 bytes (read in place: CPython caches them in the str), bytes-likes are
 * read as they are, an exact int in [-2**63, 2**64) gives the 8 little-endian bytes of its
 * value mod 2**64; every other key goes through encode_key itself (its TypeError,
 * OverflowError and KeyEncodingError messages).  A batch (keyset) is resolved once, every
 * key validated before any cell changes and every object it points into pinned until
 * mb_keys_end; a Column (_columns.h) is read in place, one chunk at a time. */
#ifndef MMAPBLOOM_PYKEYS_H
#define MMAPBLOOM_PYKEYS_H

#include <Python.h>
#include <stdint.h>

#include "_keys.h"

#define MB_CHUNK_KEYS 65536   /* keys per lock acquisition in a batch (base.CHUNK_KEYS) */

/* Validate one key and hash it (MurmurHash3_x64_128, seed 0) into h; -1 with the key's error. */
int mb_hash_object(PyObject *o, uint64_t h[2]);

/* A batch's keys: refs[i] is key i's bytes (all n of a Python iterable, or one chunk of a
 * Column at a time through mb_keys_chunk); ptr == NULL is a null key.  Fields are private
 * to _pykeys.c but for n and column (NULL unless the batch is a Column). */
typedef struct {
    PyObject *tuple;    /* the batch as a tuple (pinned whole), or NULL */
    PyObject **pins;    /* a list's items, one reference each (npins of them), or NULL */
    Py_ssize_t npins;
    PyObject *column;
    PyObject *owned;    /* list of bytes objects refs point into, or NULL */
    PyObject *encode;   /* mmapbloom.hashing.encode_key, looked up once a batch, or NULL */
    mb_key *refs;
    char *scratch;
    Py_buffer *views;
    Py_ssize_t n, nviews;
} keyset;

/* Resolve keys (a Column, or any Python iterable); copy_mutable: an add batch, whose
 * bytearray / memoryview keys are copied (a query reads them in place, pinned).  0, or -1
 * with the first bad key's error (nothing to release then). */
int mb_keys_begin(keyset *ks, PyObject *keys, int copy_mutable);

/* The keys [start, start + c) (c <= MB_CHUNK_KEYS for a Column), valid until the next call.
 * Needs no GIL; never fails. */
const mb_key *mb_keys_chunk(keyset *ks, Py_ssize_t start, Py_ssize_t c);

/* Release everything the batch pinned. */
void mb_keys_end(keyset *ks);

/* A batch writer's end: mb_keys_end, then the signal handlers of signals that arrived while
 * the batch was released (a large batch's release takes milliseconds, after the writer's
 * last check between chunks), so that their exception leaves the writer carrying
 * committed_items (the whole batch: `committed`), as every exception out of a batch writer
 * does.  done < 0 (the writer failed): mb_keys_end only.  Returns done, or -1. */
Py_ssize_t mb_keys_end_written(keyset *ks, Py_ssize_t done, Py_ssize_t committed);

/* Every exception leaving a batch writer says how far it got: set committed_items on the
 * exception in flight (normalised; kept as it was if the attribute cannot be set). */
void mb_note_committed(Py_ssize_t committed);

/* A batch's out argument: a writable buffer of exactly n bytes (one per key) into *out
 * (release with PyBuffer_Release).  0, or -1 with ValueError naming both lengths (or the
 * buffer protocol's error). */
int mb_get_out(PyObject *obj, Py_ssize_t n, Py_buffer *out);

#endif /* MMAPBLOOM_PYKEYS_H */
