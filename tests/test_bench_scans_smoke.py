"""Smoke test for ``python -m tools.bench_scans`` (the whole-array scans of big files under
two interpreters, in one run): it runs end to end with a 1 MiB file and this interpreter
as its own peer, so it cannot rot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tools.bench_scans import OPS

pytestmark = pytest.mark.slow


def test_bench_scans_runs_tiny() -> None:
    cmd = [sys.executable, "-m", "tools.bench_scans", "--peer", sys.executable, "--mib", "1", "--rounds", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line[:28].strip(): line.split() for line in proc.stdout.splitlines()[1:]}
    assert set(rows) == set(OPS), proc.stdout
    assert all(float(r[-1]) > 0 for r in rows.values()), proc.stdout  # this / peer, a ratio
