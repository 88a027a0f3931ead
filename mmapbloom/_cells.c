/* mmapbloom/_cells.c: Bloom bits and 4-/8-bit counters, one key at a time and in batches
 * (layouts and the pipeline in _cells.h). */
#include "_cells.h"

#include <string.h>

/* MMB_NO_PREFETCH (a -D flag) turns prefetching off, for measurements. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MMB_NO_PREFETCH)
#define PREFETCH_R(p) __builtin_prefetch((p), 0, 3)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH_R(p) ((void)(p))
#define PREFETCH_W(p) ((void)(p))
#endif

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

/* The 64-byte block of a blocked strategy's key starts at bit `base` of the body; the body
 * follows a 24- or 32-byte header, so the block spans two cache lines: prefetch both. */
#define PREFETCH_BLOCK(pf, body, base) \
    do {                                \
        const uint8_t *blk_ = (body) + ((base) >> 3); \
        pf(blk_);                       \
        pf(blk_ + BLOCK_BITS / 8 - 1);  \
    } while (0)

/* A blocked strategy's key as two words: row[0] = the bit index of its block (base),
 * row[1] = the multiplier seed y0 (bit i of the key is base + top 9 bits of
 * y0 * C^(i + 1), _positions.h). */
static inline void blocked_row(const geom *g, const uint64_t h[2], uint64_t row[2])
{
    row[0] = mb_mulhi64(h[0], g->m / BLOCK_BITS) * BLOCK_BITS;
    row[1] = g->strategy == S_M3B2 ? h[1] | 1 : h[1];
}

/* Bloom bits of a blocked key (base, y): set them, 1 if some was 0 (bloom_set's rule:
 * a byte is written only when it changes). */
static inline int blocked_set(uint8_t *body, uint64_t base, uint64_t y, unsigned k)
{
    uint8_t *blk = body + (base >> 3);
    int fresh = 0;
    unsigned i;
    for (i = 0; i < k; i++) {
        unsigned bit;
        y *= 0x9E3779B97F4A7C15ULL;
        bit = (unsigned)(y >> 55);
        if (!(blk[bit >> 3] & (1u << (bit & 7)))) {
            blk[bit >> 3] |= (uint8_t)(1u << (bit & 7));
            fresh = 1;
        }
    }
    return fresh;
}

/* Bloom bits of a blocked key (base, y): 1 if all are set, 0 at the first clear one. */
static inline int blocked_test(const uint8_t *body, uint64_t base, uint64_t y, unsigned k)
{
    const uint8_t *blk = body + (base >> 3);
    unsigned i;
    for (i = 0; i < k; i++) {
        unsigned bit;
        y *= 0x9E3779B97F4A7C15ULL;
        bit = (unsigned)(y >> 55);
        if (!(blk[bit >> 3] & (1u << (bit & 7))))
            return 0;
    }
    return 1;
}

/* One key's probes straight from its hash halves, lazily, each position computed when it
 * is tested (stops at the first clear cell): the direct query of a body that fits in the
 * cache, where a prefetch pipeline only adds its stores and reloads. */
static inline int probe_direct(const uint8_t *body, int width, const geom *g, const uint64_t h[2])
{
    const uint64_t m = g->m;
    const unsigned k = g->k;
    unsigned i;
    switch (g->strategy) {
    case S_M3KM: {
        uint64_t p = h[0] % m, step, gap;
        if (m == 1)
            return probe_one(body, width, 0);
        step = 1 + h[1] % (m - 1);
        gap = m - step;
        for (i = 0; i < k; i++) {
            if (!probe_one(body, width, p))
                return 0;
            p = p >= gap ? p - gap : p + step;
        }
        return 1;
    }
    case S_M3MX:
    case S_M3M2: {
        const uint64_t b = g->strategy == S_M3M2 ? h[1] | 1 : h[1];
        for (i = 0; i < k; i++)
            if (!probe_one(body, width, mb_mulhi64(mmb_fmix64(h[0] + (uint64_t)i * b), m)))
                return 0;
        return 1;
    }
    default: { /* S_M3BL, S_M3B2 */
        uint64_t row[2];
        blocked_row(g, h, row);
        if (width == 1)
            return blocked_test(body, row[0], row[1], k);
        for (i = 0; i < k; i++) {
            row[1] *= 0x9E3779B97F4A7C15ULL;
            if (!probe_one(body, width, row[0] + (row[1] >> 55)))
                return 0;
        }
        return 1;
    }
    }
}

/* First query stage: hash the key (halves into h), compute only the head of its
 * positions (the first QUERY_PREFETCH) and prefetch their bytes. */
