"""Time the whole-array scans of big filter files under two interpreters, in the same run.

Usage: ``python -m tools.bench_scans --peer /path/to/other/python [--mib 100] [--rounds 3]``

Builds one plain (M3BL, so ``observed_fp_rate`` scans the blocks), one more for the union
operand, and two 4-bit counting filter files of ``--mib`` MiB of cells each in a temporary
directory, then runs each scan in a child of this interpreter ("this") and of ``--peer``
(e.g. the build before a change), alternating, ``--rounds`` times, and prints the best
time of each and the ratio this / peer. The files are in the page cache (written just
before), so the scans run at memory speed. Each child imports ``mmapbloom`` from its own
interpreter's installation; both must read the same format.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

OPS = {
    "fill_ratio": "f.fill_ratio()",
    "observed_fp_rate (blocked)": "f.observed_fp_rate()",
    "union": "f.union(g)",
    "intersection": "f.intersection(g)",
    "to_bytes": "f.to_bytes()",
    "==": "f == g",
    "check": "f.check()",
    "counting union": "c.union(d)",
    "counting to_bloom": "c.to_bloom()",
    "counting fill_ratio": "c.fill_ratio()",
}

CHILD = r"""
import sys, time
from mmapbloom import BloomFilter, CountingBloomFilter
d_ = sys.argv[1]
f = BloomFilter.open(d_ + "/f.blm"); g = BloomFilter.open(d_ + "/g.blm")
c = CountingBloomFilter.open(d_ + "/c.blm"); d = CountingBloomFilter.open(d_ + "/d.blm")
t = time.perf_counter()
{op}
print(time.perf_counter() - t)
"""

BUILD = r"""
import sys
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter
d_, m = sys.argv[1], int(sys.argv[2])
keys = [f"k{i}" for i in range(2_000_000)]
for name in ("f", "g"):
    BloomFilter.create(d_ + f"/{name}.blm", BloomConfig(num_bits=m, num_hashes=7, strategy="M3BL")).update(keys)
    keys = keys[1_000_000:] + [f"x{i}" for i in range(1_000_000)]
for name in ("c", "d"):
    CountingBloomFilter.create(d_ + f"/{name}.blm", BloomConfig(num_bits=m // 4, num_hashes=7)).update(keys)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the other interpreter (e.g. the build before a change)")
    parser.add_argument("--mib", type=int, default=100, help="MiB of cells per file")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    m = args.mib * 2**20 * 8
    m -= m % 512
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", BUILD, tmp, str(m)], check=True)
        print(f"{'scan':28} {'this s':>9} {'peer s':>9} {'this/peer':>10}")
        for name, op in OPS.items():
            best = {"this": float("inf"), "peer": float("inf")}
            for _ in range(args.rounds):
                for who, exe in (("this", sys.executable), ("peer", args.peer)):
                    out = subprocess.run(
                        [exe, "-c", CHILD.format(op=op), tmp], check=True, capture_output=True, text=True, cwd="/"
                    )
                    best[who] = min(best[who], float(out.stdout.split()[-1]))
            print(f"{name:28} {best['this']:9.4f} {best['peer']:9.4f} {best['this'] / best['peer']:10.2f}")


if __name__ == "__main__":
    main()
