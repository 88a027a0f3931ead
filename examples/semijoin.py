#!/usr/bin/env python3
"""A Bloom-filter semi-join: ship a filter of one table's join keys, not the table, and let
the other side drop the rows that cannot match before the exact join.

1. Writes two Parquet tables in DIR: ``orders.parquet`` (the small side: ``--keys`` distinct
   customer URLs) and ``events.parquet`` (the big side: ``--rows`` rows, a fraction
   ``--match`` of them with a key that is in ``orders``).
2. Builds a filter from ``orders.parquet``'s key column (read as an Arrow column: no Python
   object per key) and writes it to ``orders.blm``: the file that would be shipped.
3. Joins three ways with DuckDB and checks that all three give the same rows:

   * ``exact join``: ``events JOIN orders``, every event row read and joined;
   * ``filter, then join``: events read batch by batch with pyarrow, each batch masked with
     ``contains_many`` (the filter opened from the file, read-only), the kept rows joined;
   * ``SQL filter, then join``: the filter registered in DuckDB as a vectorized Arrow
     function, ``WHERE might_contain(url)`` before the join.

Reports rows read, rows kept, false-positive rows (kept rows with no match) and the time of
each (read, filter and join; the row counts are taken outside the timing). Usage::

    python examples/semijoin.py DIR [--rows 5000000] [--keys 100000] [--match 0.05] [--fp-rate 0.01]

Needs pyarrow and duckdb (both in the test extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mmapbloom import BloomConfig, BloomFilter  # noqa: E402


def url(ids: np.ndarray) -> pa.Array:
    """Customer URLs for integer ids (an Arrow string column)."""
    return pa.array(np.char.add("https://shop.example/customer/", ids.astype(str)))


def write_tables(directory: str, rows: int, keys: int, match: float, seed: int = 7) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    orders = os.path.join(directory, "orders.parquet")
    events = os.path.join(directory, "events.parquet")
    pq.write_table(pa.table({"url": url(np.arange(keys)), "order_id": np.arange(keys)}), orders)
    hit = rng.random(rows) < match
    ids = np.where(hit, rng.integers(0, keys, rows), rng.integers(keys, keys + 50 * rows + 1, rows))
    pq.write_table(
        pa.table({"url": url(ids), "event": np.arange(rows), "amount": rng.integers(1, 1000, rows)}),
        events,
        row_group_size=1 << 18,
    )
    return orders, events


def build_filter(orders: str, path: str, fp_rate: float) -> BloomFilter:
    keys = pq.read_table(orders, columns=["url"])["url"]
    if os.path.exists(path):
        os.unlink(path)
    f = BloomFilter.create(path, BloomConfig.for_items(len(keys), fp_rate))
    f.update(keys)
    f.close()
    return BloomFilter.open(path, readonly=True)  # what the other side does with the shipped file


JOIN = "SELECT e.event, e.amount, o.order_id FROM {events} e JOIN '{orders}' o USING (url) ORDER BY e.event"


def arrow_result(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """The query's result as a pyarrow Table (``to_arrow_table`` in DuckDB 2, ``arrow`` before)."""
    rel = con.sql(sql)
    return (getattr(rel, "to_arrow_table", None) or rel.arrow)()


def count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.sql(f"SELECT count(*) FROM ({sql})").fetchall()[0][0])


def exact_join(con: duckdb.DuckDBPyConnection, orders: str, events: str) -> tuple[pa.Table, float, int, int]:
    t0 = time.perf_counter()
    result = arrow_result(con, JOIN.format(events=f"'{events}'", orders=orders))
    seconds = time.perf_counter() - t0
    rows = count(con, f"SELECT * FROM '{events}'")
    return result, seconds, rows, rows


def filtered_join(
    con: duckdb.DuckDBPyConnection, orders: str, events: str, f: BloomFilter
) -> tuple[pa.Table, float, int, int]:
    t0 = time.perf_counter()
    read = 0
    kept = []
    for batch in pq.ParquetFile(events).iter_batches(batch_size=1 << 18):
        read += batch.num_rows
        kept.append(batch.filter(f.contains_many(batch.column("url"))))
    survivors = pa.Table.from_batches(kept)
    con.register("survivors", survivors)
    result = arrow_result(con, JOIN.format(events="survivors", orders=orders))
    seconds = time.perf_counter() - t0
    con.unregister("survivors")
    return result, seconds, read, survivors.num_rows


def sql_filtered_join(
    con: duckdb.DuckDBPyConnection, orders: str, events: str, f: BloomFilter
) -> tuple[pa.Table, float, int, int]:
    con.create_function(
        "might_contain", lambda urls: pa.array(f.contains_many(urls)), ["VARCHAR"], "BOOLEAN", type="arrow"
    )
    inner = f"(SELECT * FROM '{events}' WHERE might_contain(url))"
    t0 = time.perf_counter()
    result = arrow_result(con, JOIN.format(events=inner, orders=orders))
    seconds = time.perf_counter() - t0
    read, kept = count(con, f"SELECT * FROM '{events}'"), count(con, inner[1:-1])
    con.remove_function("might_contain")
    return result, seconds, read, kept


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the big table (events)")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys of the small table (orders)")
    ap.add_argument("--match", type=float, default=0.05, help="fraction of events whose key is in orders")
    ap.add_argument("--fp-rate", type=float, default=0.01, help="the filter's false-positive rate")
    args = ap.parse_args(argv)
    os.makedirs(args.directory, exist_ok=True)
    orders, events = write_tables(args.directory, args.rows, args.keys, args.match)
    t0 = time.perf_counter()
    f = build_filter(orders, os.path.join(args.directory, "orders.blm"), args.fp_rate)
    build_s = time.perf_counter() - t0
    print(
        f"filter: {args.keys:,} keys, {f.size_bytes:,} bytes shipped (orders.parquet: "
        f"{os.path.getsize(orders):,} bytes), built in {build_s:.2f} s"
    )
    con = duckdb.connect()
    runs = [
        ("exact join", lambda: exact_join(con, orders, events)),
        ("filter, then join", lambda: filtered_join(con, orders, events, f)),
        ("SQL filter, then join", lambda: sql_filtered_join(con, orders, events, f)),
    ]
    print(f"{'method':<22} {'rows read':>11} {'rows kept':>11} {'false pos.':>11} {'joined':>9} {'time':>8}")
    reference = None
    for name, run in runs:
        result, seconds, read, kept = run()
        if reference is None:
            reference = result
        elif not result.equals(reference):
            print(f"{name}: the join differs from the exact join", file=sys.stderr)
            return 1
        false_pos = f"{kept - result.num_rows:,}" if name != "exact join" else "-"
        print(f"{name:<22} {read:>11,} {kept:>11,} {false_pos:>11} {result.num_rows:>9,} {seconds:>6.2f} s")
    f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
