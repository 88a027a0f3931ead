#!/usr/bin/env python3
"""Benchmark: ``info`` statistics on huge sparse filter files (time and peak resident memory).

For each size (GiB) the tool creates a sparse BLM1 file with
``BloomFilter.create(path, BloomConfig(num_bits=N, num_hashes=7), sparse=True)`` where N
makes the bit array SIZE GiB, adds ``--keys`` keys (default 10^5), fsyncs,
then measures in a FRESH SUBPROCESS (so the memory of the build does not count) what
``mmapbloom info`` computes: one ``count_ones()`` and the statistics derived from it
(fill ratio, observed false-positive rate, approximate distinct items). The child reports
the wall time of the open + count + statistics and its peak resident memory
(``VmHWM`` of ``/proc/self/status``, imports included; this is ``ru_maxrss`` of the new
process image: ``getrusage`` itself is not used because Linux carries the parent's peak over
``fork`` + ``exec`` into ``ru_maxrss``), plus its resident memory after the imports, so the
growth due to the scan can be read off.

Methods (``--method``, both by default):

* ``extents``: ``count_ones()`` of this version, which on a file-backed filter reads only
  the allocated extents with SEEK_DATA/SEEK_HOLE in bounded memory (:mod:`mmapbloom.extents`).
* ``mmap``: the previous code path, a popcount through the shared mapping
  (``mmapbloom.filter.popcount(f._bits())``), to compare.

Adding the keys (``--build``): ``update`` adds them through the shared mapping, as an
application would; ``pwrite`` (the default) writes the very same bits with
``pread``/OR/``pwrite`` on each touched 4 KiB file page, so the same pages are allocated
(the files are identical byte for byte, header included, for distinct keys). On a disk
shared with fsync-heavy neighbours, page faults into a 64 GiB sparse mapping ran at
milliseconds each (about half an hour for 6.8e5 pages), hence the default.

Each measurement is run ``--repeat`` times (page cache warm after the first) and the median
time and largest peak memory are reported. The disk must have room for the allocated part
(about ``min(size, keys * 7 * 4 KiB)``); the tool checks the free space first and removes
each file after measuring it (``--keep`` keeps them).

Usage::

    python tools/sparse_info.py --sizes 1 8 64 --dir /tmp
    python tools/sparse_info.py --sizes 1 --method mmap extents
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mmapbloom import BloomConfig, BloomFilter  # noqa: E402

GIB = 2**30
PAGE = 4096

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
def status_kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from mmapbloom import BloomFilter
from mmapbloom.filter import popcount
from mmapbloom.sizing import approx_items, observed_fp_rate
base = status_kib("VmRSS")
t0 = time.perf_counter()
with BloomFilter.open({path!r}, readonly=True) as f:
    if {method!r} == "mmap":
        ones = popcount(f._bits())
    else:
        ones = f.count_ones()
    m, k = f.num_bits, f.num_hashes
    stats = dict(ones=ones, fill_ratio=ones / m, observed_fp_rate=observed_fp_rate(ones, m, k),
                 approx_items=approx_items(ones, m, k), items_added=f.items_added)
seconds = time.perf_counter() - t0
peak = status_kib("VmHWM")
print(json.dumps(dict(seconds=seconds, peak_kib=peak, base_kib=base, **stats)))
"""


def count_extents(path: str) -> tuple[int, int]:
    """(number of data extents, allocated bytes in them) of the bit array, by SEEK_DATA."""
    from mmapbloom.extents import iter_data_extents

    fd = os.open(path, os.O_RDONLY)
    try:
        n = total = 0
        for _, length in iter_data_extents(fd, 0, os.fstat(fd).st_size):
            n += 1
            total += length
        return n, total
    finally:
        os.close(fd)


def measure(path: str, method: str) -> dict:
    code = CHILD.format(root=ROOT, path=path, method=method)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _keys(start: int, stop: int) -> list[str]:
    return [f"https://host{i % 9973}.example/{i}" for i in range(start, stop)]


