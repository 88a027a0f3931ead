/* MurmurHash3_x64_128 in plain C (no Python).  See _murmur3.c. */
#ifndef MMAPBLOOM_MURMUR3_H
#define MMAPBLOOM_MURMUR3_H

#include <stddef.h>
#include <stdint.h>

/* Hash `len` bytes at `key` with MurmurHash3_x64_128 and `seed`; store the two 64-bit
 * words in out[0] (h1) and out[1] (h2).  The value equals
 * mmh3.hash128(key, seed, x64arch=True, signed=False) == h1 | (h2 << 64) on every host:
 * input blocks are read as little-endian words whatever the host byte order. */
void mmb_murmur3_x64_128(const void *key, size_t len, uint32_t seed, uint64_t out[2]);

/* MurmurHash3's 64-bit finalisation mix (a bijection): every input bit avalanches.  Used
 * by the hash itself and by the M3MX strategy, which remixes each probe with it. */
static inline uint64_t mmb_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* MurmurHash3_x64_128 (seed 0) of exactly 8 bytes whose little-endian value is `word`
 * (an int key, an int64 column value, any 8-byte key): the general function's steps for
 * len == 8 with the constants folded (no block loop, the tail is one word, k2 == 0 so h2
 * starts at 0), about a third of its instructions.  The same out[] as
 * mmb_murmur3_x64_128(bytes, 8, 0, out); tests/test_native.py pins it against mmh3. */
static inline void mmb_murmur3_x64_128_8(uint64_t word, uint64_t out[2])
{
    uint64_t h1, h2;
    word *= 0x87c37b91114253d5ULL;              /* k1 *= c1 */
    word = (word << 31) | (word >> 33);         /* k1 = rotl64(k1, 31) */
    word *= 0x4cf5ad432745937fULL;              /* k1 *= c2; h1 = 0 ^ k1 */
    h1 = (word ^ 8) + 8;                        /* h1 ^= len; h2 = 0 ^ len; h1 += h2 */
    h2 = 8 + h1;                                /* h2 += h1 */
    h1 = mmb_fmix64(h1);
    h2 = mmb_fmix64(h2);
    h1 += h2;
    h2 += h1;
    out[0] = h1;
    out[1] = h2;
}

#endif
