/* mmapbloom/_filterbase.h: FilterBase, the base class of mmapbloom.base.MappedFilter on the
 * native backend.  It holds the filter's handle (_h) and implements add, might_contain and
 * `in` by calling a native Handle (_handle.h) directly, so `x in f` and `f.add(x)` cost one
 * C call and no Python frame; any other handle (the pure one) through its methods.  Its
 * __init_subclass__ gives each subclass its own add / might_contain descriptors, so that
 * CPython's specialised method-descriptor call (exact type only) applies to them. */
#ifndef MMAPBLOOM_FILTERBASE_H
#define MMAPBLOOM_FILTERBASE_H

#include <Python.h>

/* The type, added to the module as FilterBase. */
extern PyTypeObject mb_FilterBase_Type;

#endif /* MMAPBLOOM_FILTERBASE_H */
