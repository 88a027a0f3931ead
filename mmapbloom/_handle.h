/* mmapbloom/_handle.h: the native handle, one object per open filter (mmapbloom/handle.py
 * builds it; its methods are the hot API of every filter kind).
 *
 * A Handle binds the image buffer (exported once), the cells and their kind (width: 1 bits,
 * 4 / 8 counters; the cell operations are _cells.h's), the items word, the geometry and the
 * LockState of the filter's WriteLock (_lock.h).  Every touch of the mapping runs in a
 * guarded section (_guard.h).  Adding a cell kind: a width value handled by _cells.h and the
 * checks of h_new and of the per-kind methods (remove, count) in _handle.c. */
#ifndef MMAPBLOOM_HANDLE_H
#define MMAPBLOOM_HANDLE_H

#include <Python.h>

typedef struct mb_handle mb_handle;   /* fields private to _handle.c */

/* The type, added to the module as Handle. */
extern PyTypeObject mb_Handle_Type;

/* For FilterBase (_filterbase.c), h of mb_Handle_Type: one write (op 0 add: True if new;
 * op 1 remove: -1, 0, 1) and one query (1 may be present, 0 absent, -1 error). */
PyObject *mb_handle_write_one(mb_handle *h, PyObject *key, int op);
int mb_handle_contains(mb_handle *h, PyObject *key);

/* For FilterBase.write_lock: the handle's LockState (a borrowed reference) when the handle
 * is open and writable, else NULL (no exception set: the caller takes the Python path). */
PyObject *mb_handle_write_lock(mb_handle *h);

#endif /* MMAPBLOOM_HANDLE_H */
