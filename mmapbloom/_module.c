/* mmapbloom/_module.c: the module mmapbloom._kernels: its method table and its init.
 *
 * The units, one job each (each header says what it owns):
 *   _positions  the hash strategies and a key's positions; hash128(), positions()
 *   _cells      Bloom bits and 4-/8-bit counters, one key and batch pipelines
 *   _scans      guarded whole-range scans of a mapping (scan(), scan_bytes())
 *   _pykeys     Python keys to bytes (the encode_key rule), batches of keys
 *   _columns    key columns read in place (numpy, Arrow): Column, arrow_column(), fixed_column()
 *   _lock       the write lock's C half: LockState, flock_try(), flock_unlock()
 *   _mutex      the robust process-shared mutex in a side file: Mutex, mutex_supported()
 *   _guard      the SIGBUS guard around touches of a mapping, the items word
 *   _lastpage   the size check of a file truncated inside its mapping's last page
 *   _handle     the native Handle (the hot API of every filter): the object, per-item ops;
 *               _handle_batch its add_many / contains_many (both over _handle_impl.h)
 *   _cuckoo     the cuckoo filter's cells (CKF1, M3C1), plain C
 *   _cuckoo_handle  the native CuckooHandle (the cuckoo filter's hot API) over _cuckoo
 *   _filterbase FilterBase, the filters' base class on the native backend
 *   _murmur3    MurmurHash3_x64_128
 *
 * The pure-Python path (mmapbloom/hashing.py, kernels.py, handle.py) is the reference: every
 * function here gives exactly its answers and leaves exactly its bytes.  Thread safety: no
 * global state but the process-wide SIGBUS handler (_guard.h), whose per-call state is
 * thread-local; writers are serialised by the write lock (_lock.h); batch queries release the
 * GIL with the body, the output and every key pinned. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_columns.h"
#include "_cuckoo_handle.h"
#include "_filterbase.h"
#include "_handle.h"
#include "_lock.h"
#include "_mutex.h"
#include "_positions.h"
#include "_scans.h"

static PyMethodDef kernel_methods[] = {
    {"hash128", (PyCFunction)mb_hash128, METH_O, mb_hash128_doc},
    {"positions", (PyCFunction)(void (*)(void))mb_positions_py, METH_FASTCALL, mb_positions_doc},
    {"scan", (PyCFunction)(void (*)(void))mb_scan, METH_FASTCALL, mb_scan_doc},
    {"scan_bytes", (PyCFunction)(void (*)(void))mb_scan_bytes, METH_FASTCALL, mb_scan_bytes_doc},
#ifndef _WIN32
    {"flock_try", (PyCFunction)mb_flock_try, METH_O, mb_flock_try_doc},
    {"flock_unlock", (PyCFunction)mb_flock_unlock, METH_O, mb_flock_unlock_doc},
#endif
    {"mutex_supported", (PyCFunction)mb_mutex_supported, METH_O, mb_mutex_supported_doc},
    {NULL, NULL, 0, NULL},
};

static int add_type(PyObject *module, const char *name, PyTypeObject *type)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static int kernel_exec(PyObject *module)
{
    if (add_type(module, "FilterBase", &mb_FilterBase_Type) < 0 ||
        add_type(module, "LockState", &mb_LockState_Type) < 0 ||
        add_type(module, "Mutex", &mb_Mutex_Type) < 0 || add_type(module, "Handle", &mb_Handle_Type) < 0 ||
        add_type(module, "CuckooHandle", &mb_CuckooHandle_Type) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "M3KM", S_M3KM) < 0 || PyModule_AddIntConstant(module, "M3MX", S_M3MX) < 0 ||
        PyModule_AddIntConstant(module, "M3BL", S_M3BL) < 0 || PyModule_AddIntConstant(module, "M3M2", S_M3M2) < 0 ||
        PyModule_AddIntConstant(module, "M3B2", S_M3B2) < 0 || PyModule_AddIntConstant(module, "MAX_K", MAX_K) < 0 ||
        mb_columns_init(module) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot kernel_slots[] = {
    {Py_mod_exec, (void *)kernel_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"Compiled kernels of mmapbloom: MurmurHash3_x64_128, the M3KM / M3MX / M3BL / M3M2 / M3B2\n"
"position strategies (ids 1 to 5), the native Handle over Bloom and counting (4-/8-bit)\n"
"bodies, the CuckooHandle over CKF1 tables, guarded scans and a GIL-keeping flock.  Results\n"
"are identical to the pure-Python reference path.  The first Handle (or CuckooHandle)\n"
"installs a process-wide SIGBUS handler (chained to the previous one) that turns a fault of\n"
"a handle's mapping (a file truncated under it) into LengthMismatchError.");

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT,
    "mmapbloom._kernels",
    module_doc,
    0,
    kernel_methods,
    kernel_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    return PyModuleDef_Init(&kernel_module);
}
