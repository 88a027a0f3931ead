"""Build of the optional C extension ``mmapbloom._kernels``.

All package metadata lives in pyproject.toml; this file only declares the extension.
``optional=True``: where no C compiler is available the package installs without it
(mmapbloom then runs on its pure-Python path, which builds byte-identical files, only
slower). setuptools alone would report that in one line that pip hides, so a failed build
prints a banner saying the pure-Python path will be used (shown by ``python -m build`` and
``pip install -v``; ``python -m mmapbloom --version`` names the backend afterwards).
Set ``MMAPBLOOM_REQUIRE_NATIVE=1`` to make a failed build an error instead (the wheel
builds in CI do). Extra compiler flags can be given through the usual ``CFLAGS``
environment variable (tools/check_native.sh uses it for the sanitizer build).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_GCC_LIKE_FLAGS = ["-O3", "-Wall", "-Wextra", "-fvisibility=hidden"]

# The C units of mmapbloom._kernels (mmapbloom/_<unit>.c, each with its header but the module
# file and _handle_batch.c, which shares _handle_impl.h with _handle.c; _module.c lists what
# each owns).
_UNITS = [
    "module",
    "positions",
    "cells",
    "scans",
    "pykeys",
    "columns",
    "lock",
    "lockcall",
    "mutex",
    "guard",
    "lastpage",
    "handle",
    "handle_batch",
    "handle_multi",
    "cuckoo",
    "cuckoo_handle",
    "filterbase",
    "murmur3",
]

_FALLBACK_NOTICE = """
======================================================================
WARNING: the C extension mmapbloom._kernels could not be built:
  {error}
mmapbloom will be installed WITHOUT it and use its pure-Python path:
every feature works and files are byte-identical, but hashing and
batch operations are several times slower. To get the compiled
kernels, install a C compiler and the Python headers, then reinstall.
Check which backend is in use with: python -m mmapbloom --version
Set MMAPBLOOM_REQUIRE_NATIVE=1 to make this an error.
======================================================================
"""


class BuildExtWithNotice(build_ext):
    """``build_ext`` that says loudly when the optional extension falls back to pure Python."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, CCompilerError, DistutilsExecError, ...
            if os.environ.get("MMAPBLOOM_REQUIRE_NATIVE", "") not in ("", "0"):
                raise RuntimeError(f"MMAPBLOOM_REQUIRE_NATIVE is set and {ext.name} failed to build: {exc}") from exc
            sys.stderr.write(_FALLBACK_NOTICE.format(error=exc))
            sys.stderr.flush()
            raise  # setuptools' optional=True handling skips the extension


setup(
    cmdclass={"build_ext": BuildExtWithNotice},
    ext_modules=[
        Extension(
            "mmapbloom._kernels",
            sources=[f"mmapbloom/_{unit}.c" for unit in _UNITS],
            depends=[
                f"mmapbloom/_{unit}.h" for unit in _UNITS if unit not in ("module", "handle_batch", "handle_multi")
            ]
            + ["mmapbloom/_keys.h", "mmapbloom/_handle_impl.h"],
            optional=True,
            extra_compile_args=[] if os.name == "nt" else _GCC_LIKE_FLAGS,
        )
    ],
)
