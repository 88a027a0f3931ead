"""Build of the optional C extension ``mmapbloom._kernels``.

All package metadata lives in pyproject.toml; this file only declares the extension.
``optional=True``: where no C compiler is available the build prints a warning and the
package installs without it (mmapbloom then runs on its pure-Python path).
Extra compiler flags can be given through the usual ``CFLAGS`` environment variable
(tools/check_native.sh uses it for the sanitizer build).
"""

import os

from setuptools import Extension, setup

_GCC_LIKE_FLAGS = ["-O3", "-Wall", "-Wextra"]

setup(
    ext_modules=[
        Extension(
            "mmapbloom._kernels",
            sources=["mmapbloom/_kernels.c", "mmapbloom/_murmur3.c", "mmapbloom/_columns.c"],
            depends=["mmapbloom/_murmur3.h", "mmapbloom/_keys.h", "mmapbloom/_columns.h"],
            optional=True,
            extra_compile_args=[] if os.name == "nt" else _GCC_LIKE_FLAGS,
        )
    ],
)
