"""tools/bench_expiring.py runs and prints the figures of issue 27's closing note (a tiny
configuration: the timings themselves are not checked)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_bench_expiring_prints_every_figure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = [
        "--capacity",
        "2000",
        "--periods",
        "4",
        "--probes",
        "2000",
        "--windows",
        "3",
        "--repeat",
        "2",
        "--pairs",
        "2",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "tools.bench_expiring", *args, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no over-capacity warnings printed
    out = r.stdout
    assert re.search(r"^ratio(\s+\d+\.\d\d){4}$", out, re.M), out
    fp = re.search(r"expiring (0\.\d+), plain (0\.\d+)", out)
    assert fp is not None and float(fp.group(1)) <= 0.05, out
    sizes = re.search(r"after 2 windows ([\d,]+), after 3 ([\d,]+)", out)
    assert sizes is not None and sizes.group(1) == sizes.group(2), out
    for what in ("contains_many present", "contains_many absent", "update at the design point"):
        assert re.search(rf"^{what}.*median ratio \d+\.\d\d", out, re.M), (what, out)
