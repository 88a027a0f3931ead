/* mmapbloom/_scans.c: guarded scans of a mapping (interface in _scans.h). */
#include "_scans.h"

#include <stdint.h>
#include <string.h>

#include "_guard.h"

/* The filters' scans of a mapped cell array (statistics over blocks, union / intersection,
 * the counting sum, to_bloom, to_bytes, __eq__, check's reads, merge_into's writes) run
 * through these functions, each a guarded section (_guard.h) over its
 * buffers: a file truncated under the open handle during the scan makes the call answer
 * "faulted" (False / None) instead of killing the process; mmapbloom.scans then raises
 * LengthMismatchError.  numpy does its work on the private copies these make.  The guard's
 * range is the hull of the two buffers: inside the section this thread touches only them,
 * so a fault in the hull is theirs.  The GIL is released while the bytes move (the Py_buffer
 * exports keep both buffers alive: a mapping with an export cannot be unmapped). */

enum { SCAN_COPY = 0, SCAN_OR = 1, SCAN_AND = 2, SCAN_ADD8 = 3, SCAN_ADD4 = 4, SCAN_EQ = 5 };

/* One loop per op, byte-wise over restrict pointers (GCC -O3 vectorizes each); on x86 a
 * second AVX2 build of the four, chosen at run time (__builtin_cpu_supports). */
#define SCAN_LOOPS(sfx, attr)                                                                       \
    attr static void scan_or##sfx(uint8_t *restrict d, const uint8_t *restrict s, size_t n)          \
    {                                                                                               \
        for (size_t i = 0; i < n; i++)                                                              \
            d[i] |= s[i];                                                                           \
    }                                                                                               \
    attr static void scan_and##sfx(uint8_t *restrict d, const uint8_t *restrict s, size_t n)         \
    {                                                                                               \
        for (size_t i = 0; i < n; i++)                                                              \
            d[i] &= s[i];                                                                           \
    }                                                                                               \
    attr static void scan_add8##sfx(uint8_t *restrict d, const uint8_t *restrict s, size_t n)        \
    {                                                                                               \
        for (size_t i = 0; i < n; i++) {                                                            \
            unsigned v = (unsigned)d[i] + s[i];                                                     \
            d[i] = (uint8_t)(v > 255 ? 255 : v);                                                    \
        }                                                                                           \
    }                                                                                               \
    attr static void scan_add4##sfx(uint8_t *restrict d, const uint8_t *restrict s, size_t n)        \
    {   /* two saturating 4-bit counters per byte */                                                \
        for (size_t i = 0; i < n; i++) {                                                            \
            unsigned lo = (unsigned)(d[i] & 15) + (s[i] & 15), hi = (unsigned)(d[i] >> 4) + (s[i] >> 4); \
            d[i] = (uint8_t)((lo > 15 ? 15 : lo) | (hi > 15 ? 15 : hi) << 4);                        \
        }                                                                                           \
    }

SCAN_LOOPS(_plain, )
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
SCAN_LOOPS(_avx2, __attribute__((target("avx2"))))
#define SCAN_AVX2() __builtin_cpu_supports("avx2")
#else
#define SCAN_AVX2() 0
#define scan_or_avx2 scan_or_plain
#define scan_and_avx2 scan_and_plain
#define scan_add8_avx2 scan_add8_plain
#define scan_add4_avx2 scan_add4_plain
#endif

/* d op= s over n bytes; SCAN_EQ: compare only, 1 when equal (else 0) in *equal. */
static void scan_run(uint8_t *d, const uint8_t *s, size_t n, int op, int *equal)
{
    int avx2 = SCAN_AVX2();
    switch (op) {
    case SCAN_COPY: memcpy(d, s, n); break;
    case SCAN_OR: (avx2 ? scan_or_avx2 : scan_or_plain)(d, s, n); break;
    case SCAN_AND: (avx2 ? scan_and_avx2 : scan_and_plain)(d, s, n); break;
    case SCAN_ADD8: (avx2 ? scan_add8_avx2 : scan_add8_plain)(d, s, n); break;
    case SCAN_ADD4: (avx2 ? scan_add4_avx2 : scan_add4_plain)(d, s, n); break;
    default: *equal = memcmp(d, s, n) == 0; break;
    }
}

/* The guarded section: 0, or -1 when [lo, hi) faulted (no local lives across the jump). */
static int g_scan(uint8_t *d, const uint8_t *s, size_t n, int op, int *equal, const uint8_t *lo, const uint8_t *hi)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, lo, (size_t)(hi - lo))
    {
        return -1;
    }
    scan_run(d, s, n, op, equal);
    GUARD_END();
    return 0;
}

