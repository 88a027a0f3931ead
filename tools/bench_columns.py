#!/usr/bin/env python3
"""Columns against Python lists, measured in one run: mmapbloom's columnar path (numpy and
Arrow batches read in place) against the same call after converting the column to Python
objects, and against the peers' per-item loops (abloom, rbloom: whichever are installed).

Prints one table of ns per key and ratios (lower is better for mmapbloom), then memory
(tracemalloc peak and RSS growth) for the Arrow keys, then, with ``--dask-rows``, a Dask
DataFrame column build with the columnar path against the list path it replaced (the
threaded scheduler: both run in this process, so the list path is swapped in for the
"before" row).

Usage::

    python tools/bench_columns.py [--keys 1000000] [--repeat 3] [--dask-rows 10000000]

Times are the best of ``--repeat`` runs; each run of a write gets a fresh filter.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from typing import Any, Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402

import mmapbloom  # noqa: E402
from mmapbloom import BloomConfig, BloomFilter  # noqa: E402

#: ns per key of contains_many on a pandas 3 str Series of 1M URLs, measured on main before
#: the columnar path (the issue's figure), the target's baseline.
PANDAS_BEFORE_NS = 2242.0


def urls(n: int) -> list[str]:
    return [f"https://host{i % 1009}.example.org/path/{i * 2654435761 % 10**12}/{i}" for i in range(n)]


def best(fn: Callable[[], Any], repeat: int, setup: Optional[Callable[[], Any]] = None) -> float:
    """Best wall time of ``repeat`` runs of fn (setup, untimed, before each)."""
    out = float("inf")
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def peers(n: int, keys: list[Any]) -> dict[str, tuple[Any, Callable[[Any], bool]]]:
    """Installed peers, each filled with ``keys``: name -> (filter, contains)."""
    found: dict[str, tuple[Any, Callable[[Any], bool]]] = {}
    try:
        import abloom

        a = abloom.BloomFilter(n, 0.01)
        for k in keys:
            a.add(k)
        found["abloom"] = (a, a.__contains__)
    except ImportError:
        print("abloom: not installed (pip install abloom)")
    try:
        import rbloom

        r = rbloom.Bloom(n, 0.01)
        r.update(keys)
        found["rbloom"] = (r, r.__contains__)
    except ImportError:
        print("rbloom: not installed (pip install rbloom)")
    return found


def rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # pragma: no cover


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dask-rows", type=int, default=0, help="rows of the Dask DataFrame build (0: skip)")
    args = ap.parse_args(argv)
    n, rep = args.keys, args.repeat
    print(
        f"mmapbloom {mmapbloom.__version__}, backend {mmapbloom.BACKEND}; pyarrow {pa.__version__}, "
        f"polars {pl.__version__}, pandas {pd.__version__}, numpy {np.__version__}; {n:,} keys, best of {rep}"
    )
    keys = urls(n)
    col = pa.array(keys)
    series_pl = pl.Series(keys)
    series_pd = pd.Series(keys, dtype="str")
    ints = np.arange(n, dtype=np.int64) * 2654435761
    config = BloomConfig.for_items(n, 0.01)
    f = BloomFilter(config)
    f.update(col[: n // 2])
    f.update(ints[: n // 2])
    ns = 1e9 / n
    rows: list[tuple[str, float, float, str]] = []

    def row(what: str, ours: float, theirs: float, vs: str) -> None:
        rows.append((what, ours * ns, theirs * ns, vs))

    holder: list[BloomFilter] = []

    def fresh() -> None:
        holder[:] = [BloomFilter(config)]

    row(
        "contains_many(pyarrow str)",
        best(lambda: f.contains_many(col), rep),
        best(lambda: f.contains_many(col.to_pylist()), rep),
        "contains_many(arr.to_pylist())",
    )
    row(
        "update(pyarrow str)",
        best(lambda: holder[0].update(col), rep, fresh),
        best(lambda: holder[0].update(col.to_pylist()), rep, fresh),
        "update(arr.to_pylist())",
    )
    row(
        "contains_many(polars)",
        best(lambda: f.contains_many(series_pl), rep),
        best(lambda: f.contains_many(series_pl.to_list()), rep),
        "contains_many(s.to_list())",
    )
    row(
        "update(polars)",
        best(lambda: holder[0].update(series_pl), rep, fresh),
        best(lambda: holder[0].update(series_pl.to_list()), rep, fresh),
        "update(s.to_list())",
    )
    half = keys[: n // 2]
    int_list = ints.tolist()
    for name, (_, contains) in peers(n, half + int_list[: n // 2]).items():
        row(
            "contains_many(pyarrow str)",
            best(lambda: f.contains_many(col), rep),
            best(lambda: [contains(k) for k in col.to_pylist()], rep),
            f"to_pylist() + {name} `in` loop",
        )
        row(
            "contains_many(numpy int64)",
            best(lambda: f.contains_many(ints), rep),
            best(lambda: [contains(k) for k in int_list], rep),
            f"{name} `in` loop over Python ints",
        )
    pandas_s = best(lambda: f.contains_many(series_pd), rep)
    rows.append(("contains_many(pandas str)", pandas_s * ns, PANDAS_BEFORE_NS, "main before (issue figure)"))
    row(
        "contains_many(pandas str)",
        pandas_s,
        best(lambda: f.contains_many(series_pd.tolist()), rep),
        "contains_many(s.tolist())",
    )

    print()
    print(f"| {'call':<28} | {'ns/key':>7} | {'vs ns/key':>9} | {'ratio':>6} | vs |")
    print(f"|{'-' * 30}|{'-' * 9}|{'-' * 11}|{'-' * 8}|----|")
    for what, ours, theirs, vs in rows:
        print(f"| {what:<28} | {ours:>7.0f} | {theirs:>9.0f} | {ours / theirs:>5.2f}x | {vs} |")

    # memory of the columnar path on the Arrow keys
    print()
    g = BloomFilter(config)
    gc.collect()
    before = rss_kb()
    tracemalloc.start()
    g.update(col)
    hits = g.contains_many(col)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    grown = rss_kb() - before
    assert hits.all()
    print(
        f"memory, update + contains_many of {n:,} Arrow keys: tracemalloc peak {peak / 1e6:.2f} MB "
        f"({peak / n:.2f} bytes/key: the {n:,}-byte answers), RSS growth {grown / 1e3:.1f} MB "
        f"(the filter itself: {g.size_bytes / 1e6:.1f} MB)"
    )
    tracemalloc.start()
    g.contains_many(col.to_pylist())
    _, peak_list = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  the same query after to_pylist(): tracemalloc peak {peak_list / 1e6:.1f} MB")

    if args.dask_rows:
        dask_build(args.dask_rows, rep)
    return 0


def dask_build(rows: int, rep: int) -> None:
    """A Dask DataFrame column build: the columnar path against the list path it replaced."""
    import dask
    import dask.dataframe as dd

    from mmapbloom import dask as mdask

    def list_chunks(partition: Any) -> Any:  # mmapbloom.dask._chunks before the columnar path
        if hasattr(partition, "iloc") and hasattr(partition, "tolist"):
            for start in range(0, len(partition), mdask.SHARD_CHUNK_ITEMS):
                yield partition.iloc[start : start + mdask.SHARD_CHUNK_ITEMS].tolist()
            return
        yield list(partition)

    frame = pd.DataFrame({"url": pd.Series(urls(rows), dtype="str")})
    col = dd.from_pandas(frame, npartitions=8)["url"]
    config = BloomConfig.for_items(rows, 0.01)
    columnar = mdask._chunks
    times = {}
    with tempfile.TemporaryDirectory() as tmp, dask.config.set(scheduler="threads", num_workers=2):
        for label, chunks in (("before (list per chunk)", list_chunks), ("after (Arrow column)", columnar)):
            mdask._chunks = chunks  # type: ignore[assignment]
            try:
                times[label] = best(lambda: mdask.build(col, config, os.path.join(tmp, "d.blm"), overwrite=True), rep)
            finally:
                mdask._chunks = columnar  # type: ignore[assignment]
    print()
    print(f"Dask DataFrame build, {rows:,} rows in 8 partitions, threaded scheduler (2 workers), best of {rep}:")
    for label, seconds in times.items():
        print(f"  {label:<26} {seconds:6.2f} s  {rows / seconds / 1e6:5.2f} M rows/s")
    first, last = times.values()
    print(f"  ratio after/before: {last / first:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
