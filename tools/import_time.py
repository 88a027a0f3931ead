"""Start-up cost of ``import mmapbloom`` next to its peers, measured in one run.

Command: ``python tools/import_time.py [--runs 9]``. Each row is a fresh interpreter
(``python -c ...``, wall time, median of ``--runs``, the rows interleaved round by round so
that a change in machine load hits all rows alike); ratios are to ``import mmh3``. It also
lists which of numpy, portalocker and tqdm ``import mmapbloom`` left in ``sys.modules``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROWS = [
    ("python -c pass", "pass"),
    ("import mmh3", "import mmh3"),
    ("import numpy", "import numpy"),
    ("import portalocker", "import portalocker"),
    ("import tqdm", "import tqdm"),
    ("import mmapbloom", "import mmapbloom"),
    (
        "import mmapbloom; BloomFilter(...) add + in",
        "import mmapbloom; f = mmapbloom.BloomFilter(mmapbloom.BloomConfig.for_items(1000, 0.01)); f.add('k'); 'k' in f",
    ),
]


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs per row; the median is reported (default 9)")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    for _ in range(args.runs):
        for name, code in ROWS:
            times[name].append(wall(code))
    base = statistics.median(times["import mmh3"])
    load = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}, {args.runs} runs per row, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'command':48s} {'median ms':>10s} {'min ms':>8s} {'x mmh3':>7s}")
    for name, _ in ROWS:
        t = times[name]
        print(f"{name:48s} {statistics.median(t) * 1e3:10.1f} {min(t) * 1e3:8.1f} {statistics.median(t) / base:7.2f}")
    left = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, mmapbloom; "
            "print(' '.join(m for m in ('numpy', 'portalocker', 'tqdm') if m in sys.modules) or 'none')",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"loaded by import mmapbloom: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
