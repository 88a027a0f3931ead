#!/usr/bin/env python3
"""Measure :func:`mmapbloom.merge_shards` throughput (GB/s of shard bytes read).

Writes ``--shards`` shard files of ``--mib`` MiB of random bits each in ``--dir`` (page
cache warm, as right after a build), merges them with ``merge_shards`` (OR) ``--repeat``
times into a new output, and prints the best and median of ``MergeResult.gb_per_s``
(validation, the combining loop, writing the output and its fsync included)::

    python tools/merge_throughput.py --shards 8 --mib 256 --dir /tmp
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mmapbloom import BloomConfig, merge_shards  # noqa: E402
from mmapbloom import format as fmt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--mib", type=int, default=256, help="bit-array MiB per shard")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="merge-throughput-", dir=args.dir)
    try:
        body = args.mib * 2**20
        cfg = BloomConfig(num_bits=body * 8, num_hashes=7)
        rng = np.random.default_rng(1)
        paths = []
        for i in range(args.shards):
            path = os.path.join(work, f"shard-{i:05d}.blm")
            with open(path, "wb") as out:
                out.write(fmt.pack_header(cfg.strategy.name, cfg.num_bits, cfg.num_hashes, 1000))
                for _ in range(args.mib // 64 or 1):
                    out.write(rng.integers(0, 256, size=min(body, 64 * 2**20), dtype=np.uint8).tobytes())
            paths.append(path)
        speeds = []
        for r in range(args.repeat):
            res = merge_shards(os.path.join(work, f"out-{r}.blm"), paths, progress=False)
            speeds.append(res.gb_per_s)
            print(res.summary(), file=sys.stderr)
            os.unlink(res.output)
        print(
            f"{args.shards} shards x {args.mib} MiB: best {max(speeds):.2f} GB/s, "
            f"median {statistics.median(speeds):.2f} GB/s (load average {os.getloadavg()[0]:.1f})"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