static void stage_query(const uint8_t *body, int width, const geom *g, const mb_key *key, uint64_t *row,
                        uint64_t h[2])
{
    const unsigned head = g->k < QUERY_PREFETCH ? g->k : QUERY_PREFETCH;
    unsigned i;
    if (key->ptr != NULL) {
        mb_hash_key(key, h);
    } else {   /* a null key (a Column's): answered 0 by query_run; any valid positions do */
        h[0] = h[1] = 0;
    }
    mb_positions_n(g, h, row, 0, head);
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
        mb_positions_n(g, h, row, head, k);
        for (i = head; i < k; i++)
            PREFETCH_R(body + byte_of(width, row[i]));
    }
    return 1;
}

/* Blocked Bloom bits: one block (two lines) per key, so one stage: key i + AHEAD is
 * hashed, its (base, y) kept in the ring and its block prefetched; key i is tested from
 * its (base, y), the bits computed as they are tested. */
static void query_blocked(const uint8_t *body, const geom *g, const mb_key *keys, size_t n, uint8_t *out)
{
    uint64_t rows[AHEAD][2], h[2];
    size_t i;
    for (i = 0; i < n && i < AHEAD; i++) {
        if (keys[i].ptr == NULL)
            continue;
        mb_hash_key(&keys[i], h);
        blocked_row(g, h, rows[i]);
        PREFETCH_BLOCK(PREFETCH_R, body, rows[i][0]);
    }
    for (i = 0; i < n; i++) {
        uint64_t *row = rows[i % AHEAD];
        out[i] = (uint8_t)(keys[i].ptr != NULL && blocked_test(body, row[0], row[1], g->k));
        if (i + AHEAD + KEY_AHEAD < n)
            MB_PREFETCH_KEY(&keys[i + AHEAD + KEY_AHEAD]);
        if (i + AHEAD < n && keys[i + AHEAD].ptr != NULL) {
            mb_hash_key(&keys[i + AHEAD], h);
            blocked_row(g, h, row);
            PREFETCH_BLOCK(PREFETCH_R, body, row[0]);
        }
    }
}

/* The query loop run without the GIL: out[i] = key i may be present.  width 1 = Bloom
 * body, else a counting body of that width (present = every cell non-zero).  ring has
 * room for AHEAD * k positions (row i % AHEAD holds key i's positions).  Three paths:
 * a body of at most DIRECT_BYTES (BLOCK_DIRECT_BYTES for blocked Bloom bits: it fits in
 * the cache) is probed key by key (probe_direct); blocked Bloom bits take query_blocked;
 * the rest the three-stage pipeline of _cells.h. */
void mb_cells_query(const uint8_t *body, int width, const geom *g, const mb_key *keys, size_t n, uint64_t *ring,
                    uint8_t *out)
{
    const unsigned k = g->k, head = k < QUERY_PREFETCH ? k : QUERY_PREFETCH;
    const size_t half = AHEAD / 2;
    uint8_t maybe[AHEAD];   /* head test passed, by ring row */
    uint64_t hs[AHEAD][2];  /* hash halves, by ring row */
    size_t i;
    const int blocked_bits = width == 1 && STRATEGY_BLOCKED(g->strategy);
    if (mb_body_bytes(g->m, width) <= (blocked_bits ? BLOCK_DIRECT_BYTES : DIRECT_BYTES)) {
        for (i = 0; i < n; i++) {
            uint64_t h[2];
            if (keys[i].ptr == NULL) {
                out[i] = 0;
                continue;
            }
            if (i + KEY_AHEAD < n)
                MB_PREFETCH_KEY(&keys[i + KEY_AHEAD]);
            mb_hash_key(&keys[i], h);
            out[i] = (uint8_t)probe_direct(body, width, g, h);
        }
        return;
    }
    if (blocked_bits) {
        query_blocked(body, g, keys, n, out);
        return;
    }
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
        if (i + AHEAD + KEY_AHEAD < n)
            MB_PREFETCH_KEY(&keys[i + AHEAD + KEY_AHEAD]);
        if (i + AHEAD < n)
            stage_query(body, width, g, &keys[i + AHEAD], row, hs[slot]);
    }
}

/* Hash the keys [0, n) of refs into rows, two words a key (a null key's row is left
 * alone): (base, y0) for blocked strategies (blocked_row), else the hash halves. */
