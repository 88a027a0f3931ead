/* mmapbloom._kernels.Column: key columns read in place (interface and sources in _columns.h).
 *
 * The Arrow C Data Interface structs below are copied from the specification
 * (https://arrow.apache.org/docs/format/CDataInterface.html), which declares them ABI-stable
 * and asks consumers to define them themselves under these include guards.  Import follows the
 * PyCapsule interface (https://arrow.apache.org/docs/format/CDataInterface/PyCapsuleInterface.html):
 * the capsule's struct is moved out (its release set to NULL) and released by the Column.
 */
#include "_columns.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};
#endif

/* ---- decoded arrays ------------------------------------------------------------------- */

enum { A_OFF32 = 1, A_OFF64, A_VIEW, A_FIXED, A_INT, A_NULL };

/* One array (chunk) of keys, decoded from its schema and buffers. */
typedef struct mb_array {
    int kind;
    int width;                 /* A_FIXED: bytes per key; A_INT: bytes per value (1, 2, 4, 8) */
    int is_signed;             /* A_INT */
    int strip_nul;             /* A_FIXED: drop trailing NUL bytes (numpy 'S') */
    int64_t length;            /* logical number of keys */
    int64_t offset;            /* element offset into the buffers (Arrow slices) */
    const uint8_t *validity;   /* NULL: no nulls */
    const uint8_t *data;       /* values (A_INT, A_FIXED) or string bytes (A_OFF32/64) */
    const void *offsets;       /* A_OFF32 (int32) / A_OFF64 (int64): length + 1 entries from offset */
    const uint8_t *views;      /* A_VIEW: 16-byte views */
    const uint8_t *const *bufs;/* A_VIEW: the variadic data buffers */
    int64_t nbufs;
    struct mb_array *dict;     /* dictionary values (this array then holds A_INT indices) */
} mb_array;

typedef struct ColumnObject {
    PyObject_HEAD
    struct ColumnObject *base; /* owner of the data (a new reference; self for a base) */
    Py_ssize_t start, len;     /* the slice of the base's keys */
    /* the rest is used in a base only */
    struct ArrowSchema schema;
    struct ArrowArray *arrays; /* imported arrays, released at dealloc */
    Py_ssize_t narrays;
    mb_array *chunks;          /* decoded, 2 * narrays entries: chunk i, then its dictionary */
    int64_t *starts;           /* nchunks + 1 cumulative starts */
    Py_ssize_t nchunks;
    Py_buffer buf;             /* fixed_column's buffer export */
    int have_buf;
} ColumnObject;

/* The Column type, created once (PyType_FromSpec) and kept for the life of the process. */
static PyTypeObject *Column_Type = NULL;

int mb_column_check(PyObject *o)
{
    return Column_Type != NULL && PyObject_TypeCheck(o, Column_Type);
}

Py_ssize_t mb_column_len(PyObject *col)
{
    return ((ColumnObject *)col)->len;
}

static inline int64_t int_at(const mb_array *a, int64_t j)
{
    switch (a->width) {
    case 1:
        return a->is_signed ? (int64_t)((const int8_t *)a->data)[j] : (int64_t)a->data[j];
    case 2: {
        uint16_t v;
        memcpy(&v, a->data + 2 * j, 2);
        return a->is_signed ? (int64_t)(int16_t)v : (int64_t)v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, a->data + 4 * j, 4);
        return a->is_signed ? (int64_t)(int32_t)v : (int64_t)v;
    }
    default: {
        uint64_t v;
        memcpy(&v, a->data + 8 * j, 8);
        return (int64_t)v;
    }
    }
}

