/* mmapbloom/_lockcall.c: LockCall / LockSlot, `with lock:` without a bound method (interface in _lockcall.h). */
#include "_lockcall.h"
#include "_lock.h"

#include <stddef.h>

/* ---- `with lock:` without a bound method per statement --------------------------------
 * BEFORE_WITH looks __enter__ and __exit__ up on the type and calls each descriptor's
 * __get__, which for a method descriptor allocates (and the statement then frees) a bound
 * method: measured with callgrind, about 800 of the 1,800 instructions of a `with
 * f.write_lock(): pass` pair.  At the first LockState made, the two entries of LockState's
 * dict become LockSlot descriptors: their __get__ on an instance returns a LockCall (the
 * lock and which method, vectorcall), taken from a small free list; on the class
 * (LockState.__enter__, WriteLock.__enter__, contextlib.ExitStack's type(cm).__enter__) the
 * plain method descriptor, unchanged.  A LockCall holds a strong reference to its lock and is
 * tracked by the GC, like a bound method; calling it is calling the method. */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *owner;   /* the LockState (strong) */
    int is_exit;
} LockCall;

static PyTypeObject LockCall_Type;

#ifndef Py_GIL_DISABLED   /* the free list is protected by the GIL */
#define LC_FREE_MAX 8
static LockCall *lc_free[LC_FREE_MAX];
static int lc_nfree;
#endif

static PyObject *lc_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LockCall *c = (LockCall *)self;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)
        return PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", c->is_exit ? "__exit__" : "__enter__");
    if (c->owner == NULL)   /* never, as a bound method's __self__ (no tp_clear) */
        return PyErr_Format(PyExc_SystemError, "%s() of a cleared lock", c->is_exit ? "__exit__" : "__enter__");
    if (c->is_exit)
        return mb_lock_exit(c->owner, args, nargs);
    if (nargs != 0)
        return PyErr_Format(PyExc_TypeError, "__enter__() takes no arguments (%zd given)", nargs);
    return mb_lock_enter(c->owner, NULL);
}

static PyObject *lc_new(PyObject *owner, int is_exit)
{
    LockCall *c;
#ifndef Py_GIL_DISABLED
    if (lc_nfree > 0) {
        c = lc_free[--lc_nfree];
        (void)PyObject_Init((PyObject *)c, &LockCall_Type);
    } else
#endif
    if ((c = PyObject_GC_New(LockCall, &LockCall_Type)) == NULL)
        return NULL;
    c->vectorcall = lc_vectorcall;
    c->owner = Py_NewRef(owner);
    c->is_exit = is_exit;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

static void lc_dealloc(LockCall *c)
{
    PyObject_GC_UnTrack(c);
    Py_CLEAR(c->owner);
#ifndef Py_GIL_DISABLED
    if (lc_nfree < LC_FREE_MAX) {
        lc_free[lc_nfree++] = c;
        return;
    }
#endif
    PyObject_GC_Del(c);
}

static int lc_traverse(LockCall *c, visitproc visit, void *arg)
{
    Py_VISIT(c->owner);
    return 0;
}

static PyObject *lc_repr(LockCall *c)
{
    return PyUnicode_FromFormat("<bound method %s of %R>", c->is_exit ? "__exit__" : "__enter__",
                                c->owner != NULL ? c->owner : Py_None);
}

static PyObject *lc_get_self(LockCall *c, void *unused)
{
    (void)unused;
    return Py_NewRef(c->owner != NULL ? c->owner : Py_None);
}

static PyObject *lc_get_name(LockCall *c, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(c->is_exit ? "__exit__" : "__enter__");
}

static PyObject *lc_get_doc(LockCall *c, void *unused)
{
    PyObject *method = PyObject_GetAttrString((PyObject *)&mb_LockState_Type, c->is_exit ? "__exit__" : "__enter__");
    PyObject *doc;
    (void)unused;
    if (method == NULL)
        return NULL;
    doc = PyObject_GetAttrString(method, "__doc__");
    Py_DECREF(method);
    return doc;
}

static PyGetSetDef lc_getset[] = {
    {"__self__", (getter)lc_get_self, NULL, "the lock", NULL},
    {"__name__", (getter)lc_get_name, NULL, "the method's name", NULL},
    {"__doc__", (getter)lc_get_doc, NULL, "the method's docstring", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LockCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.LockCall",
    .tp_basicsize = sizeof(LockCall),
    .tp_dealloc = (destructor)lc_dealloc,
    .tp_vectorcall_offset = offsetof(LockCall, vectorcall),
    .tp_repr = (reprfunc)lc_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)lc_traverse,
    .tp_getset = lc_getset,
};

/* The descriptor in LockState's dict: __get__ on an instance makes a LockCall, on the class
 * returns the method descriptor it replaced. */
typedef struct {
    PyObject_HEAD
    PyObject *method;   /* the PyMethodDescr of ls_methods */
    int is_exit;
} LockSlot;

static PyObject *slot_get(PyObject *self, PyObject *obj, PyObject *type)
{
    LockSlot *s = (LockSlot *)self;
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(s->method);
    if (Py_TYPE(obj)->tp_base != &mb_LockState_Type && !PyObject_TypeCheck(obj, &mb_LockState_Type))
        return Py_TYPE(s->method)->tp_descr_get(s->method, obj, type);
    return lc_new(obj, s->is_exit);
}

static void slot_dealloc(LockSlot *s)
{
    Py_CLEAR(s->method);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *slot_get_doc(LockSlot *s, void *unused)
{
    (void)unused;
    return PyObject_GetAttrString(s->method, "__doc__");
}

static PyGetSetDef slot_getset[] = {
    {"__doc__", (getter)slot_get_doc, NULL, "the method's docstring", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LockSlot_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mmapbloom._kernels.LockSlot",
    .tp_basicsize = sizeof(LockSlot),
    .tp_dealloc = (destructor)slot_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_descr_get = slot_get,
    .tp_getset = slot_getset,
};

/* Replace LockState's __enter__ / __exit__ entries by LockSlots (once, at the first
 * LockState made, with the GIL).  A failure leaves the plain methods (slower, same result). */

void mb_lockcall_install(void)
{
    static const char *names[2] = {"__enter__", "__exit__"};
    PyObject *dict = mb_LockState_Type.tp_dict;
    if (dict == NULL || PyType_Ready(&LockCall_Type) < 0 || PyType_Ready(&LockSlot_Type) < 0) {
        PyErr_Clear();
        return;
    }
    for (int i = 0; i < 2; i++) {
        PyObject *method = PyDict_GetItemString(dict, names[i]);   /* borrowed */
        LockSlot *s;
        if (method == NULL || !Py_IS_TYPE(method, &PyMethodDescr_Type))
            continue;
        if ((s = PyObject_New(LockSlot, &LockSlot_Type)) == NULL) {
            PyErr_Clear();
            return;
        }
        s->method = Py_NewRef(method);
        s->is_exit = i;
        if (PyDict_SetItemString(dict, names[i], (PyObject *)s) < 0)
            PyErr_Clear();
        Py_DECREF(s);
    }
    PyType_Modified(&mb_LockState_Type);
}
