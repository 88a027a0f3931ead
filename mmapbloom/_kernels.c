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
 * Thread safety: the functions keep no global state but one: the process-wide SIGBUS
 * handler of the handle's guard (installed once; see "the SIGBUS guard"), whose per-call
 * state is thread-local.  Writes to a body are plain byte stores; the Python layer serialises writers (thread lock + flock).  contains_many and
 * count_contains_many release the GIL while they hash and probe; the body, the output
 * array and every key are pinned (buffer exports and references) for that time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/file.h>
#endif

#include "_columns.h"   /* the Column type (key columns read in place); includes _keys.h */
#include "_keys.h"
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

/* A key's bytes (UTF-8 of a str, or the raw bytes of a bytes-like object): mb_key of
 * _keys.h, the shape every batch source (Python sequences here, columns in _columns.c)
 * resolves its keys to.  ptr == NULL is a null key (never added, never found). */
typedef mb_key keyref;

static inline void hash_key(const keyref *key, uint64_t h[2])
{
    mmb_murmur3_x64_128((const uint8_t *)key->ptr, (size_t)key->len, 0, h);
}

/* Positions [first, count) (count <= g->k) of a key whose MurmurHash3 halves are h[0],
 * h[1] (definitions at the top of the file): queries compute the head first and the rest
 * only when the head's bits are set.  pos has room for count values; pos[0, first) may be
 * rewritten with the same values (the sequential strategies restart from 0, which costs
 * a few instructions; M3MX / M3M2, whose positions are independent, skip them). */
static void positions_n(const geom *g, const uint64_t h[2], uint64_t *pos, unsigned first, unsigned count)
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

/* All k positions. */
static inline void positions_of(const geom *g, const uint64_t h[2], uint64_t *pos)
{
    positions_n(g, h, pos, 0, g->k);
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
    } else {   /* heapsort: in place, allocates nothing (it runs inside guarded sections) */
        unsigned start = k / 2, end = k, root, child;
        uint64_t v;
        while (end > 1) {
            if (start > 0) {
                v = pos[--start];
            } else {
                v = pos[--end];
                pos[end] = pos[0];
            }
            for (root = start; (child = 2 * root + 1) < end; root = child) {
                if (child + 1 < end && pos[child + 1] > pos[child])
                    child++;
                if (pos[child] <= v)
                    break;
                pos[root] = pos[child];
            }
            pos[root] = v;
        }
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

/* First query stage: hash the key (halves into h), compute only the head of its
 * positions (the first QUERY_PREFETCH) and prefetch their bytes. */
static void stage_query(const uint8_t *body, int width, const geom *g, const keyref *key, uint64_t *row,
                        uint64_t h[2])
{
    const unsigned head = g->k < QUERY_PREFETCH ? g->k : QUERY_PREFETCH;
    unsigned i;
    if (key->ptr != NULL) {
        hash_key(key, h);
    } else {   /* a null key (a Column's): answered 0 by query_run; any valid positions do */
        h[0] = h[1] = 0;
    }
    positions_n(g, h, row, 0, head);
    for (i = 0; i < head; i++)
        PREFETCH_R(body + byte_of(width, row[i]));
}

/* Middle query stage: test the head of the row; if it passes, compute the remaining
 * positions (lazily: an absent key usually stops at the head) and prefetch them. */
static int query_head(const uint8_t *body, int width, const geom *g, uint64_t *row, const uint64_t h[2])
{
    const unsigned k = g->k, head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    unsigned i;
    if (!probe_range(body, width, row, 0, head))
        return 0;
    if (head < k) {
        positions_n(g, h, row, head, k);
        for (i = head; i < k; i++)
            PREFETCH_R(body + byte_of(width, row[i]));
    }
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
    uint64_t hs[AHEAD][2];  /* hash halves, by ring row */
    size_t i;
    for (i = 0; i < n && i < AHEAD; i++)
        stage_query(body, width, g, &keys[i], ring + i * k, hs[i]);
    for (i = 0; i < n && i < half; i++)
        maybe[i] = (uint8_t)query_head(body, width, g, ring + i * k, hs[i]);
    for (i = 0; i < n; i++) {
        const size_t slot = i % AHEAD;
        uint64_t *row = ring + slot * k;
        out[i] = (uint8_t)(keys[i].ptr != NULL && maybe[slot] && probe_range(body, width, row, head, k));
        if (i + half < n) {
            const size_t s2 = (i + half) % AHEAD;
            maybe[s2] = (uint8_t)query_head(body, width, g, ring + s2 * k, hs[s2]);
        }
        if (i + AHEAD < n)
            stage_query(body, width, g, &keys[i + AHEAD], row, hs[slot]);
    }
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
        const char *s;
        if (PyUnicode_IS_COMPACT_ASCII(o)) {   /* the common case: its bytes are its UTF-8 */
            r->ptr = (const char *)PyUnicode_DATA(o);
            r->len = PyUnicode_GET_LENGTH(o);
            return 0;
        }
        s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL)
            return -1;
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
        r.ptr = (const char *)b;
        r.len = 8;
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
        PyObject *enc = encoded_bytes(encode_key_py(o));
        if (enc == NULL)
            return -1;
        r.ptr = PyBytes_AS_STRING(enc);
        r.len = PyBytes_GET_SIZE(enc);
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
    PyObject *keys;       /* tuple (owned) */
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
    PyMem_Free(c->ring);
}

