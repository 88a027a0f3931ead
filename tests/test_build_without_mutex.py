"""The C units build and link where robust process-shared mutexes are not built (macOS,
Windows, any non-Linux host: ``MB_HAVE_MUTEX`` unset in ``_mutex.h``): every ``mb_*`` /
``mmb_*`` function one unit calls is defined by some unit. A call without a definition there
links on macOS (``-undefined dynamic_lookup``) and then fails at import, which
``mmapbloom.kernels`` takes for "no extension": the wheel would silently run on the
pure-Python path. Simulated here by compiling every unit with ``__linux__`` undefined."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sysconfig
from typing import Any

import pytest

from tests.conftest import ROOT

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
NM = shutil.which("nm")
INCLUDE = sysconfig.get_paths()["include"]

pytestmark = [
    pytest.mark.skipif(
        CC is None or NM is None or not os.path.exists(os.path.join(INCLUDE, "Python.h")),
        reason="needs a C compiler, nm and the Python headers",
    ),
    pytest.mark.skipif(
        not os.path.exists(os.path.join(ROOT, "mmapbloom", "_mutex.c")), reason="no C sources in this tree"
    ),
]


def _symbols(obj: str) -> tuple[set[str], set[str]]:
    """(defined, undefined) ``mb_*`` / ``mmb_*`` symbols of one object file."""
    out = subprocess.run([str(NM), obj], capture_output=True, text=True, check=True).stdout
    defined: set[str] = set()
    undefined: set[str] = set()
    for line in out.splitlines():
        parts = line.split()
        name = parts[-1].lstrip("_") if parts else ""
        if not name.startswith(("mb_", "mmb_")):
            continue
        (undefined if parts[-2] == "U" else defined).add(name)
    return defined, undefined


def test_every_call_is_defined_without_robust_mutexes(tmp_path: Any) -> None:
    units = sorted(glob.glob(os.path.join(ROOT, "mmapbloom", "*.c")))
    assert len(units) >= 10, units
    defined: set[str] = set()
    undefined: set[str] = set()
    for unit in units:
        obj = str(tmp_path / (os.path.basename(unit)[:-2] + ".o"))
        proc = subprocess.run(
            [str(CC), "-c", "-O0", "-U__linux__", "-I", INCLUDE, unit, "-o", obj], capture_output=True, text=True
        )
        assert proc.returncode == 0, (unit, proc.stderr[-2000:])
        d, u = _symbols(obj)
        defined |= d
        undefined |= u
    assert "mb_mutex_run" in defined  # the stub of the no-mutex build is what is checked
    assert undefined - defined == set()
