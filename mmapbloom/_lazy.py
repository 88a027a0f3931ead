"""Heavy dependencies loaded on first use: :data:`np` and :data:`npt` stand for ``numpy``
and ``numpy.typing`` and import them the first time one of their attributes is read, so
that opening a filter, ``in``, ``add``, ``update`` with a list and ``close`` never import
numpy (it costs about 300 M instructions, 60-90 ms, of a fresh process). A module writes::

    if TYPE_CHECKING:
        import numpy as np
        import numpy.typing as npt
    else:
        from ._lazy import np, npt

and uses ``np.x`` as before; mypy sees the real module. :func:`is_ndarray` tests for an
array without importing numpy (an array can only exist once numpy is imported).

Thread safety: the first attribute read runs ``importlib.import_module``, which the import
system serialises; copying the module's namespace is idempotent, so two threads racing on
the first read both see the real attributes. After the first read an attribute is a plain
read of the stand-in's ``__dict__`` (a copy of the module's, taken then); a name the module
gains later (numpy's own lazily loaded submodules) is fetched from it on each read.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeGuard

    import numpy

__all__ = ["LazyModule", "is_ndarray", "np", "npt", "numpy_attr", "numpy_loaded"]


class LazyModule(types.ModuleType):
    """A stand-in for the module named ``name`` that imports it on the first attribute
    read, then holds a copy of its namespace.

    Args:
        name: the absolute module name, for example ``"numpy"``.

    Raises:
        ImportError: on the first attribute read, when the module cannot be imported.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__") and attr not in ("__version__", "__file__"):
            raise AttributeError(attr)  # copy, pickle, inspect probes: never import for them
        module = importlib.import_module(self.__dict__["_lazy_target"])
        namespace = {k: v for k, v in vars(module).items() if k != "__getattr__"}
        self.__dict__.update(namespace)
        return getattr(module, attr)


#: ``numpy``, imported on the first attribute read.
np = LazyModule("numpy")
#: ``numpy.typing``, imported on the first attribute read.
npt = LazyModule("numpy.typing")


def numpy_attr(name: str) -> Any:
    """``numpy.<name>`` if numpy is imported in this process, else None (numpy is not
    imported for it). While another thread is importing numpy, waits for that import to
    finish (the import system's module lock), so a partly initialised numpy is never
    read."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return None
    value = getattr(numpy, name, None)
    if value is None:  # partly initialised: another thread is importing it
        value = getattr(importlib.import_module("numpy"), name)
    return value


def is_ndarray(value: object) -> TypeGuard[numpy.ndarray[Any, Any]]:
    """Whether ``value`` is a ``numpy.ndarray`` (or a subclass), without importing numpy
    when it is not imported yet (then no array can exist)."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return False
    return isinstance(value, getattr(numpy, "ndarray", None) or numpy_attr("ndarray"))


def numpy_loaded() -> bool:
    """Whether numpy is imported in this process (cheap: a dictionary look-up)."""
    return "numpy" in sys.modules
