/* mmapbloom/_keys.h: the one shape of a resolved key, shared by the batch code of
 * _pykeys.c (keys from a Python sequence) and _columns.c (keys from a numpy array or an
 * Arrow column), so that every source feeds the same staging / lock / test-and-set code. */
#ifndef MMAPBLOOM_KEYS_H
#define MMAPBLOOM_KEYS_H

#include <Python.h>
#include <stdint.h>

/* one resolved key; ptr == NULL means a null key: never added, never found */
typedef struct { const char *ptr; Py_ssize_t len; } mb_key;

/* Prefetch (read) the bytes of a key a batch loop will reach a few keys later: a batch's
 * keys are separate objects spread over the heap, each read by the hash in its turn, and
 * a large batch has long left the caches by then.  MMB_NO_PREFETCH turns it off. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MMB_NO_PREFETCH)
#define MB_PREFETCH_KEY(key)                                                          \
    do {                                                                              \
        const uintptr_t pk_ = (uintptr_t)(key)->ptr; /* prefetch never faults, NULL too */ \
        __builtin_prefetch((const void *)pk_, 0, 3);                                  \
        __builtin_prefetch((const void *)(pk_ + (uintptr_t)(key)->len - 1), 0, 3);    \
    } while (0)
#else
#define MB_PREFETCH_KEY(key) ((void)(key))
#endif
/* keys this far ahead of the one hashed are prefetched */
#define KEY_AHEAD 8

#endif /* MMAPBLOOM_KEYS_H */