void mb_cells_stage(const geom *g, const mb_key *refs, size_t n, uint64_t *rows)
{
    const int blocked = STRATEGY_BLOCKED(g->strategy);
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t *row = rows + 2 * i;
        if (i + KEY_AHEAD < n)
            MB_PREFETCH_KEY(&refs[i + KEY_AHEAD]);
        if (refs[i].ptr == NULL)
            continue;
        mb_hash_key(&refs[i], row);
        if (blocked)
            blocked_row(g, row, row);
    }
}

/* A staged key's positions into pos (k values): from its two words of mb_cells_stage. */
static inline void staged_positions(const geom *g, const uint64_t row[2], uint64_t *pos)
{
    unsigned i;
    uint64_t y;
    if (!STRATEGY_BLOCKED(g->strategy)) {
        mb_positions(g, row, pos);
        return;
    }
    for (i = 0, y = row[1]; i < g->k; i++) {
        y *= 0x9E3779B97F4A7C15ULL;
        pos[i] = row[0] + (y >> 55);
    }
}

/* Write one key from its positions (bits, or its distinct counters). */
static inline int set_row(uint8_t *body, int width, uint64_t *pos, unsigned k, int *sat)
{
    int fresh = 0;
    if (width == 1)
        return bloom_set(body, pos, k);
    count_inc(body, width, pos, distinct(pos, k), &fresh, sat);
    return fresh;
}

/* A staged key's k bit positions into pos, each prefetched (for writing) as it is made:
 * M3MX / M3M2 inline (the default strategy), others through mb_positions. */
static inline void bits_ahead(uint8_t *body, const geom *g, const uint64_t row[2], uint64_t *pos)
{
    const unsigned k = g->k;
    unsigned j;
    if (g->strategy == S_M3M2 || g->strategy == S_M3MX) {
        const uint64_t m = g->m, b = g->strategy == S_M3M2 ? row[1] | 1 : row[1];
        uint64_t x = row[0];
        for (j = 0; j < k; j++, x += b) {
            const uint64_t p = mb_mulhi64(mmb_fmix64(x), m);
            pos[j] = p;
            PREFETCH_W(body + (p >> 3));
        }
        return;
    }
    staged_positions(g, row, pos);
    for (j = 0; j < k; j++)
        PREFETCH_W(body + (pos[j] >> 3));
}

/* Set the bits of a staged key (non-blocked strategy) straight from its row, each
 * position computed as it is set: the commit of a body that fits in the cache, where the
 * ring and the prefetches only add work.  1 if some bit was 0 (bloom_set's rule). */
static inline int bits_direct(uint8_t *body, const geom *g, const uint64_t row[2], uint64_t *pos)
{
    const unsigned k = g->k;
    unsigned j;
    int fresh = 0;
    if (g->strategy == S_M3M2 || g->strategy == S_M3MX) {
        const uint64_t m = g->m, b = g->strategy == S_M3M2 ? row[1] | 1 : row[1];
        uint64_t x = row[0];
        for (j = 0; j < k; j++, x += b) {
            const uint64_t p = mb_mulhi64(mmb_fmix64(x), m);
            uint8_t *byte = body + (p >> 3);
            const uint8_t mask = (uint8_t)(1u << (p & 7));
            if (!(*byte & mask)) {
                *byte |= mask;
                fresh = 1;
            }
        }
        return fresh;
    }
    staged_positions(g, row, pos);
    return bloom_set(body, pos, k);
}

/* mb_cells_commit for Bloom bits of a non-blocked strategy (the ring pipeline). */
static Py_ssize_t commit_bits(uint8_t *body, const geom *g, const mb_key *refs, size_t n, const uint64_t *rows,
                              uint64_t *ring, uint8_t *out)
{
    const unsigned k = g->k;
    Py_ssize_t total = 0;
    size_t i;
    if (mb_body_bytes(g->m, 1) <= DIRECT_BYTES) {
        for (i = 0; i < n; i++) {
            const int fresh = refs[i].ptr != NULL ? bits_direct(body, g, rows + 2 * i, ring) : 0;
            if (out != NULL)
                out[i] = (uint8_t)fresh;
            total += fresh;
        }
        return total;
    }
    for (i = 0; i < n && i < AHEAD; i++)
        if (refs[i].ptr != NULL)
            bits_ahead(body, g, rows + 2 * i, ring + i * k);
    for (i = 0; i < n; i++) {
        uint64_t *pos = ring + (i % AHEAD) * k;
        int fresh = 0;
        if (refs[i].ptr != NULL)
            fresh = bloom_set(body, pos, k);
        if (out != NULL)
            out[i] = (uint8_t)fresh;
        total += fresh;
        if (i + AHEAD < n && refs[i + AHEAD].ptr != NULL)
            bits_ahead(body, g, rows + 2 * (i + AHEAD), pos);
    }
    return total;
}

