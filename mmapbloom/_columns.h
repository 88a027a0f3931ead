/* mmapbloom._kernels.Column: a batch of keys read in place, with no Python object per key.
 *
 * Sources (constructors exported as module functions by mb_columns_init):
 *   arrow_column(obj)   any object with __arrow_c_stream__ or __arrow_c_array__ (the Arrow
 *                       PyCapsule interface: pyarrow, polars, pandas, duckdb, nanoarrow), read
 *                       through the Arrow C Data Interface (no pyarrow needed).  Types: utf8,
 *                       large_utf8, utf8_view, binary, large_binary, binary_view,
 *                       fixed_size_binary, int8..int64, uint8..uint64, and dictionary arrays of
 *                       those; a stream of one-column record batches (struct of one child);
 *                       chunks, offsets (slices) and validity bitmaps (nulls); null (format
 *                       "n": all nulls).  TypeError names any other type, or the column count
 *                       of a multi-column batch.  A malformed array raises ValueError
 *                       ("malformed Arrow array of format ...", the pure reader's message,
 *                       mmapbloom/arrowc.py): every check the interface allows is made at
 *                       import (buffer counts, NULL buffers, offsets non-decreasing from >= 0,
 *                       view lengths, buffer indices and ranges against the variadic sizes,
 *                       dictionary indices, struct children); the sizes it does not carry
 *                       (validity, data, offsets buffers) are trusted, as by every consumer.
 *   fixed_column(buf, width, strip_nul)
 *                       a C-contiguous buffer of n * width bytes (numpy arrays): key i is bytes
 *                       [i * width, (i + 1) * width), trailing NUL bytes dropped if strip_nul
 *                       (numpy 'S' semantics).
 * Integer keys (Arrow int columns, dictionary-free) are given as the 8 little-endian bytes of
 * their value mod 2^64, as mmapbloom.hashing.encode_key does for a Python int.
 *
 * A Column supports len() and slicing with step 1 (col[a:b], sharing the data).  It keeps the
 * imported Arrow arrays (or the buffer export) alive until it and all its slices are gone.
 *
 * C interface (for the batch kernels): */
#ifndef MMAPBLOOM_COLUMNS_H
#define MMAPBLOOM_COLUMNS_H

#include "_keys.h"

/* Register the Column type and the two constructors on the module; -1 on error. */
int mb_columns_init(PyObject *module);

/* 1 if o is a Column, else 0. */
int mb_column_check(PyObject *o);

/* Number of keys of the column (slice). */
Py_ssize_t mb_column_len(PyObject *col);

/* keys[0..n) = the keys at [start, start + n) of the column (0 <= start, start + n <= len).
 * A null key gets ptr == NULL.  Integer keys are their 8-byte little-endian values, written
 * into scratch (the caller gives 8 * n bytes; keys point into it until the next call), except
 * that a chunk whose keys are its values as stored (fixed-size, or int64 / uint64 on a
 * little-endian host; no nulls, no dictionary) is pointed at in place.  Needs no GIL (reads only
 * the column's buffers, kept alive by the Column); never fails. */
void mb_column_fill(PyObject *col, Py_ssize_t start, Py_ssize_t n, mb_key *keys, char *scratch);

#endif
