"""Smoke test for tools/benchmark.py: it runs end to end with tiny sizes, so it cannot rot.

Peers and matplotlib are optional: a peer that is not installed must be reported as
missing, and the chart skipped with a message, without failing the run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = os.path.join(ROOT, "tools", "benchmark.py")


def test_benchmark_runs_tiny(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    chart = tmp_path / "benchmark.png"
    cmd = [
        sys.executable, SCRIPT, "--keys", "2000", "--absent", "2000", "--rounds", "1",
        "--big-keys", "0", "--union-mb", "1", "--open-mb", "1", "--procs", "2,4", "--profile",
        "--workdir", str(tmp_path / "work"), "--out", str(out), "--chart", str(chart),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    assert "| mmapbloom (mmap + flock) |" in table
    assert "## Targets of issue 5" in table
    assert "## Processes writing one file at once" in table
    report = out.read_text()
    assert report.startswith("# Benchmarks")
    assert "python tools/benchmark.py --keys 2000" in report
    for peer in ("pybloomfiltermmap3", "rbloom", "abloom", "fastbloom-rs", "bloomsieve"):
        assert peer in table  # measured, or listed as missing
    if importlib.util.find_spec("matplotlib") is None:
        assert "chart skipped" in proc.stderr
    else:
        assert chart.stat().st_size > 0