/* Parse (body, [width,] strategy_id, m, k, keys, out). */
static int batch_begin(batch_call *c, PyObject *const *args, int counting, int writable)
{
    PyObject *body = args[0];
    c->have_body = c->have_out = 0;
    c->keys = NULL;
    c->ring = NULL;
    c->width = 1;
    if (counting) {
        if (parse_width(args[1], &c->width) < 0)
            return -1;
        args++;
    }
    if (parse_geom(args[1], args[2], args[3], &c->g) < 0 || (c->keys = keys_tuple(args[4])) == NULL)
        goto fail;
    c->n = PyTuple_GET_SIZE(c->keys);
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

/* Sequential adds of every key (Bloom for width 1, else counting), pipelined as
 * query_run.  out[i] = key i was new; *fresh_total = number of new keys; *sat |= some
 * counter saturated.  Every key is validated before the first write. */
static int add_run(batch_call *c, Py_ssize_t *fresh_total, int *sat)
{
    const unsigned k = c->g.k;
    const Py_ssize_t n = c->n;
    uint8_t *body = c->body.buf, *out = c->out.buf;
    Py_ssize_t i, total = 0;

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
"Returns int.  Add every key of keys (a list or tuple) to the Bloom body, in order; out (a writable\n"
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

/* ===================================================================================== */
/* 3. The native handle: the write lock's state and one object per open filter           */
/* ===================================================================================== */
/*
 * LockState is the C half of mmapbloom.locking.WriteLock (its base class): the handle's
 * thread-level lock (re-entrant: owner thread, recursion count) and the fields that the
 * uncontended write path reads without calling Python: the file-lock depth, the descriptor
 * to flock (-1 in memory) and the stale / closed flags.  WriteLock (Python) keeps the rest
 * of the protocol: waiting, SelfDeadlockError, LockTimeout, fork handling, recovery.
 *
 * Handle binds one open filter: the image buffer (exported once), the cells, the items
 * word, m, k, strategy, cell width and the LockState.  A write takes the lock in C when it
 * is free (thread lock, flock(LOCK_EX | LOCK_NB)), sets the cells, bumps the items word and
 * unlocks, all with the GIL held; only a real wait calls WriteLock.acquire (Python, which
 * waits interruptibly).  A batch resolves its keys once (mb_key array, objects pinned),
 * hashes a chunk with the GIL released (large chunks), then locks, tests-and-sets the
 * chunk, bumps the counter once and unlocks.  Warnings are emitted through Python
 * callables after the lock is released.
 *
 * Every field of both objects is read and written with the GIL held (no free-threaded
 * build support).  `busy` counts a handle's calls that let go of the GIL or call Python;
 * close() while one is in flight defers releasing the image export to its end, so a
 * handle (or a call in flight) that outlives its filter never touches unmapped memory.
 */

#ifndef _WIN32
#include <time.h>
static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#else
#include <time.h>
static double mono_seconds(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}
#endif

typedef struct {
    PyObject_HEAD
    PyThread_type_lock tlock;
    unsigned long owner;   /* thread ident holding tlock, 0: nobody */
    Py_ssize_t count;      /* re-entry count of tlock */
    Py_ssize_t depth;      /* WriteLock._depth: nesting of the held write lock */
    int flock_fd;          /* WriteLock._flock_fd: the descriptor to flock, -1: none (in memory) */
    char stale, closed;    /* WriteLock._stale, WriteLock._closed */
} LockState;

static PyObject *ls_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    LockState *self;
    (void)args;
    (void)kwds;
    self = (LockState *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->flock_fd = -1;
    self->tlock = PyThread_allocate_lock();
    if (self->tlock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void ls_dealloc(LockState *self)
{
    if (self->tlock != NULL) {
        if (self->count > 0)
            PyThread_release_lock(self->tlock);
        PyThread_free_lock(self->tlock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Wait for a thread lock like threading.Lock.acquire: interruptible (signal handlers run,
 * an exception from one ends the wait: -1), GIL released while waiting.  timeout < 0:
 * forever; otherwise seconds.  1: acquired, 0: timed out. */
static int tlock_wait(PyThread_type_lock lk, double timeout)
{
    double deadline = 0.0;
    PyLockStatus r = PyThread_acquire_lock_timed(lk, 0, 0);
    if (r == PY_LOCK_ACQUIRED)
        return 1;
    if (timeout == 0.0)
        return 0;
    if (timeout > 0.0)
        deadline = mono_seconds() + timeout;
    for (;;) {
        PY_TIMEOUT_T us = -1;
        if (timeout > 0.0) {
            const double left = deadline - mono_seconds();
            if (left <= 0.0)
                return PyThread_acquire_lock_timed(lk, 0, 0) == PY_LOCK_ACQUIRED;
            us = left * 1e6 >= (double)PY_TIMEOUT_MAX ? PY_TIMEOUT_MAX : (PY_TIMEOUT_T)(left * 1e6) + 1;
        }
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(lk, us, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED)
            return 1;
        if (r == PY_LOCK_FAILURE)
            return 0;
        if (PyErr_CheckSignals() < 0)   /* PY_LOCK_INTR */
            return -1;
    }
}

PyDoc_STRVAR(ls_tacquire_doc,
"_tacquire(timeout=-1.0, /)\n--\n\n"
"Take the thread lock (re-entrant).  timeout: seconds, < 0 waits forever.  Returns True,\n"
"or False when the timeout expired.  The wait releases the GIL and is interruptible.");

static PyObject *ls_tacquire(LockState *self, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned long me = PyThread_get_thread_ident();
    double timeout = -1.0;
    int got;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "_tacquire() takes at most 1 argument (%zd given)", nargs);
    if (nargs == 1 && args[0] != Py_None) {
        timeout = PyFloat_AsDouble(args[0]);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
    }
    if (self->owner == me && self->count > 0) {
        self->count++;
        Py_RETURN_TRUE;
    }
    got = tlock_wait(self->tlock, timeout);
    if (got < 0)
        return NULL;
    if (!got)
        Py_RETURN_FALSE;
    self->owner = me;
    self->count = 1;
    Py_RETURN_TRUE;
}

static int tlock_release(LockState *self)
{
    if (self->count <= 0 || self->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--self->count == 0) {
        self->owner = 0;
        PyThread_release_lock(self->tlock);
    }
    return 0;
}

static PyObject *ls_trelease(LockState *self, PyObject *unused)
{
    (void)unused;
    if (tlock_release(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *ls_towned(LockState *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(self->count > 0 && self->owner == PyThread_get_thread_ident());
}

/* In a fork child: a fresh, free thread lock.  The old one may be held by a thread that
 * does not exist in the child; it is left allocated (never waited on again). */
static PyObject *ls_treset(LockState *self, PyObject *unused)
{
    PyThread_type_lock fresh = PyThread_allocate_lock();
    (void)unused;
    if (fresh == NULL)
        return PyErr_NoMemory();
    self->tlock = fresh;
    self->owner = 0;
    self->count = 0;
    Py_RETURN_NONE;
}

static PyMethodDef ls_methods[] = {
    {"_tacquire", (PyCFunction)(void (*)(void))ls_tacquire, METH_FASTCALL, ls_tacquire_doc},
    {"_trelease", (PyCFunction)ls_trelease, METH_NOARGS, "Release one level of the thread lock."},
    {"_towned", (PyCFunction)ls_towned, METH_NOARGS, "True if the calling thread holds the thread lock."},
    {"_treset", (PyCFunction)ls_treset, METH_NOARGS, "A fresh thread lock (fork child)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ls_members[] = {
    {"_depth", T_PYSSIZET, offsetof(LockState, depth), 0, "nesting of the held write lock"},
    {"_flock_fd", T_INT, offsetof(LockState, flock_fd), 0, "descriptor to flock, -1: none"},
    {"_stale", T_BOOL, offsetof(LockState, stale), 0, "reopen before locking (fork child)"},
    {"_closed", T_BOOL, offsetof(LockState, closed), 0, "refuse acquisitions"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LockState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.LockState",
    .tp_basicsize = sizeof(LockState),
    .tp_dealloc = (destructor)ls_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "LockState()\n--\n\nThe C half of mmapbloom.locking.WriteLock (its base class): a re-entrant\n"
              "thread lock and the fields the native handle's uncontended write path reads.",
    .tp_methods = ls_methods,
    .tp_members = ls_members,
    .tp_new = ls_new,
};

/* ---- taking the lock from C ------------------------------------------------------------ */

enum { LOCK_HELD = 0, LOCK_TAKEN = 1, LOCK_SLOW = 2 };

/* The uncontended path: LOCK_TAKEN (this call took the thread lock and the flock: leave
 * with lock_release), LOCK_HELD (this thread is inside its own write_lock(): the file lock
 * is held, nothing to take), LOCK_SLOW (taking it needs a wait, a reopen or the closed
 * check: WriteLock.acquire decides), -1 (OSError set). */
static int lock_try(LockState *L)
{
    const unsigned long me = PyThread_get_thread_ident();
    if (L->count > 0 && L->owner == me)
        return L->depth > 0 ? LOCK_HELD : LOCK_SLOW;
    if (L->closed || L->stale || L->count > 0)
        return LOCK_SLOW;
    if (!PyThread_acquire_lock(L->tlock, NOWAIT_LOCK))
        return LOCK_SLOW;
    L->owner = me;
    L->count = 1;
    if (L->flock_fd >= 0) {
#ifndef _WIN32
        if (flock(L->flock_fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            L->owner = 0;
            L->count = 0;
            PyThread_release_lock(L->tlock);
            if (err == EWOULDBLOCK || err == EAGAIN || err == EINTR)
                return LOCK_SLOW;
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
#else
        L->owner = 0;
        L->count = 0;
        PyThread_release_lock(L->tlock);
        return LOCK_SLOW;
#endif
    }
    L->depth = 1;
    return LOCK_TAKEN;
}

/* Release one level, as WriteLock.release (the flock goes with the outermost level). */
static int lock_release(LockState *L)
{
    int rc = 0;
    if (L->depth == 1 && L->flock_fd >= 0) {
#ifndef _WIN32
        while (flock(L->flock_fd, LOCK_UN) != 0) {
            if (errno != EINTR) {
                PyErr_SetFromErrno(PyExc_OSError);
                rc = -1;
                break;
            }
        }
#endif
        L->depth = 0;
    } else if (L->depth > 0) {
        L->depth--;
    }
    if (tlock_release(L) < 0)
        rc = -1;
    return rc;
}

/* The slow path: WriteLock.acquire() waits (interruptibly), or raises FilterClosedError,
 * SelfDeadlockError...  On any exception WriteLock.recover(held_before) leaves nothing
 * held that this call took. */
static int lock_wait(LockState *L)
{
    const int held = L->count > 0 && L->owner == PyThread_get_thread_ident();
    PyObject *r = PyObject_CallMethod((PyObject *)L, "acquire", NULL);
    PyObject *et, *ev, *tb;
    if (r != NULL) {
        Py_DECREF(r);
        return 0;
    }
    PyErr_Fetch(&et, &ev, &tb);
    r = PyObject_CallMethod((PyObject *)L, "recover", "O", held ? Py_True : Py_False);
    Py_XDECREF(r);
    if (r == NULL)
        PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return -1;
}

/* ---- the items word ------------------------------------------------------------------ */

#define MAX_ITEMS 0xFFFFFFFFu

/* One aligned 4-byte load / store (format.items_word explains why), little-endian. */
static inline uint32_t items_load(const uint8_t *p)
{
    uint32_t v;
#if defined(__GNUC__) || defined(__clang__)
    if (((uintptr_t)p & 3) == 0)
        v = __atomic_load_n((const uint32_t *)(const void *)p, __ATOMIC_RELAXED);
    else
        memcpy(&v, p, 4);
#else
    memcpy(&v, p, 4);
#endif
#if !PY_LITTLE_ENDIAN
    v = (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
#endif
    return v;
}

static inline void items_store(uint8_t *p, uint32_t v)
{
#if !PY_LITTLE_ENDIAN
    v = (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
#endif
#if defined(__GNUC__) || defined(__clang__)
    if (((uintptr_t)p & 3) == 0)
        __atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELAXED);
    else
        memcpy(p, &v, 4);
#else
    memcpy(p, &v, 4);
#endif
}

/* ---- the SIGBUS guard ------------------------------------------------------------------ */

/* A page of a shared mapping past the end of its file (another program truncated the file
 * under the open handle) kills the process with SIGBUS at the first touch.  Every touch of
 * the mapping by a Handle method runs inside a guarded section instead:
 *
 *   - one process-wide SIGBUS handler (sigaction, SA_SIGINFO | SA_NODEFER | SA_ONSTACK),
 *     installed once, by the first Handle made, chaining to the handler it replaced (the
 *     default action, or Python's faulthandler, which pytest enables);
 *   - a thread-local pointer to the calling thread's active guard: a sigjmp_buf and the
 *     mapping's address range, set by GUARD_BEGIN (sigsetjmp(env, 0): no system call, no
 *     signal mask saved) and cleared by GUARD_END;
 *   - on a fault (si_code > 0) inside the active guard's range, the handler clears the
 *     guard and siglongjmps back to GUARD_BEGIN, which then answers "faulted"; the caller
 *     releases what the normal path releases (the thread lock and flock) and raises
 *     LengthMismatchError through the filter's fail(3).  Any other SIGBUS (no guard in
 *     this thread, an address outside the guarded mapping) goes to the previous handler,
 *     or, for the default action, restores it and lets the fault repeat: the crash is the
 *     one the process would have had without the guard.
 *
 * A guarded section calls no Python API and allocates nothing, so the jump never skips
 * interpreter or allocator state; it only reads and writes the cells and the items word.
 * Every guarded section is a function of its own (the g_* helpers below): no local of the
 * caller lives across the sigsetjmp.  SA_NODEFER keeps SIGBUS unblocked after the jump
 * (sigsetjmp(env, 0) restores no mask).  A SIGBUS *sent* (kill, raise: si_code <= 0)
 * while this thread is guarded is ignored: it is faulthandler re-raising a guarded fault
 * that it saw first (it was installed after this handler); the fault repeats and lands
 * here.  Windows: no guard (no SIGBUS there). */
#if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
#define MB_GUARD 1
#include <setjmp.h>
#include <signal.h>

typedef struct {
    sigjmp_buf env;
    const uint8_t *lo, *hi;   /* the guarded mapping [lo, hi) */
} mb_guard;

/* glibc: initial-exec, a plain thread-pointer-relative access with no __tls_get_addr
 * (which allocates a dlopen'ed module's block lazily, so must not run in a signal
 * handler; glibc keeps static TLS room for such modules).  Elsewhere (musl allocates every
 * block up front and refuses initial-exec in dlopen'ed modules; macOS) the default model. */
#if defined(__GLIBC__)
#define MB_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define MB_TLS_MODEL
#endif
static __thread mb_guard *volatile mb_active MB_TLS_MODEL;
static struct sigaction mb_prev_bus;
static int mb_bus_installed;

static void mb_bus_handler(int sig, siginfo_t *si, void *ctx)
{
    mb_guard *g = mb_active;
    if (g != NULL) {
        if (si == NULL || si->si_code <= 0)
            return;   /* sent, not a fault: see above */
        if ((const uint8_t *)si->si_addr >= g->lo && (const uint8_t *)si->si_addr < g->hi) {
            mb_active = NULL;
            siglongjmp(g->env, 1);
        }
    }
    if (mb_prev_bus.sa_flags & SA_SIGINFO) {
        if (mb_prev_bus.sa_sigaction != NULL) {
            mb_prev_bus.sa_sigaction(sig, si, ctx);
            return;
        }
    } else if (mb_prev_bus.sa_handler != SIG_DFL && mb_prev_bus.sa_handler != SIG_IGN) {
        mb_prev_bus.sa_handler(sig);
        return;
    }
    {   /* the default action: restore it; a fault repeats when this returns, a sent signal
         * is sent again */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        if (si == NULL || si->si_code <= 0)
            raise(sig);
    }
}

/* Install the handler (the first call; the caller holds the GIL), and re-install it when a
 * later call finds the default action back in its place.  Called by every Handle made and
 * every scan: one sigaction query each.  -1 with OSError. */
static int mb_guard_install(void)
{
    struct sigaction act, cur;
    if (mb_bus_installed) {
        /* Installed before: put it back only if the default action replaced it (what
         * faulthandler.disable() or signal.signal(SIGBUS, SIG_DFL) leave when they ran
         * after it).  Another function there (faulthandler enabled after it) chains to
         * this handler already: installing over it would make each chain to the other. */
        if (sigaction(SIGBUS, NULL, &cur) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
            return 0;
    }
    memset(&act, 0, sizeof act);
    act.sa_sigaction = mb_bus_handler;
    act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGBUS, &act, &mb_prev_bus) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    mb_bus_installed = 1;
    return 0;
}

/* Open a guarded section over [lo, lo + len) in a g_* helper: the statement after it runs
 * when the mapping faulted inside the section (the guard is cleared then).  mb_active is
 * volatile and fenced: the compiler must neither drop the store (the section's body does
 * not read it) nor move a touch of the mapping outside the section. */
#define GUARD_BEGIN(gd, base, len)                              \
    (gd).lo = (const uint8_t *)(base);                          \
    (gd).hi = (gd).lo + (len);                                  \
    if (sigsetjmp((gd).env, 0) == 0) {                          \
        mb_active = &(gd);                                      \
        __atomic_signal_fence(__ATOMIC_SEQ_CST);                \
    } else
/* The fences keep every touch of the mapping between the two stores (a compiler barrier:
 * the handler runs in the same thread). */
#define GUARD_END() (__atomic_signal_fence(__ATOMIC_SEQ_CST), mb_active = NULL)
#define GUARD_DECL(gd) mb_guard gd
/* GCC's -Wclobbered flags the g_* helpers' parameters and locals as "might be clobbered
 * by longjmp": after the jump a helper reads none of them (it only returns -1), so no
 * value is indeterminate there (C11 7.13.2.1).  The only functions here that call
 * sigsetjmp are the g_* helpers. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
#else
#define GUARD_BEGIN(gd, base, len) if (0)
#define GUARD_END() ((void)0)
#define GUARD_DECL(gd) int gd = 0; (void)gd
static int mb_guard_install(void)
{
    return 0;
}
#endif

/* ---- the handle ------------------------------------------------------------------------ */

#define HANDLE_CHUNK_KEYS 65536      /* keys per lock acquisition in a batch (base.CHUNK_KEYS) */
#define STAGE_POSITIONS (1 << 20)    /* staged positions per chunk at most (8 MiB) */

typedef struct {
    PyObject_HEAD
    Py_buffer image;       /* the whole image (header + cells), exported once */
    int have_image;
    uint8_t *body;         /* the cells: image + header size */
    uint8_t *items;        /* the header's items word */
    geom g;
    int width;             /* 1: Bloom bits; 4 or 8: counters */
    int writable, closed, warned;
    Py_ssize_t busy;       /* calls in flight that let go of the GIL or call Python */
    double warn_at;        /* the design point (items.design_limit) */
    LockState *lock;
    PyObject *fail;        /* fail(kind): raises FilterClosedError (0) or refuses a write (1) */
    PyObject *over;        /* over(count): emits the over-capacity warning */
    PyObject *saturated;   /* saturated(): emits the counter-saturation warning, or None */
} Handle;

static void h_release_image(Handle *h)
{
    if (h->have_image) {
        h->have_image = 0;
        PyBuffer_Release(&h->image);
    }
}

static int h_traverse(Handle *h, visitproc visit, void *arg)
{
    Py_VISIT(h->lock);
    Py_VISIT(h->fail);
    Py_VISIT(h->over);
    Py_VISIT(h->saturated);
    return 0;
}

static int h_clear(Handle *h)
{
    h->closed = 1;
    Py_CLEAR(h->lock);
    Py_CLEAR(h->fail);
    Py_CLEAR(h->over);
    Py_CLEAR(h->saturated);
    return 0;
}

static void h_dealloc(Handle *h)
{
    PyObject_GC_UnTrack(h);
    h_clear(h);
    h_release_image(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *h_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"image", "header_size", "items_offset", "strategy_id", "m", "k", "width", "writable",
                            "lock", "warn_at", "fail", "over", "saturated", NULL};
    PyObject *image, *sid, *m, *k, *lock, *fail, *over, *saturated;
    Py_ssize_t header_size, items_offset;
    int width, writable;
    double warn_at;
    Handle *h;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnnOOOipO!dOOO:Handle", names, &image, &header_size, &items_offset,
                                     &sid, &m, &k, &width, &writable, &LockState_Type, &lock, &warn_at, &fail, &over,
                                     &saturated))
        return NULL;
    if (width != 1 && width != 4 && width != 8)
        return PyErr_Format(PyExc_ValueError, "width must be 1, 4 or 8, got %d", width);
    if (mb_guard_install() < 0)   /* once per process: the handle's touches are guarded */
        return NULL;
    if (header_size < 0 || items_offset < 0 || items_offset > header_size - 4)
        return PyErr_Format(PyExc_ValueError, "items_offset %zd does not fit a header of %zd bytes", items_offset,
                            header_size);
    h = (Handle *)type->tp_alloc(type, 0);
    if (h == NULL)
        return NULL;
    if (parse_geom(sid, m, k, &h->g) < 0)
        goto fail;
    h->width = width;
    if (PyObject_GetBuffer(image, &h->image, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        goto fail;
    h->have_image = 1;
    if (h->image.len < header_size ||
        (uint64_t)(h->image.len - header_size) < body_bytes(h->g.m, width)) {
        PyErr_Format(PyExc_ValueError, "image has %zd bytes, expected at least %zd + %llu", h->image.len, header_size,
                     (unsigned long long)body_bytes(h->g.m, width));
        goto fail;
    }
    h->body = (uint8_t *)h->image.buf + header_size;
    h->items = (uint8_t *)h->image.buf + items_offset;
    h->writable = writable;
    h->warn_at = warn_at;
    Py_INCREF(lock);
    h->lock = (LockState *)lock;
    Py_INCREF(fail);
    h->fail = fail;
    Py_INCREF(over);
    h->over = over;
    Py_INCREF(saturated);
    h->saturated = saturated;
    return (PyObject *)h;
fail:
    Py_DECREF(h);
    return NULL;
}

/* Raise for a closed handle (kind 0) or a refused write (kind 1, which is also
 * FilterClosedError while the handle closes) through the filter's own errors. */
static PyObject *h_refuse(Handle *h, int write)
{
    if (h->fail != NULL) {
        PyObject *r = PyObject_CallFunction(h->fail, "i", write && !h->closed ? 1 : 0);
        Py_XDECREF(r);
    }
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "operation on a closed filter");
    return NULL;
}

/* End of a call counted in busy: the image export goes once the handle is closed and no
 * call is in flight. */
static void h_leave(Handle *h)
{
    if (--h->busy == 0 && h->closed)
        h_release_image(h);
}

/* Add delta to the items word by the rule of mmapbloom.items.items_update: clamped to
 * [0, 2**32 - 1], never moving again once saturated.  Returns 1 (and the stored count)
 * when the count is past the design point and this handle has not warned yet.  The caller
 * holds the write lock. */
static int items_bump(Handle *h, long long delta, uint32_t *stored)
{
    const uint32_t count = items_load(h->items);
    long long total;
    if (count == MAX_ITEMS || delta == 0)
        return 0;
    total = (long long)count + delta;
    total = total < 0 ? 0 : total > (long long)MAX_ITEMS ? (long long)MAX_ITEMS : total;
    items_store(h->items, (uint32_t)total);
    *stored = (uint32_t)total;
    return !h->warned && (double)total > h->warn_at;
}

/* The warnings of a write, after the lock is released.  depth: Python frames between
 * the callback and the user's call, beyond one (0: called from a filter method written in
 * Python; -1: from FilterBase, straight from the user's code). */
static int h_warn(Handle *h, int over, uint32_t stored, int sat, int depth)
{
    PyObject *r;
    if (over && !h->warned && h->over != NULL) {
        h->warned = 1;
        r = PyObject_CallFunction(h->over, "ki", (unsigned long)stored, depth);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (sat && h->saturated != NULL && h->saturated != Py_None) {
        r = PyObject_CallFunction(h->saturated, "i", depth);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Take the write lock for a write: the uncontended path in C, else WriteLock.acquire.
 * Returns LOCK_HELD or LOCK_TAKEN, or -1 with an exception set. */
static int h_lock(Handle *h)
{
    int state = lock_try(h->lock);
    if (state != LOCK_SLOW)
        return state;
    h->busy++;
    state = lock_wait(h->lock);
    h->busy--;
    if (state < 0) {
        if (h->busy == 0 && h->closed)
            h_release_image(h);
        return -1;
    }
    if (h->closed) {   /* closed while this thread waited (WriteLock saw it first, normally) */
        lock_release(h->lock);
        if (h->busy == 0)
            h_release_image(h);
        h_refuse(h, 0);
        return -1;
    }
    return LOCK_TAKEN;
}

/* Raise for a fault of the mapping inside a guarded section (the file was truncated under
 * the open handle): LengthMismatchError through fail(3), which compares the file's size
 * with the mapping.  The caller released what it held. */
static PyObject *h_faulted(Handle *h)
{
    if (h->fail != NULL) {
        PyObject *r = PyObject_CallFunction(h->fail, "i", 3);
        Py_XDECREF(r);
    }
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_OSError, "a touch of the filter's mapping faulted (SIGBUS): the file was truncated "
                                       "under the open handle");
    return NULL;
}

/* ---- guarded sections: every touch of the mapping (see "the SIGBUS guard") -------------- */

/* The cells and items word of one write (the lock is held): op 0 adds (n = k positions),
 * op 1 removes (n distinct positions).  0, or -1: the mapping faulted. */
static int g_write_one(Handle *h, const uint64_t *pos, unsigned n, int op, int *fresh, int *sat, int *removed,
                       int *over, uint32_t *stored)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    if (op == 0) {
        if (h->width == 1)
            *fresh = bloom_set(h->body, pos, n);
        else
            count_inc(h->body, h->width, pos, n, fresh, sat);
        if (*fresh)
            *over = items_bump(h, 1, stored);
    } else {
        *removed = count_dec(h->body, h->width, pos, n);
        if (*removed > 0)
            *over = items_bump(h, -1, stored);
    }
    GUARD_END();
    return 0;
}

/* The probes of one query (pos has room for k; its head is computed): 1 present, 0
 * absent (stops at the first zero cell; the rest of the positions lazily), -1 faulted. */
static int g_contains(Handle *h, const uint64_t hv[2], uint64_t *pos, unsigned head)
{
    const unsigned k = h->g.k;
    int present;
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    present = probe_range(h->body, h->width, pos, 0, head);
    if (present && head < k) {
        positions_n(&h->g, hv, pos, head, k);
        present = probe_range(h->body, h->width, pos, head, k);
    }
    GUARD_END();
    return present;
}

/* The minimum of a key's counters into *low: 0, or -1 faulted. */
static int g_count_min(Handle *h, const uint64_t *pos, unsigned *low)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    *low = count_min_of(h->body, h->width, pos, h->g.k);
    GUARD_END();
    return 0;
}

/* A key's positions into pos (k values; pos has SMALL_K room, else heap in *heap). */
static uint64_t *h_positions(Handle *h, PyObject *key, uint64_t *small)
{
    uint64_t hv[2], *pos = small;
    if (hash_object(key, hv) < 0)   /* the one key rule: str, bytes-like, int, else encode_key */
        return NULL;
    if (h->g.k > SMALL_K && (pos = PyMem_Malloc(h->g.k * sizeof *pos)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    positions_of(&h->g, hv, pos);
    return pos;
}

PyDoc_STRVAR(h_add_doc,
"add(key, /)\n--\n\n"
"Add one key under the write lock; True if it was new (some bit was 0 / some counter was 0).\n"
"Atomic across threads and processes; the items word is bumped under the same lock.");

/* op: 0 add, 1 remove (counting) */
static PyObject *h_write_one(Handle *h, PyObject *key, int op, int depth)
{
    uint64_t small[SMALL_K], *pos;
    int state, fresh = 0, sat = 0, over = 0, removed = 0;
    uint32_t stored = 0;
    unsigned n;
    if (h->closed || !h->writable)
        return h_refuse(h, 1);
    if ((pos = h_positions(h, key, small)) == NULL)
        return NULL;
    n = h->width == 1 ? h->g.k : distinct(pos, h->g.k);
    state = h_lock(h);
    if (state < 0)
        goto fail;
    if (g_write_one(h, pos, n, op, &fresh, &sat, &removed, &over, &stored) < 0) {
        if (state == LOCK_TAKEN && lock_release(h->lock) < 0)
            goto fail;
        h_faulted(h);
        goto fail;
    }
    if (state == LOCK_TAKEN && lock_release(h->lock) < 0)
        goto fail;
    if (pos != small)
        PyMem_Free(pos);
    if ((over || sat) && h_warn(h, over, stored, sat, depth) < 0)
        return NULL;
    if (op == 0)
        return PyBool_FromLong(fresh);
    return PyLong_FromLong(removed);
fail:
    if (pos != small)
        PyMem_Free(pos);
    return NULL;
}

static PyObject *h_add(Handle *h, PyObject *key)
{
    return h_write_one(h, key, 0, 0);
}

PyDoc_STRVAR(h_remove_doc,
"remove(key, /)\n--\n\n"
"Counting handles: decrement the key's distinct counters under the write lock.  Returns -1\n"
"(a counter is 0: certainly absent, nothing changed), 1 (some counter returned to 0; the\n"
"items word is decremented) or 0.");

static PyObject *h_remove(Handle *h, PyObject *key)
{
    if (h->width == 1)
        return PyErr_Format(PyExc_TypeError, "remove needs a counting handle");
    return h_write_one(h, key, 1, 0);
}

PyDoc_STRVAR(h_contains_doc,
"contains(key, /)\n--\n\n"
"True if every bit (counter) of the key is set (non-zero); stops at the first 0.  No lock.");

/* 1: the key may be present, 0: certainly absent, -1: error. */
static int h_contains_int(Handle *h, PyObject *key)
{
    const unsigned k = h->g.k, head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    uint64_t hv[2], small[SMALL_K], *pos = small;
    int present;
    if (h->closed) {
        h_refuse(h, 0);
        return -1;
    }
    if (hash_object(key, hv) < 0)   /* the one key rule: str, bytes-like, int, else encode_key */
        return -1;
    if (h->closed) {   /* encode_key ran Python: another thread may have closed (and unmapped) */
        h_refuse(h, 0);
        return -1;
    }
    /* Room for k positions before the guarded probes (which allocate nothing). */
    if (k > SMALL_K && (pos = PyMem_Malloc(k * sizeof *pos)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Lazily: the head positions first; an absent key usually stops there. */
    positions_n(&h->g, hv, pos, 0, head);
    present = g_contains(h, hv, pos, head);
    if (pos != small)
        PyMem_Free(pos);
    if (present < 0)
        h_faulted(h);
    return present;
}

static PyObject *h_contains(Handle *h, PyObject *key)
{
    const int present = h_contains_int(h, key);
    return present < 0 ? NULL : PyBool_FromLong(present);
}

PyDoc_STRVAR(h_count_doc,
"count(key, /)\n--\n\n"
"Counting handles: the minimum of the key's counters (0: certainly absent).  No lock.");

static PyObject *h_count(Handle *h, PyObject *key)
{
    uint64_t small[SMALL_K], *pos;
    unsigned low = 0;
    int faulted;
    if (h->width == 1)
        return PyErr_Format(PyExc_TypeError, "count needs a counting handle");
    if (h->closed)
        return h_refuse(h, 0);
    if ((pos = h_positions(h, key, small)) == NULL)
        return NULL;
    if (h->closed) {   /* the key's encoding may have run Python, and another thread closed */
        if (pos != small)
            PyMem_Free(pos);
        return h_refuse(h, 0);
    }
    faulted = g_count_min(h, pos, &low);
    if (pos != small)
        PyMem_Free(pos);
    if (faulted < 0)
        return h_faulted(h);
    return PyLong_FromUnsignedLong(low);
}

/* ---- batches over resolved keys ------------------------------------------------------- */

/* A batch's keys.  From a Python sequence they are resolved once, every key validated by
 * encode_key's rule before any cell changes: refs[i] is key i's bytes, every object pinned
 * until keys_end (the tuple holds the items; bytearray / memoryview keys of a query hold
 * buffer exports; an exact int's 8 bytes are in scratch; the bytes of any other key, and
 * of a bytearray / memoryview key of an add batch, are new bytes objects held by owned).
 * From a Column (see _columns.h; it pins its numpy / Arrow buffers and is referenced until
 * keys_end) they are read in place one chunk at a time by keys_chunk, into refs (room for
 * HANDLE_CHUNK_KEYS keys) and scratch (8 bytes a key, for integer keys); a null key has
 * ptr == NULL: never added, never found. */
typedef struct {
    PyObject *tuple;
    PyObject *column;
    PyObject *owned;    /* list of bytes objects refs point into, or NULL */
    PyObject *encode;   /* mmapbloom.hashing.encode_key, looked up once a batch, or NULL */
    mb_key *refs;
    char *scratch;
    Py_buffer *views;
    Py_ssize_t n, nviews;
} keyset;

static void keys_end(keyset *ks)
{
    while (ks->nviews > 0)
        PyBuffer_Release(&ks->views[--ks->nviews]);
    PyMem_Free(ks->views);
    PyMem_Free(ks->refs);
    PyMem_Free(ks->scratch);
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

/* The keys [start, start + c) of the batch (c <= HANDLE_CHUNK_KEYS for a column): a column
 * chunk is filled now (no GIL needed, never fails), valid until the next call. */
static const mb_key *keys_chunk(keyset *ks, Py_ssize_t start, Py_ssize_t c)
{
    if (ks->column == NULL)
        return ks->refs + start;
    if (c > 0)
        mb_column_fill(ks->column, start, c, ks->refs, ks->scratch);
    return ks->refs;
}

static int keys_from_python(keyset *ks, PyObject *keys, int copy_mutable);

/* Any batch: a Column (read in place by chunks) or a Python iterable (keys_from_python;
 * copy_mutable: an add batch, whose bytearray / memoryview keys are copied). */
static int keys_begin(keyset *ks, PyObject *keys, int copy_mutable)
{
    Py_ssize_t room;
    if (!mb_column_check(keys))
        return keys_from_python(ks, keys, copy_mutable);
    ks->tuple = NULL;
    ks->views = NULL;
    ks->owned = NULL;
    ks->encode = NULL;
    ks->nviews = 0;
    Py_INCREF(keys);
    ks->column = keys;
    ks->n = mb_column_len(keys);
    room = ks->n < HANDLE_CHUNK_KEYS ? (ks->n ? ks->n : 1) : HANDLE_CHUNK_KEYS;
    ks->refs = PyMem_Malloc((size_t)room * sizeof *ks->refs);
    ks->scratch = PyMem_Malloc((size_t)room * 8);
    if (ks->refs == NULL || ks->scratch == NULL) {
        keys_end(ks);
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
 * (the one rule, with its messages: TypeError, OverflowError, UnicodeEncodeError). */
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
 * A list is copied to a tuple so it cannot change under a GIL-released stage. */
static int keys_from_python(keyset *ks, PyObject *keys, int copy_mutable)
{
    Py_ssize_t i, cap = 0;
    ks->refs = NULL;
    ks->views = NULL;
    ks->nviews = 0;
    ks->column = NULL;
    ks->scratch = NULL;
    ks->owned = NULL;
    ks->encode = NULL;
    if (PyTuple_CheckExact(keys)) {
        Py_INCREF(keys);
        ks->tuple = keys;
    } else if (PyList_CheckExact(keys)) {
        ks->tuple = PyList_AsTuple(keys);
    } else {
        ks->tuple = PySequence_Tuple(keys);
    }
    if (ks->tuple == NULL)
        return -1;
    ks->n = PyTuple_GET_SIZE(ks->tuple);
    ks->refs = PyMem_Malloc((size_t)(ks->n ? ks->n : 1) * sizeof *ks->refs);
    if (ks->refs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (i = 0; i < ks->n; i++) {
        PyObject *o = PyTuple_GET_ITEM(ks->tuple, i);
        mb_key *r = &ks->refs[i];
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
        } else if (key_owned(ks, o, r) < 0) {
            goto fail;
        }
    }
    return 0;
fail:
    keys_end(ks);
    return -1;
}

/* Hash the keys [0, n) of refs into rows (k positions each); null keys get no row use. */
static void stage_rows(const geom *g, const mb_key *refs, size_t n, uint64_t *rows)
{
    size_t i;
    uint64_t hv[2];
    for (i = 0; i < n; i++) {
        if (refs[i].ptr == NULL)
            continue;
        hash_key(&refs[i], hv);
        positions_of(g, hv, rows + i * g->k);
    }
}

/* Test-and-set the staged rows in order (the lock is held): out[i] = key i was new.
 * Returns the number of new keys; *sat |= some counter saturated. */
static Py_ssize_t commit_rows(Handle *h, const mb_key *refs, size_t n, uint64_t *rows, uint8_t *out, int *sat)
{
    const unsigned k = h->g.k;
    const int width = h->width;
    uint8_t *body = h->body;
    Py_ssize_t total = 0;
    size_t i;
    unsigned j;
    for (i = 0; i < n && i < AHEAD; i++)
        if (refs[i].ptr != NULL)
            for (j = 0; j < k; j++)
                PREFETCH_W(body + byte_of(width, rows[i * k + j]));
    for (i = 0; i < n; i++) {
        uint64_t *row = rows + i * k;
        int fresh = 0;
        if (i + AHEAD < n && refs[i + AHEAD].ptr != NULL)
            for (j = 0; j < k; j++)
                PREFETCH_W(body + byte_of(width, row[(size_t)AHEAD * k + j]));
        if (refs[i].ptr != NULL) {
            if (width == 1)
                fresh = bloom_set(body, row, k);
            else
                count_inc(body, width, row, distinct(row, k), &fresh, sat);
        }
        if (out != NULL)
            out[i] = (uint8_t)fresh;
        total += fresh;
    }
    return total;
}

/* A chunk's commit and its count (the lock is held): 0, or -1 the mapping faulted (cells
 * of the chunk may be set, its count is not bumped). */
static int g_commit(Handle *h, const mb_key *refs, size_t n, uint64_t *rows, uint8_t *out, int *sat,
                    Py_ssize_t *fresh, int *over, uint32_t *stored)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    *fresh = commit_rows(h, refs, n, rows, out, sat);
    *over = *fresh ? items_bump(h, *fresh, stored) : 0;
    GUARD_END();
    return 0;
}

/* Tell the caller how far a failed batch got (every exception leaving add_many). */
static void note_committed(Py_ssize_t committed)
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

/* The batch writer over resolved keys: chunks of HANDLE_CHUNK_KEYS keys (fewer for a
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
    if (chunk > HANDLE_CHUNK_KEYS)
        chunk = HANDLE_CHUNK_KEYS;
    if (chunk < 1)
        chunk = 1;
    if (chunk > n)
        chunk = n ? n : 1;
    rows = PyMem_Malloc((size_t)chunk * k * sizeof *rows);
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
            refs = keys_chunk(ks, start, c);
            stage_rows(&h->g, refs, (size_t)c, rows);
            Py_END_ALLOW_THREADS
        } else {
            refs = keys_chunk(ks, start, c);
            stage_rows(&h->g, refs, (size_t)c, rows);
        }
        if (h->closed) {
            h_refuse(h, 0);
            goto fail;
        }
        state = h_lock(h);
        if (state < 0)
            goto fail;
        fresh = 0;
        o = 0;
        if (g_commit(h, refs, (size_t)c, rows, out ? out + start : NULL, &sat, &fresh, &o, &s) < 0) {
            if (state == LOCK_TAKEN && lock_release(h->lock) < 0)
                goto fail;
            h_faulted(h);
            goto fail;
        }
        if (o) {
            over = 1;
            stored = s;
        }
        committed = start + c;
        total += fresh;
        if (state == LOCK_TAKEN && lock_release(h->lock) < 0)
            goto fail;
        /* An interrupt lands between chunks (or after the last one, still inside this call,
         * so the exception carries committed_items), never between a chunk's cells and
         * its count. */
        if (PyErr_CheckSignals() < 0)
            goto fail;
    }
    h_leave(h);
    PyMem_Free(rows);
    if ((over || sat) && h_warn(h, over, stored, sat, 0) < 0)
        return -1;
    return total;
fail:
    note_committed(committed);
    h_leave(h);
    PyMem_Free(rows);
    if (over) {
        /* The warning of the committed chunks goes now, not with the next (unrelated) add;
         * one turned into an error (-W error) never replaces the exception in flight. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (h_warn(h, over, stored, 0, 0) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return -1;
}

/* out argument: None, or a writable buffer of n bytes. */
static int get_out(PyObject *obj, Py_ssize_t n, Py_buffer *out)
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

PyDoc_STRVAR(h_add_many_doc,
"add_many(keys, out=None, /)\n--\n\n"
"Add every key of keys (any iterable, or a Column: read in place chunk by chunk, a null key\n"
"never added and answered 0) in order, as sequential add() calls; returns the\n"
"number of new keys, and out (a writable buffer of len(keys) bytes) gets 1 where a key was\n"
"new.  Every key is validated before any cell changes.  The write lock is taken once per\n"
"chunk of up to 65536 keys, hashed before the lock is taken; an exception leaving it\n"
"carries committed_items (how many leading keys were committed).");

static PyObject *h_add_many(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    int have_out = 0;
    Py_ssize_t fresh;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "add_many() takes 1 or 2 arguments (%zd given)", nargs);
    if (h->closed || !h->writable)
        return h_refuse(h, 1);
    if (keys_begin(&ks, args[0], 1) < 0)
        return NULL;
    if (nargs == 2 && args[1] != Py_None) {
        if (get_out(args[1], ks.n, &out) < 0) {
            keys_end(&ks);
            return NULL;
        }
        have_out = 1;
    }
    fresh = h_add_keys(h, &ks, have_out ? out.buf : NULL);
    if (have_out)
        PyBuffer_Release(&out);
    keys_end(&ks);
    return fresh < 0 ? NULL : PyLong_FromSsize_t(fresh);
}

PyDoc_STRVAR(h_contains_many_doc,
"contains_many(keys, out, /)\n--\n\n"
"out[i] = 1 if key i may be present, else 0 (out: a writable buffer of len(keys) bytes;\n"
"keys: any iterable, or a Column, whose null keys answer 0).\n"
"No lock; the keys are resolved and pinned first, then hashing and probing run without the\n"
"GIL (from 256 keys on).");

/* query_run over a batch: at once for resolved Python keys, chunk by chunk for a Column.
 * Needs no GIL. */
static void query_keys(Handle *h, keyset *ks, uint64_t *ring, uint8_t *out)
{
    const Py_ssize_t n = ks->n, step = ks->column != NULL ? HANDLE_CHUNK_KEYS : (n ? n : 1);
    Py_ssize_t start;
    for (start = 0; start < n; start += step) {
        const Py_ssize_t c = n - start < step ? n - start : step;
        query_run(h->body, h->width, &h->g, keys_chunk(ks, start, c), (size_t)c, ring, out + start);
    }
}

/* query_keys in a guarded section (with or without the GIL): 0, or -1 faulted. */
static int g_query(Handle *h, keyset *ks, uint64_t *ring, uint8_t *out)
{
    GUARD_DECL(gd);
    GUARD_BEGIN(gd, h->image.buf, h->image.len)
        return -1;
    query_keys(h, ks, ring, out);
    GUARD_END();
    return 0;
}

static PyObject *h_contains_many(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    keyset ks;
    Py_buffer out;
    uint64_t *ring;
    int faulted;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "contains_many() takes 2 arguments (%zd given)", nargs);
    if (h->closed)
        return h_refuse(h, 0);
    if (keys_begin(&ks, args[0], 0) < 0)
        return NULL;
    if (get_out(args[1], ks.n, &out) < 0) {
        keys_end(&ks);
        return NULL;
    }
    ring = PyMem_Malloc((size_t)AHEAD * h->g.k * sizeof *ring);
    if (ring == NULL) {
        PyBuffer_Release(&out);
        keys_end(&ks);
        return PyErr_NoMemory();
    }
    if (h->closed) {   /* keys_begin / get_out may have run Python, and another thread closed */
        PyMem_Free(ring);
        PyBuffer_Release(&out);
        keys_end(&ks);
        return h_refuse(h, 0);
    }
    h->busy++;
    if (ks.n >= GIL_MIN_KEYS) {
        Py_BEGIN_ALLOW_THREADS
        faulted = g_query(h, &ks, ring, out.buf);
        Py_END_ALLOW_THREADS
    } else {
        faulted = g_query(h, &ks, ring, out.buf);
    }
    h_leave(h);
    PyMem_Free(ring);
    PyBuffer_Release(&out);
    keys_end(&ks);
    if (faulted < 0)
        return h_faulted(h);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(h_close_doc,
"close()\n--\n\n"
"Refuse every later call (FilterClosedError through fail) and release the image export, at\n"
"once or when the calls in flight end.  Idempotent.");

static PyObject *h_close(Handle *h, PyObject *unused)
{
    (void)unused;
    h->closed = 1;
    if (h->busy == 0)
        h_release_image(h);
    Py_RETURN_NONE;
}

static PyObject *h_get_closed(Handle *h, void *unused)
{
    (void)unused;
    return PyBool_FromLong(h->closed);
}

static PyObject *h_get_warned(Handle *h, void *unused)
{
    (void)unused;
    return PyBool_FromLong(h->warned);
}

static int h_set_warned(Handle *h, PyObject *v, void *unused)
{
    int t;
    (void)unused;
    if (v == NULL || (t = PyObject_IsTrue(v)) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cannot delete warned");
        return -1;
    }
    h->warned = t;
    return 0;
}

static PyObject *h_get_backend(Handle *h, void *unused)
{
    (void)h;
    (void)unused;
    return PyUnicode_FromString("native");
}

static PyGetSetDef h_getset[] = {
    {"closed", (getter)h_get_closed, NULL, "True after close().", NULL},
    {"warned", (getter)h_get_warned, (setter)h_set_warned, "The over-capacity warning was emitted.", NULL},
    {"backend", (getter)h_get_backend, NULL, "\"native\".", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef h_methods[] = {
    {"add", (PyCFunction)h_add, METH_O, h_add_doc},
    {"contains", (PyCFunction)h_contains, METH_O, h_contains_doc},
    {"add_many", (PyCFunction)(void (*)(void))h_add_many, METH_FASTCALL, h_add_many_doc},
    {"contains_many", (PyCFunction)(void (*)(void))h_contains_many, METH_FASTCALL, h_contains_many_doc},
    {"remove", (PyCFunction)h_remove, METH_O, h_remove_doc},
    {"count", (PyCFunction)h_count, METH_O, h_count_doc},
    {"close", (PyCFunction)h_close, METH_NOARGS, h_close_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Handle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)h_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Handle(image, header_size, items_offset, strategy_id, m, k, width, writable, lock, warn_at, fail,\n"
              "       over, saturated)\n--\n\n"
              "One open filter bound once: the image buffer (exported once), the cells at header_size, the\n"
              "items word at items_offset, the geometry and the LockState of its WriteLock.  Its methods\n"
              "are the hot API (add, contains, add_many, contains_many, remove, count).  fail(kind) raises\n"
              "the filter's errors, over(count) and saturated() emit its warnings.",
    .tp_traverse = (traverseproc)h_traverse,
    .tp_clear = (inquiry)h_clear,
    .tp_methods = h_methods,
    .tp_getset = h_getset,
    .tp_new = h_new,
};


/* ---- FilterBase: the hot API of the filter classes, without a Python frame ----------- */

/* The base class of mmapbloom.base.MappedFilter on the native backend: it holds the
 * filter's handle (_h) and implements add, might_contain and `in` by calling it directly,
 * so `x in f` and `f.add(x)` cost one C call and no Python frame.  A handle that is not
 * a native Handle (the pure one, for a custom strategy) is called through its methods. */
typedef struct {
    PyObject_HEAD
    PyObject *h;
} FilterBase;

static int fb_traverse(FilterBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->h);
    return 0;
}

static int fb_clear(FilterBase *self)
{
    Py_CLEAR(self->h);
    return 0;
}

static void fb_dealloc(FilterBase *self)
{
    PyObject_GC_UnTrack(self);
    fb_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fb_handle(FilterBase *self)
{
    if (self->h == NULL)
        PyErr_SetString(PyExc_ValueError, "operation on a closed filter (no handle attached)");
    return self->h;
}

PyDoc_STRVAR(fb_add_doc,
"add(item, /)\n--\n\n"
"Add one item (str, hashed as UTF-8, bytes-like, or int: mmapbloom.hashing.encode_key's\n"
"rule); return True if it was new (some bit\n"
"was 0; for a counting filter, some counter was 0).\n\n"
"An atomic test-and-set across threads and processes: when several add the same new item\n"
"at once, exactly one gets True.  Cost: one hash and k cell operations under the write\n"
"lock, taken and released in C when it is free (one flock pair unless the caller holds\n"
"write_lock()); the items counter is bumped under the same lock.  Counting filters:\n"
"saturated counters stay at their maximum (SaturationWarning once per handle).\n"
"OverCapacityWarning once per handle past the design point.\n\n"
"Raises TypeError (another item type), UnicodeEncodeError (a str with lone surrogates),\n"
"ReadOnlyFilterError, FilterClosedError, SelfDeadlockError (this thread holds the\n"
"file's lock through another handle), LengthMismatchError (the file was truncated under\n"
"the open handle: the touch of the mapping is guarded, never SIGBUS).");

static PyObject *fb_add(FilterBase *self, PyObject *key)
{
    PyObject *h = fb_handle(self), *r;
    if (h == NULL)
        return NULL;
    Py_INCREF(h);   /* the call may run Python, which may rebind or delete self._h */
    if (Py_IS_TYPE(h, &Handle_Type))
        r = h_write_one((Handle *)h, key, 0, -1);
    else
        r = PyObject_CallMethod(h, "add", "Oi", key, 0);
    Py_DECREF(h);
    return r;
}

static int fb_contains_int(FilterBase *self, PyObject *key)
{
    PyObject *h = fb_handle(self), *r;
    int t;
    if (h == NULL)
        return -1;
    Py_INCREF(h);   /* the call may run Python, which may rebind or delete self._h */
    if (Py_IS_TYPE(h, &Handle_Type)) {
        t = h_contains_int((Handle *)h, key);
    } else if ((r = PyObject_CallMethod(h, "contains", "O", key)) == NULL) {
        t = -1;
    } else {
        t = PyObject_IsTrue(r);
        Py_DECREF(r);
    }
    Py_DECREF(h);
    return t;
}

PyDoc_STRVAR(fb_might_contain_doc,
"might_contain(item, /)\n--\n\n"
"True if item (str, bytes-like or int) may have been added; False only if it certainly was not\n"
"(no false negatives).  Same as `item in f`.  Takes no lock; computes positions lazily and\n"
"stops at the first zero cell: one hash and at most k cell reads (fewer for most absent\n"
"items).\n\n"
"Raises TypeError (an item of another type, bool, float, None), OverflowError (an int outside\n"
"[-2**63, 2**64)), FilterClosedError, LengthMismatchError (the file was truncated under the\n"
"open handle).");

static PyObject *fb_might_contain(FilterBase *self, PyObject *key)
{
    const int present = fb_contains_int(self, key);
    return present < 0 ? NULL : PyBool_FromLong(present);
}

static PyMethodDef fb_methods[] = {
    {"add", (PyCFunction)fb_add, METH_O, fb_add_doc},
    {"might_contain", (PyCFunction)fb_might_contain, METH_O, fb_might_contain_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef fb_members[] = {
    {"_h", T_OBJECT, offsetof(FilterBase, h), 0, "the filter's handle (mmapbloom.handle.attach)"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods fb_as_sequence = {
    .sq_contains = (objobjproc)fb_contains_int,
};

static PyTypeObject FilterBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.FilterBase",
    .tp_basicsize = sizeof(FilterBase),
    .tp_dealloc = (destructor)fb_dealloc,
    .tp_as_sequence = &fb_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FilterBase()\n--\n\n"
              "Base class of mmapbloom's filters on the native backend: add, might_contain and `in` go\n"
              "straight to the filter's handle (_h), with no Python frame.",
    .tp_traverse = (traverseproc)fb_traverse,
    .tp_clear = (inquiry)fb_clear,
    .tp_methods = fb_methods,
    .tp_members = fb_members,
    .tp_new = PyType_GenericNew,
};

/* ---- guarded scans: whole-range reads and writes of a mapping (mmapbloom/scans.py) ------ */

/* The filters' scans of a mapped cell array (statistics over blocks, union / intersection,
 * the counting sum, to_bloom, to_bytes, __eq__, check's reads, merge_into's writes) run
 * through these three functions, each a guarded section (see "the SIGBUS guard") over its
 * buffers: a file truncated under the open handle during the scan makes the call answer
 * "faulted" (False / None) instead of killing the process; mmapbloom.scans then raises
 * LengthMismatchError.  numpy does its work on the private copies these make.  The guard's
 * range is the hull of the two buffers: inside the section this thread touches only them,
 * so a fault in the hull is theirs.  The GIL is released while the bytes move (the Py_buffer
 * exports keep both buffers alive: a mapping with an export cannot be unmapped). */

enum { SCAN_COPY = 0, SCAN_OR = 1, SCAN_AND = 2, SCAN_ADD8 = 3, SCAN_ADD4 = 4, SCAN_EQ = 5 };

/* One loop per op, byte-wise over restrict pointers (GCC -O3 vectorizes each); on x86 a
 * second AVX2 build of the four, chosen at run time (as popcount chooses popcnt). */
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

PyDoc_STRVAR(scan_doc,
"scan($module, dst, dst_offset, src, src_offset, count, op, /)\n--\n\n"
"Guarded ``dst[dst_offset:+count] op= src[src_offset:+count]``: op 0 copies, 1 ORs, 2 ANDs,\n"
"3 adds bytes saturating at 255, 4 adds two 4-bit counters per byte saturating at 15;\n"
"5 compares only (dst may be read-only).  Returns True, or False when a buffer faulted\n"
"(SIGBUS: a mapped file truncated under it; dst is then partly written); op 5: 1 when the\n"
"ranges are equal, 0 when not, None when a buffer faulted.  dst must be writable (ops 0-4);\n"
"both C-contiguous and not overlapping.  Raises ValueError for a range outside a buffer or an\n"
"unknown op.  Releases the GIL.");

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

static PyObject *k_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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

PyDoc_STRVAR(scan_bytes_doc,
"scan_bytes($module, src, offset, count, /)\n--\n\n"
"A new ``bytes`` holding ``src[offset:offset + count]``, copied in a guarded section; None\n"
"when the buffer faulted (SIGBUS: a mapped file truncated under it).  Raises ValueError for\n"
"a range outside the buffer, MemoryError.  Releases the GIL while copying.");

static PyObject *k_scan_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
    FAST(scan),
    FAST(scan_bytes),
#ifndef _WIN32
    ONE(flock_try),
    ONE(flock_unlock),
#endif
    {NULL, NULL, 0, NULL},
};

static int kernel_exec(PyObject *module)
{
    if (PyType_Ready(&LockState_Type) < 0 || PyType_Ready(&Handle_Type) < 0 || PyType_Ready(&FilterBase_Type) < 0)
        return -1;
    Py_INCREF(&FilterBase_Type);
    if (PyModule_AddObject(module, "FilterBase", (PyObject *)&FilterBase_Type) < 0) {
        Py_DECREF(&FilterBase_Type);
        return -1;
    }
    Py_INCREF(&LockState_Type);
    if (PyModule_AddObject(module, "LockState", (PyObject *)&LockState_Type) < 0) {
        Py_DECREF(&LockState_Type);
        return -1;
    }
    Py_INCREF(&Handle_Type);
    if (PyModule_AddObject(module, "Handle", (PyObject *)&Handle_Type) < 0) {
        Py_DECREF(&Handle_Type);
        return -1;
    }
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
"GIL-keeping flock.  Results are identical to the pure-Python reference path.  The first\n"
"Handle installs a process-wide SIGBUS handler (chained to the previous one) that turns a\n"
"fault of a handle's mapping (a file truncated under it) into LengthMismatchError.");

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
