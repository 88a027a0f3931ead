/* mmapbloom/_positions.h: the hash strategies and a key's positions (plain C, no Python state).
 *
 * Strategies (ids are frozen: 1 = M3KM, 2 = M3MX, 3 = M3BL, 4 = M3M2, 5 = M3B2).  With
 * (h1, h2) = MurmurHash3_x64_128(key, seed 0) and all arithmetic in unsigned 64 bits:
 *   M3KM  Kirsch-Mitzenmacher double hashing (Kirsch & Mitzenmacher 2006, "Less hashing,
 *         same performance"): pos_i = (h1 mod m + i * (1 + h2 mod (m - 1))) mod m, exact;
 *         every position is 0 when m == 1.
 *   M3MX  pos_i = mb_mulhi64(fmix64(h1 + i * h2), m): a remixed double hash reduced to [0, m)
 *         by Lemire's multiply-shift ("Fast random integer generation in an interval",
 *         ACM TOMACS 2019), which needs no division.
 *   M3BL  blocked Bloom filter (Putze, Sanders & Singler 2007, "Cache-, hash- and
 *         space-efficient Bloom filters"): one 512-bit block chosen by
 *         mb_mulhi64(h1, m / 512), then k bits inside it from the top 9 bits of successive
 *         Weyl/Fibonacci products y_i = h2 * 0x9E3779B97F4A7C15^i.  m % 512 == 0.
 *   M3M2  M3MX with an odd step h2 | 1 (the default): h1 + i * (h2 | 1) takes k distinct
 *         values, so no key's probes collapse (under M3MX, h2 == 0, e.g. the empty key,
 *         puts all k probes on one bit).
 *   M3B2  M3BL with an odd multiplier seed y_0 = h2 | 1 (never 0, so the k bits of a key
 *         never all fall on bit 0 of its block).
 *
 * The pure-Python reference (mmapbloom/hashing.py) gives exactly the same positions.  The
 * position code is inline here (it runs per key inside every batch loop); the checked
 * geometry and the golden-value functions hash128() and positions() are in _positions.c. */
#ifndef MMAPBLOOM_POSITIONS_H
#define MMAPBLOOM_POSITIONS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_keys.h"
#include "_murmur3.h"

enum { S_M3KM = 1, S_M3MX = 2, S_M3BL = 3, S_M3M2 = 4, S_M3B2 = 5, S_LAST = S_M3B2 };

/* Blocked strategies: all k positions of a key in one BLOCK_BITS block (m % BLOCK_BITS == 0). */
#define STRATEGY_BLOCKED(s) ((s) == S_M3BL || (s) == S_M3B2)

#define MAX_K 4096         /* largest accepted number of hash functions */
#define BLOCK_BITS 512     /* M3BL block size in bits (64 bytes: one cache line if the body is aligned) */
#define SMALL_K 64         /* positions a per-item call keeps on the stack (more: PyMem_Malloc) */

/* What a kernel needs to know about the filter. */
typedef struct {
    int strategy;   /* S_M3KM .. S_LAST */
    uint64_t m;     /* number of bits / cells, >= 1 (a multiple of 512 when STRATEGY_BLOCKED) */
    unsigned k;     /* number of positions per key, 1..MAX_K */
} geom;

/* The high 64 bits of the 128-bit product a * b. */
static inline uint64_t mb_mulhi64(uint64_t a, uint64_t b)
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

/* MurmurHash3_x64_128 (seed 0) of a key's bytes into h[0], h[1]; an 8-byte key (ints,
 * int64 columns) takes the fixed-length body, same value. */
static inline void mb_hash_key(const mb_key *key, uint64_t h[2])
{
    if (key->len == 8) {
        uint64_t word;
        memcpy(&word, key->ptr, 8);
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        mmb_murmur3_x64_128_8(word, h);
        return;
    }
    mmb_murmur3_x64_128((const uint8_t *)key->ptr, (size_t)key->len, 0, h);
}

/* Positions [first, count) (count <= g->k) of a key whose MurmurHash3 halves are h[0],
 * h[1]: queries compute the head first and the rest only when the head's bits are set.
 * pos has room for count values; pos[0, first) may be rewritten with the same values (the
 * sequential strategies restart from 0; M3MX / M3M2, whose positions are independent,
 * skip them). */
static inline void mb_positions_n(const geom *g, const uint64_t h[2], uint64_t *pos, unsigned first, unsigned count)
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
            pos[i] = mb_mulhi64(mmb_fmix64(h[0] + (uint64_t)i * b), m);
        return;
    }
    default: { /* S_M3BL, S_M3B2 */
        const uint64_t base = mb_mulhi64(h[0], m / BLOCK_BITS) * BLOCK_BITS;
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
static inline void mb_positions(const geom *g, const uint64_t h[2], uint64_t *pos)
{
    mb_positions_n(g, h, pos, 0, g->k);
}

/* strategy id, m, k (Python ints) -> *g, with every range check; -1 with ValueError /
 * TypeError. */
int mb_parse_geom(PyObject *sid, PyObject *m, PyObject *k, geom *g);

/* The module functions hash128(key) (METH_O) and positions(strategy_id, key, m, k)
 * (METH_FASTCALL): golden values for the tests and tools. */
PyObject *mb_hash128(PyObject *module, PyObject *key);
PyObject *mb_positions_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
extern const char mb_hash128_doc[], mb_positions_doc[];

#endif /* MMAPBLOOM_POSITIONS_H */
