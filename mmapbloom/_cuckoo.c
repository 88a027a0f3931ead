/* The cuckoo filter's cells in plain C: see _cuckoo.h for what this unit owns and the
 * definitions.  The algorithm, exactly as the pure reference (cuckoo_kernels.py):
 *
 * insert(i1, fp, r), the caller holding the write lock:
 *   1. lookup(i1, fp): present -> 0, nothing changed.
 *   2. the lowest empty slot of bucket i1, else of i2 = alt(i1, fp): store fp -> 1.
 *   3. the victim slot is taken -> -1 (full), nothing changed.
 *   4. find a kick path before writing anything: r = next(r); cur = r >> 63 ? i2 : i1;
 *      up to max_kicks times: r = next(r); s0 = ((r >> 32) * b) >> 32; s = the first of
 *      s0, s0+1, .. (mod b) whose slot cur*b+s is not on the path yet (none: fail);
 *      append it; cur = alt(cur, fingerprint in it); if bucket cur has an empty slot e
 *      (the lowest): go to 5.
 *   5. apply from the end: e = fp of path[K-1], path[K-1] = fp of path[K-2], ...,
 *      path[0] = fp.  Every fingerprint is in one of its slots at every moment (copied
 *      into its other bucket before its old slot is overwritten), so lock-free readers
 *      never miss.  -> 1.
 *   6. no path: victim = (fp, i1), index stored before the fingerprint -> 1.
 * lookup: i1, i2, the victim; a miss is accepted only from a pass bracketed by one even
 * kick counter (header bytes 18..19): every move (a kick path, a victim re-homed) runs
 * while it is odd (see mb_ck_lookup and cuckoo_kernels.py's "Lookup").
 * remove: first match in i1, else i2 (lowest slot), cleared; else a matching victim is
 * cleared (fingerprint before index).  After a slot was cleared, a victim moves to the
 * lowest empty slot of its bucket, else of its other bucket (slot first, then cleared). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, sched_yield under -std=c11 */
#include "_cuckoo.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include "_murmur3.h"

static inline uint64_t mulhi(uint64_t a, uint64_t b)
{
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}

static inline uint64_t lcg(uint64_t r)
{
    return r * 6364136223846793005ULL + 1442695040888963407ULL;
}

mb_ck_key mb_ck_key_from_hash(const mb_ck_geom *g, uint64_t lo, uint64_t hi)
{
    mb_ck_key k;
    uint64_t range = (g->fp_bits == 32) ? 0xFFFFFFFFULL : ((1ULL << g->fp_bits) - 1);
    k.i1 = mulhi(lo, g->num_buckets);
    k.fp = (uint32_t)((((hi >> 32) * range) >> 32) + 1);
    k.r = lo ^ hi;
    return k;
}

uint64_t mb_ck_alt(const mb_ck_geom *g, uint64_t i, uint32_t fp)
{
    uint64_t n = g->num_buckets;
    uint64_t t = n - 1 - i + mulhi(mmb_fmix64(fp), n);
    return t >= n ? t - n : t;
}

static inline uint8_t *body(const mb_ck_geom *g) { return g->image + MB_CK_HEADER_SIZE; }

static inline uint64_t load_le(const uint8_t *p, unsigned nbytes)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < nbytes; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

