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

/* The query loop run without the GIL: out[i] = key i may be present.  width 1 = Bloom
 * body, else a counting body of that width (present = every cell non-zero).  ring has
 * room for AHEAD * k positions (row i % AHEAD holds key i's positions). */
void mb_cells_query(const uint8_t *body, int width, const geom *g, const mb_key *keys, size_t n, uint64_t *ring,
                    uint8_t *out)
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

/* Hash the keys [0, n) of refs into rows (k positions each); null keys get no row use. */
void mb_cells_stage(const geom *g, const mb_key *refs, size_t n, uint64_t *rows)
{
    size_t i;
    uint64_t hv[2];
    for (i = 0; i < n; i++) {
        if (refs[i].ptr == NULL)
            continue;
        mb_hash_key(&refs[i], hv);
        mb_positions(g, hv, rows + i * g->k);
    }
}

/* Test-and-set the staged rows in order (the lock is held): out[i] = key i was new.
 * Returns the number of new keys; *sat |= some counter saturated. */
Py_ssize_t mb_cells_commit(uint8_t *body, int width, unsigned k, const mb_key *refs, size_t n, uint64_t *rows,
                           uint8_t *out, int *sat)
{
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
