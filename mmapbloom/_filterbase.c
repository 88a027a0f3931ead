/* mmapbloom/_filterbase.c: FilterBase, the base class of the filters on the native backend
 * (interface in _filterbase.h). */
#include "_filterbase.h"

#include <structmember.h>

#include "_handle.h"

/* The base class of mmapbloom.base.MappedFilter on the native backend: it holds the
 * filter's handle (_h) and implements add, might_contain and `in` by calling it directly,
 * so `x in f` and `f.add(x)` cost one C call and no Python frame; write_lock() returns the
 * handle's LockState in one C call when the handle is open and writable (anything else:
 * the subclass's _write_lock_slow).  A handle that is not
 * a native Handle (the pure one, for a custom strategy) is called through its methods. */
typedef struct {
    PyObject_HEAD
    PyObject *h;
} FilterBase;

static int fb_traverse(FilterBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->h);
    return 0;
}

static int fb_clear(FilterBase *self)
{
    Py_CLEAR(self->h);
    return 0;
}

static void fb_dealloc(FilterBase *self)
{
    PyObject_GC_UnTrack(self);
    fb_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fb_handle(FilterBase *self)
{
    if (self->h == NULL)
        PyErr_SetString(PyExc_ValueError, "operation on a closed filter (no handle attached)");
    return self->h;
}

PyDoc_STRVAR(fb_add_doc,
"add(item, /)\n--\n\n"
"Add one item (str, hashed as UTF-8, bytes-like, or int: mmapbloom.hashing.encode_key's\n"
"rule); return True if it was new (some bit\n"
"was 0; for a counting filter, some counter was 0).\n\n"
"An atomic test-and-set across threads and processes: when several add the same new item\n"
"at once, exactly one gets True.  Cost: one hash and k cell operations under the write\n"
"lock, taken and released in C when it is free (one flock pair unless the caller holds\n"
"write_lock()); the items counter is bumped under the same lock.  Counting filters:\n"
"saturated counters stay at their maximum (SaturationWarning once per handle).\n"
"OverCapacityWarning once per handle past the design point.\n\n"
"Raises TypeError (another item type), KeyEncodingError (a str with lone surrogates),\n"
"ReadOnlyFilterError, FilterClosedError, SelfDeadlockError (this thread holds the\n"
"file's lock through another handle), LengthMismatchError (the file was truncated under\n"
"the open handle: the touch of the mapping is guarded, never SIGBUS).");

static PyObject *fb_add(FilterBase *self, PyObject *key)
{
    PyObject *h = fb_handle(self), *r;
    if (h == NULL)
        return NULL;
    Py_INCREF(h);   /* the call may run Python, which may rebind or delete self._h */
    if (Py_IS_TYPE(h, &mb_Handle_Type))
        r = mb_handle_write_one((mb_handle *)h, key, 0);
    else
        r = PyObject_CallMethod(h, "add", "O", key);
    Py_DECREF(h);
    return r;
}

static int fb_contains_int(FilterBase *self, PyObject *key)
{
    PyObject *h = fb_handle(self), *r;
    int t;
    if (h == NULL)
        return -1;
    Py_INCREF(h);   /* the call may run Python, which may rebind or delete self._h */
    if (Py_IS_TYPE(h, &mb_Handle_Type)) {
        t = mb_handle_contains((mb_handle *)h, key);
    } else if ((r = PyObject_CallMethod(h, "contains", "O", key)) == NULL) {
        t = -1;
    } else {
        t = PyObject_IsTrue(r);
        Py_DECREF(r);
    }
    Py_DECREF(h);
    return t;
}

PyDoc_STRVAR(fb_might_contain_doc,
"might_contain(item, /)\n--\n\n"
"True if item (str, bytes-like or int) may have been added; False only if it certainly was not\n"
"(no false negatives).  Same as `item in f`.  Takes no lock; computes positions lazily and\n"
"stops at the first zero cell: one hash and at most k cell reads (fewer for most absent\n"
"items).\n\n"
"Raises TypeError (an item of another type, bool, float, None), OverflowError (an int outside\n"
"[-2**63, 2**64)), FilterClosedError, LengthMismatchError (the file was truncated under the\n"
"open handle).");

static PyObject *fb_might_contain(FilterBase *self, PyObject *key)
{
    const int present = fb_contains_int(self, key);
    return present < 0 ? NULL : PyBool_FromLong(present);
}

PyDoc_STRVAR(fb_write_lock_doc,
"write_lock(timeout=None)\n--\n\n"
"The handle's write lock, as a context manager, for loops that cannot batch::\n\n"
"    with f.write_lock():\n"
"        for url in urls:\n"
"            if f.add(url): ...\n\n"
"Inside the block writes re-enter the lock without another lock call.  Other writers\n"
"(threads, processes) wait until the block ends; readers are not blocked.  A write through\n"
"a *second* handle on the same file inside the block (same thread) raises\n"
"SelfDeadlockError at once; snapshot reads of a second handle (copy, to_bytes, |, to_bloom,\n"
"a counting union) work inside the block and see its writes.\n\n"
"timeout: None (default) waits as long as it takes; a number of seconds >= 0: entering the\n"
"block waits at most that long (thread lock and cross-process lock together) and raises\n"
"LockTimeout (a TimeoutError).  Cost without a timeout on an open writable handle: one C\n"
"call that returns the lock (no Python frame); otherwise MappedFilter._write_lock_slow.\n\n"
"Raises ReadOnlyFilterError, FilterClosedError (such a handle), ValueError (a negative or\n"
"non-finite timeout); on entering: LockTimeout, SelfDeadlockError, FilterClosedError.");

static PyObject *fb_write_lock(FilterBase *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *slow, *r;
    if (nargs == 0 && kwnames == NULL && self->h != NULL && Py_IS_TYPE(self->h, &mb_Handle_Type)) {
        PyObject *lock = mb_handle_write_lock((mb_handle *)self->h);
        if (lock != NULL)
            return Py_NewRef(lock);
    }
    /* a timeout, a closed or read-only handle, the pure handle: the Python protocol */
    slow = PyObject_GetAttrString((PyObject *)self, "_write_lock_slow");
    if (slow == NULL)
        return NULL;
    r = PyObject_Vectorcall(slow, args, nargs, kwnames);
    Py_DECREF(slow);
    return r;
}

static PyObject *fb_init_subclass(PyObject *cls, PyObject *args, PyObject *kwargs);

/* The hot methods, rebound on every subclass by fb_init_subclass: the first three entries. */
#define FB_HOT_METHODS 3

static PyMethodDef fb_methods[] = {
    {"add", (PyCFunction)fb_add, METH_O, fb_add_doc},
    {"might_contain", (PyCFunction)fb_might_contain, METH_O, fb_might_contain_doc},
    {"write_lock", (PyCFunction)(void (*)(void))fb_write_lock, METH_FASTCALL | METH_KEYWORDS, fb_write_lock_doc},
    {"__init_subclass__", (PyCFunction)(void (*)(void))fb_init_subclass, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "Give the new subclass its own add, might_contain and write_lock descriptors (see _filterbase.h)."},
    {NULL, NULL, 0, NULL},
};

/* CPython's specialised call of a METH_O method descriptor (PRECALL / CALL
 * _NO_KW_METHOD_DESCRIPTOR_O, 3.11 to 3.13) requires type(self) to be exactly the
 * descriptor's type; FilterBase's own descriptors are therefore called through the generic
 * path from every subclass instance (measured: f.add(s) cost 206 instructions more than a
 * cached bound method).  Each subclass gets a descriptor of the same C function, owned by
 * the subclass, unless a class on the way overrides the name with something else; the
 * call, its result, errors and docstring are unchanged. */
static PyObject *fb_init_subclass(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    PyObject *sup, *init, *r;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "__init_subclass__ expects a class");
        return NULL;
    }
    for (int i = 0; i < FB_HOT_METHODS; i++) {
        /* a class attribute read: a method descriptor comes back as itself */
        PyObject *found = PyObject_GetAttrString(cls, fb_methods[i].ml_name);
        if (found == NULL) {
            PyErr_Clear();
            continue;
        }
        const int ours = Py_IS_TYPE(found, &PyMethodDescr_Type) && ((PyMethodDescrObject *)found)->d_method == &fb_methods[i];
        Py_DECREF(found);
        if (!ours)
            continue;   /* overridden on the way: leave it */
        PyObject *descr = PyDescr_NewMethod((PyTypeObject *)cls, &fb_methods[i]);
        if (descr == NULL)
            return NULL;
        int rc = PyObject_SetAttrString(cls, fb_methods[i].ml_name, descr);
        Py_DECREF(descr);
        if (rc < 0)
            return NULL;
    }
    /* super(FilterBase, cls).__init_subclass__(*args, **kwargs): the next class in the MRO */
    sup = PyObject_CallFunctionObjArgs((PyObject *)&PySuper_Type, (PyObject *)&mb_FilterBase_Type, cls, NULL);
    if (sup == NULL)
        return NULL;
    init = PyObject_GetAttrString(sup, "__init_subclass__");
    Py_DECREF(sup);
    if (init == NULL)
        return NULL;
    r = PyObject_Call(init, args, kwargs);
    Py_DECREF(init);
    return r;
}

static PyMemberDef fb_members[] = {
    {"_h", T_OBJECT, offsetof(FilterBase, h), 0, "the filter's handle (mmapbloom.handle.attach)"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods fb_as_sequence = {
    .sq_contains = (objobjproc)fb_contains_int,
};

PyTypeObject mb_FilterBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.FilterBase",
    .tp_basicsize = sizeof(FilterBase),
    .tp_dealloc = (destructor)fb_dealloc,
    .tp_as_sequence = &fb_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FilterBase()\n--\n\n"
              "Base class of mmapbloom's filters on the native backend: add, might_contain and `in` go\n"
              "straight to the filter's handle (_h), with no Python frame.",
    .tp_traverse = (traverseproc)fb_traverse,
    .tp_clear = (inquiry)fb_clear,
    .tp_methods = fb_methods,
    .tp_members = fb_members,
    .tp_new = PyType_GenericNew,
};