/* Key i (logical, 0 <= i < a->length) of an array; scratch: 8 bytes for an integer key. */
static void key_at(const mb_array *a, int64_t i, mb_key *key, char *scratch)
{
    const int64_t j = i + a->offset;
    if (a->kind == A_NULL || (a->validity != NULL && !((a->validity[j >> 3] >> (j & 7)) & 1))) {
        key->ptr = NULL;
        key->len = 0;
        return;
    }
    switch (a->kind) {
    case A_OFF32: {
        const int32_t *o = (const int32_t *)a->offsets;
        key->ptr = (const char *)a->data + o[j];
        key->len = (Py_ssize_t)o[j + 1] - o[j];
        return;
    }
    case A_OFF64: {
        const int64_t *o = (const int64_t *)a->offsets;
        key->ptr = (const char *)a->data + o[j];
        key->len = (Py_ssize_t)(o[j + 1] - o[j]);
        return;
    }
    case A_VIEW: {
        const uint8_t *v = a->views + 16 * j;
        int32_t len, bi, off;
        memcpy(&len, v, 4);
        key->len = len;
        if (len <= 12) {
            key->ptr = (const char *)v + 4;
            return;
        }
        memcpy(&bi, v + 8, 4);
        memcpy(&off, v + 12, 4);
        if (bi < 0 || bi >= a->nbufs) {   /* malformed view: never read outside the buffers */
            key->ptr = NULL;
            key->len = 0;
            return;
        }
        key->ptr = (const char *)a->bufs[bi] + off;
        return;
    }
    case A_FIXED: {
        const char *p = (const char *)a->data + j * a->width;
        Py_ssize_t n = a->width;
        if (a->strip_nul)
            while (n > 0 && p[n - 1] == 0)
                n--;
        key->ptr = p;
        key->len = n;
        return;
    }
    default: { /* A_INT */
        const int64_t v = int_at(a, j);
        if (a->dict != NULL) {
            if (v < 0 || v >= a->dict->length) {   /* malformed index: never read outside */
                key->ptr = NULL;
                key->len = 0;
                return;
            }
            key_at(a->dict, v, key, scratch);
            return;
        }
        {
            uint64_t u = (uint64_t)v;   /* value mod 2^64, written little-endian */
            int b;
            for (b = 0; b < 8; b++, u >>= 8)
                scratch[b] = (char)(u & 0xFF);
        }
        key->ptr = scratch;
        key->len = 8;
        return;
    }
    }
}

/* The bytes per key when an array's keys are its values as stored, back to back (then a
 * key points at its own bytes), else 0: fixed-size keys kept whole (no NUL stripping) and
 * int64 / uint64 values on a little-endian host (an int key is its value mod 2^64,
 * little-endian: key_at's scratch bytes are the value's own), without nulls or a
 * dictionary. */
static inline int64_t stride_of(const mb_array *a)
{
    if (a->validity != NULL || a->dict != NULL)
        return 0;
    if (a->kind == A_FIXED && !a->strip_nul)
        return a->width;
#if PY_LITTLE_ENDIAN
    if (a->kind == A_INT && a->width == 8)
        return 8;
#endif
    return 0;
}

