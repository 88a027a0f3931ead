/* mmapbloom/_scans.h: guarded whole-range reads and writes of a mapping (mmapbloom/scans.py).
 *
 * The filters' scans of a mapped cell array (statistics over blocks, union / intersection,
 * the counting sum, to_bloom, to_bytes, __eq__, check's reads, merge_into's writes) run
 * through the two module functions below, each a guarded section (_guard.h) over its
 * buffers, with the GIL released while the bytes move; the byte loops have an AVX2 build
 * chosen at run time on x86-64. */
#ifndef MMAPBLOOM_SCANS_H
#define MMAPBLOOM_SCANS_H

#include <Python.h>

/* scan(dst, dst_offset, src, src_offset, count, op) and scan_bytes(src, offset, count),
 * both METH_FASTCALL (their docstrings say what they answer). */
PyObject *mb_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *mb_scan_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
extern const char mb_scan_doc[], mb_scan_bytes_doc[];

#endif /* MMAPBLOOM_SCANS_H */
