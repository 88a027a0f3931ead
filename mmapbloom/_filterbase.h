/* mmapbloom/_filterbase.h: FilterBase, the base class of mmapbloom.base.MappedFilter on the
 * native backend.  It holds the filter's handle (_h) and implements add, might_contain and
 * `in` by calling a native Handle (_handle.h) directly, so `x in f` and `f.add(x)` cost one
 * C call and no Python frame; any other handle (the pure one) through its methods. */
#ifndef MMAPBLOOM_FILTERBASE_H
#define MMAPBLOOM_FILTERBASE_H

#include <Python.h>

/* The type, added to the module as FilterBase. */
extern PyTypeObject mb_FilterBase_Type;

#endif /* MMAPBLOOM_FILTERBASE_H */
