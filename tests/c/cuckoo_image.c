/* Test driver for mmapbloom/_cuckoo.c (tests/test_cuckoo_c.py): reads a CKF1 image and
 * operations from stdin, applies them with the C unit, writes the image to stdout.
 * Input: "<n> <b> <f> <kicks> <image_bytes>\n", then the image bytes, then lines
 * "a <hexkey>" (insert), "r <hexkey>" (remove); results (0/1/-1) go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../mmapbloom/_cuckoo.h"
#include "../../mmapbloom/_murmur3.h"

static size_t unhex(const char *s, unsigned char *out)
{
    size_t n = 0;
    while (s[0] && s[1] && s[0] != '\n') {
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (unsigned char)v;
        s += 2;
    }
    return n;
}

int main(void)
{
    unsigned long long n, size;
    unsigned b, f, kicks;
    if (scanf("%llu %u %u %u %llu", &n, &b, &f, &kicks, &size) != 5)
        return 2;
    getchar();
    uint64_t *aligned = calloc((size + 7) / 8 + 1, 8);
    uint8_t *image = (uint8_t *)aligned;
    if (fread(image, 1, size, stdin) != size)
        return 3;
    /* body_bytes as the native handle sets it: the packed slots' 8-byte loads run too */
    mb_ck_geom g = {.image = image,
                    .num_buckets = n,
                    .bucket_size = b,
                    .fp_bits = f,
                    .max_kicks = kicks,
                    .body_bytes = (n * b * f + 7) / 8,
                    .stale_seq = 0};
    uint64_t *path = malloc(sizeof(uint64_t) * kicks);
    char line[4096];
    unsigned char key[2048];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] != 'a' && line[0] != 'r')
            continue;
        size_t len = unhex(line + 2, key);
        uint64_t h[2];
        mmb_murmur3_x64_128(key, len, 0, h);
        mb_ck_key k = mb_ck_key_from_hash(&g, h[0], h[1]);
        int got;
        if (line[0] == 'a')
            got = mb_ck_insert(&g, k.i1, k.fp, k.r, path);
        else
            got = mb_ck_remove(&g, k.i1, k.fp);
        uint32_t items;
        memcpy(&items, image + MB_CK_ITEMS_OFFSET, 4);
        if (got > 0)
            items += line[0] == 'a' ? 1 : (uint32_t)-1;
        memcpy(image + MB_CK_ITEMS_OFFSET, &items, 4);
        fprintf(stderr, "%d\n", got);
    }
    fwrite(image, 1, size, stdout);
    free(path);
    free(aligned);
    return 0;
}
