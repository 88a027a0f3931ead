/* mmapbloom._kernels: the compiled hot loops of mmapbloom.
 *
 * Layout of this file:
 *   1. plain C (no Python): the three hash strategies, the Bloom bit loops, the counting
 *      filter's 4-/8-bit counter loops, popcount;
 *   2. one thin CPython binding layer (METH_O / METH_FASTCALL) that validates every
 *      argument and converts it for the plain C part.
 *
 * The pure-Python path (mmapbloom/hashing.py, filter.py, counting.py) is the reference:
 * every function here must give exactly its answers and leave exactly its bytes.
 *
 * Strategies (ids are frozen: 1 = M3KM, 2 = M3MX, 3 = M3BL, 4 = M3M2, 5 = M3B2).  With
 * (h1, h2) = MurmurHash3_x64_128(key, seed 0) and all arithmetic in unsigned 64 bits:
 *   M3KM  Kirsch-Mitzenmacher double hashing (Kirsch & Mitzenmacher 2006, "Less hashing,
 *         same performance"): pos_i = (h1 mod m + i * (1 + h2 mod (m - 1))) mod m, exact;
 *         every position is 0 when m == 1.
 *   M3MX  pos_i = mulhi64(fmix64(h1 + i * h2), m): a remixed double hash reduced to [0, m)
 *         by Lemire's multiply-shift ("Fast random integer generation in an interval",
 *         ACM TOMACS 2019), which needs no division.
 *   M3BL  blocked Bloom filter (Putze, Sanders & Singler 2007, "Cache-, hash- and
 *         space-efficient Bloom filters"): one 512-bit block chosen by
 *         mulhi64(h1, m / 512), then k bits inside it from the top 9 bits of successive
 *         Weyl/Fibonacci products y_i = h2 * 0x9E3779B97F4A7C15^i.  m % 512 == 0.
 *   M3M2  M3MX with an odd step h2 | 1 (the default): h1 + i * (h2 | 1) takes k distinct
 *         values, so no key's probes collapse (under M3MX, h2 == 0, e.g. the empty key,
 *         puts all k probes on one bit).
 *   M3B2  M3BL with an odd multiplier seed y_0 = h2 | 1 (never 0, so the k bits of a key
 *         never all fall on bit 0 of its block).
 *
 * Thread safety: the functions keep no global state.  Writes to a body are plain byte
 * stores; the Python layer serialises writers (thread lock + flock).  contains_many and
 * count_contains_many release the GIL while they hash and probe; the body, the output
 * array and every key are pinned (buffer exports and references) for that time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/file.h>
#endif

#include "_columns.h"
#include "_murmur3.h"

/* ===================================================================================== */
/* 1. Plain C                                                                            */
/* ===================================================================================== */

enum { S_M3KM = 1, S_M3MX = 2, S_M3BL = 3, S_M3M2 = 4, S_M3B2 = 5, S_LAST = S_M3B2 };

/* Blocked strategies: all k positions of a key in one BLOCK_BITS block (m % BLOCK_BITS == 0). */
#define STRATEGY_BLOCKED(s) ((s) == S_M3BL || (s) == S_M3B2)

#define MAX_K 4096         /* largest accepted number of hash functions */
#define BLOCK_BITS 512     /* M3BL block size in bits (64 bytes: one cache line if the body is aligned) */
/* Batches run as a pipeline so that a probe rarely waits for memory (the body of a large
 * filter is far bigger than the caches).  Adds: the positions of key i + AHEAD are computed
 * and all their lines prefetched before key i is written.  Queries, in three stages:
 *   i + AHEAD      hash, positions, prefetch the first QUERY_PREFETCH positions;
 *   i + AHEAD / 2  test those; a key that fails is known absent (most absent keys stop
 *                  here), otherwise prefetch its other positions;
 *   i              test the remaining positions.
 * So an absent key costs about QUERY_PREFETCH lines and a present key gets all its lines
 * fetched ahead.  Both constants are -D overridable (for measurements). */
#ifndef AHEAD
#define AHEAD 16
#endif
#ifndef QUERY_PREFETCH
#define QUERY_PREFETCH 2
#endif
#if AHEAD < 2 || QUERY_PREFETCH < 1
#error "AHEAD must be at least 2 and QUERY_PREFETCH at least 1"
#endif
#define GIL_MIN_KEYS 256   /* batch queries release the GIL from this many keys on */

/* MMB_NO_PREFETCH (a -D flag) turns prefetching off, for measurements. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MMB_NO_PREFETCH)
#define PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH_R(p) ((void)(p))
#define PREFETCH_W(p) ((void)(p))
#endif

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

/* What a kernel needs to know about the filter. */
typedef struct {
    int strategy;   /* S_M3KM .. S_LAST */
    uint64_t m;     /* number of bits / cells, >= 1 (a multiple of 512 when STRATEGY_BLOCKED) */
    unsigned k;     /* number of positions per key, 1..MAX_K */
} geom;

/* A key's bytes (UTF-8 of a str, or the raw bytes of a bytes-like object). */
typedef struct {
    const uint8_t *p;
    size_t n;
} keyref;

static inline void hash_key(const keyref *key, uint64_t h[2])
{
    mmb_murmur3_x64_128(key->p, key->n, 0, h);
}

/* The k positions of a key whose MurmurHash3 halves are h[0], h[1] (definitions at the
 * top of the file).  pos has room for g->k values. */
