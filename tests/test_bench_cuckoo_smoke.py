"""Smoke test for ``python -m tools.bench_cuckoo`` (the cuckoo filter against BloomFilter,
CountingBloomFilter and pyprobables, same run, ratios): it runs end to end on a few
thousand keys, so it cannot rot."""

from __future__ import annotations

import math

from tools.bench_cuckoo import main


def test_bench_cuckoo_runs_tiny(capsys: object) -> None:
    results = main(["--keys", "3000", "--per-item", "500", "--peer-keys", "300", "--rounds", "1"])
    for kind in ("cuckoo", "bloom", "counting"):
        r = results[kind]
        assert all(r[op] > 0 for op in ("update", "contains_many present", "contains_many absent", "add", "in"))
        assert r["bits per key"] > 0 and 0 <= r["measured fp rate"] < 0.05
    assert results["cuckoo"]["bits per key"] < 0.4 * results["counting"]["bits per key"]
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    lines = {line.split("  ")[0].strip(): line.split() for line in out.splitlines()[1:] if line[:1].isalpha()}
    assert "update" in lines and "in" in lines
    assert all(not math.isnan(float(x)) for x in lines["update"][2:])  # times and ratios printed
