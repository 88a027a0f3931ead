"""Smoke test for ``python -m tools.bench.instructions`` (the hot-path table against abloom,
the bare flock pair and the 4-writer figure): it runs end to end with tiny sizes, without
valgrind, so it cannot rot; the 4-writer run must lose no bit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_instructions_tool_runs_tiny() -> None:
    cmd = [sys.executable, "-m", "tools.bench.instructions", "--keys", "2000", "--capacity", "10000"]
    cmd += ["--rounds", "1", "--writers-keys", "4000", "--skip-instructions"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    for row in ("update", "contains_many absent", "add, lock per call", "x in f present", "bare flock pair"):
        assert f"| {row} |" in out, out
    assert "what the lock adds to an add costs" in out, out
    assert "lost bits 0" in out, out
