"""The package type-checks under ``mypy --strict`` (it ships ``py.typed``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_mypy_strict() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra; install it to run this check")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "mmapbloom"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
