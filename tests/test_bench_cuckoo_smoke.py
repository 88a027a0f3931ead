"""Smoke test for ``python -m tools.bench_cuckoo`` (the cuckoo filter against BloomFilter,
CountingBloomFilter and pyprobables, same run, ratios): it runs end to end on a few
thousand keys, so it cannot rot."""

from __future__ import annotations

import math

from tools.bench_cuckoo import main


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
