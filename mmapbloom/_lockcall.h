/* mmapbloom/_lockcall.h: LockCall / LockSlot (_lockcall.c), the descriptors that make
 * `with lock:` on a LockState call __enter__ / __exit__ without allocating a bound method.
 * Owns: the LockCall and LockSlot types and the LockCall free list.  No behaviour of its own:
 * calling a LockCall is calling LockState.__enter__ / __exit__ (mb_lock_enter / mb_lock_exit). */
#ifndef MMAPBLOOM_LOCKCALL_H
#define MMAPBLOOM_LOCKCALL_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Called by _lock.c once, at the first LockState made, with the GIL: replaces the
 * __enter__ / __exit__ entries of mb_LockState_Type's dict by LockSlots.  Never fails (a
 * failure leaves the plain methods: slower, same result). */
void mb_lockcall_install(void);

/* Provided by _lock.c: LockState.__enter__ (obj a LockState) and __exit__ (nargs 3). */
PyObject *mb_lock_enter(PyObject *obj, PyObject *unused);
PyObject *mb_lock_exit(PyObject *obj, PyObject *const *args, Py_ssize_t nargs);

#endif