/* Test-and-set the staged rows in order (the lock is held): out[i] = key i was new.
 * Returns the number of new keys; *sat |= some counter saturated.  Blocked Bloom bits are
 * set straight from (base, y0), the block of key i + AHEAD prefetched; otherwise the
 * positions of key i + AHEAD are computed into ring row (i + AHEAD) % AHEAD (AHEAD * k
 * words: it stays in L1) and prefetched there, and key i is set from its ring row. */
Py_ssize_t mb_cells_commit(uint8_t *body, int width, const geom *g, const mb_key *refs, size_t n,
                           const uint64_t *rows, uint64_t *ring, uint8_t *out, int *sat)
{
    const unsigned k = g->k;
    Py_ssize_t total = 0;
    size_t i;
    unsigned j;
    if (width == 1 && STRATEGY_BLOCKED(g->strategy)) {
        const int ahead = mb_body_bytes(g->m, 1) > BLOCK_DIRECT_BYTES;   /* else it fits in the cache */
        for (i = 0; ahead && i < n && i < AHEAD; i++)
            if (refs[i].ptr != NULL)
                PREFETCH_BLOCK(PREFETCH_W, body, rows[2 * i]);
        for (i = 0; i < n; i++) {
            int fresh = 0;
            if (ahead && i + AHEAD < n && refs[i + AHEAD].ptr != NULL)
                PREFETCH_BLOCK(PREFETCH_W, body, rows[2 * (i + AHEAD)]);
            if (refs[i].ptr != NULL)
                fresh = blocked_set(body, rows[2 * i], rows[2 * i + 1], k);
            if (out != NULL)
                out[i] = (uint8_t)fresh;
            total += fresh;
        }
        return total;
    }
    if (width == 1)
        return commit_bits(body, g, refs, n, rows, ring, out);
    for (i = 0; i < n && i < AHEAD; i++) {
        if (refs[i].ptr == NULL)
            continue;
        staged_positions(g, rows + 2 * i, ring + i * k);
        for (j = 0; j < k; j++)
            PREFETCH_W(body + byte_of(width, ring[i * k + j]));
    }
    for (i = 0; i < n; i++) {
        uint64_t *pos = ring + (i % AHEAD) * k;
        int fresh = 0;
        if (refs[i].ptr != NULL)
            fresh = set_row(body, width, pos, k, sat);
        if (out != NULL)
            out[i] = (uint8_t)fresh;
        total += fresh;
        if (i + AHEAD < n && refs[i + AHEAD].ptr != NULL) {
            staged_positions(g, rows + 2 * (i + AHEAD), pos);
            for (j = 0; j < k; j++)
                PREFETCH_W(body + byte_of(width, pos[j]));
        }
    }
    return total;
}


/* Bytes a body of m bits (width 1) or m cells of `width` bits needs: ceil(m * width / 8),
 * computed without overflow. */
uint64_t mb_body_bytes(uint64_t m, int width)
{
    if (width == 8)
        return m;
    if (width == 4)
        return m / 2 + (m & 1);
    return m / 8 + ((m & 7) != 0);
}


/* ---- the interface of _cells.h: one dispatch by cell kind each ------------------------- */

unsigned mb_cells_distinct(int width, uint64_t *pos, unsigned k)
{
    return width == 1 ? k : distinct(pos, k);
}

int mb_cells_add(uint8_t *body, int width, const uint64_t *pos, unsigned n, int *sat)
{
    int fresh = 0;
    if (width == 1)
        return bloom_set(body, pos, n);
    count_inc(body, width, pos, n, &fresh, sat);
    return fresh;
}

int mb_cells_remove(uint8_t *body, int width, const uint64_t *pos, unsigned n)
{
    return count_dec(body, width, pos, n);
}

unsigned mb_cells_min(const uint8_t *body, int width, const uint64_t *pos, unsigned k)
{
    return count_min_of(body, width, pos, k);
}

int mb_cells_probe(const uint8_t *body, int width, const uint64_t *pos, unsigned from, unsigned to)
{
    return probe_range(body, width, pos, from, to);
}


/* ---- several bodies of one geometry (_handle_multi.c) -------------------------------- */

void mb_cells_stage_hashed(const geom *g, const uint64_t h[2], uint64_t row[2])
{
    row[0] = h[0];
    row[1] = h[1];
    if (STRATEGY_BLOCKED(g->strategy))
        blocked_row(g, h, row);
}

