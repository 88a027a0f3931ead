"""Smoke test for ``python -m tools.bench_locks`` (the write lock's mutex and flock modes in
one run): it runs end to end on a few keys, so it cannot rot."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_bench_locks_runs_tiny() -> None:
    cmd = [sys.executable, "-m", "tools.bench_locks", "--keys", "2000", "--rounds", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line[:28].strip(): line.split() for line in proc.stdout.splitlines()[1:]}
    assert {
        "add locked",
        "add held",
        "lock pair",
        "bare pair",
        "4 writers / 1 (mutex)",
        "4 writers / 1 (flock)",
    } <= set(rows)
    assert "lost bits: 0" in proc.stdout
