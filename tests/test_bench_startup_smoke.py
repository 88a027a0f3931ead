"""Smoke test for ``python -m tools.bench.startup`` (start-up against pybloomfiltermmap3 and
``python -c pass``, and the per-call table): it runs end to end with tiny sizes, without
valgrind, so it cannot rot; the open + query row must leave numpy and portalocker
unimported."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_startup_tool_runs_tiny() -> None:
    cmd = [sys.executable, "-m", "tools.bench.startup", "--keys", "1000", "--runs", "1", "--skip-instructions"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    for row in ("python -c pass", "mmapbloom: open + one query", "python -m mmapbloom check F --key k"):
        assert f"| {row} |" in out, out
    line = next(x for x in out.splitlines() if x.startswith("| mmapbloom: open + one query |"))
    assert line.endswith("| none |"), line