uint32_t mb_ck_get(const mb_ck_geom *g, uint64_t j)
{
    uint8_t *b = body(g);
    switch (g->fp_bits) {
    case 8: return __atomic_load_n(b + j, __ATOMIC_RELAXED);
    case 16: return __atomic_load_n((uint16_t *)(b + 2 * j), __ATOMIC_RELAXED);
    case 32: return __atomic_load_n((uint32_t *)(b + 4 * j), __ATOMIC_RELAXED);
    default: {
        uint64_t o = j * g->fp_bits, w;
        unsigned shift = (unsigned)(o & 7), nbytes = (shift + g->fp_bits + 7) >> 3;
        if ((o >> 3) + 8 <= g->body_bytes) { /* one unaligned load (the bytes a slot spans, and more) */
            memcpy(&w, b + (o >> 3), 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            w = __builtin_bswap64(w);
#endif
        } else {
            w = load_le(b + (o >> 3), nbytes);
        }
        return (uint32_t)((w >> shift) & ((1ULL << g->fp_bits) - 1));
    }
    }
}

void mb_ck_set(const mb_ck_geom *g, uint64_t j, uint32_t v)
{
    uint8_t *b = body(g);
    switch (g->fp_bits) {
    case 8: __atomic_store_n(b + j, (uint8_t)v, __ATOMIC_RELEASE); return;
    case 16: __atomic_store_n((uint16_t *)(b + 2 * j), (uint16_t)v, __ATOMIC_RELEASE); return;
    case 32: __atomic_store_n((uint32_t *)(b + 4 * j), v, __ATOMIC_RELEASE); return;
    default: {
        uint64_t o = j * g->fp_bits, mask = (1ULL << g->fp_bits) - 1;
        unsigned shift = (unsigned)(o & 7), nbytes = (shift + g->fp_bits + 7) >> 3;
        uint8_t *p = b + (o >> 3);
        uint64_t w = (load_le(p, nbytes) & ~(mask << shift)) | ((uint64_t)v << shift);
        for (unsigned k = 0; k < nbytes; k++) /* unchanged neighbour bytes store their value */
            __atomic_store_n(p + k, (uint8_t)(w >> (8 * k)), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    }
}

uint32_t mb_ck_victim(const mb_ck_geom *g, uint64_t *index)
{
    uint32_t fp = __atomic_load_n((uint32_t *)(g->image + MB_CK_VICTIM_FP_OFFSET), __ATOMIC_ACQUIRE);
    *index = fp ? __atomic_load_n((uint64_t *)(g->image + MB_CK_VICTIM_INDEX_OFFSET), __ATOMIC_RELAXED) : 0;
    return fp;
}

static void set_victim(const mb_ck_geom *g, uint32_t fp, uint64_t index)
{
    uint32_t *vfp = (uint32_t *)(g->image + MB_CK_VICTIM_FP_OFFSET);
    uint64_t *vidx = (uint64_t *)(g->image + MB_CK_VICTIM_INDEX_OFFSET);
    if (fp) {
        __atomic_store_n(vidx, index, __ATOMIC_RELAXED);
        __atomic_store_n(vfp, fp, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(vfp, 0, __ATOMIC_RELEASE);
        __atomic_store_n(vidx, 0, __ATOMIC_RELAXED);
    }
}

static int64_t find(const mb_ck_geom *g, uint64_t i, uint32_t fp)
{
    uint64_t base = i * g->bucket_size;
    const unsigned f = g->fp_bits, b = g->bucket_size;
    if ((f & 7) != 0 && b * f <= 57) { /* a packed bucket within one 8-byte load */
        uint64_t o = base * f, w;
        if ((o >> 3) + 8 <= g->body_bytes) {
            const uint64_t mask = (1ULL << f) - 1;
            memcpy(&w, body(g) + (o >> 3), 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            w = __builtin_bswap64(w);
#endif
            w >>= (o & 7);
            for (unsigned s = 0; s < b; s++, w >>= f)
                if ((w & mask) == fp)
                    return (int64_t)(base + s);
            return -1;
        }
    }
    for (uint64_t j = base; j < base + g->bucket_size; j++)
        if (mb_ck_get(g, j) == fp)
            return (int64_t)j;
    return -1;
}

static int lookup_once(const mb_ck_geom *g, uint64_t i1, uint64_t i2, uint32_t fp)
{
    uint64_t vidx;
    if (find(g, i1, fp) >= 0)
        return 1;
    if (i2 != i1 && find(g, i2, fp) >= 0)
        return 1;
    uint32_t vfp = mb_ck_victim(g, &vidx);
    return vfp == fp && (vidx == i1 || vidx == i2);
}

static inline uint16_t *seq_word(const mb_ck_geom *g) { return (uint16_t *)(g->image + MB_CK_KICK_SEQ_OFFSET); }

uint32_t mb_ck_seq(const mb_ck_geom *g) { return __atomic_load_n(seq_word(g), __ATOMIC_ACQUIRE); }

int mb_ck_repair_seq(const mb_ck_geom *g)
{
    uint16_t v = __atomic_load_n(seq_word(g), __ATOMIC_RELAXED);
    if (!(v & 1))
        return 0;
    __atomic_store_n(seq_word(g), (uint16_t)(v + 1), __ATOMIC_RELEASE);
    return 1;
}

/* Before the first move of a path (the counter even: repaired on entry) and after the last. */
static void moves_begin(const mb_ck_geom *g)
{
    uint16_t v = __atomic_load_n(seq_word(g), __ATOMIC_RELAXED);
    __atomic_store_n(seq_word(g), (uint16_t)(v + 1), __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* odd is visible before any slot store */
}

static void moves_end(const mb_ck_geom *g)
{
    uint16_t v = __atomic_load_n(seq_word(g), __ATOMIC_RELAXED);
    __atomic_store_n(seq_word(g), (uint16_t)(v + 1), __ATOMIC_RELEASE);
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A miss is accepted only from a pass bracketed by one even counter value (a seqlock):
 * a move between two reads of a pass (a kick copying fp from i2 into i1, a victim
 * re-homed) runs while the counter is odd, so the reader reads again until a pass saw
 * no move.  An odd value unchanged for MB_CK_STALE_WAIT_NS is a writer killed mid path:
 * recorded in g->stale_seq, it is accepted from then on (the next writer makes it even). */
int mb_ck_lookup(const mb_ck_geom *g, uint64_t i1, uint32_t fp)
{
    return mb_ck_lookup2(g, i1, mb_ck_alt(g, i1, fp), fp);
}

/* The counter's verdict on a lock-free pass that began when it read *s1: 1 believe the
 * pass (the same even value, or the odd value this reader waited out), 0 read it again
 * (*s1 then holds the new value).  *deadline: when an odd, unchanged value is taken for a
 * killed writer (0: not yet waiting). */
static int pass_settled(const mb_ck_geom *g, uint32_t *s1, long long *deadline)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the pass's loads before the counter's */
    const uint32_t s2 = __atomic_load_n(seq_word(g), __ATOMIC_RELAXED);
    if (s2 == *s1 && (!(s2 & 1) || (0x10000u | s2) == __atomic_load_n(&g->stale_seq, __ATOMIC_RELAXED)))
        return 1;
    if (s2 == *s1) { /* odd and unchanged: a writer is applying a path, or died doing so */
        long long now = now_ns();
        if (!*deadline) {
            *deadline = now + MB_CK_STALE_WAIT_NS;
        } else if (now > *deadline) {
            __atomic_store_n((uint32_t *)&g->stale_seq, 0x10000u | s2, __ATOMIC_RELAXED);
            return 1;
        }
        sched_yield();
    }
    *s1 = s2;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the counter's load before the next pass's */
    return 0;
}

int mb_ck_lookup2(const mb_ck_geom *g, uint64_t i1, uint64_t i2, uint32_t fp)
{
    uint32_t s1 = mb_ck_seq(g);
    long long deadline = 0;
    for (;;) {
        if (lookup_once(g, i1, i2, fp))
            return 1; /* a hit is never caused by a move */
        if (pass_settled(g, &s1, &deadline))
            return 0;
    }
}

static int count_once(const mb_ck_geom *g, uint64_t i1, uint64_t i2, uint32_t fp)
{
    uint64_t vidx, b = g->bucket_size;
    int total = 0;
    for (uint64_t j = i1 * b; j < i1 * b + b; j++)
        total += mb_ck_get(g, j) == fp;
    if (i2 != i1)
        for (uint64_t j = i2 * b; j < i2 * b + b; j++)
            total += mb_ck_get(g, j) == fp;
    uint32_t vfp = mb_ck_victim(g, &vidx);
    return total + (vfp == fp && (vidx == i1 || vidx == i2));
}

/* Every answer of a count is believed only from a pass bracketed by one even counter: a
 * move between its reads can hide fp (0) or show it in both buckets (2). */
int mb_ck_count(const mb_ck_geom *g, uint64_t i1, uint32_t fp)
{
    const uint64_t i2 = mb_ck_alt(g, i1, fp);
    uint32_t s1 = mb_ck_seq(g);
    long long deadline = 0;
    for (;;) {
        const int total = count_once(g, i1, i2, fp);
        if (pass_settled(g, &s1, &deadline))
            return total;
    }
}

static int on_path(const uint64_t *path, uint32_t len, uint64_t j)
{
    for (uint32_t k = 0; k < len; k++)
        if (path[k] == j)
            return 1;
    return 0;
}

int mb_ck_insert(const mb_ck_geom *g, uint64_t i1, uint32_t fp, uint64_t r, uint64_t *path)
{
    uint64_t b = g->bucket_size, i2 = mb_ck_alt(g, i1, fp), vidx;
    mb_ck_repair_seq(g);
    if (lookup_once(g, i1, i2, fp)) /* under the lock: nothing moves, one pass */
        return 0;
    int64_t e = find(g, i1, 0);
    if (e < 0 && i2 != i1)
        e = find(g, i2, 0);
    if (e >= 0) {
        mb_ck_set(g, (uint64_t)e, fp);
        return 1;
    }
    if (mb_ck_victim(g, &vidx))
        return -1;
    r = lcg(r);
    uint64_t cur = (r >> 63) ? i2 : i1;
    uint32_t len = 0;
    for (uint32_t t = 0; t < g->max_kicks; t++) {
        r = lcg(r);
        uint64_t s0 = ((r >> 32) * b) >> 32, j = 0;
        uint64_t d;
        for (d = 0; d < b; d++) {
            j = cur * b + (s0 + d) % b;
            if (!on_path(path, len, j))
                break;
        }
        if (d == b)
            break; /* every slot of the bucket is on the path */
        path[len++] = j;
        cur = mb_ck_alt(g, cur, mb_ck_get(g, j));
        e = find(g, cur, 0);
        if (e >= 0) {
            uint64_t dst = (uint64_t)e;
            moves_begin(g);
            for (uint32_t k = len; k-- > 0;) { /* copy into the new slot, then overwrite the old */
                mb_ck_set(g, dst, mb_ck_get(g, path[k]));
                dst = path[k];
            }
            mb_ck_set(g, dst, fp);
            moves_end(g);
            return 1;
        }
    }
    set_victim(g, fp, i1);
    return 1;
}

int mb_ck_remove(const mb_ck_geom *g, uint64_t i1, uint32_t fp)
{
    mb_ck_repair_seq(g);
    int64_t j = find(g, i1, fp);
    uint64_t i2 = mb_ck_alt(g, i1, fp), vidx;
    if (j < 0 && i2 != i1)
        j = find(g, i2, fp);
    uint32_t vfp = mb_ck_victim(g, &vidx);
    if (j < 0) {
        if (vfp == fp && (vidx == i1 || vidx == i2)) {
            set_victim(g, 0, 0);
            return 1;
        }
        return 0;
    }
    mb_ck_set(g, (uint64_t)j, 0);
    if (vfp) {
        int64_t e = find(g, vidx, 0);
        if (e < 0)
            e = find(g, mb_ck_alt(g, vidx, vfp), 0);
        if (e >= 0) {
            moves_begin(g);
            mb_ck_set(g, (uint64_t)e, vfp);
            set_victim(g, 0, 0);
            moves_end(g);
        }
    }
    return 1;
}
