/* mmapbloom/_keys.h: the one shape of a resolved key, shared by the batch code of
 * _pykeys.c (keys from a Python sequence) and _columns.c (keys from a numpy array or an
 * Arrow column), so that every source feeds the same staging / lock / test-and-set code. */
#ifndef MMAPBLOOM_KEYS_H
#define MMAPBLOOM_KEYS_H

#include <Python.h>

/* one resolved key; ptr == NULL means a null key: never added, never found */
typedef struct { const char *ptr; Py_ssize_t len; } mb_key;

#endif /* MMAPBLOOM_KEYS_H */
