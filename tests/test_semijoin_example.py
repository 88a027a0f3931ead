"""The semi-join example (examples/semijoin.py), run as a script on real Parquet files and
DuckDB: the filter file is built from one table's keys, and all three joins (exact, filter
then join, SQL filter then join) give the same rows, with no false negative."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

SCRIPT = os.path.join(ROOT, "examples", "semijoin.py")


def test_semijoin_example_reports_and_agrees(tmp_path: Any) -> None:
    rows, keys, match = 100_000, 5_000, 0.05
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path), "--rows", str(rows), "--keys", str(keys), "--match", str(match)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # it exits 1 if a join differs
    assert (tmp_path / "orders.blm").exists()
    assert "native backend" in proc.stderr or "python backend" in proc.stderr  # it says which runs, and why
    lines = {line[:22].strip(): line[22:].split() for line in proc.stdout.splitlines()[2:5]}
    exact, filtered, sql = lines["exact join"], lines["filter, then join"], lines["SQL filter, then join"]
    joined = int(exact[3].replace(",", ""))
    assert abs(joined - rows * match) < rows * match * 0.2
    for row in (filtered, sql):
        read, kept, false_pos, got = (int(v.replace(",", "")) for v in row[:4])
        assert read == rows and got == joined
        assert kept == joined + false_pos  # every matching row kept: no false negative
        assert false_pos < 0.03 * (rows - joined)  # about the 1% rate asked for
    assert filtered[:3] == sql[:3]
    # The case the filter exists for: the probe side shipped to the join, measured in bytes,
    # with the break-even stated; and the row-group read, with why it does not pay.
    out = proc.stdout
    without = int(out.split("without the filter")[1].split()[0].replace(",", ""))
    with_filter = int(out.split("  with the filter")[1].split()[0].replace(",", ""))
    assert with_filter < 0.2 * without  # 5% match + 1% false positives, plus the filter file
    assert "break-even" in out and ("link slower than" in out or "always" in out)
    assert "row groups skipped" in out and "(1 - p)^R" in out
