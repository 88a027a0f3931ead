/* mmapbloom/_lastpage.h: a file truncated inside its mapping's last page (issue 29, item 1).
 *
 * A truncation before the mapping's last page makes a touch past the new end fault
 * (SIGBUS, turned into an error by _guard.h); every guarded section therefore first touches
 * the mapping's last byte (MB_TOUCH_LAST).  A truncation inside the last page does not
 * fault: the rest of that page reads as zeros and takes writes that never reach the file.
 * So a handle whose operation touches bytes in the last page compares the file's size
 * with the mapping first (mb_lastpage_check: one fstat, through the mmap's size()).  In
 * memory there is nothing to check.  Used by the Bloom handle (_handle.c) and the cuckoo
 * handle (_cuckoo_handle.c).  Fields are read and written with the GIL held. */
#ifndef MMAPBLOOM_LASTPAGE_H
#define MMAPBLOOM_LASTPAGE_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject *size_fn;    /* image.size (an mmap: the file's size), or NULL (in memory) */
    PyObject *check_size; /* hooks.check_size(): raises LengthMismatchError */
    uintptr_t last;       /* the address where the mapping's last page starts */
    Py_ssize_t len;       /* the mapping's length in bytes */
} mb_lastpage;

/* Fill lp for the buffer view exported by image (an mmap.mmap: a file; anything else: in
 * memory, nothing to check); hooks.check_size is read for a file.  0, or -1 with an
 * exception (lp then holds what it took: mb_lastpage_clear releases it). */
int mb_lastpage_init(mb_lastpage *lp, PyObject *image, const Py_buffer *view, PyObject *hooks);

/* 1 if bytes [p, p + n) of the mapping reach into its last page (and lp is a file's). */
static inline int mb_lastpage_touches(const mb_lastpage *lp, const void *p, size_t n)
{
    return lp->size_fn != NULL && (uintptr_t)p + n > lp->last;
}

/* The file still covers the whole mapping: 0.  -1: size() failed (its exception is set;
 * the mmap may have been closed by another thread).  -2: the file is shorter, and the
 * check_size hook's LengthMismatchError is set.  One fstat; 0 at once in memory. */
int mb_lastpage_check(mb_lastpage *lp);

int mb_lastpage_traverse(mb_lastpage *lp, visitproc visit, void *arg);
void mb_lastpage_clear(mb_lastpage *lp);

/* The first touch of every guarded section over a mapping of len bytes at buf: its last
 * byte, which faults when the file was truncated anywhere before the last page. */
#define MB_TOUCH_LAST(buf, len) ((void)*(volatile const uint8_t *)((const uint8_t *)(buf) + (len) - 1))

#endif /* MMAPBLOOM_LASTPAGE_H */
