#!/usr/bin/env python3
"""Crawl this Python's pydoc site with worker processes that share one Bloom filter file.

The site is the documentation of the running Python, served by its own ``pydoc`` HTTP
server (``python -m pydoc -n 127.0.0.1 -p 0``) in a child process. W worker processes
take URLs from a shared queue, fetch them with ``urllib``, extract links with
``html.parser`` and enqueue a link only if ``filter.add(link)`` returned True, i.e. only
the first process (of all of them) to see a URL gets to enqueue it. The filter is one
memory-mapped file that every worker opens (a file-backed :class:`mmapbloom.BloomFilter`
pickles as its path). An exact record, kept only to check the filter, counts pages
fetched twice (must be 0) and the filter's false positives (links never fetched).

Run from the repository root, installed (``pip install -e .``) or not::

    python examples/crawl.py --workers 4 --max-pages 1000 --time-limit 120
    python examples/crawl.py --json
    python examples/crawl.py --help

The parts live in ``examples/crawler/``: ``links.py`` (link handling and the skip list
``SKIP_MODULES``), ``server.py`` (the pydoc server), ``workers.py`` (the worker processes
and the termination protocol). This file is the command line and the report. Only the
public mmapbloom API is used.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded by path (tests) rather than run as a script
    sys.path.insert(0, _HERE)
try:
    from mmapbloom import BloomConfig, BloomFilter, cli
except ImportError:  # run from a source checkout without installing (cli.backend_note says so)
    sys.path.insert(0, os.path.dirname(_HERE))
    from mmapbloom import BloomConfig, BloomFilter, cli

from crawler import (  # noqa: E402  (after the path fix above)
    DEFAULT_FETCH_TIMEOUT,
    DEFAULT_MAX_PAGES,
    DEFAULT_TIME_LIMIT,
    DEFAULT_WORKERS,
    SKIP_MODULES,
    CrawlResult,
    PydocServer,
    ServerError,
    crawl,
    extract_links,
    is_skipped_module,
    is_skipped_url,
    normalise_link,
)

__all__ = [
    "SKIP_MODULES",
    "CrawlResult",
    "PydocServer",
    "ServerError",
    "build_parser",
    "crawl",
    "extract_links",
    "is_skipped_module",
    "is_skipped_url",
    "main",
    "normalise_link",
]

DEFAULT_CAPACITY = 20_000
DEFAULT_FP_RATE = 0.01
#: The crawl fails when more than this fraction of its fetches failed.
DEFAULT_MAX_ERROR_RATE = 0.02
PROG = "crawl.py"


# -- reporting ----------------------------------------------------------------------------
def _filter_stats(bloom: BloomFilter, items_before: int) -> dict[str, Any]:
    return {
        "path": bloom.path,
        "num_bits": bloom.num_bits,
        "num_hashes": bloom.num_hashes,
        "size_bytes": bloom.size_bytes,
        "capacity": bloom.config.capacity,
        "target_fp_rate": bloom.config.fp_rate,
        "items_added": bloom.items_added,
        "items_added_this_run": bloom.items_added - items_before,
        "fill_ratio": bloom.fill_ratio(),
        "expected_fp_rate": bloom.expected_fp_rate(),
        "observed_fp_rate": bloom.observed_fp_rate(),
    }


def _print_text(report: dict[str, Any]) -> None:
    f = report["filter"]
    lines = [
        f"site                 {report['root_url']}  (pydoc of Python {report['python']})",
        f"workers              {report['workers']} process{'es' if report['workers'] != 1 else ''} "
        f"({report['start_method']}), "
        f"max pages {report['max_pages']}, time limit {report['time_limit']:g} s",
        f"stopped because      {report['stop_reason']}",
        "",
        f"pages fetched        {report['pages_fetched']}",
        f"links seen           {report['links_seen']}  (distinct same-site links per page, summed)",
        f"duplicates skipped   {report['duplicates_skipped']}  (filter.add returned False)",
        f"new links            {report['links_new']}  ({report['links_enqueued']} enqueued)",
        f"links ignored        {report['links_ignored']}  (off-site, not http, or skip-listed)",
        f"fetch errors         {report['fetch_errors']}",
        f"pages fetched twice  {report['pages_fetched_twice']}  (exact check over {report['fetch_attempts']} fetches)",
        f"false positives      {report['false_positives']}  (distinct links never judged new, "
        f"of {report['distinct_links']})",
        "",
        f"filter               {f['path']}",
        f"  m (bits)           {f['num_bits']}  ({f['size_bytes']} bytes)",
        f"  k (hashes)         {f['num_hashes']}",
        f"  sized for          {f['capacity']} items at p = {f['target_fp_rate']}",
        f"  items added        {f['items_added']}",
        f"  fill ratio         {f['fill_ratio']:.4f}",
        f"  expected fp rate   {f['expected_fp_rate']:.3e}",
        f"  observed fp rate   {f['observed_fp_rate']:.3e}",
        "",
        f"crawl time           {report['crawl_time_s']:.2f} s",
        f"wall time            {report['wall_time_s']:.2f} s",
        f"server stopped       {report['server_stop']}",
    ]
    for url, error in report["error_samples"]:
        lines.append(f"  error: {url}: {error}")
    lines.append("result               " + ("OK" if report["ok"] else "FAILED: " + "; ".join(report["problems"])))
    print("\n".join(lines))


# -- command line -------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def _probability(text: str) -> float:
    value = _positive_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the crawler example.

    Returns:
        A parser for ``python examples/crawl.py``; invalid values exit with status 2.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Crawl the pydoc documentation site of this Python with several processes "
        "that share one Bloom filter file to avoid fetching a page twice.",
    )
    parser.add_argument(
        "--workers", type=_positive_int, default=DEFAULT_WORKERS, help=f"worker processes (default {DEFAULT_WORKERS})"
    )
    parser.add_argument(
        "--max-pages",
        type=_positive_int,
        default=DEFAULT_MAX_PAGES,
        help=f"fetch at most this many pages (default {DEFAULT_MAX_PAGES})",
    )
    parser.add_argument(
        "--time-limit",
        type=_positive_float,
        default=DEFAULT_TIME_LIMIT,
        metavar="SECONDS",
        help=f"start no fetch after this many seconds (default {DEFAULT_TIME_LIMIT:g})",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_FETCH_TIMEOUT,
        metavar="SECONDS",
        help=f"timeout of one fetch (default {DEFAULT_FETCH_TIMEOUT:g})",
    )
    parser.add_argument(
        "--filter",
        metavar="PATH",
        help="filter file to use (opened, or created if missing); default: a new "
        "file in a temporary directory, removed at the end",
    )
    parser.add_argument(
        "--capacity",
        type=_positive_int,
        default=DEFAULT_CAPACITY,
        help=f"items the filter is sized for (default {DEFAULT_CAPACITY})",
    )
    parser.add_argument(
        "--fp-rate",
        type=_probability,
        default=DEFAULT_FP_RATE,
        help=f"target false-positive rate at capacity (default {DEFAULT_FP_RATE})",
    )
    parser.add_argument(
        "--start-method",
        choices=multiprocessing.get_all_start_methods(),
        default="spawn",
        help="multiprocessing start method (default spawn)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it is off anyway when stderr is not a terminal)"
    )
    parser.add_argument(
        "--max-error-rate",
        type=_probability,
        default=DEFAULT_MAX_ERROR_RATE,
        metavar="FRACTION",
        help=f"fail when more than this fraction of the fetches failed (default {DEFAULT_MAX_ERROR_RATE:g})",
    )
    parser.add_argument("--json", action="store_true", help="print the final numbers as JSON")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the crawler example.

    Starts the pydoc server, crawls it (see :func:`crawl`), stops the server, prints the
    totals (text, or JSON with ``--json``).

    Args:
        argv: the arguments, without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 if the crawl fetched pages, none twice, with few fetch errors,
        and the server was alive and answering until shutdown; 1 if a check failed (a page
        fetched twice, no page fetched, more than ``--max-error-rate`` of the fetches
        failed, the server died or stopped answering, a worker crashed), the server did
        not start or the filter could not be opened; 130 on Ctrl-C; 2 for bad arguments
        (argparse exits).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    print(cli.backend_note(PROG), file=sys.stderr)  # which backend runs, and why
    server = PydocServer()
    try:
        return _run(args, server)
    except KeyboardInterrupt:  # before or after the crawl (crawl() handles it during)
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, server: PydocServer) -> int:
    t0 = time.perf_counter()
    tmpdir: Optional[str] = None
    bloom: Optional[BloomFilter] = None
    result: Optional[CrawlResult] = None
    fstats: dict[str, Any] = {}
    try:
        try:
            root = server.start()
        except (ServerError, OSError) as exc:
            print(f"{PROG}: error: cannot start the pydoc server: {exc}", file=sys.stderr)
            return 1
        config = BloomConfig.for_items(args.capacity, args.fp_rate)
        if args.filter:
            path = args.filter
        else:
            tmpdir = tempfile.mkdtemp(prefix="mmapbloom-crawl-")
            path = os.path.join(tmpdir, "urls.blm")
        try:
            bloom = BloomFilter.open_or_create(path, config)
        except (OSError, ValueError) as exc:
            print(f"{PROG}: error: cannot open the filter: {exc}", file=sys.stderr)
            return 1
        items_before = bloom.items_added
        if items_before and not args.json:
            print(f"note: {path} already holds {items_before} items", file=sys.stderr)
        result = crawl(
            root,
            bloom,
            workers=args.workers,
            max_pages=args.max_pages,
            time_limit=args.time_limit,
            fetch_timeout=args.timeout,
            start_method=args.start_method,
            progress=False if args.no_progress else None,
            site_alive=server.alive,
        )
        fstats = _filter_stats(bloom, items_before)
    finally:
        if bloom is not None:
            bloom.close()
        server.stop()
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
    wall = time.perf_counter() - t0
    assert result is not None

    problems: list[str] = []
    if result.pages_fetched_twice:
        problems.append(f"{result.pages_fetched_twice} pages fetched twice")
    if result.pages_fetched == 0:
        problems.append("no page fetched")
    if result.workers_crashed:
        problems.append("a worker failed")
    if result.interrupted:
        problems.append("interrupted")
    attempts = result.pages_fetched + result.fetch_errors
    if result.fetch_errors > args.max_error_rate * attempts:
        problems.append(
            f"{result.fetch_errors} of {attempts} fetches failed (more than {args.max_error_rate:.0%}; "
            "the site went away or broke)"
        )
    if result.site_lost:
        problems.append(f"the site went away during the crawl: {result.site_lost}")
    if not server.stopped_cleanly:
        problems.append(f"the pydoc server {server.stop_note}")
    report: dict[str, Any] = {
        "root_url": root,
        "python": platform.python_version(),
        "workers": args.workers,
        "start_method": args.start_method,
        "max_pages": args.max_pages,
        "time_limit": args.time_limit,
        "stop_reason": result.stop_reason,
        "pages_fetched": result.pages_fetched,
        "fetch_attempts": result.pages_fetched + result.fetch_errors,
        "fetch_errors": result.fetch_errors,
        "links_seen": result.links_seen,
        "duplicates_skipped": result.duplicates_skipped,
        "links_new": result.links_new,
        "links_enqueued": result.links_enqueued,
        "links_ignored": result.links_ignored,
        "pages_fetched_twice": result.pages_fetched_twice,
        "distinct_links": result.distinct_links,
        "false_positives": result.false_positives,
        "filter": fstats,
        "crawl_time_s": result.crawl_seconds,
        "wall_time_s": wall,
        "server_stopped_cleanly": bool(server.stopped_cleanly),
        "server_stop": server.stop_note,
        "site_lost": result.site_lost,
        "max_error_rate": args.max_error_rate,
        "workers_killed": result.workers_killed,
        "error_samples": [list(e) for e in result.error_samples],
        "ok": not problems,
        "problems": problems,
    }
    for crash in result.workers_crashed:
        print(f"{PROG}: {crash}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_text(report)
    if result.interrupted:
        return 130
    return 0 if not problems else 1


if __name__ == "__main__":  # needed: spawned workers re-import this file as __mp_main__
    sys.exit(main())
