"""``import mmapbloom`` is light: numpy, portalocker and tqdm load on first use of the
names that need them, not at import (checked in fresh interpreters); every public name
still resolves to its module's object. Timings are measured by tools/import_time.py, not
asserted here."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import mmapbloom
from tests.conftest import ROOT

HEAVY = ("numpy", "portalocker", "tqdm")


def _loaded_after(code: str, **env: str) -> list[str]:
    """The modules of HEAVY in ``sys.modules`` after ``code`` runs in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    return out.stdout.split()


@pytest.mark.parametrize("pure", ["", "1"])
def test_import_loads_none_of_the_heavy_dependencies(pure: str) -> None:
    assert _loaded_after("import mmapbloom; mmapbloom.__version__; mmapbloom.MmapBloomError", MMAPBLOOM_PURE=pure) == []


def test_first_use_loads_them_and_batch_queries_return_numpy_arrays() -> None:
    code = (
        "import mmapbloom\n"
        "f = mmapbloom.BloomFilter(mmapbloom.BloomConfig.for_items(100, 0.01))\n"
        "f.add('a')\n"
        "r = f.contains_many(['a', 'b'])\n"
        "assert type(r).__module__ == 'numpy' and r.tolist() == [True, False], r"
    )
    assert "numpy" in _loaded_after(code)


def test_every_public_name_resolves_to_its_modules_object() -> None:
    lazy = mmapbloom._LAZY
    assert set(lazy) <= set(mmapbloom.__all__)
    for name in mmapbloom.__all__:
        value = getattr(mmapbloom, name)
        if name in lazy:
            assert value is getattr(importlib.import_module(f"mmapbloom.{lazy[name]}"), name), name
        assert name in dir(mmapbloom), name
    with pytest.raises(AttributeError, match="no_such_name"):
        mmapbloom.no_such_name  # noqa: B018