static void positions_of(const geom *g, const uint64_t h[2], uint64_t *pos)
{
    const uint64_t m = g->m;
    const unsigned k = g->k;
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
        for (i = 0; i < k; i++)
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

/* ---- Bloom bodies: bit i is bit (i & 7) of byte i >> 3 ------------------------------ */

/* Set the bits; return 1 if some was 0 before.  A byte is written only when it changes,
 * so adding a present key never dirties a page of the mapping. */
static int bloom_set(uint8_t *body, const uint64_t *pos, unsigned k)
{
    int fresh = 0;
    unsigned i;
    for (i = 0; i < k; i++) {
        uint8_t *byte = body + (pos[i] >> 3);
        const uint8_t mask = (uint8_t)(1u << (pos[i] & 7));
        if (!(*byte & mask)) {
            *byte |= mask;
            fresh = 1;
        }
    }
    return fresh;
}

/* 1 if every bit is set; stops at the first 0 bit. */
static int bloom_test(const uint8_t *body, const uint64_t *pos, unsigned k)
{
    unsigned i;
    for (i = 0; i < k; i++)
        if (!(body[pos[i] >> 3] & (1u << (pos[i] & 7))))
            return 0;
    return 1;
}

/* Number of set bits in n bytes: 8-byte words through memcpy (any alignment), four
 * accumulators.  POPCOUNT_LOOP is instantiated twice on x86 below: once compiled for the
 * POPCNT instruction (chosen at run time when the CPU has it), once for baseline x86-64,
 * where __builtin_popcountll is a bit-twiddling sequence. */
#if defined(__GNUC__) || defined(__clang__)
#define POPCOUNT64(w) ((uint64_t)__builtin_popcountll(w))
#else
static inline uint64_t POPCOUNT64(uint64_t w)
{
    w = w - ((w >> 1) & 0x5555555555555555ULL);
    w = (w & 0x3333333333333333ULL) + ((w >> 2) & 0x3333333333333333ULL);
    w = (w + (w >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (w * 0x0101010101010101ULL) >> 56;
}
#endif

#define POPCOUNT_LOOP(p, n, total)                                                        \
    do {                                                                                  \
        uint64_t w0, w1, w2, w3, t0 = 0, t1 = 0, t2 = 0, t3 = 0;                          \
        size_t i = 0;                                                                     \
        for (; i + 32 <= (n); i += 32) {                                                  \
            memcpy(&w0, (p) + i, 8);                                                      \
            memcpy(&w1, (p) + i + 8, 8);                                                  \
            memcpy(&w2, (p) + i + 16, 8);                                                 \
            memcpy(&w3, (p) + i + 24, 8);                                                 \
            t0 += POPCOUNT64(w0);                                                         \
            t1 += POPCOUNT64(w1);                                                         \
            t2 += POPCOUNT64(w2);                                                         \
            t3 += POPCOUNT64(w3);                                                         \
        }                                                                                 \
        for (; i < (n); i++)                                                              \
            t0 += POPCOUNT64((uint64_t)(p)[i]);                                           \
        (total) = t0 + t1 + t2 + t3;                                                      \
    } while (0)

static uint64_t popcount_plain(const uint8_t *p, size_t n)
{
    uint64_t total;
    POPCOUNT_LOOP(p, n, total);
    return total;
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
__attribute__((target("popcnt"))) static uint64_t popcount_hw(const uint8_t *p, size_t n)
{
    uint64_t total;
    POPCOUNT_LOOP(p, n, total);
    return total;
}

static uint64_t popcount_bytes(const uint8_t *p, size_t n)
{
    return __builtin_cpu_supports("popcnt") ? popcount_hw(p, n) : popcount_plain(p, n);
}
#else
static uint64_t popcount_bytes(const uint8_t *p, size_t n)
{
    return popcount_plain(p, n);
}
#endif

/* ---- counting bodies: width 8 -> cell i is byte i; width 4 -> cell i is the low nibble
 * ---- of byte i >> 1 for even i, the high nibble for odd i ---------------------------- */

static inline unsigned cell_get(const uint8_t *body, int width, uint64_t c)
{
    if (width == 8)
        return body[c];
    return (body[c >> 1] >> ((c & 1) << 2)) & 0x0Fu;
}

static inline void cell_put(uint8_t *body, int width, uint64_t c, unsigned v)
{
    if (width == 8) {
        body[c] = (uint8_t)v;
    } else {
        const unsigned shift = (unsigned)(c & 1) << 2;
        uint8_t *b = body + (c >> 1);
        *b = (uint8_t)((*b & (0xF0u >> shift)) | (v << shift));
    }
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sort pos[0..k) and drop repeats in place; return the number of distinct values. */
static unsigned distinct(uint64_t *pos, unsigned k)
{
    unsigned i, j, n;
    if (k <= 32) {   /* insertion sort: few comparisons for the usual k <= 20 */
        for (i = 1; i < k; i++) {
            const uint64_t v = pos[i];
            for (j = i; j > 0 && pos[j - 1] > v; j--)
                pos[j] = pos[j - 1];
            pos[j] = v;
        }
    } else {
        qsort(pos, k, sizeof *pos, cmp_u64);
    }
    for (i = 1, n = 1; i < k; i++)
        if (pos[i] != pos[n - 1])
            pos[n++] = pos[i];
    return k ? n : 0;
}

/* Increment the DISTINCT cells cells[0..n) (saturated cells stay at max).  *fresh |= some
 * cell was 0 before; *sat |= some cell reached max now. */
static void count_inc(uint8_t *body, int width, const uint64_t *cells, unsigned n, int *fresh, int *sat)
{
    const unsigned top = width == 8 ? 255u : 15u;
    unsigned i;
    for (i = 0; i < n; i++) {
        const unsigned v = cell_get(body, width, cells[i]);
        if (v == 0)
            *fresh = 1;
        if (v < top) {
            cell_put(body, width, cells[i], v + 1);
            if (v + 1 == top)
                *sat = 1;
        }
    }
}

/* Decrement the DISTINCT cells: -1 (nothing changed) if one is 0; else 1 if a cell went to
 * 0, 0 otherwise.  Saturated cells are never decremented. */
static int count_dec(uint8_t *body, int width, const uint64_t *cells, unsigned n)
{
    const unsigned top = width == 8 ? 255u : 15u;
    int emptied = 0;
    unsigned i;
    for (i = 0; i < n; i++)
        if (cell_get(body, width, cells[i]) == 0)
            return -1;
    for (i = 0; i < n; i++) {
        const unsigned v = cell_get(body, width, cells[i]);
        if (v < top) {
            cell_put(body, width, cells[i], v - 1);
            if (v == 1)
                emptied = 1;
        }
    }
    return emptied;
}

/* Minimum of the cells (repeats do not matter); stops at 0. */
static unsigned count_min_of(const uint8_t *body, int width, const uint64_t *cells, unsigned k)
{
    unsigned i, low = 255;
    for (i = 0; i < k && low; i++) {
        const unsigned v = cell_get(body, width, cells[i]);
        if (v < low)
            low = v;
    }
    return low;
}

/* ---- batches -------------------------------------------------------------------------- */

/* Byte of a position: bit >> 3 (Bloom, width 1), cell (width 8), cell >> 1 (width 4). */
static inline uint64_t byte_of(int width, uint64_t p)
{
    return width == 1 ? p >> 3 : width == 8 ? p : p >> 1;
}

/* Compute a key's positions into row and prefetch the bytes of row[0..depth) (for
 * writing if `write`). */
static void stage_key(const uint8_t *body, int width, const geom *g, const keyref *key, uint64_t *row,
                      unsigned depth, int write)
{
    uint64_t h[2];
    unsigned i;
    hash_key(key, h);
    positions_of(g, h, row);
    if (depth > g->k)
        depth = g->k;
    for (i = 0; i < depth; i++) {
        if (write)
            PREFETCH_W(body + byte_of(width, row[i]));
        else
            PREFETCH_R(body + byte_of(width, row[i]));
    }
}

/* Is position p set (width 1) / cell p non-zero (width 4, 8)? */
static inline int probe_one(const uint8_t *body, int width, uint64_t p)
{
    return width == 1 ? (body[p >> 3] >> (p & 7)) & 1 : cell_get(body, width, p) != 0;
}

/* Test row[from..to); 0 at the first clear position. */
static inline int probe_range(const uint8_t *body, int width, const uint64_t *row, unsigned from, unsigned to)
{
    for (; from < to; from++)
        if (!probe_one(body, width, row[from]))
            return 0;
    return 1;
}

/* Middle query stage: test the head of the row; if it passes, prefetch the rest. */
static int query_head(const uint8_t *body, int width, const uint64_t *row, unsigned k)
{
    const unsigned head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    unsigned i;
    if (!probe_range(body, width, row, 0, head))
        return 0;
    for (i = head; i < k; i++)
        PREFETCH_R(body + byte_of(width, row[i]));
    return 1;
}

/* The query loop run without the GIL: out[i] = key i may be present.  width 1 = Bloom
 * body, else a counting body of that width (present = every cell non-zero).  ring has
 * room for AHEAD * k positions (row i % AHEAD holds key i's positions). */
static void query_run(const uint8_t *body, int width, const geom *g, const keyref *keys, size_t n,
                      uint64_t *ring, uint8_t *out)
{
    const unsigned k = g->k, head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    const size_t half = AHEAD / 2;
    uint8_t maybe[AHEAD];   /* head test passed, by ring row */
    size_t i;
    for (i = 0; i < n && i < AHEAD; i++)
        stage_key(body, width, g, &keys[i], ring + i * k, QUERY_PREFETCH, 0);
    for (i = 0; i < n && i < half; i++)
        maybe[i] = (uint8_t)query_head(body, width, ring + i * k, k);
    for (i = 0; i < n; i++) {
        const size_t slot = i % AHEAD;
        uint64_t *row = ring + slot * k;
        out[i] = (uint8_t)(maybe[slot] && probe_range(body, width, row, head, k));
        if (i + half < n) {
            const size_t s2 = (i + half) % AHEAD;
            maybe[s2] = (uint8_t)query_head(body, width, ring + s2 * k, k);
        }
        if (i + AHEAD < n)
            stage_key(body, width, g, &keys[i + AHEAD], row, QUERY_PREFETCH, 0);
    }
}

/* Sequential adds of keys[0..n) (Bloom for width 1, else counting), pipelined as
 * query_run: the positions of key i + AHEAD are computed and prefetched for writing before
 * key i is set.  out[i] = key i was new; returns the number of new keys; *sat |= some
 * counter saturated. */
static size_t add_run_refs(uint8_t *body, int width, const geom *g, const keyref *keys, size_t n, uint64_t *ring,
                           uint8_t *out, int *sat)
{
    const unsigned k = g->k;
    size_t i, total = 0;
    for (i = 0; i < n && i < AHEAD; i++)
        stage_key(body, width, g, &keys[i], ring + i * k, k, 1);
    for (i = 0; i < n; i++) {
        uint64_t *row = ring + (i % AHEAD) * k;
        int fresh = 0;
        if (width == 1)
            fresh = bloom_set(body, row, k);
        else
            count_inc(body, width, row, distinct(row, k), &fresh, sat);
        out[i] = (uint8_t)fresh;
        total += (size_t)fresh;
        if (i + AHEAD < n)
            stage_key(body, width, g, &keys[i + AHEAD], row, k, 1);
    }
    return total;
}

/* ===================================================================================== */
/* 2. CPython binding                                                                    */
/* ===================================================================================== */

static int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want, nargs);
    return -1;
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
static int parse_geom(PyObject *sid, PyObject *m, PyObject *k, geom *g)
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

static int parse_width(PyObject *o, int *width)
{
    uint64_t w;
    if (arg_u64(o, "width", &w) < 0)
        return -1;
    if (w != 4 && w != 8) {
        PyErr_Format(PyExc_ValueError, "width must be 4 or 8, got %llu", (unsigned long long)w);
        return -1;
    }
    *width = (int)w;
    return 0;
}

/* Bytes a body of m bits (width 1) or m cells of `width` bits needs: ceil(m * width / 8),
 * computed without overflow. */
static uint64_t body_bytes(uint64_t m, int width)
{
    if (width == 8)
        return m;
    if (width == 4)
        return m / 2 + (m & 1);
    return m / 8 + ((m & 7) != 0);
}

/* Get the body's buffer (writable if asked) and check its size for m and width. */
static int get_body(PyObject *obj, int writable, uint64_t m, int width, Py_buffer *view)
{
    const uint64_t need = body_bytes(m, width);
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if ((uint64_t)view->len < need) {
        PyErr_Format(PyExc_ValueError, "body has %zd bytes, expected at least %llu (m=%llu, %d bit%s per %s)",
                     view->len, (unsigned long long)need, (unsigned long long)m, width, width == 1 ? "" : "s",
                     width == 1 ? "position" : "cell");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

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

/* A key that resolve_key does not take in place: raise encode_key's error for it (or, for
 * a key that encode_key accepts, say that batches must be encoded first: the Python layer
 * does that, see mmapbloom.batches). */
static int key_not_fast(PyObject *o)
{
    PyObject *enc = encode_key_py(o);
    if (enc == NULL)
        return -1;
    Py_DECREF(enc);
    PyErr_Format(PyExc_TypeError, "batch keys must be str or contiguous bytes-like (encode the others with "
                 "mmapbloom.hashing.encode_key first), got %.200s", Py_TYPE(o)->tp_name);
    return -1;
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
 * surrogates raise UnicodeEncodeError as str.encode does. */
static int resolve_key(PyObject *o, keyref *r, Py_buffer *view)
{
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL)
            return -1;
        r->p = (const uint8_t *)s;
        r->n = (size_t)n;
        return 0;
    }
    if (PyBytes_Check(o)) {
        r->p = (const uint8_t *)PyBytes_AS_STRING(o);
        r->n = (size_t)PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyByteArray_Check(o) || (PyMemoryView_Check(o) && PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(o), 'C'))) {
        /* PyBUF_SIMPLE: C-contiguous bytes (BufferError otherwise).  The export also keeps
         * a bytearray from being resized while we hold it. */
        if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0)
            return -1;
        r->p = (const uint8_t *)view->buf;
        r->n = (size_t)view->len;
        return 1;
    }
    return key_not_fast(o);
}

/* Validate a key and hash it: str and contiguous bytes-likes in place, an exact int in
 * [-2^63, 2^64) as its 8 little-endian bytes, anything else through encode_key_py (the
 * one rule, in Python, with its messages). */
static int hash_object(PyObject *o, uint64_t h[2])
{
    keyref r;
    Py_buffer view;
    int got;
    if (PyLong_CheckExact(o)) {
        uint8_t b[8];
        if (int_key_bytes(o, b) < 0)
            return -1;
        r.p = b;
        r.n = 8;
        hash_key(&r, h);
        return 0;
    }
    if (is_fast_key(o)) {
        got = resolve_key(o, &r, &view);
        if (got < 0)
            return -1;
        hash_key(&r, h);
        if (got)
            PyBuffer_Release(&view);
        return 0;
    }
    {
        PyObject *enc = encode_key_py(o);
        if (enc == NULL)
            return -1;
        if (!PyBytes_Check(enc)) {
            Py_DECREF(enc);
            PyErr_SetString(PyExc_TypeError, "mmapbloom.hashing.encode_key must return bytes");
            return -1;
        }
        r.p = (const uint8_t *)PyBytes_AS_STRING(enc);
        r.n = (size_t)PyBytes_GET_SIZE(enc);
        hash_key(&r, h);
        Py_DECREF(enc);
        return 0;
    }
}

/* keys -> a new reference to a tuple (a list is copied, so it cannot change under us). */
static PyObject *keys_tuple(PyObject *keys)
{
    if (PyTuple_Check(keys)) {
        Py_INCREF(keys);
        return keys;
    }
    if (PyList_Check(keys))
        return PyList_AsTuple(keys);
    PyErr_Format(PyExc_TypeError, "keys must be a list or a tuple, got %.200s", Py_TYPE(keys)->tp_name);
    return NULL;
}

/* ---- per-item calls ------------------------------------------------------------------- */

#define SMALL_K 64

/* Everything a per-item call holds. */
typedef struct {
    geom g;
    int width;                /* 1 = Bloom body, 4 or 8 = counting body */
    Py_buffer body;
    int have_body;
    uint64_t *pos;            /* k positions: small, or heap for k > SMALL_K */
    uint64_t small[SMALL_K];
} item_call;

static void item_end(item_call *c)
{
    if (c->have_body)
        PyBuffer_Release(&c->body);
    if (c->pos != c->small)
        PyMem_Free(c->pos);
}

/* Parse (body, [width,] strategy_id, m, k, key), take the body and compute the key's
 * positions into c->pos.  On failure everything is released and -1 returned. */
static int item_begin(item_call *c, PyObject *const *args, int counting, int writable)
{
    uint64_t h[2];
    PyObject *body = args[0];
    c->have_body = 0;
    c->pos = c->small;
    c->width = 1;
    if (counting) {
        if (parse_width(args[1], &c->width) < 0)
            return -1;
        args++;
    }
    if (parse_geom(args[1], args[2], args[3], &c->g) < 0 || hash_object(args[4], h) < 0)
        return -1;
    if (get_body(body, writable, c->g.m, c->width, &c->body) < 0)
        return -1;
    c->have_body = 1;
    if (c->g.k > SMALL_K) {
        c->pos = PyMem_Malloc(c->g.k * sizeof(uint64_t));
        if (c->pos == NULL) {
            c->pos = c->small;
            item_end(c);
            PyErr_NoMemory();
            return -1;
        }
    }
    positions_of(&c->g, h, c->pos);
    return 0;
}

PyDoc_STRVAR(hash128_doc,
"hash128($module, key)\n--\n\n"
"Returns int.  MurmurHash3_x64_128 of key (seed 0) as an unsigned 128-bit int h1 | h2 << 64, equal to\n"
"mmh3.hash128(key, seed=0, x64arch=True, signed=False).  key: str (its UTF-8 bytes), bytes-like, or an\n"
"int (8 bytes little-endian of its value mod 2^64): the rule of mmapbloom.hashing.encode_key, which\n"
"is called for every key not resolved here (its TypeError / OverflowError messages),\n"
"UnicodeEncodeError for a str with lone surrogates.");

static PyObject *k_hash128(PyObject *module, PyObject *key)
{
    uint64_t h[2];
    PyObject *hi, *lo, *shift, *shifted, *result;
    (void)module;
    if (hash_object(key, h) < 0)
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

PyDoc_STRVAR(positions_doc,
"positions($module, strategy_id, key, m, k)\n--\n\n"
"Returns list[int].  The k positions in [0, m) of key under strategy 1 (M3KM), 2 (M3MX), 3 (M3BL),\n"
"4 (M3M2) or 5 (M3B2).  ValueError for an unknown strategy, m < 1, k outside [1, 4096], or a\n"
"blocked strategy (M3BL, M3B2) with\n"
"m % 512 != 0; key errors as hash128.");

static PyObject *k_positions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    geom g;
    uint64_t h[2], small[SMALL_K], *pos = small;
    PyObject *list;
    unsigned i;
    (void)module;
    if (check_nargs("positions", nargs, 4) < 0 || parse_geom(args[0], args[2], args[3], &g) < 0 ||
        hash_object(args[1], h) < 0)
        return NULL;
    if (g.k > SMALL_K && (pos = PyMem_Malloc(g.k * sizeof *pos)) == NULL)
        return PyErr_NoMemory();
    positions_of(&g, h, pos);
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

PyDoc_STRVAR(add_doc,
"add($module, body, strategy_id, m, k, key)\n--\n\n"
"Returns bool.  Set the key's k bits in the Bloom body (a writable buffer of at least ceil(m / 8) bytes);\n"
"True if some bit was 0 before (the key was new).  Not atomic: the caller holds the\n"
"write lock.  ValueError for bad sizes (see positions) or a short body; TypeError or\n"
"BufferError for a read-only body.");

static PyObject *k_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    item_call c;
    int fresh;
    (void)module;
    if (check_nargs("add", nargs, 5) < 0 || item_begin(&c, args, 0, 1) < 0)
        return NULL;
    fresh = bloom_set(c.body.buf, c.pos, c.g.k);
    item_end(&c);
    return PyBool_FromLong(fresh);
}

PyDoc_STRVAR(contains_doc,
"contains($module, body, strategy_id, m, k, key)\n--\n\n"
"Returns bool.  True if all the key's k bits are set in the Bloom body (stops at the first 0 bit).\n"
"The body may be read-only.  Errors as add.");

static PyObject *k_contains(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    item_call c;
    int present;
    (void)module;
    if (check_nargs("contains", nargs, 5) < 0 || item_begin(&c, args, 0, 0) < 0)
        return NULL;
    present = bloom_test(c.body.buf, c.pos, c.g.k);
    item_end(&c);
    return PyBool_FromLong(present);
}

PyDoc_STRVAR(count_add_doc,
"count_add($module, body, width, strategy_id, m, k, key)\n--\n\n"
"Returns (new, saturated).  Increment the key's distinct counters (width 4 or 8 bits; saturated counters stay at\n"
"15 / 255).  new: some counter was 0; saturated: some counter reached the maximum now.\n"
"The body needs ceil(m * width / 8) bytes.  Caller holds the write lock.");

static PyObject *k_count_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    item_call c;
    int fresh = 0, sat = 0;
    (void)module;
    if (check_nargs("count_add", nargs, 6) < 0 || item_begin(&c, args, 1, 1) < 0)
        return NULL;
    count_inc(c.body.buf, c.width, c.pos, distinct(c.pos, c.g.k), &fresh, &sat);
    item_end(&c);
    return PyTuple_Pack(2, fresh ? Py_True : Py_False, sat ? Py_True : Py_False);
}

PyDoc_STRVAR(count_remove_doc,
"count_remove($module, body, width, strategy_id, m, k, key)\n--\n\n"
"Returns int.  -1 if one of the key's counters is 0 (certainly absent; nothing changes); otherwise\n"
"decrement each distinct counter below the maximum and return 1 if one went to 0, else 0.");

static PyObject *k_count_remove(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    item_call c;
    int r;
    (void)module;
    if (check_nargs("count_remove", nargs, 6) < 0 || item_begin(&c, args, 1, 1) < 0)
        return NULL;
    r = count_dec(c.body.buf, c.width, c.pos, distinct(c.pos, c.g.k));
    item_end(&c);
    return PyLong_FromLong(r);
}

PyDoc_STRVAR(count_min_doc,
"count_min($module, body, width, strategy_id, m, k, key)\n--\n\n"
"Returns int.  The minimum of the key's counters (0 = certainly absent).  The body may be read-only.");

static PyObject *k_count_min(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    item_call c;
    unsigned low;
    (void)module;
    if (check_nargs("count_min", nargs, 6) < 0 || item_begin(&c, args, 1, 0) < 0)
        return NULL;
    low = count_min_of(c.body.buf, c.width, c.pos, c.g.k);
    item_end(&c);
    return PyLong_FromUnsignedLong(low);
}

/* ---- batch calls ---------------------------------------------------------------------- */

/* Everything a batch call holds. */
typedef struct {
    geom g;
    int width;
    Py_buffer body, out;
    int have_body, have_out;
    PyObject *keys;       /* tuple (owned), or NULL for a column */
    PyObject *column;     /* a Column (owned; see _columns.h), or NULL */
    Py_ssize_t n;
    uint64_t *ring;       /* AHEAD * k positions */
} batch_call;

static void batch_end(batch_call *c)
{
    if (c->have_body)
        PyBuffer_Release(&c->body);
    if (c->have_out)
        PyBuffer_Release(&c->out);
    Py_XDECREF(c->keys);
    Py_XDECREF(c->column);
    PyMem_Free(c->ring);
}

/* Parse (body, [width,] strategy_id, m, k, keys, out). */
static int batch_begin(batch_call *c, PyObject *const *args, int counting, int writable)
{
    PyObject *body = args[0];
    c->have_body = c->have_out = 0;
    c->keys = NULL;
    c->column = NULL;
    c->ring = NULL;
    c->width = 1;
    if (counting) {
        if (parse_width(args[1], &c->width) < 0)
            return -1;
        args++;
    }
    if (parse_geom(args[1], args[2], args[3], &c->g) < 0)
        goto fail;
    if (mb_column_check(args[4])) {
        Py_INCREF(args[4]);
        c->column = args[4];
        c->n = mb_column_len(c->column);
    } else if ((c->keys = keys_tuple(args[4])) == NULL) {
        goto fail;
    } else {
        c->n = PyTuple_GET_SIZE(c->keys);
    }
    if (get_body(body, writable, c->g.m, c->width, &c->body) < 0)
        goto fail;
    c->have_body = 1;
    if (PyObject_GetBuffer(args[5], &c->out, PyBUF_WRITABLE) < 0)
        goto fail;
    c->have_out = 1;
    if (c->out.len != c->n) {
        PyErr_Format(PyExc_ValueError, "out has %zd bytes, expected %zd (one per key)", c->out.len, c->n);
        goto fail;
    }
    c->ring = PyMem_Malloc((size_t)AHEAD * c->g.k * sizeof(uint64_t));
    if (c->ring == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    return 0;
fail:
    batch_end(c);
    return -1;
}

/* Check every key (type, encodability) before anything is written. */
static int validate_keys(PyObject *keys)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(keys);
    for (i = 0; i < n; i++) {
        keyref r;
        Py_buffer view;
        const int got = resolve_key(PyTuple_GET_ITEM(keys, i), &r, &view);
        if (got < 0)
            return -1;
        if (got)
            PyBuffer_Release(&view);
    }
    return 0;
}

/* Hash a validated key object and stage it (see stage_key) for writing. */
static int stage_object(batch_call *c, Py_ssize_t i, uint64_t *row)
{
    keyref r;
    Py_buffer view;
    const int got = resolve_key(PyTuple_GET_ITEM(c->keys, i), &r, &view);
    if (got < 0)
        return -1;
    stage_key(c->body.buf, c->width, &c->g, &r, row, c->g.k, 1);
    if (got)
        PyBuffer_Release(&view);
    return 0;
}

#define COLUMN_BLOCK 2048   /* keys resolved per step of a column batch */

/* A batch over a Column (see _columns.h): blocks of keys are resolved in place, the null
 * ones answered 0 and skipped, the others added (add_run_refs) or queried (query_run),
 * all without the GIL (from GIL_MIN_KEYS keys on).  *fresh_total gets the number of new keys. */
static int column_run(batch_call *c, int adding, Py_ssize_t *fresh_total, int *sat)
{
    const Py_ssize_t n = c->n;
    mb_key *keys = PyMem_Malloc(COLUMN_BLOCK * sizeof *keys);
    keyref *refs = PyMem_Malloc(COLUMN_BLOCK * sizeof *refs);
    Py_ssize_t *where = PyMem_Malloc(COLUMN_BLOCK * sizeof *where);
    char *scratch = PyMem_Malloc(COLUMN_BLOCK * 8);
    uint8_t *flags = PyMem_Malloc(COLUMN_BLOCK);
    uint8_t *body = c->body.buf, *out = c->out.buf;
    size_t total = 0;
    int rc = -1;
    PyThreadState *ts = NULL;
    if (keys == NULL || refs == NULL || where == NULL || scratch == NULL || flags == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n >= GIL_MIN_KEYS)
        ts = PyEval_SaveThread();
    {
        Py_ssize_t start, i;
        for (start = 0; start < n; start += COLUMN_BLOCK) {
            const Py_ssize_t nb = n - start < COLUMN_BLOCK ? n - start : COLUMN_BLOCK;
            size_t live = 0, j;
            mb_column_fill(c->column, start, nb, keys, scratch);
            for (i = 0; i < nb; i++) {
                if (keys[i].ptr == NULL) {
                    out[start + i] = 0;
                    continue;
                }
                refs[live].p = (const uint8_t *)keys[i].ptr;
                refs[live].n = (size_t)keys[i].len;
                where[live++] = start + i;
            }
            if (adding)
                total += add_run_refs(body, c->width, &c->g, refs, live, c->ring, flags, sat);
            else
                query_run(body, c->width, &c->g, refs, live, c->ring, flags);
            for (j = 0; j < live; j++)
                out[where[j]] = flags[j];
        }
    }
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    *fresh_total = (Py_ssize_t)total;
    rc = 0;
done:
    PyMem_Free(keys);
    PyMem_Free(refs);
    PyMem_Free(where);
    PyMem_Free(scratch);
    PyMem_Free(flags);
    return rc;
}

/* Sequential adds of every key (Bloom for width 1, else counting), pipelined as
 * query_run.  out[i] = key i was new; *fresh_total = number of new keys; *sat |= some
 * counter saturated.  Every key is validated before the first write. */
static int add_run(batch_call *c, Py_ssize_t *fresh_total, int *sat)
{
    const unsigned k = c->g.k;
    const Py_ssize_t n = c->n;
    uint8_t *body = c->body.buf, *out = c->out.buf;
    Py_ssize_t i, total = 0;

    if (c->column != NULL)
        return column_run(c, 1, fresh_total, sat);
    if (validate_keys(c->keys) < 0)
        return -1;
    /* After validation resolve_key cannot fail: the tuple and its str / bytes keys are
     * immutable and no Python code runs in between. */
    for (i = 0; i < n && i < AHEAD; i++)
        if (stage_object(c, i, c->ring + i * k) < 0)
            return -1;
    for (i = 0; i < n; i++) {
        uint64_t *row = c->ring + (i % AHEAD) * k;
        int fresh = 0;
        if (c->width == 1)
            fresh = bloom_set(body, row, k);
        else
            count_inc(body, c->width, row, distinct(row, k), &fresh, sat);
        out[i] = (uint8_t)fresh;
        total += fresh;
        if (i + AHEAD < n && stage_object(c, i + AHEAD, row) < 0)
            return -1;
    }
    *fresh_total = total;
    return 0;
}

/* Pin every key (references through the tuple, buffer exports for bytearray and
 * memoryview keys), then hash and probe without the GIL. */
static int query_pinned(batch_call *c)
{
    const Py_ssize_t n = c->n;
    keyref *refs = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t i, nviews = 0, nbuf = 0;
    int rc = -1;

    if (c->column != NULL) {
        int sat = 0;
        return column_run(c, 0, &i, &sat);
    }

    for (i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(c->keys, i);
        nbuf += PyByteArray_Check(o) || PyMemoryView_Check(o);
    }
    refs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *refs);
    views = PyMem_Malloc((size_t)(nbuf + 1) * sizeof *views);   /* + 1: see the check below */
    if (refs == NULL || views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        const int got = resolve_key(PyTuple_GET_ITEM(c->keys, i), &refs[i], &views[nviews]);
        if (got < 0)
            goto done;
        if (got && ++nviews > nbuf) {   /* cannot happen (counted above); views[nbuf] is spare */
            PyErr_SetString(PyExc_RuntimeError, "key buffers changed during the call");
            goto done;
        }
    }
    if (n >= GIL_MIN_KEYS) {
        Py_BEGIN_ALLOW_THREADS
        query_run(c->body.buf, c->width, &c->g, refs, (size_t)n, c->ring, c->out.buf);
        Py_END_ALLOW_THREADS
    } else {
        query_run(c->body.buf, c->width, &c->g, refs, (size_t)n, c->ring, c->out.buf);
    }
    rc = 0;
done:
    while (nviews > 0)
        PyBuffer_Release(&views[--nviews]);
    PyMem_Free(views);
    PyMem_Free(refs);
    return rc;
}

PyDoc_STRVAR(add_many_doc,
"add_many($module, body, strategy_id, m, k, keys, out)\n--\n\n"
"Returns int.  Add every key of keys (a list or tuple of str and contiguous bytes-likes, or a Column:\n"
"nulls answer 0 and are skipped, GIL released) to the Bloom body, in order; out (a writable\n"
"buffer of len(keys) bytes, e.g. a numpy bool array) gets 1 where the key was new,\n"
"exactly as sequential add() calls (a repeat inside the batch is new once).  Returns the\n"
"number of new keys.  Every key is validated before any bit is set: a bad key leaves the\n"
"body unchanged.  Holds the GIL; the caller holds the write lock.");

static PyObject *k_add_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    batch_call c;
    Py_ssize_t fresh;
    int sat = 0, rc;
    (void)module;
    if (check_nargs("add_many", nargs, 6) < 0 || batch_begin(&c, args, 0, 1) < 0)
        return NULL;
    rc = add_run(&c, &fresh, &sat);
    batch_end(&c);
    return rc < 0 ? NULL : PyLong_FromSsize_t(fresh);
}

