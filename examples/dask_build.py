#!/usr/bin/env python3
"""Build one filter from a text file of lines three ways and compare the timings:

1. **Dask**: ``dask.bag.read_text`` on a ``distributed.LocalCluster`` of 2 worker
   processes (1 thread each); each partition becomes a shard file written by its worker,
   then the shards are merged (:func:`mmapbloom.dask.build`).
2. **One process**: ``BloomFilter.update`` over the file's lines in chunks of 65,536.
3. **The CLI**: ``mmapbloom create`` then ``mmapbloom add OUT FILE``.

All three must give the same bit array (checked at the end); the items-added counters may
differ slightly (see :mod:`mmapbloom.dask`: the merged counter is the sum of the shards').

Usage::

    python examples/dask_build.py /tmp/lines.txt --generate 10000000   # make the file first
    python examples/dask_build.py /tmp/lines.txt --workers 2 --fp-rate 0.01

Lines are items without their ``\\n`` (and a ``\\r`` before it), as for ``mmapbloom add``.
Needs the ``dask`` extra (from the checkout: ``pip install -e '.[dask]'``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mmapbloom import BloomConfig, BloomFilter  # noqa: E402
from mmapbloom import cli as mmapbloom_cli  # noqa: E402
from mmapbloom.dask import build  # noqa: E402


def strip_newlines(lines: "list[str]") -> "list[str]":
    """A partition of ``read_text`` lines without their terminators (the CLI's framing:
    ``\\n``, or ``\\r\\n``). One call per partition: ``Bag.map`` would cost a Python call
    and an iterator step per line."""
    return [line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line for line in lines]


def generate(path: str, lines: int) -> None:
    """Write ``lines`` distinct URL-like lines (about 50 bytes each)."""
    with open(path, "w", encoding="ascii") as out:
        step = 100_000
        for start in range(0, lines, step):
            out.write(
                "".join(
                    f"https://host{i % 100_003}.example.org/path/{i * 2654435761 % 10**12}/{i}\n"
                    for i in range(start, min(lines, start + step))
                )
            )


def count_lines(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))


def single_process(path: str, cfg: BloomConfig, out: str) -> None:
    with BloomFilter.create(out, cfg) as f, open(path, "rb") as fh:
        chunk: list[bytes] = []
        for line in fh:
            chunk.append(line.rstrip(b"\n").rstrip(b"\r") if line.endswith(b"\n") else line)
            if len(chunk) == 65_536:
                f.update(chunk)
                chunk = []
        if chunk:
            f.update(chunk)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--generate", type=int, metavar="N", help="first write N lines to FILE")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fp-rate", type=float, default=0.01)
    ap.add_argument("--blocksize", default="32MiB", help="read_text block size (one partition each)")
    args = ap.parse_args()
    print(mmapbloom_cli.backend_note("dask_build.py"), file=sys.stderr)  # which backend runs, and why

    if args.generate:
        t = time.perf_counter()
        generate(args.file, args.generate)
        print(f"generated {args.generate:,} lines in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    n = count_lines(args.file)
    cfg = BloomConfig.for_items(max(n, 1), args.fp_rate)
    size = os.path.getsize(args.file)
    print(
        f"input: {args.file}, {n:,} lines, {size / 2**20:,.0f} MiB; filter m={cfg.num_bits:,} "
        f"k={cfg.num_hashes} ({cfg.num_bits / 8 / 2**20:,.1f} MiB); load average {os.getloadavg()[0]:.2f}"
    )
    work = tempfile.mkdtemp(prefix="dask-build-", dir=os.path.dirname(os.path.abspath(args.file)))
    rows = []
    try:
        import dask.bag as db
        from distributed import Client, LocalCluster

        t = time.perf_counter()
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
            ) as cluster,
            Client(cluster) as client,
        ):
            started = time.perf_counter() - t
            bag = db.read_text(args.file, blocksize=args.blocksize).map_partitions(strip_newlines)
            t = time.perf_counter()
            dask_out = build(bag, cfg, os.path.join(work, "dask.blm"), client=client)
            rows.append(
                (
                    f"Dask, LocalCluster of {args.workers} processes x 1 thread ({bag.npartitions} partitions)",
                    time.perf_counter() - t,
                    dask_out,
                )
            )
        print(f"(cluster start-up: {started:.1f} s, not included)", file=sys.stderr)

        t = time.perf_counter()
        single_out = os.path.join(work, "single.blm")
        single_process(args.file, cfg, single_out)
        rows.append(("one process, BloomFilter.update in chunks of 65,536", time.perf_counter() - t, single_out))

        t = time.perf_counter()
        cli_out = os.path.join(work, "cli.blm")
        cli = [sys.executable, "-m", "mmapbloom"]
        subprocess.run(
            cli + ["create", cli_out, "--bits", str(cfg.num_bits), "--hashes", str(cfg.num_hashes), "-q"], check=True
        )
        subprocess.run(cli + ["add", cli_out, args.file, "-q"], check=True)
        rows.append(("CLI: mmapbloom create + mmapbloom add FILE", time.perf_counter() - t, cli_out))

        print(f"\n| method ({n:,} lines) | seconds | lines/s | items added |\n|---|---:|---:|---:|")
        bodies = set()
        for name, seconds, out in rows:
            with BloomFilter.open(out, readonly=True) as f:
                items = f.items_added
            with open(out, "rb") as fh:
                bodies.add(fh.read()[24:])
            print(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} | {items:,} |")
        print(f"\nbit arrays identical: {len(bodies) == 1}")
        return 0 if len(bodies) == 1 else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