/* Guarded d[0:n] op= s[0:n] with the GIL released; the hull of both buffers is guarded. */
static int scan_guarded(const Py_buffer *dv, const Py_buffer *sv, uint8_t *d, const uint8_t *s, size_t n, int op,
                        int *equal)
{
    const uint8_t *a0 = dv->buf, *a1 = a0 + dv->len, *b0 = sv->buf, *b1 = b0 + sv->len;
    const uint8_t *lo = a0 < b0 ? a0 : b0, *hi = a1 > b1 ? a1 : b1;
    int rc;
    if (n == 0)
        return 0;
    Py_BEGIN_ALLOW_THREADS
    rc = g_scan(d, s, n, op, equal, lo, hi);
    Py_END_ALLOW_THREADS
    return rc;
}

static int scan_range(const Py_buffer *v, Py_ssize_t off, Py_ssize_t n, const char *what)
{
    if (off < 0 || n < 0 || off > v->len || n > v->len - off) {
        PyErr_Format(PyExc_ValueError, "%s range [%zd, %zd) is outside the buffer of %zd bytes", what, off,
                     off + n, v->len);
        return -1;
    }
    return 0;
}

const char mb_scan_doc[] =
"scan($module, dst, dst_offset, src, src_offset, count, op, /)\n--\n\n"
"Guarded ``dst[dst_offset:+count] op= src[src_offset:+count]``: op 0 copies, 1 ORs, 2 ANDs,\n"
"3 adds bytes saturating at 255, 4 adds two 4-bit counters per byte saturating at 15;\n"
"5 compares only (dst may be read-only).  Returns True, or False when a buffer faulted\n"
"(SIGBUS: a mapped file truncated under it; dst is then partly written); op 5: 1 when the\n"
"ranges are equal, 0 when not, None when a buffer faulted.  dst must be writable (ops 0-4);\n"
"both C-contiguous and not overlapping.  Raises ValueError for a range outside a buffer or an\n"
"unknown op.  Releases the GIL.";

/* The loops take restrict pointers: a writing op's ranges must not overlap.  -1 with
 * ValueError when they do. */
static int scan_overlap(const uint8_t *d, const uint8_t *s, Py_ssize_t n, int op)
{
    if (op != SCAN_EQ && n > 0 && d < s + n && s < d + n) {
        PyErr_Format(PyExc_ValueError, "scan: the destination and source ranges overlap (%zd bytes each)", n);
        return -1;
    }
    return 0;
}

PyObject *mb_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer dv, sv;
    Py_ssize_t doff, soff, n;
    long op;
    int rc, equal = 1;
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan() takes 6 arguments");
        return NULL;
    }
    if ((doff = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if ((soff = PyLong_AsSsize_t(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    if ((n = PyLong_AsSsize_t(args[4])) == -1 && PyErr_Occurred())
        return NULL;
    if ((op = PyLong_AsLong(args[5])) == -1 && PyErr_Occurred())
        return NULL;
    if (op < SCAN_COPY || op > SCAN_EQ) {
        PyErr_Format(PyExc_ValueError, "scan op must be 0 to 5, got %ld", op);
        return NULL;
    }
    if (mb_guard_install() < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &dv, op == SCAN_EQ ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &sv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&dv);
        return NULL;
    }
    rc = scan_range(&dv, doff, n, "destination") < 0 || scan_range(&sv, soff, n, "source") < 0 ? -2
         : scan_overlap((const uint8_t *)dv.buf + doff, (const uint8_t *)sv.buf + soff, n, (int)op) < 0 ? -2
         : scan_guarded(&dv, &sv, (uint8_t *)dv.buf + doff, (const uint8_t *)sv.buf + soff, (size_t)n, (int)op,
                        &equal);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&dv);
    if (rc == -2)
        return NULL;
    if (op == SCAN_EQ) {
        if (rc < 0)
            Py_RETURN_NONE;
        return PyLong_FromLong(equal);
    }
    return PyBool_FromLong(rc == 0);
}

const char mb_scan_bytes_doc[] =
"scan_bytes($module, src, offset, count, /)\n--\n\n"
"A new ``bytes`` holding ``src[offset:offset + count]``, copied in a guarded section; None\n"
"when the buffer faulted (SIGBUS: a mapped file truncated under it).  Raises ValueError for\n"
"a range outside the buffer, MemoryError.  Releases the GIL while copying.";

PyObject *mb_scan_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer sv;
    Py_ssize_t off, n;
    PyObject *out = NULL;
    int rc;
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan_bytes() takes 3 arguments");
        return NULL;
    }
    if ((off = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if ((n = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())
        return NULL;
    if (mb_guard_install() < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &sv, PyBUF_SIMPLE) < 0)
        return NULL;
    if (scan_range(&sv, off, n, "source") < 0)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        goto done;
    rc = scan_guarded(&sv, &sv, (uint8_t *)PyBytes_AS_STRING(out), (const uint8_t *)sv.buf + off, (size_t)n,
                      SCAN_COPY, NULL);
    if (rc < 0) {
        Py_DECREF(out);
        out = Py_None;
        Py_INCREF(out);
    }
done:
    PyBuffer_Release(&sv);
    return out;
}

