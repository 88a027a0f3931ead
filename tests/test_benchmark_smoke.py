"""Smoke test for the benchmark package tools/bench/ (``python -m tools.bench``): it runs
end to end with tiny sizes, so it cannot rot; its counting mode (``--counting``, which
replaced tools/bench_counting.py) too.

Peers and matplotlib are optional: a peer that is not installed must be reported as
missing, and the chart skipped with a message, without failing the run.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

import mmapbloom
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_benchmark_runs_tiny(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    chart = tmp_path / "benchmark.png"
    cmd = [
        sys.executable,
        "-m",
        "tools.bench",
        "--keys",
        "2000",
        "--absent",
        "2000",
        "--rounds",
        "1",
        "--big-keys",
        "0",
        "--union-mb",
        "1",
        "--open-mb",
        "1",
        "--procs",
        "2,4",
        "--profile",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
        "--chart",
        str(chart),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    default = mmapbloom.DEFAULT_STRATEGY.name
    assert f"| mmapbloom (mmap + flock, {default}) |" in table
    assert f"mmapbloom backend {getattr(mmapbloom, 'BACKEND', 'python')}, strategies {default};" in table
    assert "Time ratios, *vs pybloomfiltermmap3*" in table
    assert "## Processes writing one file at once" in table
    assert "| mmapbloom | batch API | 2,000 | 4 |" in table
    assert "## Union" in table and "### mmapbloom, update(keys)" in table
    # The extra parts, tiny: lock cost vs a bare flock pair (alone and next to a busy thread),
    # two threads on one handle, counting vs plain, native vs pure (a MMAPBLOOM_PURE=1 child).
    assert "## The write lock per item" in table
    assert "| bare `fcntl.flock(fd, LOCK_EX)` + `LOCK_UN` pair |" in table
    assert "| `f.add(key)`, lock taken per call, next to a busy thread |" in table
    assert "per-call lock costs" in table and "next to a busy thread / alone" in table
    assert "## Two threads querying one handle" in table
    assert "| mmapbloom | 2,000 | 1,000 |" in table and "CPU s / wall s, 2 threads" in table
    assert "## Counting filters: 2,000 keys" in table and f"| Counting 4-bit {default} |" in table
    assert "## mmapbloom native vs pure Python" in table
    assert "(backend there: python)" in table
    assert "| mmapbloom | `key in f` |" in table
    # No acceptance targets of past issues: ratios only.
    assert "Targets" not in table and "PASS" not in table and "MISS" not in table
    report = out.read_text()
    assert report.startswith("# Benchmarks")
    assert "python -m tools.bench --keys 2000" in report
    for peer in ("pybloomfiltermmap3", "rbloom", "abloom", "fastbloom-rs", "bloomsieve"):
        assert peer in table  # measured, or listed as missing
    if importlib.util.find_spec("matplotlib") is None:
        assert "chart skipped" in proc.stderr
    else:
        assert chart.stat().st_size > 0


def test_help_and_counting_mode(tmp_path: pathlib.Path) -> None:
    # The old shims (tools/benchmark.py, tools/bench_counting.py) are gone: one command.
    assert not os.path.exists(os.path.join(ROOT, "tools", "benchmark.py"))
    assert not os.path.exists(os.path.join(ROOT, "tools", "bench_counting.py"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    helped = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=env,
    )
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: ") and "--strategies" in helped.stdout

    default = mmapbloom.DEFAULT_STRATEGY.name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.bench",
            "--counting",
            "--keys",
            "500",
            "--rounds",
            "1",
            "--strategies",
            f"{default},ZZZZ",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "## Counting filters: 500 keys" in proc.stdout
    for row in (f"| BloomFilter {default} |", f"| Counting 4-bit {default} |", f"| Counting 8-bit {default} |"):
        assert row in proc.stdout, row
    assert "missing: mmapbloom:ZZZZ (UnknownStrategyError" in proc.stderr  # resolved by get_strategy at run time
