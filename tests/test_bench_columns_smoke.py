"""Smoke test for tools/bench_columns.py: it runs end to end with tiny sizes, so it cannot rot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("pyarrow")
pytest.importorskip("polars")


def test_bench_columns_runs_tiny() -> None:
    proc = subprocess.run(
        [sys.executable, "tools/bench_columns.py", "--keys", "3000", "--repeat", "1", "--dask-rows", "3000"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "| contains_many(pyarrow str)   |" in out and "contains_many(arr.to_pylist())" in out
    assert "tracemalloc peak" in out and "ratio after/before" in out
