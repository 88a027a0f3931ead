/* mmapbloom/_positions.c: the checked geometry of a filter and the golden-value functions
 * hash128() and positions() (the strategies themselves: _positions.h). */
#include "_positions.h"

#include <string.h>

#include "_pykeys.h"

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
"KeyEncodingError for a str with lone surrogates.";

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
