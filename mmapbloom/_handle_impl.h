/* mmapbloom/_handle_impl.h: the native handle's fields and the helpers its C files share,
 * private to them: _handle.c (the object, per-item ops, close), _handle_batch.c (add_many,
 * contains_many) and _handle_multi.c (the same over several handles of one geometry).
 * Everything else goes through _handle.h. */
#ifndef MMAPBLOOM_HANDLE_IMPL_H
#define MMAPBLOOM_HANDLE_IMPL_H

#include "_handle.h"

#include "_lastpage.h"
#include "_lock.h"
#include "_positions.h"

typedef mb_handle Handle;

struct mb_handle {
    PyObject_HEAD
    Py_buffer image;       /* the whole image (header + cells), exported once */
    int have_image;
    uint8_t *body;         /* the cells: image + header size */
    uint8_t *items;        /* the header's items word */
    geom g;
    int width;             /* 1: Bloom bits; 4 or 8: counters */
    int writable, closed, warned;
    Py_ssize_t busy;       /* calls in flight that let go of the GIL or call Python */
    double warn_at;        /* the design point (items.design_limit) */
    LockState *lock;
    /* The filter's hooks (mmapbloom.handle.Hooks), read once by Handle(): */
    PyObject *closed_hook;     /* closed(): raises FilterClosedError */
    PyObject *readonly_hook;   /* readonly(): raises the read-only handle's write refusal */
    PyObject *faulted_hook;    /* faulted(): raises after a touch of the mapping faulted */
    PyObject *over;            /* over(count): emits the over-capacity warning */
    PyObject *saturated;       /* saturated(): emits the counter-saturation warning, or None */
    /* A file truncated inside the mapping's last page (issue 29, item 1): the rest of that
     * page reads as zeros and takes writes, with no SIGBUS.  Every guarded section first
     * touches the mapping's last byte (a truncation before the last page faults there);
     * a per-item op whose cells (or items word) lie in the last page, and each batch
     * chunk, compare the file's size first (mb_h_check_size: one fstat).  In memory: none. */
    mb_lastpage lp;
    uint64_t last_cell;        /* cells from this index on lie in the last page (file only) */
    int items_last;            /* the items word lies in the last page */
};

/* Raise for a closed handle, or (write) for a refused write, which is also
 * FilterClosedError while the handle closes, through the filter's own errors.  NULL. */
PyObject *mb_h_refuse(Handle *h, int write);

/* End of a call counted in busy: the image export goes once the handle is closed and no
 * call is in flight. */
void mb_h_leave(Handle *h);

/* Add delta to the items word by the rule of mmapbloom.items.items_update: clamped to
 * [0, 2**32 - 1], never moving again once saturated.  Returns 1 (and the stored count)
 * when the count is past the design point and this handle has not warned yet.  The caller
 * holds the write lock. */
int mb_h_items_bump(Handle *h, long long delta, uint32_t *stored);

/* The warnings of a write, after the lock is released (the hooks find the user's frame). */
int mb_h_warn(Handle *h, int over, uint32_t stored, int sat);

/* Take the write lock for a write: the uncontended path in C, else WriteLock.acquire;
 * after such a real wait the file's size is checked again (a truncation inside the last
 * page made while this thread waited).  Returns LOCK_HELD or LOCK_TAKEN, or -1 with an
 * exception set (the lock then not held). */
int mb_h_lock(Handle *h);

/* Raise for a fault of the mapping inside a guarded section (the file was truncated under
 * the open handle): LengthMismatchError through the faulted hook.  NULL. */
PyObject *mb_h_faulted(Handle *h);

/* The file still covers the whole mapping: 0; else -1 with LengthMismatchError (or
 * FilterClosedError when another thread closed the handle meanwhile).  _lastpage.h. */
int mb_h_check_size(Handle *h);

/* The batch methods (_handle_batch.c), in Handle's method table. */
PyObject *mb_h_add_many(Handle *h, PyObject *const *args, Py_ssize_t nargs);
PyObject *mb_h_contains_many(Handle *h, PyObject *const *args, Py_ssize_t nargs);
extern const char mb_h_add_many_doc[];
extern const char mb_h_contains_many_doc[];

/* The multi-handle methods (_handle_multi.c): one key hashed once for several handles of
 * one geometry (the expiring filter's periods), in Handle's method table. */
PyObject *mb_h_add_many_unless(Handle *h, PyObject *const *args, Py_ssize_t nargs);
PyObject *mb_h_contains_many_any(Handle *h, PyObject *const *args, Py_ssize_t nargs);
PyObject *mb_h_add_unless(Handle *h, PyObject *const *args, Py_ssize_t nargs);
PyObject *mb_h_contains_any(Handle *h, PyObject *const *args, Py_ssize_t nargs);
extern const char mb_h_add_many_unless_doc[];
extern const char mb_h_contains_many_any_doc[];
extern const char mb_h_add_unless_doc[];
extern const char mb_h_contains_any_doc[];

/* The first touch of every guarded section (_lastpage.h). */
#define TOUCH_LAST(h) MB_TOUCH_LAST((h)->image.buf, (h)->image.len)

#endif /* MMAPBLOOM_HANDLE_IMPL_H */
