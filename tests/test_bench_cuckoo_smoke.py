"""Smoke test for ``python -m tools.bench_cuckoo`` (the cuckoo filter against BloomFilter,
CountingBloomFilter and pyprobables, same run, ratios): it runs end to end on a few
thousand keys, so it cannot rot; the callgrind child runs without valgrind, and the instructions section
with it where valgrind is installed."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tools.bench_cuckoo import INSTRUCTION_ROWS, instructions, main


def test_bench_cuckoo_runs_tiny(capsys: object) -> None:
    results = main(
        ["--keys", "3000", "--per-item", "500", "--peer-keys", "300", "--rounds", "1"]
        + ["--fp-sizes", "2000", "--absent", "5000", "--load-capacity", "1000", "--load-trials", "1"]
    )
    space = results["space"]
    assert set(space) == {"0.01", "0.001", "0.0001"}
    assert all(0 < r["cuckoo"] < r["counting"] for r in space.values())
    assert space["0.01"]["cuckoo / counting"] <= 0.4  # issue 26: <= 0.4x the counting filter at 1%
    grid = results["fp grid"]
    assert len(grid) == 3 and all(0 <= r["measured"] < 0.05 and r["load"] > 0.9 for r in grid)
    loads = results["first failure"]
    assert len(loads) == 2 and all(0.9 < r["load at first FilterFullError"] <= 1.0 for r in loads)
    for kind in ("cuckoo", "bloom", "counting"):
        r = results[kind]
        assert all(r[op] > 0 for op in ("update", "contains_many present", "contains_many absent", "add", "in"))
        assert r["bits per key"] > 0 and 0 <= r["measured fp rate"] < 0.05
    assert results["cuckoo"]["bits per key"] < 0.4 * results["counting"]["bits per key"]
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    lines = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()[1:] if line[:1].isalpha()}
    assert "update" in lines and "in" in lines
    assert all(not math.isnan(float(x)) for x in lines["update"][2:])  # times and ratios printed


@pytest.mark.parametrize("kind", ["cuckoo", "bloom"])
def test_instructions_child_runs_without_valgrind(kind: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tools.bench_cuckoo", "--instructions-child", kind, "2000", "0.01", "200"]
    proc = subprocess.run(cmd + [str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(counts) == len(INSTRUCTION_ROWS) and counts[1:] == [200] * 4 and counts[0] > 1800


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instructions_section_tiny() -> None:
    ins = instructions(2000, 0.01, 200)
    for kind in ("cuckoo", "bloom"):
        # per key: hundreds on the native backend, up to about 10**5 on the pure one
        assert all(0 < ins[kind][op] < 2_000_000 for op in INSTRUCTION_ROWS), ins
