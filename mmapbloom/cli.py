"""The ``mmapbloom`` command line (console script and ``python -m mmapbloom``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from .errors import MmapBloomError
from .filter import BloomFilter

__all__ = ["main"]


def _info(args: argparse.Namespace) -> int:
    with BloomFilter.open(args.file, readonly=True) as f:
        ones = f.count_ones()
        from .sizing import approx_items, observed_fp_rate

        report = {
            "path": f.path,
            "scheme": f.strategy.name,
            "num_bits": f.num_bits,
            "num_hashes": f.num_hashes,
            "size_bytes": f.size_bytes,
            "items_added": f.items_added,
            "approx_items": approx_items(ones, f.num_bits, f.num_hashes),
            "fill_ratio": ones / f.num_bits,
            "expected_fp_rate": f.expected_fp_rate(),
            "observed_fp_rate": observed_fp_rate(ones, f.num_bits, f.num_hashes),
            "over_capacity": f.is_over_capacity(),
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:17} {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args.demo_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmapbloom", description="Bloom filters in memory-mapped files.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="show a filter file's shape and fill")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_info)
    p = sub.add_parser("demo", help="run the crawler demo (see examples/crawl.py)", add_help=False)
    p.add_argument("demo_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 absent, 2 usage or bad file)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (MmapBloomError, OSError) as exc:
        print(f"mmapbloom: error: {exc}", file=sys.stderr)
        return 2
