/* The cuckoo filter's cells (CKF1, scheme M3C1), in plain C (no Python.h): the C twin of
 * mmapbloom/cuckoo_kernels.py (CuckooCells), byte for byte.
 *
 * This unit owns: the packed slot array (get / set of a slot at its width), the victim
 * slot of the header, and the four cell operations (lookup, insert with its kick path,
 * remove, count) plus the key's (i1, fp, r) from its MurmurHash3 halves and the
 * alternate index.  It owns no lock, no items counter, no key reading and no error
 * reporting: the caller (the Handle's cuckoo mode) holds the file's write lock around
 * insert / remove, bumps the items word (header offset 20) by the result, and turns a
 * full insert (-1) into FilterFullError.  Lookups and counts need no lock.
 *
 * Definitions (docs/FORMAT.md, "CKF1"):  lo, hi = the two 64-bit halves of
 * MurmurHash3_x64_128(key, seed 0) (out[0], out[1] of mmb_murmur3_x64_128);
 *     i1 = (lo * n) >> 64                 (128-bit product)
 *     fp = (((hi >> 32) * (2^f - 1)) >> 32) + 1          in [1, 2^f - 1]
 *     alt(i, fp) = (n - 1 - i + ((fmix64(fp) * n) >> 64)) mod n     an involution
 *     r  = lo ^ hi;  next(r) = r * 6364136223846793005 + 1442695040888963407 (mod 2^64)
 * Insert: see _cuckoo.c (the same six steps as cuckoo_kernels.py's module docstring). */
#ifndef MMAPBLOOM_CUCKOO_H
#define MMAPBLOOM_CUCKOO_H

#include <stddef.h>
#include <stdint.h>

/* Byte offsets in the CKF1 header. */
#define MB_CK_HEADER_SIZE 48
#define MB_CK_KICK_SEQ_OFFSET 18 /* u16: odd while a writer moves fingerprints */
#define MB_CK_ITEMS_OFFSET 20
#define MB_CK_VICTIM_FP_OFFSET 28
#define MB_CK_VICTIM_INDEX_OFFSET 32
#define MB_CK_MAX_KICKS 65536

/* One table: `image` is the whole mapping (header + slots; 8-byte aligned, as a mapping
 * or a bytearray's buffer is), the rest the header's geometry. */
typedef struct {
    uint8_t *image;
    uint64_t num_buckets; /* n >= 1 */
    uint32_t bucket_size; /* b: 1, 2, 4, 8 */
    uint32_t fp_bits;     /* f: 4..32 */
    uint32_t max_kicks;   /* 1..65536 */
    uint64_t body_bytes;  /* bytes of the slot array, or 0 (unknown: packed slots read byte
                           * by byte; known: one 8-byte load where 8 bytes are in range) */
    uint32_t stale_seq;   /* 0, or 0x10000 | an odd kick counter this reader waited out (a
                           * writer killed mid path): passes bracketed by it are accepted */
} mb_ck_geom;

/* Seconds a reader waits on an odd, unchanged kick counter (cuckoo_kernels.STALE_WAIT). */
#define MB_CK_STALE_WAIT_NS 500000000LL

/* A key's first bucket, fingerprint and kick seed from its hash halves. */
typedef struct {
    uint64_t i1;
    uint32_t fp;
    uint64_t r;
} mb_ck_key;

mb_ck_key mb_ck_key_from_hash(const mb_ck_geom *g, uint64_t lo, uint64_t hi);
uint64_t mb_ck_alt(const mb_ck_geom *g, uint64_t i, uint32_t fp);

/* Slot j (= bucket * b + s) of the packed array: f bits at bit offset j * f of the body,
 * little-endian.  f = 8, 16, 32: one aligned load / store.  Other widths: the bytes
 * holding the slot, neighbours rewritten with their own values (the caller holds the
 * lock), so only the slot being written can be read torn. */
uint32_t mb_ck_get(const mb_ck_geom *g, uint64_t j);
void mb_ck_set(const mb_ck_geom *g, uint64_t j, uint32_t v);

/* The victim slot: fingerprint (0: empty) and bucket index. */
uint32_t mb_ck_victim(const mb_ck_geom *g, uint64_t *index);

/* The kick sequence counter (header bytes 18..19); mb_ck_repair_seq makes an odd one
 * (left by a writer killed mid path) even, under the write lock: 1 if it was odd. */
uint32_t mb_ck_seq(const mb_ck_geom *g);
int mb_ck_repair_seq(const mb_ck_geom *g);

/* 1 if fp is in bucket i1, in alt(i1, fp), or is their victim.  No lock: a miss is
 * accepted only from a pass bracketed by one even kick counter (cuckoo_kernels.py,
 * "Lookup"); an odd counter unchanged for MB_CK_STALE_WAIT_NS is waited out once
 * (recorded in g->stale_seq). */
int mb_ck_lookup(const mb_ck_geom *g, uint64_t i1, uint32_t fp);
/* The same with i2 = mb_ck_alt(g, i1, fp) already computed (the batch query's staging). */
int mb_ck_lookup2(const mb_ck_geom *g, uint64_t i1, uint64_t i2, uint32_t fp);
/* Matching slots of both buckets (each once), plus 1 for a matching victim.  No lock: read
 * under the lookup's counter rule (every answer from a pass bracketed by one even value). */
int mb_ck_count(const mb_ck_geom *g, uint64_t i1, uint32_t fp);
/* Test-and-set under the write lock: 0 present (nothing changed), 1 inserted,
 * -1 full (nothing changed).  `path` is scratch for max_kicks slot numbers. */
int mb_ck_insert(const mb_ck_geom *g, uint64_t i1, uint32_t fp, uint64_t r, uint64_t *path);
/* Remove one matching fingerprint (i1's lowest slot, else alt's, else the victim), then
 * re-home the victim if it fits: 1 removed, 0 none matched (nothing changed). */
int mb_ck_remove(const mb_ck_geom *g, uint64_t i1, uint32_t fp);

#endif
