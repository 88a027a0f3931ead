/* mmapbloom: the one resolved-key struct shared by the key readers and the batch kernels. */
#ifndef MMAPBLOOM_KEYS_H
#define MMAPBLOOM_KEYS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* one resolved key; ptr == NULL means a null key: never added, never found */
typedef struct { const char *ptr; Py_ssize_t len; } mb_key;

#endif
