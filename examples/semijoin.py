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
each (read, filter and join; the row counts are taken outside the timing).

On one machine, with both tables on local disk, the filter costs more than it saves: DuckDB's
hash join already drops non-matching rows at memory speed, so "filter, then join" is slower
than the exact join (the example prints by how much). The filter exists for the case the
example then measures, where the probe side has to be *moved or read* before the join:

4. **Shipping the probe side** (the classic distributed semi-join): without the filter every
   event row crosses the link to the join; with it, the filter file crosses one way and only
   the kept rows come back. The example counts both in bytes (Arrow IPC, what would be
   sent) and states the **break-even link speed**: below it the filter path is faster end
   to end (bytes saved / extra seconds of filtering measured here).
5. **Reading the probe side from Parquet by row group**: the key column of each row group
   is read first and probed; the other columns of a row group are read only if some row
   was kept. Bytes are those of the Parquet column chunks (compressed, from the file's
   metadata). This does *not* pay with row groups of realistic size, and the example
   shows why: a row group of R rows without a single match is still kept with
   probability 1 - (1 - p)^R because of false positives (at p = 1% and R = 262,144, always),
   even when the matches cluster (``--clustered``: the matching events are contiguous, as
   recent activity is in a time-ordered log). Skipping row groups needs per-row-group
   statistics (Parquet's min/max or its own per-column-chunk Bloom filters), not one filter
   of the build side; the filter saves the rows' transfer and join, not their read.

Usage::

    python examples/semijoin.py DIR [--rows 5000000] [--keys 100000] [--match 0.05] [--fp-rate 0.01] [--clustered]

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

from mmapbloom import BloomConfig, BloomFilter, cli  # noqa: E402


def url(ids: np.ndarray) -> pa.Array:
    """Customer URLs for integer ids (an Arrow string column)."""
    return pa.array(np.char.add("https://shop.example/customer/", ids.astype(str)))


ROW_GROUP_ROWS = 1 << 18


def write_tables(
    directory: str, rows: int, keys: int, match: float, seed: int = 7, clustered: bool = False
) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    orders = os.path.join(directory, "orders.parquet")
    events = os.path.join(directory, "events.parquet")
    pq.write_table(pa.table({"url": url(np.arange(keys)), "order_id": np.arange(keys)}), orders)
    hit = np.arange(rows) < round(rows * match) if clustered else rng.random(rows) < match
    ids = np.where(hit, rng.integers(0, keys, rows), rng.integers(keys, keys + 50 * rows + 1, rows))
    pq.write_table(
        pa.table({"url": url(ids), "event": np.arange(rows), "amount": rng.integers(1, 1000, rows)}),
        events,
        row_group_size=ROW_GROUP_ROWS,
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


def ipc_bytes(table: "pa.Table | pa.RecordBatch") -> int:
    """Bytes of ``table`` as an Arrow IPC stream: what shipping it over a link would send."""
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return int(sink.size())


def shipping(events: str, f: BloomFilter) -> tuple[int, int, int]:
    """(bytes of every event row, bytes of the kept rows, bytes of the filter file)."""
    everything = pq.read_table(events)
    kept = everything.filter(f.contains_many(everything.column("url")))
    return ipc_bytes(everything), ipc_bytes(kept), f.size_bytes


def row_group_scan(events: str, f: BloomFilter) -> tuple[int, int, int, int]:
    """Read ``events`` row group by row group: the key column first, the other columns only
    where a row was kept. Returns (row groups, row groups skipped, bytes of every column
    chunk, bytes of the column chunks read), from the Parquet metadata."""
    pf = pq.ParquetFile(events)
    names = pf.schema_arrow.names
    key = names.index("url")
    total = read = skipped = 0
    for i in range(pf.num_row_groups):
        meta = pf.metadata.row_group(i)
        sizes = [meta.column(c).total_compressed_size for c in range(meta.num_columns)]
        total += sum(sizes)
        read += sizes[key]
        urls = pf.read_row_group(i, columns=["url"]).column("url")
        if f.contains_many(urls).any():
            pf.read_row_group(i, columns=[n for n in names if n != "url"])
            read += sum(sizes) - sizes[key]
        else:
            skipped += 1
    return pf.num_row_groups, skipped, total, read


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the big table (events)")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys of the small table (orders)")
    ap.add_argument("--match", type=float, default=0.05, help="fraction of events whose key is in orders")
    ap.add_argument("--fp-rate", type=float, default=0.01, help="the filter's false-positive rate")
    ap.add_argument(
        "--clustered", action="store_true", help="the matching events are contiguous (recent activity in a log)"
    )
    args = ap.parse_args(argv)
    print(cli.backend_note("semijoin.py"), file=sys.stderr)  # which backend runs, and why
    os.makedirs(args.directory, exist_ok=True)
    orders, events = write_tables(args.directory, args.rows, args.keys, args.match, clustered=args.clustered)
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
    seconds_of: dict[str, float] = {}
    for name, run in runs:
        result, seconds, read, kept = run()
        seconds_of[name] = seconds
        if reference is None:
            reference = result
        elif not result.equals(reference):
            print(f"{name}: the join differs from the exact join", file=sys.stderr)
            return 1
        false_pos = f"{kept - result.num_rows:,}" if name != "exact join" else "-"
        print(f"{name:<22} {read:>11,} {kept:>11,} {false_pos:>11} {result.num_rows:>9,} {seconds:>6.2f} s")
    extra = seconds_of["filter, then join"] - seconds_of["exact join"]
    print()
    print(
        f"on one machine the filter path took {extra:+.2f} s against the exact join "
        f"({seconds_of['filter, then join'] / seconds_of['exact join']:.2f}x): it pays only where rows must move"
    )
    everything, kept_bytes, filter_bytes = shipping(events, f)
    saved = everything - kept_bytes - filter_bytes
    print("shipping the probe side to the join (Arrow IPC bytes):")
    print(f"  without the filter   {everything:,} bytes (every event row)")
    print(
        f"  with the filter      {filter_bytes + kept_bytes:,} bytes (the filter {filter_bytes:,}, then the kept "
        f"rows {kept_bytes:,}): {(filter_bytes + kept_bytes) / everything:.1%} of it"
    )
    if saved <= 0:
        print("  break-even           never: the filter and the kept rows are no smaller than the rows")
    elif extra <= 0:
        print(f"  break-even           always: {saved:,} bytes saved and no extra time here")
    else:
        print(
            f"  break-even           the filter path is faster end to end on a link slower than "
            f"{saved / extra / 1e6:,.0f} MB/s ({saved:,} bytes saved for {extra:.2f} s of filtering)"
        )
    groups, skipped, total_bytes, read_bytes = row_group_scan(events, f)
    print(f"reading the probe side by row group ({ROW_GROUP_ROWS:,} rows each; key column first):")
    print(
        f"  row groups skipped   {skipped} of {groups}; {read_bytes:,} of {total_bytes:,} Parquet bytes read "
        f"({read_bytes / total_bytes:.1%})"
    )
    print(
        f"  why                  a row group with no match is skipped only with probability (1 - p)^R = "
        f"{(1 - args.fp_rate) ** ROW_GROUP_ROWS:.3g} (p = {args.fp_rate:g}, R = {ROW_GROUP_ROWS:,}): false "
        "positives keep every row group, so the filter saves transfer and join work, not Parquet reads"
    )
    f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