void mb_column_fill(PyObject *col, Py_ssize_t start, Py_ssize_t n, mb_key *keys, char *scratch)
{
    const ColumnObject *c = (const ColumnObject *)col;
    const ColumnObject *b = c->base;
    int64_t pos = (int64_t)c->start + start;
    Py_ssize_t lo = 0, hi = b->nchunks, i;
    /* the chunk holding pos: the last with starts[ci] <= pos */
    while (hi - lo > 1) {
        const Py_ssize_t mid = (lo + hi) / 2;
        if (b->starts[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    for (i = 0; i < n;) {
        const mb_array *a;
        int64_t j, run, r, stride;
        while (pos >= b->starts[lo + 1])
            lo++;
        a = &b->chunks[2 * lo];
        j = pos - b->starts[lo];
        run = b->starts[lo + 1] - pos;   /* the keys of this chunk from pos on */
        if (run > n - i)
            run = n - i;
        if ((stride = stride_of(a)) > 0) {   /* the keys are the values themselves: point at them */
            const char *p = (const char *)a->data + stride * (j + a->offset);
            for (r = 0; r < run; r++) {
                keys[i + r].ptr = p + stride * r;
                keys[i + r].len = (Py_ssize_t)stride;
            }
        } else {
            for (r = 0; r < run; r++)
                key_at(a, j + r, &keys[i + r], scratch + 8 * (i + r));
        }
        i += (Py_ssize_t)run;
        pos += run;
    }
}

/* ---- Arrow schema -> mb_array ----------------------------------------------------------- */

/* A readable name of an Arrow format string, for error messages. */
static const char *arrow_type_name(const char *f)
{
    static const struct { const char *fmt, *name; } names[] = {
        {"n", "null"}, {"b", "bool"}, {"c", "int8"}, {"C", "uint8"}, {"s", "int16"}, {"S", "uint16"},
        {"i", "int32"}, {"I", "uint32"}, {"l", "int64"}, {"L", "uint64"}, {"e", "float16"},
        {"f", "float32"}, {"g", "float64 (double)"}, {"z", "binary"}, {"Z", "large_binary"},
        {"vz", "binary_view"}, {"u", "utf8"}, {"U", "large_utf8"}, {"vu", "utf8_view"},
        {"tdD", "date32"}, {"tdm", "date64"}, {"+l", "list"}, {"+L", "large_list"}, {"+vl", "list_view"},
        {"+s", "struct"}, {"+m", "map"}, {"+r", "run_end_encoded"},
    };
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(f, names[i].fmt) == 0)
            return names[i].name;
    if (f[0] == 'd' && f[1] == ':')
        return "decimal";
    if (f[0] == 't' && f[1] == 's')
        return "timestamp";
    if (f[0] == 't' && f[1] == 't')
        return "time";
    if (f[0] == 't' && f[1] == 'D')
        return "duration";
    if (f[0] == 't' && f[1] == 'i')
        return "interval";
    if (f[0] == '+' && f[1] == 'w')
        return "fixed_size_list";
    if (f[0] == '+' && f[1] == 'u')
        return "union";
    return "unknown";
}

#define KEY_ARROW_TYPES                                                                              \
    "utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary, int8..int64, " \
    "uint8..uint64, or a dictionary of those"

static int bad_type(const char *fmt, int in_dict)
{
    PyErr_Format(PyExc_TypeError, "an Arrow key column must be %s; got %s%s (format '%s')", KEY_ARROW_TYPES,
                 in_dict ? "a dictionary of " : "", arrow_type_name(fmt), fmt);
    return -1;
}

static int bad_array(const char *fmt, const char *what, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, what);
    PyOS_vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    PyErr_Format(PyExc_ValueError, "malformed Arrow array of format '%s': %s", fmt, text);
    return -1;
}

/* 1 if the integer format f was decoded into *a (width, signedness). */
static int int_format(const char *f, mb_array *a)
{
    static const char codes[] = "cCsSiIlL";
    const char *p;
    if (f[0] == 0 || f[1] != 0 || (p = strchr(codes, f[0])) == NULL)
        return 0;
    a->width = 1 << ((p - codes) / 2);
    a->is_signed = ((p - codes) % 2) == 0;
    return 1;
}

/* The width of a fixed_size_binary format "w:N" (N: 1 to 10 decimal digits, < 2**31), or -1
 * with ValueError set (arrowc._fixed_width). */
static long fixed_width(const char *f)
{
    const char *d = f + 2;
    size_t n = strlen(d), i;
    long long w = 0;
    int ok = n > 0 && n <= 10;
    for (i = 0; ok && i < n; i++) {
        if (d[i] < '0' || d[i] > '9')
            ok = 0;
        else
            w = 10 * w + (d[i] - '0');
    }
    if (!ok || w > INT32_MAX) {
        bad_array(f, "fixed_size_binary width must be a decimal number in [0, 2**31), got '%s'", d);
        return -1;
    }
    return (long)w;
}

static int64_t i64_at(const void *p, int64_t j)
{
    int64_t v;
    memcpy(&v, (const char *)p + 8 * j, 8);
    return v;
}

static int is_valid(const mb_array *a, int64_t j)
{
    return a->validity == NULL || ((a->validity[j >> 3] >> (j & 7)) & 1);
}

/* Decode keys [0, length) of an array of the given schema, from its element extra on (extra: a
 * parent record batch's offset; length: the parent's length, or the array's own).  Every check
 * and message is the pure reader's (arrowc._keys), in the same order. */
static int decode(const struct ArrowSchema *s, const struct ArrowArray *arr, int64_t extra, int64_t length,
                  mb_array *a, mb_array *dict_slot, int in_dict)
{
    const char *f = s->format;
    int64_t want, i;
    memset(a, 0, sizeof *a);
    if (f == NULL)
        return bad_array("?", "no format");
    if (s->dictionary != NULL && in_dict)
        return bad_type(s->dictionary->format ? s->dictionary->format : "?", 1);
    if (s->dictionary != NULL) {
        if (dict_slot == NULL)
            return bad_type(s->dictionary->format ? s->dictionary->format : "?", 1);
        if (!int_format(f, a))
            return bad_array(f, "dictionary indices must be an integer type, got format '%s'", f);
        a->kind = A_INT;
        a->dict = dict_slot;
        want = 2;
    } else if (strcmp(f, "n") == 0) {
        a->kind = A_NULL;
        want = 0;
    } else if (int_format(f, a)) {
        a->kind = A_INT;
        want = 2;
    } else if (strcmp(f, "u") == 0 || strcmp(f, "z") == 0) {
        a->kind = A_OFF32;
        want = 3;
    } else if (strcmp(f, "U") == 0 || strcmp(f, "Z") == 0) {
        a->kind = A_OFF64;
        want = 3;
    } else if (strcmp(f, "vu") == 0 || strcmp(f, "vz") == 0) {
        a->kind = A_VIEW;
        want = 3;
    } else if (f[0] == 'w' && f[1] == ':') {
        long w = fixed_width(f);
        if (w < 0)
            return -1;
        a->kind = A_FIXED;
        a->width = (int)w;
        want = 2;
    } else {
        return bad_type(f, in_dict);
    }
    if (arr->length < 0 || arr->offset < 0)
        return bad_array(f, "negative length or offset (length %lld, offset %lld)", (long long)arr->length,
                         (long long)arr->offset);
    if (a->kind == A_NULL)
        ;   /* no buffers are read (the spec gives none; polars exports one) */
    else if (a->kind == A_VIEW && arr->n_buffers < want)
        return bad_array(f, "expected at least %lld buffers, got %lld", (long long)want, (long long)arr->n_buffers);
    else if (a->kind != A_VIEW && arr->n_buffers != want)
        return bad_array(f, "expected %lld buffers, got %lld", (long long)want, (long long)arr->n_buffers);
    if (want > 0 && arr->buffers == NULL)
        return bad_array(f, "the buffers pointer is NULL");
    if (a->dict != NULL) {
        if (arr->dictionary == NULL)
            return bad_array(f, "dictionary array missing");
        if (decode(s->dictionary, arr->dictionary, 0, arr->dictionary->length < 0 ? 0 : arr->dictionary->length,
                   dict_slot, NULL, 1) < 0)
            return -1;
    }
    a->length = length;
    a->offset = arr->offset + extra;
    if (length == 0 || a->kind == A_NULL)
        return 0;
    a->validity = arr->null_count == 0 ? NULL : (const uint8_t *)arr->buffers[0];
    switch (a->kind) {
    case A_INT:
        if (arr->buffers[1] == NULL)
            return bad_array(f, "the data buffer is NULL");
        a->data = arr->buffers[1];
        if (a->dict != NULL)
            for (i = 0; i < length; i++) {
                int64_t v;
                if (!is_valid(a, a->offset + i))
                    continue;
                v = int_at(a, a->offset + i);
                if (v < 0 && !a->is_signed)   /* a uint64 index of 2**63 or more */
                    return bad_array(f, "dictionary index %llu at element %lld is outside the dictionary's %lld values",
                                     (unsigned long long)v, (long long)i, (long long)a->dict->length);
                if (v < 0 || v >= a->dict->length)
                    return bad_array(f, "dictionary index %lld at element %lld is outside the dictionary's %lld values",
                                     (long long)v, (long long)i, (long long)a->dict->length);
            }
        break;
    case A_FIXED:
        if (a->width > 0 && arr->buffers[1] == NULL)
            return bad_array(f, "the data buffer is NULL");
        a->data = arr->buffers[1] != NULL ? arr->buffers[1] : (const uint8_t *)"";
        break;
    case A_OFF32:
    case A_OFF64: {
        int64_t prev, cur;
        const int wide = a->kind == A_OFF64;
        if (arr->buffers[1] == NULL)
            return bad_array(f, "the offsets buffer is NULL");
        a->offsets = arr->buffers[1];
#define OFF_AT(j) (wide ? i64_at(a->offsets, (j)) : (int64_t)((const int32_t *)a->offsets)[(j)])
        prev = OFF_AT(a->offset);
        if (prev < 0)
            return bad_array(f, "offsets start negative (%lld)", (long long)prev);
        for (i = 0; i < length; i++, prev = cur) {
            cur = OFF_AT(a->offset + i + 1);
            if (cur < prev)
                return bad_array(f, "offsets decrease at element %lld (%lld then %lld)", (long long)i,
                                 (long long)prev, (long long)cur);
        }
        if (arr->buffers[2] == NULL && prev > OFF_AT(a->offset))
            return bad_array(f, "the data buffer is NULL");
#undef OFF_AT
        a->data = arr->buffers[2] != NULL ? arr->buffers[2] : (const uint8_t *)"";
        break;
    }
    default: { /* A_VIEW: validity, views, data buffers..., variadic buffer sizes */
        const void *sizes;
        if (arr->buffers[1] == NULL)
            return bad_array(f, "the views buffer is NULL");
        a->views = arr->buffers[1];
        a->bufs = (const uint8_t *const *)arr->buffers + 2;
        a->nbufs = arr->n_buffers - 3;
        sizes = arr->buffers[arr->n_buffers - 1];
        if (a->nbufs > 0 && sizes == NULL)
            return bad_array(f, "the variadic buffer sizes buffer is NULL");
        for (i = 0; i < length; i++) {
            const uint8_t *v = a->views + 16 * (a->offset + i);
            int32_t len, bi, off;
            int64_t size;
            if (!is_valid(a, a->offset + i))
                continue;
            memcpy(&len, v, 4);
            if (len < 0)
                return bad_array(f, "view %lld has a negative length (%ld)", (long long)i, (long)len);
            if (len <= 12)
                continue;
            memcpy(&bi, v + 8, 4);
            memcpy(&off, v + 12, 4);
            if (bi < 0 || bi >= a->nbufs)
                return bad_array(f, "view %lld names data buffer %ld, but the array has %lld data buffers",
                                 (long long)i, (long)bi, (long long)a->nbufs);
            size = i64_at(sizes, bi);
            if (off < 0 || (int64_t)off + len > size)
                return bad_array(f, "view %lld reads bytes [%ld, %lld) of data buffer %ld, which has %lld bytes",
                                 (long long)i, (long)off, (long long)off + len, (long)bi, (long long)size);
            if (a->bufs[bi] == NULL)
                return bad_array(f, "data buffer %ld is NULL", (long)bi);
        }
        break;
    }
    }
    return 0;
}

/* ---- the Column type ---------------------------------------------------------------------- */

/* A producer's release callback may run Python (a ctypes or nanoarrow producer): it must not
 * run with an exception set (that becomes SystemError, and the callback may not run at all),
 * so the pending exception, if any, is kept aside while it runs and put back after. */
#if PY_VERSION_HEX >= 0x030C0000
#define KEEP_ERROR_BEGIN { PyObject *kept_error_ = PyErr_GetRaisedException();
#define KEEP_ERROR_END PyErr_SetRaisedException(kept_error_); }
#else
#define KEEP_ERROR_BEGIN { PyObject *kept_t_, *kept_v_, *kept_tb_; PyErr_Fetch(&kept_t_, &kept_v_, &kept_tb_);
#define KEEP_ERROR_END PyErr_Restore(kept_t_, kept_v_, kept_tb_); }
#endif

static void Column_dealloc(ColumnObject *self)
{
    if (self->base != self) {
        Py_XDECREF(self->base);
    } else {
        Py_ssize_t i;
        KEEP_ERROR_BEGIN
        for (i = 0; i < self->narrays; i++)
            if (self->arrays[i].release != NULL) {
                self->arrays[i].release(&self->arrays[i]);
                self->arrays[i].release = NULL;   /* released exactly once */
            }
        if (self->schema.release != NULL) {
            self->schema.release(&self->schema);
            self->schema.release = NULL;
        }
        KEEP_ERROR_END
        PyMem_Free(self->arrays);
        PyMem_Free(self->chunks);
        PyMem_Free(self->starts);
        if (self->have_buf)
            PyBuffer_Release(&self->buf);
    }
    {
        PyTypeObject *tp = Py_TYPE(self);
        PyObject_Free(self);
        Py_DECREF(tp);   /* instances of a heap type own a reference to it */
    }
}

static ColumnObject *column_new(void)
{
    ColumnObject *c = PyObject_New(ColumnObject, Column_Type);
    if (c == NULL)
        return NULL;
    c->base = c;
    c->start = c->len = 0;
    memset(&c->schema, 0, sizeof c->schema);
    c->arrays = NULL;
    c->narrays = 0;
    c->chunks = NULL;
    c->starts = NULL;
    c->nchunks = 0;
    c->have_buf = 0;
    return c;
}

static Py_ssize_t Column_length(ColumnObject *self)
{
    return self->len;
}

static PyObject *Column_subscript(ColumnObject *self, PyObject *item)
{
    Py_ssize_t start, stop, step, n;
    ColumnObject *c;
    if (!PySlice_Check(item)) {
        PyErr_Format(PyExc_TypeError, "a Column takes only slices, got %.200s", Py_TYPE(item)->tp_name);
        return NULL;
    }
    if (PySlice_Unpack(item, &start, &stop, &step) < 0)
        return NULL;
    n = PySlice_AdjustIndices(self->len, &start, &stop, step);
    if (step != 1) {
        PyErr_SetString(PyExc_ValueError, "a Column slice must have step 1");
        return NULL;
    }
    c = PyObject_New(ColumnObject, Column_Type);
    if (c == NULL)
        return NULL;
    Py_INCREF(self->base);
    c->base = self->base;
    c->start = self->start + start;
    c->len = n;
    c->arrays = NULL;
    c->chunks = NULL;
    c->starts = NULL;
    c->have_buf = 0;
    return (PyObject *)c;
}

static PyObject *Column_repr(ColumnObject *self)
{
    return PyUnicode_FromFormat("<mmapbloom._kernels.Column of %zd keys>", self->len);
}

PyDoc_STRVAR(Column_doc,
"A batch of keys read in place from an Arrow column or a fixed-width buffer (see arrow_column,\n"
"fixed_column).  len() and slices with step 1; the batch kernels take it as their keys.");

static PyType_Slot Column_slots[] = {
    {Py_tp_dealloc, (void *)Column_dealloc},
    {Py_tp_repr, (void *)Column_repr},
    {Py_sq_length, (void *)Column_length},
    {Py_mp_length, (void *)Column_length},
    {Py_mp_subscript, (void *)Column_subscript},
    {Py_tp_doc, (void *)Column_doc},
    {0, NULL},
};

static PyType_Spec Column_spec = {
    "mmapbloom._kernels.Column",
    sizeof(ColumnObject),
    0,
    Py_TPFLAGS_DEFAULT,
    Column_slots,
};

/* Decode every imported array into chunks and cumulative starts. */
static int column_index(ColumnObject *c)
{
    const struct ArrowSchema *s = &c->schema;
    int64_t total = 0;
    Py_ssize_t i;
    int record = s->format != NULL && strcmp(s->format, "+s") == 0;
    if (record && s->n_children != 1) {
        PyErr_Format(PyExc_TypeError, "an Arrow key batch must have one column, got %lld columns",
                     (long long)s->n_children);
        return -1;
    }
    c->chunks = PyMem_Calloc((size_t)(2 * c->narrays + 1), sizeof *c->chunks);
    c->starts = PyMem_Calloc((size_t)(c->narrays + 1), sizeof *c->starts);
    if (c->chunks == NULL || c->starts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (record) {
        if (s->children == NULL)
            return bad_array("+s", "struct schema has 1 child, but its children pointer is NULL");
        if (s->children[0] == NULL)
            return bad_array("+s", "struct schema has 1 child, but child 0 is NULL");
    }
    for (i = 0; i < c->narrays; i++) {
        const struct ArrowArray *arr = &c->arrays[i];
        if (record) {   /* the checks and messages of arrowc._record_column */
            const struct ArrowArray *child;
            if (arr->length < 0 || arr->offset < 0)
                return bad_array("+s", "negative length or offset (length %lld, offset %lld)", (long long)arr->length,
                                 (long long)arr->offset);
            if (arr->n_buffers != 1)
                return bad_array("+s", "expected 1 buffers, got %lld", (long long)arr->n_buffers);
            if (arr->buffers == NULL)
                return bad_array("+s", "the buffers pointer is NULL");
            if (arr->n_children != 1)
                return bad_array("+s", "expected 1 child array, got %lld", (long long)arr->n_children);
            if (arr->children == NULL || arr->children[0] == NULL)
                return bad_array("+s", "record batch without its column (a NULL child pointer)");
            if (arr->null_count != 0 && arr->buffers[0] != NULL)
                return bad_array("+s", "a record batch with null rows");
            child = arr->children[0];
            if (child->length < arr->offset + arr->length)
                return bad_array("+s", "its column has %lld elements, expected at least %lld (the batch's offset %lld + "
                                 "length %lld)", (long long)child->length, (long long)(arr->offset + arr->length),
                                 (long long)arr->offset, (long long)arr->length);
            if (decode(s->children[0], child, arr->offset, arr->length, &c->chunks[2 * i], &c->chunks[2 * i + 1], 0) < 0)
                return -1;
        } else if (decode(s, arr, 0, arr->length < 0 ? 0 : arr->length, &c->chunks[2 * i], &c->chunks[2 * i + 1], 0) <
                   0) {
            return -1;
        }
        c->starts[i] = total;
        total += c->chunks[2 * i].length;
    }
    c->starts[c->narrays] = total;
    c->nchunks = c->narrays;
    if (total > PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "Arrow column too long");
        return -1;
    }
    c->len = (Py_ssize_t)total;
    return 0;
}

static void *capsule_move(PyObject *cap, const char *name, void *dst, size_t size)
{
    void *src = PyCapsule_GetPointer(cap, name);
    if (src == NULL)
        return NULL;
    memcpy(dst, src, size);
    /* every Arrow struct starts ... release is at a different place in each: the caller
     * clears it through the typed pointer returned */
    return src;
}

/* Import the whole stream (every chunk) into c. */
static int import_stream(ColumnObject *c, PyObject *cap)
{
    struct ArrowArrayStream st, *src;
    Py_ssize_t cap_n = 0;
    int rc = -1;
    src = capsule_move(cap, "arrow_array_stream", &st, sizeof st);
    if (src == NULL)
        return -1;
    src->release = NULL;   /* moved */
    if (st.release == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Arrow stream was already consumed");
        return -1;
    }
    if (st.get_schema(&st, &c->schema) != 0) {
        const char *e = st.get_last_error(&st);
        PyErr_Format(PyExc_ValueError, "Arrow stream get_schema failed: %s", e ? e : "(no message)");
        goto done;
    }
    for (;;) {
        struct ArrowArray a;
        int err;
        memset(&a, 0, sizeof a);
        Py_BEGIN_ALLOW_THREADS   /* a producer (duckdb) may compute the batch now */
        err = st.get_next(&st, &a);
        Py_END_ALLOW_THREADS
        if (err != 0) {
            const char *e = st.get_last_error(&st);
            PyErr_Format(PyExc_ValueError, "Arrow stream get_next failed: %s", e ? e : "(no message)");
            goto done;
        }
        if (a.release == NULL)
            break;
        if (c->narrays == cap_n) {
            struct ArrowArray *grown;
            cap_n = cap_n ? 2 * cap_n : 8;
            grown = PyMem_Realloc(c->arrays, (size_t)cap_n * sizeof *grown);
            if (grown == NULL) {
                a.release(&a);   /* no exception is set yet */
                PyErr_NoMemory();
                goto done;
            }
            c->arrays = grown;
        }
        c->arrays[c->narrays++] = a;
    }
    rc = 0;
done:
    KEEP_ERROR_BEGIN
    st.release(&st);
    KEEP_ERROR_END
    return rc;
}

static int import_array(ColumnObject *c, PyObject *pair)
{
    struct ArrowSchema *ssrc;
    struct ArrowArray *asrc;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "__arrow_c_array__ must return (schema capsule, array capsule)");
        return -1;
    }
    c->arrays = PyMem_Calloc(1, sizeof *c->arrays);
    if (c->arrays == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if ((ssrc = capsule_move(PyTuple_GET_ITEM(pair, 0), "arrow_schema", &c->schema, sizeof c->schema)) == NULL)
        return -1;
    ssrc->release = NULL;
    if ((asrc = capsule_move(PyTuple_GET_ITEM(pair, 1), "arrow_array", &c->arrays[0], sizeof c->arrays[0])) == NULL)
        return -1;
    asrc->release = NULL;
    c->narrays = 1;
    if (c->schema.release == NULL || c->arrays[0].release == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Arrow array was already consumed");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(arrow_column_doc,
"arrow_column($module, obj)\n--\n\n"
"Returns Column.  The keys of obj, an object with __arrow_c_stream__ (preferred) or __arrow_c_array__,\n"
"imported through the Arrow C Data Interface (every chunk of a stream is imported now).  Types in\n"
"_columns.h; TypeError names another type or the column count of a multi-column batch.");

static PyObject *k_arrow_column(PyObject *module, PyObject *obj)
{
    ColumnObject *c;
    PyObject *got;
    int rc;
    (void)module;
    if ((c = column_new()) == NULL)
        return NULL;
    if (PyObject_HasAttrString(obj, "__arrow_c_stream__")) {
        got = PyObject_CallMethod(obj, "__arrow_c_stream__", NULL);
        rc = got == NULL ? -1 : import_stream(c, got);
    } else if (PyObject_HasAttrString(obj, "__arrow_c_array__")) {
        got = PyObject_CallMethod(obj, "__arrow_c_array__", NULL);
        rc = got == NULL ? -1 : import_array(c, got);
    } else {
        PyErr_Format(PyExc_TypeError, "arrow_column needs an object with __arrow_c_stream__ or __arrow_c_array__, "
                     "got %.200s", Py_TYPE(obj)->tp_name);
        got = NULL;
        rc = -1;
    }
    Py_XDECREF(got);
    if (rc < 0 || column_index(c) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

PyDoc_STRVAR(fixed_column_doc,
"fixed_column($module, buf, width, strip_nul)\n--\n\n"
"Returns Column.  Keys of width bytes each, back to back in buf (a C-contiguous buffer whose\n"
"length is a multiple of width; width >= 1); with strip_nul true, each key's trailing NUL bytes are\n"
"dropped (numpy 'S' arrays).  The buffer stays exported (pinned) while the Column lives.");

static PyObject *k_fixed_column(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ColumnObject *c;
    Py_ssize_t width;
    int strip;
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "fixed_column() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    width = PyLong_AsSsize_t(args[1]);
    if (width == -1 && PyErr_Occurred())
        return NULL;
    if (width < 1 || width > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "width must be in [1, 2**31), got %zd", width);
        return NULL;
    }
    if ((strip = PyObject_IsTrue(args[2])) < 0 || (c = column_new()) == NULL)
        return NULL;
    if (PyObject_GetBuffer(args[0], &c->buf, PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    c->have_buf = 1;
    if (c->buf.len % width != 0) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd bytes is not a whole number of %zd-byte keys", c->buf.len,
                     width);
        Py_DECREF(c);
        return NULL;
    }
    c->chunks = PyMem_Calloc(2, sizeof *c->chunks);
    c->starts = PyMem_Calloc(2, sizeof *c->starts);
    if (c->chunks == NULL || c->starts == NULL) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    c->chunks[0].kind = A_FIXED;
    c->chunks[0].width = (int)width;
    c->chunks[0].strip_nul = strip;
    c->chunks[0].data = c->buf.buf;
    c->chunks[0].length = c->buf.len / width;
    c->starts[1] = c->chunks[0].length;
    c->nchunks = 1;
    c->len = c->buf.len / width;
    return (PyObject *)c;
}

static PyMethodDef column_functions[] = {
    {"arrow_column", (PyCFunction)k_arrow_column, METH_O, arrow_column_doc},
    {"fixed_column", (PyCFunction)(void (*)(void))k_fixed_column, METH_FASTCALL, fixed_column_doc},
    {NULL, NULL, 0, NULL},
};

int mb_columns_init(PyObject *module)
{
    if (Column_Type == NULL && (Column_Type = (PyTypeObject *)PyType_FromSpec(&Column_spec)) == NULL)
        return -1;
    Py_INCREF(Column_Type);
    if (PyModule_AddObject(module, "Column", (PyObject *)Column_Type) < 0) {
        Py_DECREF(Column_Type);
        return -1;
    }
    return PyModule_AddFunctions(module, column_functions);
}
