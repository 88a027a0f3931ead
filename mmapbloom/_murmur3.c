/* MurmurHash3_x64_128, written from the published algorithm.
 *
 * Reference: Austin Appleby, SMHasher, MurmurHash3.cpp (public domain),
 * https://github.com/aappleby/smhasher/blob/master/src/MurmurHash3.cpp
 *
 * Differences from the reference code, none of which changes the value:
 *  - blocks are loaded byte-order independently (memcpy + byte swap on big-endian
 *    hosts), so the result is the little-endian one everywhere, as mmh3 returns it;
 *  - the length is a size_t (the reference takes an int); it enters the hash as
 *    `h ^= len` in 64 bits, which is what mmh3 does with its Py_ssize_t length;
 *  - the tail is assembled by a loop instead of a fall-through switch.
 */
#include "_murmur3.h"

#include <string.h>

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* Little-endian 64-bit load from an unaligned address. */
static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

void mmb_murmur3_x64_128(const void *key, size_t len, uint32_t seed, uint64_t out[2])
{
    const uint8_t *data = (const uint8_t *)key;
    const size_t nblocks = len / 16;
    const uint64_t c1 = 0x87c37b91114253d5ULL;
    const uint64_t c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = seed, h2 = seed, k1, k2;
    size_t i;

    /* body: 16-byte blocks */
    for (i = 0; i < nblocks; i++) {
        k1 = load_le64(data + 16 * i);
        k2 = load_le64(data + 16 * i + 8);

        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;

        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }

    /* tail: the last len % 16 bytes, as little-endian partial words
     * (bytes 8..14 into k2, bytes 0..7 into k1) */
    {
        const uint8_t *tail = data + 16 * nblocks;
        const size_t rest = len & 15;
        size_t j;
        k1 = 0;
        k2 = 0;
        if (len >= 8 && rest > 0) {
            /* The same words from whole loads: the 8 bytes ending at the key's end hold the
             * tail's last bytes (their top ones), shifted down; bytes before the tail are
             * the last block's (or the tail's first word), inside the key. */
            const uint64_t last = load_le64(data + len - 8);
            if (rest > 8) {
                k2 = last >> (8 * (16 - rest));
                k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
                k1 = load_le64(tail);
            } else {
                k1 = last >> (8 * (8 - rest));
            }
            k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        } else if (rest > 0) {   /* a key shorter than 8 bytes: byte by byte */
            for (j = rest; j > 0; j--)
                k1 = (k1 << 8) | tail[j - 1];
            k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        }
    }

    /* finalisation */
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = mmb_fmix64(h1);
    h2 = mmb_fmix64(h2);
    h1 += h2;
    h2 += h1;

    out[0] = h1;
    out[1] = h2;
}
