/* mmapbloom/_cells.h: the cells of a filter body and the batch loops over them (plain C, no
 * Python state, no GIL needed).
 *
 * A body is one of two cell kinds, chosen by `width` (the dispatch is inside each function
 * below, so a new kind, e.g. cuckoo fingerprints, adds its case here and in _cells.c):
 *   width 1  Bloom bits: bit i is bit (i & 7) of byte i >> 3;
 *   width 4  4-bit counters: cell i is the low nibble of byte i >> 1 for even i, the high
 *            nibble for odd i;
 *   width 8  8-bit counters: cell i is byte i.
 * Counters saturate at their maximum and are never decremented from there.  The pure-Python
 * reference (mmapbloom/kernels.py) leaves exactly the same bytes.
 *
 * Batches run as a pipeline so that a probe rarely waits for memory (the body of a large
 * filter is far bigger than the caches).  Adds: the staging (outside the lock) keeps two
 * words a key (hash halves, or a blocked key's block and multiplier seed), never its k
 * positions; the commit computes the positions of key i + AHEAD into an L1 ring of AHEAD
 * rows and prefetches them before key i is written (blocked Bloom bits: the key's block,
 * its bits computed as they are set; a Bloom body of at most DIRECT_BYTES, which fits
 * in the cache, is set key by key without the ring, blocked Bloom bits without the block
 * prefetch up to BLOCK_DIRECT_BYTES).  Queries: a body of at most DIRECT_BYTES
 * (BLOCK_DIRECT_BYTES for blocked Bloom bits) is probed key by key; blocked Bloom bits
 * prefetch the block of key i + AHEAD and test key i; the rest run in three stages:
 *   i + AHEAD      hash, positions, prefetch the first QUERY_PREFETCH positions;
 *   i + AHEAD / 2  test those; a key that fails is known absent (most absent keys stop
 *                  here), otherwise prefetch its other positions;
 *   i              test the remaining positions.
 * The constants are -D overridable (for measurements); MMB_NO_PREFETCH turns prefetching
 * off.  None of these functions allocates: they run inside the SIGBUS guard (_guard.h). */
#ifndef MMAPBLOOM_CELLS_H
#define MMAPBLOOM_CELLS_H

#include <Python.h>
#include <stdint.h>

#include "_keys.h"
#include "_positions.h"

#ifndef AHEAD
#define AHEAD 16
#endif
#ifndef QUERY_PREFETCH
#define QUERY_PREFETCH 2
#endif
/* A body of at most this many bytes is queried, and its Bloom bits set, key by key, each
 * position computed as it is tested or set, without the pipeline's stores, reloads and
 * prefetches (measured on the 1M-key filter of tools/bench/targets, 1.2 MB: the direct
 * loops beat the pipeline's for the default strategy, on a 1 MiB per-core L2). */
#ifndef DIRECT_BYTES
#define DIRECT_BYTES (2u << 20)
#endif
/* The same bound for blocked Bloom bits, whose prefetch costs two instructions a key (its
 * block; no ring): past a quarter of a 1 MiB per-core L2 (the keys and the staged rows share
 * it) the blocks are prefetched.  Measured, same run, 1M keys (1.2 MB body), M3B2: update
 * 67.5 -> 62.4 ns a key, contains_many of absent keys 59.6 -> 47.8, of present 50.6 -> 43.9. */
#ifndef BLOCK_DIRECT_BYTES
#define BLOCK_DIRECT_BYTES (256u << 10)
#endif
#if AHEAD < 2 || QUERY_PREFETCH < 1
#error "AHEAD must be at least 2 and QUERY_PREFETCH at least 1"
#endif
#define GIL_MIN_KEYS 256   /* batches release the GIL from this many keys on */

/* Bytes a body of m cells of `width` bits needs: ceil(m * width / 8), without overflow. */
uint64_t mb_body_bytes(uint64_t m, int width);

/* The positions a write touches: all k for bits; for counters, pos sorted with repeats
 * dropped in place (a key's repeated cell is counted once).  Returns their number. */
unsigned mb_cells_distinct(int width, uint64_t *pos, unsigned k);

/* Add one key at pos[0..n) (n from mb_cells_distinct): 1 if some cell was 0 before;
 * *sat |= some counter reached its maximum now.  A byte is written only when it changes. */
int mb_cells_add(uint8_t *body, int width, const uint64_t *pos, unsigned n, int *sat);

/* Counters: remove one key at its distinct cells: -1 (a cell is 0: nothing changed), 1 (a
 * cell returned to 0) or 0. */
int mb_cells_remove(uint8_t *body, int width, const uint64_t *pos, unsigned n);

/* Counters: the minimum of the cells pos[0..k) (stops at 0). */
unsigned mb_cells_min(const uint8_t *body, int width, const uint64_t *pos, unsigned k);

/* 1 if every cell pos[from..to) is set (non-zero); 0 at the first that is not. */
int mb_cells_probe(const uint8_t *body, int width, const uint64_t *pos, unsigned from, unsigned to);

/* Batches.  Hash keys[0..n) into rows, two words a key (a null key's row is left alone):
 * the hash halves, or (base, y0) for the blocked strategies (M3BL, M3B2). */
void mb_cells_stage(const geom *g, const mb_key *keys, size_t n, uint64_t *rows);

/* Test-and-set the staged rows in order: out[i] (if out) = key i was new.  Returns the
 * number of new keys; *sat |= some counter saturated.  ring: room for AHEAD * k words
 * (the positions of the keys in flight). */
Py_ssize_t mb_cells_commit(uint8_t *body, int width, const geom *g, const mb_key *keys, size_t n,
                           const uint64_t *rows, uint64_t *ring, uint8_t *out, int *sat);

/* out[i] = key i may be present (a null key: 0).  ring has room for AHEAD * k positions. */
void mb_cells_query(const uint8_t *body, int width, const geom *g, const mb_key *keys, size_t n, uint64_t *ring,
                    uint8_t *out);

/* found[i] = 1 if staged key i may be present in one of bodies[0..nb) (nb <= 64), all of
 * geometry g and cell width `width`; keys already found and null keys are skipped.  A
 * key's positions are the same in every body: each is computed once and its cell read in
 * all the bodies still possible (a bit mask; no branch per body), until every body has
 * shown a zero cell or one has all k set.  Allocates nothing. */
void mb_cells_any_rows(const uint8_t *const *bodies, unsigned nb, int width, const geom *g, const mb_key *keys,
                       size_t n, const uint64_t *rows, uint8_t *found);

/* One staged key in bodies[0..nb) (nb <= 64), as mb_cells_any_rows: returns the mask of
 * the bodies that may hold it (0: none); *suspect = the bodies that showed a zero cell
 * only at positions >= last (where a file truncated inside its last page reads zeros). */
uint64_t mb_cells_any_one(const uint8_t *const *bodies, unsigned nb, int width, const geom *g, const uint64_t row[2],
                          uint64_t last, uint64_t *suspect);

/* One key's staged row (mb_cells_stage's two words) from its hash halves h. */
void mb_cells_stage_hashed(const geom *g, const uint64_t h[2], uint64_t row[2]);

#endif /* MMAPBLOOM_CELLS_H */