/* A staged key's positions one at a time (the same sequence as staged_positions). */
typedef struct {
    uint64_t a, b, gap, m;
    int strategy;
} pos_iter;

static inline void iter_init(pos_iter *it, const geom *g, const uint64_t row[2])
{
    it->m = g->m;
    it->strategy = g->strategy;
    it->gap = 0;   /* used by M3KM only (set below); defined for every strategy */
    switch (g->strategy) {
    case S_M3KM:
        it->a = row[0] % g->m;
        it->b = g->m == 1 ? 0 : 1 + row[1] % (g->m - 1);   /* m == 1: every position is 0 */
        it->gap = g->m - it->b;
        return;
    case S_M3MX:
    case S_M3M2:
        it->a = row[0];
        it->b = g->strategy == S_M3M2 ? row[1] | 1 : row[1];
        return;
    default:   /* blocked: the staged row is (base, y0) */
        it->a = row[0];
        it->b = row[1];
        return;
    }
}

static inline uint64_t iter_next(pos_iter *it)
{
    uint64_t p;
    switch (it->strategy) {
    case S_M3KM:
        p = it->a;
        it->a = it->a >= it->gap ? it->a - it->gap : it->a + it->b;
        return p;
    case S_M3MX:
    case S_M3M2:
        p = mb_mulhi64(mmb_fmix64(it->a), it->m);
        it->a += it->b;
        return p;
    default:
        it->b *= 0x9E3779B97F4A7C15ULL;
        return it->a + (it->b >> 55);
    }
}

/* Index of the lowest set bit of x (x != 0). */
static inline unsigned low_bit(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(x);
#else
    unsigned j = 0;
    while (!(x & 1)) {
        x >>= 1;
        j++;
    }
    return j;
#endif
}

/* The bodies of `alive` whose cell at position p is set (bit j: bodies[j]); only those
 * bodies are read. */
static inline uint64_t cells_mask(const uint8_t *const *bodies, uint64_t alive, int width, uint64_t p)
{
    uint64_t bits = 0, rest;
    if (width == 1) {
        const uint64_t byte = p >> 3;
        const unsigned shift = (unsigned)(p & 7);
        for (rest = alive; rest; rest &= rest - 1) {
            const unsigned j = low_bit(rest);
            bits |= (uint64_t)((bodies[j][byte] >> shift) & 1u) << j;
        }
        return bits;
    }
    for (rest = alive; rest; rest &= rest - 1) {
        const unsigned j = low_bit(rest);
        bits |= (uint64_t)(cell_get(bodies[j], width, p) != 0) << j;
    }
    return bits;
}

void mb_cells_any_rows(const uint8_t *const *bodies, unsigned nb, int width, const geom *g, const mb_key *keys,
                       size_t n, const uint64_t *rows, uint8_t *found)
{
    const uint64_t all = nb >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << nb) - 1;
    const int ahead = mb_body_bytes(g->m, width) > DIRECT_BYTES / (nb ? nb : 1);   /* else all fit in the cache */
    size_t i;
    unsigned j;
    if (nb == 0)
        return;
    for (i = 0; i < n; i++) {
        pos_iter it;
        uint64_t alive = all;
        unsigned step;
        if (ahead && i + AHEAD < n && keys[i + AHEAD].ptr != NULL && !found[i + AHEAD]) {
            uint64_t first;
            iter_init(&it, g, rows + 2 * (i + AHEAD));
            first = byte_of(width, iter_next(&it));
            for (j = 0; j < nb; j++)
                PREFETCH_R(bodies[j] + first);
        }
        if (keys[i].ptr == NULL || found[i])
            continue;
        iter_init(&it, g, rows + 2 * i);
        for (step = 0; step < g->k && alive; step++)
            alive &= cells_mask(bodies, alive, width, iter_next(&it));
        found[i] = (uint8_t)(alive != 0);
    }
}

uint64_t mb_cells_any_one(const uint8_t *const *bodies, unsigned nb, int width, const geom *g, const uint64_t row[2],
                          uint64_t last, uint64_t *suspect)
{
    uint64_t alive = nb >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << nb) - 1, bad = 0;
    pos_iter it;
    unsigned step;
    iter_init(&it, g, row);
    for (step = 0; step < g->k && alive; step++) {
        const uint64_t p = iter_next(&it), set = cells_mask(bodies, alive, width, p);
        if (p >= last)
            bad |= alive & ~set;
        alive &= set;
    }
    *suspect = bad;
    return alive;
}