PyDoc_STRVAR(contains_many_doc,
"contains_many($module, body, strategy_id, m, k, keys, out)\n--\n\n"
"Returns None.  out[i] = 1 if key i may be in the Bloom body, else 0.  The keys are pinned first, then\n"
"hashing and probing run without the GIL (from 256 keys on), so threads querying run in\n"
"parallel.  The body may be read-only.");

static PyObject *k_contains_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    batch_call c;
    int rc;
    (void)module;
    if (check_nargs("contains_many", nargs, 6) < 0 || batch_begin(&c, args, 0, 0) < 0)
        return NULL;
    rc = query_pinned(&c);
    batch_end(&c);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(count_add_many_doc,
"count_add_many($module, body, width, strategy_id, m, k, keys, out)\n--\n\n"
"Returns (number of new keys, some counter saturated).  count_add of every key in order;\n"
"out flags and key validation as add_many.  Holds the GIL; the caller holds the write lock.");

static PyObject *k_count_add_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    batch_call c;
    Py_ssize_t fresh;
    int sat = 0, rc;
    (void)module;
    if (check_nargs("count_add_many", nargs, 7) < 0 || batch_begin(&c, args, 1, 1) < 0)
        return NULL;
    rc = add_run(&c, &fresh, &sat);
    batch_end(&c);
    return rc < 0 ? NULL : Py_BuildValue("(nN)", fresh, PyBool_FromLong(sat));
}

