/* mmapbloom/_cuckoo_handle.h: the cuckoo filter's native handle (CuckooHandle), one object
 * per open CKF1 filter (mmapbloom/cuckoo_kernels.py builds it; CuckooFilter's hot API goes
 * through it).
 *
 * A CuckooHandle binds the image buffer (exported once), the table's geometry (_cuckoo.h's
 * mb_ck_geom over it), the header's items word and the LockState of the filter's WriteLock.
 * Writes take the write lock through the lock seam (_lock.h: mb_lock_try, else
 * mb_lock_wait) with the GIL held, run _cuckoo.c's cell operations, bump the items word
 * and unlock; lookups take no lock.  Keys are converted by _pykeys.h (the encode_key rule;
 * batches of any iterable or a Column of _columns.h, nulls skipped).  Every touch of the
 * mapping runs in a guarded section (_guard.h): a file truncated under the handle raises
 * through hooks.faulted instead of SIGBUS.  It owns no format knowledge beyond _cuckoo.h's
 * offsets and no error text: hooks (closed, readonly, faulted, full) raise the filter's
 * errors. */
#ifndef MMAPBLOOM_CUCKOO_HANDLE_H
#define MMAPBLOOM_CUCKOO_HANDLE_H

#include <Python.h>

/* The type, added to the module as CuckooHandle. */
extern PyTypeObject mb_CuckooHandle_Type;

#endif /* MMAPBLOOM_CUCKOO_HANDLE_H */
