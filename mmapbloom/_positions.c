/* mmapbloom/_positions.c: the hash strategies (definitions in _positions.h), the checked
 * geometry of a filter, and the golden-value functions hash128() and positions(). */
#include "_positions.h"

#include <string.h>

#include "_pykeys.h"

/* The high 64 bits of the 128-bit product a * b. */
static inline uint64_t mulhi64(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

void mb_positions_n(const geom *g, const uint64_t h[2], uint64_t *pos, unsigned first, unsigned count)
{
    const uint64_t m = g->m;
    const unsigned k = count;
    unsigned i;

    switch (g->strategy) {
    case S_M3KM: {
        uint64_t p = h[0] % m, step, gap;
        if (m == 1) {
            memset(pos, 0, k * sizeof *pos);
            return;
        }
        step = 1 + h[1] % (m - 1);   /* in [1, m - 1] */
        gap = m - step;               /* p + step >= m  <=>  p >= m - step: no overflow */
        for (i = 0; i < k; i++) {
            pos[i] = p;
            p = p >= gap ? p - gap : p + step;
        }
        return;
    }
    case S_M3MX:
    case S_M3M2: {
        const uint64_t b = g->strategy == S_M3M2 ? h[1] | 1 : h[1];
        for (i = first; i < k; i++)
            pos[i] = mulhi64(mmb_fmix64(h[0] + (uint64_t)i * b), m);
        return;
    }
    default: { /* S_M3BL, S_M3B2 */
        const uint64_t base = mulhi64(h[0], m / BLOCK_BITS) * BLOCK_BITS;
        uint64_t y = g->strategy == S_M3B2 ? h[1] | 1 : h[1];
        for (i = 0; i < k; i++) {
            y *= 0x9E3779B97F4A7C15ULL;
            pos[i] = base + (y >> 55);   /* top 9 bits: [0, 512) */
        }
        return;
    }
    }
}


/* A Python int in [0, 2**64) -> *out.  TypeError for a non-int, ValueError out of range. */
static int arg_u64(PyObject *o, const char *name, uint64_t *out)
{
    unsigned long long v;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.200s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**64), got %R", name, o);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* strategy id, m, k -> *g, with every range check. */
int mb_parse_geom(PyObject *sid, PyObject *m, PyObject *k, geom *g)
{
    uint64_t s, kk;
    if (arg_u64(sid, "strategy_id", &s) < 0 || arg_u64(m, "m", &g->m) < 0 || arg_u64(k, "k", &kk) < 0)
        return -1;
    if (s < S_M3KM || s > S_LAST) {
        PyErr_Format(PyExc_ValueError,
                     "unknown strategy id %llu (expected 1 = M3KM, 2 = M3MX, 3 = M3BL, 4 = M3M2 or 5 = M3B2)",
                     (unsigned long long)s);
        return -1;
    }
    if (g->m < 1) {
        PyErr_SetString(PyExc_ValueError, "m must be at least 1, got 0");
        return -1;
    }
    if (kk < 1 || kk > MAX_K) {
        PyErr_Format(PyExc_ValueError, "k must be in [1, %d], got %llu", MAX_K, (unsigned long long)kk);
        return -1;
    }
    if (STRATEGY_BLOCKED(s) && g->m % BLOCK_BITS != 0) {
        PyErr_Format(PyExc_ValueError, "%s needs m to be a positive multiple of %d, got %llu",
                     s == S_M3BL ? "M3BL" : "M3B2", BLOCK_BITS, (unsigned long long)g->m);
        return -1;
    }
    g->strategy = (int)s;
    g->k = (unsigned)kk;
    return 0;
}

const char mb_hash128_doc[] =
"hash128($module, key)\n--\n\n"
"Returns int.  MurmurHash3_x64_128 of key (seed 0) as an unsigned 128-bit int h1 | h2 << 64, equal to\n"
"mmh3.hash128(key, seed=0, x64arch=True, signed=False).  key: str (its UTF-8 bytes), bytes-like, or an\n"
"int (8 bytes little-endian of its value mod 2^64): the rule of mmapbloom.hashing.encode_key, which\n"
"is called for every key not resolved here (its TypeError / OverflowError messages),\n"
"UnicodeEncodeError for a str with lone surrogates.";

PyObject *mb_hash128(PyObject *module, PyObject *key)
{
    uint64_t h[2];
    PyObject *hi, *lo, *shift, *shifted, *result;
    (void)module;
    if (mb_hash_object(key, h) < 0)
        return NULL;
    hi = PyLong_FromUnsignedLongLong(h[1]);
    lo = PyLong_FromUnsignedLongLong(h[0]);
    shift = PyLong_FromLong(64);
    shifted = hi && shift ? PyNumber_Lshift(hi, shift) : NULL;
    result = shifted && lo ? PyNumber_Or(shifted, lo) : NULL;
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    return result;
}

const char mb_positions_doc[] =
"positions($module, strategy_id, key, m, k)\n--\n\n"
"Returns list[int].  The k positions in [0, m) of key under strategy 1 (M3KM), 2 (M3MX), 3 (M3BL),\n"
"4 (M3M2) or 5 (M3B2).  ValueError for an unknown strategy, m < 1, k outside [1, 4096], or a\n"
"blocked strategy (M3BL, M3B2) with\n"
"m % 512 != 0; key errors as hash128.";

PyObject *mb_positions_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    geom g;
    uint64_t h[2], small[SMALL_K], *pos = small;
    PyObject *list;
    unsigned i;
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "positions() takes exactly 4 arguments (%zd given)", nargs);
        return NULL;
    }
    if (mb_parse_geom(args[0], args[2], args[3], &g) < 0 ||
        mb_hash_object(args[1], h) < 0)
        return NULL;
    if (g.k > SMALL_K && (pos = PyMem_Malloc(g.k * sizeof *pos)) == NULL)
        return PyErr_NoMemory();
    mb_positions(&g, h, pos);
    list = PyList_New(g.k);
    for (i = 0; list && i < g.k; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(pos[i]);
        if (v == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, v);
    }
    if (pos != small)
        PyMem_Free(pos);
    return list;
}