PyDoc_STRVAR(count_contains_many_doc,
"count_contains_many($module, body, width, strategy_id, m, k, keys, out)\n--\n\n"
"Returns None.  out[i] = 1 if every counter of key i is non-zero, else 0; GIL released as contains_many.");

static PyObject *k_count_contains_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    batch_call c;
    int rc;
    (void)module;
    if (check_nargs("count_contains_many", nargs, 7) < 0 || batch_begin(&c, args, 1, 0) < 0)
        return NULL;
    rc = query_pinned(&c);
    batch_end(&c);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- whole body, locks ---------------------------------------------------------------- */

PyDoc_STRVAR(popcount_doc,
"popcount($module, body)\n--\n\n"
"Returns int.  Number of set bits in the buffer (any C-contiguous buffer, read-only allowed).");

static PyObject *k_popcount(PyObject *module, PyObject *body)
{
    Py_buffer view;
    uint64_t total;
    (void)module;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    total = popcount_bytes(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(total);
}

#ifndef _WIN32
PyDoc_STRVAR(flock_try_doc,
"flock_try($module, fd)\n--\n\n"
"Returns bool.  flock(fd, LOCK_EX | LOCK_NB) WITHOUT releasing the GIL: True if the lock was acquired,\n"
"False if another open file description holds it (EWOULDBLOCK).  fd: an int or an object\n"
"with fileno().  Retries on EINTR (after running signal handlers); OSError otherwise.\n"
"Unlike fcntl.flock, it never hands the interpreter to another thread.");

static PyObject *k_flock_try(PyObject *module, PyObject *arg)
{
    int fd;
    (void)module;
    if ((fd = PyObject_AsFileDescriptor(arg)) < 0)
        return NULL;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            Py_RETURN_TRUE;
        if (errno == EWOULDBLOCK || errno == EAGAIN)
            Py_RETURN_FALSE;
        if (errno != EINTR)
            return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

PyDoc_STRVAR(flock_unlock_doc,
"flock_unlock($module, fd)\n--\n\n"
"Returns None.  flock(fd, LOCK_UN) without releasing the GIL.  OSError on failure.");

static PyObject *k_flock_unlock(PyObject *module, PyObject *arg)
{
    int fd;
    (void)module;
    if ((fd = PyObject_AsFileDescriptor(arg)) < 0)
        return NULL;
    for (;;) {
        if (flock(fd, LOCK_UN) == 0)
            Py_RETURN_NONE;
        if (errno != EINTR)
            return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}
#endif

/* ---- module --------------------------------------------------------------------------- */

#define FAST(name) {#name, (PyCFunction)(void (*)(void))k_##name, METH_FASTCALL, name##_doc}
#define ONE(name) {#name, (PyCFunction)k_##name, METH_O, name##_doc}

static PyMethodDef kernel_methods[] = {
    ONE(hash128),
    FAST(positions),
    FAST(add),
    FAST(contains),
    FAST(add_many),
    FAST(contains_many),
    FAST(count_add),
    FAST(count_remove),
    FAST(count_min),
    FAST(count_add_many),
    FAST(count_contains_many),
    ONE(popcount),
#ifndef _WIN32
    ONE(flock_try),
    ONE(flock_unlock),
#endif
    {NULL, NULL, 0, NULL},
};

static int kernel_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "M3KM", S_M3KM) < 0 || PyModule_AddIntConstant(module, "M3MX", S_M3MX) < 0 ||
        PyModule_AddIntConstant(module, "M3BL", S_M3BL) < 0 || PyModule_AddIntConstant(module, "M3M2", S_M3M2) < 0 ||
        PyModule_AddIntConstant(module, "M3B2", S_M3B2) < 0 || PyModule_AddIntConstant(module, "MAX_K", MAX_K) < 0 ||
        mb_columns_init(module) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot kernel_slots[] = {
    {Py_mod_exec, (void *)kernel_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"Compiled kernels of mmapbloom: MurmurHash3_x64_128, the M3KM / M3MX / M3BL / M3M2 / M3B2\n"
"position strategies (ids 1 to 5), Bloom and counting (4-/8-bit) body loops, popcount and a\n"
"GIL-keeping flock.  Results are identical to the pure-Python reference path.  The module\n"
"keeps no state.");

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT,
    "mmapbloom._kernels",
    module_doc,
    0,
    kernel_methods,
    kernel_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    return PyModuleDef_Init(&kernel_module);
}
