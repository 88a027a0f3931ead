/* mmapbloom/_lastpage.c: the size check of a mapping's last page (interface and why in
 * _lastpage.h). */
#include "_lastpage.h"

#ifndef _WIN32
#include <unistd.h>
#endif

int mb_lastpage_init(mb_lastpage *lp, PyObject *image, const Py_buffer *view, PyObject *hooks)
{
    PyObject *mod = PyImport_ImportModule("mmap"), *mmap_type;
    int is_mmap;
    lp->size_fn = lp->check_size = NULL;
    lp->len = view->len;
    lp->last = UINTPTR_MAX;
    if (mod == NULL)
        return -1;
    mmap_type = PyObject_GetAttrString(mod, "mmap");
    Py_DECREF(mod);
    if (mmap_type == NULL)
        return -1;
    is_mmap = PyObject_IsInstance(image, mmap_type);
    Py_DECREF(mmap_type);
    if (is_mmap <= 0)
        return is_mmap;
    {
#ifdef _WIN32
        const long page = 4096;
#else
        const long page = sysconf(_SC_PAGESIZE);
#endif
        const uintptr_t end = (uintptr_t)view->buf + (uintptr_t)view->len;
        lp->last = (end - 1) & ~(uintptr_t)(page > 0 ? page - 1 : 4095);
    }
    if ((lp->check_size = PyObject_GetAttrString(hooks, "check_size")) == NULL)
        return -1;
    lp->size_fn = PyObject_GetAttrString(image, "size");
    return lp->size_fn == NULL ? -1 : 0;
}

int mb_lastpage_check(mb_lastpage *lp)
{
    PyObject *r;
    Py_ssize_t size;
    if (lp->size_fn == NULL)
        return 0;
    if ((r = PyObject_CallNoArgs(lp->size_fn)) == NULL)
        return -1;
    size = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    if (size == -1 && PyErr_Occurred())
        return -1;
    if (size >= lp->len)
        return 0;
    r = PyObject_CallNoArgs(lp->check_size);   /* raises LengthMismatchError */
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_OSError, "the filter's file is shorter than its mapping (truncated under the open handle)");
    return -2;
}

int mb_lastpage_traverse(mb_lastpage *lp, visitproc visit, void *arg)
{
    Py_VISIT(lp->size_fn);
    Py_VISIT(lp->check_size);
    return 0;
}

void mb_lastpage_clear(mb_lastpage *lp)
{
    Py_CLEAR(lp->size_fn);
    Py_CLEAR(lp->check_size);
}
