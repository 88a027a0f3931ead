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

#endif