def build(path: str, size_gib: float, keys: int, how: str) -> tuple[float, int]:
    """Create the sparse file and add the keys: ``update`` through the mapping, or
    ``pwrite``: the same bits written with pread/OR/pwrite per touched 4 KiB file page
    (the pages a write through the mapping would dirty, so the same blocks get allocated)."""
    num_bits = int(size_gib * GIB) * 8
    cfg = BloomConfig(num_bits=num_bits, num_hashes=7)
    t0 = time.perf_counter()
    step = 1 << 16
    if how == "update":
        with BloomFilter.create(path, cfg, sparse=True) as f:
            for start in range(0, keys, step):
                f.update(_keys(start, min(keys, start + step)))
            f.flush()
        return time.perf_counter() - t0, num_bits
    BloomFilter.create(path, cfg, sparse=True).close()
    pos = np.concatenate(
        [
            cfg.strategy.positions_many([k.encode() for k in _keys(s, min(keys, s + step))], 7, num_bits).ravel()
            for s in range(0, keys, step)
        ]
    )
    offs = (pos >> np.uint64(3)).astype(np.int64) + 24  # file offset of each bit's byte
    masks = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
    order = np.argsort(offs, kind="stable")
    offs, masks = offs[order], masks[order]
    page_of = offs // PAGE
    bounds = np.flatnonzero(np.diff(page_of)) + 1
    fd = os.open(path, os.O_RDWR)
    try:
        end = os.fstat(fd).st_size
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [offs.size]]), strict=True):
            base = int(page_of[lo]) * PAGE
            page = np.frombuffer(bytearray(os.pread(fd, PAGE, base).ljust(PAGE, b"\0")), dtype=np.uint8)
            np.bitwise_or.at(page, offs[lo:hi] - base, masks[lo:hi])
            os.pwrite(fd, page[: min(PAGE, end - base)].tobytes(), base)
        os.fsync(fd)
    finally:
        os.close(fd)
    with BloomFilter.open(path) as f, f.write_lock():
        f._counter.set(keys)  # the keys are distinct; a tool-only shortcut for the header field
    return time.perf_counter() - t0, num_bits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 8, 64], help="bit-array sizes in GiB")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--method", nargs="+", choices=["extents", "mmap"], default=["mmap", "extents"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--build",
        choices=["update", "pwrite"],
        default="pwrite",
        help="add the keys with BloomFilter.update through the mapping, or write the same "
        "bits with pwrite (much faster on a busy disk; the default)",
    )
    args = ap.parse_args()

    rows = []
    for size in args.sizes:
        need = min(size * GIB, args.keys * 7 * PAGE)
        free = shutil.disk_usage(args.dir).free
        if free < 2 * need + GIB:
            print(
                f"skip {size} GiB: {free / GIB:.1f} GiB free in {args.dir}, need about {2 * need / GIB:.1f}",
                file=sys.stderr,
            )
            continue
        path = os.path.join(args.dir, f"sparse-info-{size:g}g.blm")
        if os.path.exists(path):
            os.unlink(path)
        build_s, num_bits = build(path, size, args.keys, args.build)
        n_ext, data = count_extents(path)
        st = os.stat(path)
        print(
            f"{size:g} GiB: built in {build_s:.1f} s, {n_ext:,} data extents, {data / 2**20:,.0f} MiB allocated",
            file=sys.stderr,
        )
        for method in args.method:
            runs = [measure(path, method) for _ in range(args.repeat)]
            row = dict(
                size_gib=size,
                file_bytes=st.st_size,
                allocated=st.st_blocks * 512,
                extents=n_ext,
                method=method,
                seconds=statistics.median(r["seconds"] for r in runs),
                all_seconds=[round(r["seconds"], 3) for r in runs],
                peak_mib=max(r["peak_kib"] for r in runs) / 1024,
                base_mib=min(r["base_kib"] for r in runs) / 1024,
                ones=runs[0]["ones"],
                approx_items=runs[0]["approx_items"],
            )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
        if not args.keep:
            os.unlink(path)

    print(
        f"| file size | allocated | data extents | method | time (median of {args.repeat}) "
        "| peak RSS (after imports) | bits set | approx items |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['size_gib']:g} GiB | {r['allocated'] / 2**20:,.0f} MiB | {r['extents']:,} | {r['method']} "
            f"| {r['seconds']:.2f} s | {r['peak_mib']:.0f} MiB ({r['base_mib']:.0f} MiB) | {r['ones']:,} "
            f"| {r['approx_items']:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
