#!/usr/bin/env python3
"""Resident memory of Scrapy's default duplicate filter and of mmapbloom's, after N requests.

Each filter runs in a fresh process, which calls ``request_seen`` for N distinct synthetic
fingerprints (SHA-1 of the request number, 20 bytes like Scrapy's) and reports its
resident memory (``/proc/self/status``: VmRSS = RssAnon + RssFile + RssShmem, and the
peak VmHWM) at every tenth of the way::

    python tools/scrapy_memory.py                      # 10 million requests, both filters
    python tools/scrapy_memory.py --requests 1000000 --filters bloom
    python tools/scrapy_memory.py --jobdir             # also: reopen time, as on a resume

Both filters are driven through their own ``request_seen``, built as Scrapy builds them
(``RFPDupeFilter(path, debug, fingerprinter=...)``, ``BloomDupeFilter(path, debug,
fingerprinter=...)``), with a fingerprinter that returns the precomputed fingerprint it is
given instead of hashing a ``Request``; that step is the same for both filters and only
costs time. Neither filter keeps the fingerprints elsewhere, so what grows is the filter.

With ``--jobdir`` each filter writes its JOBDIR file (``requests.seen``,
``requests.blm``); a third process then reopens it as a resumed crawl does, and its time
to open and resident memory after opening are reported.

Linux only (reads ``/proc/self/status``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")


def memory() -> dict[str, float]:
    """The process's memory figures from /proc/self/status, in MiB."""
    found: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in FIELDS:
                found[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return found


class Given:
    """A request fingerprinter (Scrapy's ``RequestFingerprinterProtocol``) for requests
    that are already their fingerprint (``bytes``)."""

    def fingerprint(self, request: Any) -> bytes:
        return request  # type: ignore[no-any-return]


def build(name: str, path: str | None) -> Any:
    """The filter, as Scrapy's ``from_crawler`` builds it (no debug) with ``path`` as
    JOBDIR (or none). Call :func:`load` first: importing is not part of opening."""
    if name == "default":
        from scrapy.dupefilters import RFPDupeFilter

        return RFPDupeFilter(path, False, fingerprinter=Given())
    from mmapbloom.scrapy import JOBDIR_FILE_NAME, BloomDupeFilter

    return BloomDupeFilter(os.path.join(path, JOBDIR_FILE_NAME) if path else None, False, fingerprinter=Given())


def load(name: str) -> None:
    """Import Scrapy and the filter's module (counted in the starting figures, as in a
    crawl, where both are imported before the spider opens)."""
    import scrapy.dupefilters  # noqa: F401

    if name == "bloom":
        import mmapbloom.scrapy  # noqa: F401


def child_fill(name: str, n: int, jobdir: str | None) -> dict[str, Any]:
    load(name)
    start = memory()
    df = build(name, jobdir)
    opened = memory()
    samples = []
    step = max(1, n // 10)
    t0 = time.perf_counter()
    duplicates = 0
    seen = df.request_seen
    sha1 = hashlib.sha1
    for i in range(n):
        if seen(sha1(i.to_bytes(8, "little")).digest()):
            duplicates += 1  # a false positive: every fingerprint is distinct
        if (i + 1) % step == 0:
            samples.append({"requests": i + 1, "seconds": time.perf_counter() - t0, **memory()})
    # A second pass over the first 100,000: every one must be reported seen.
    missed = sum(not seen(sha1(i.to_bytes(8, "little")).digest()) for i in range(min(n, 100_000)))
    elapsed = time.perf_counter() - t0
    end = memory()
    df.close("finished")
    return {
        "filter": name,
        "requests": n,
        "start": start,
        "opened": opened,
        "end": end,
        "samples": samples,
        "seconds": elapsed,
        "false_positives": duplicates,
        "missed": missed,
    }


def child_reopen(name: str, jobdir: str) -> dict[str, Any]:
    load(name)
    start = memory()
    t0 = time.perf_counter()
    df = build(name, jobdir)
    seconds = time.perf_counter() - t0
    end = memory()
    assert df.request_seen(hashlib.sha1((0).to_bytes(8, "little")).digest())  # resumed state is there
    df.close("finished")
    return {"filter": name, "start": start, "end": end, "seconds": seconds}


def run_child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=10_000_000, help="distinct requests (default 10 million)")
    parser.add_argument("--filters", default="default,bloom", help="comma-separated: default, bloom")
    parser.add_argument("--jobdir", action="store_true", help="use a JOBDIR and time reopening it")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, name, *rest = args.child
        result = child_fill(name, int(rest[0]), rest[1] or None) if kind == "fill" else child_reopen(name, rest[0])
        print(json.dumps(result))
        return 0

    import scrapy

    import mmapbloom

    print(
        f"scrapy {scrapy.__version__}, mmapbloom {mmapbloom.__version__}, Python {sys.version.split()[0]}, "
        f"{args.requests:,} distinct requests"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="scrapy-memory-") as tmp:
        for name in args.filters.split(","):
            jobdir = os.path.join(tmp, name) if args.jobdir else ""
            if jobdir:
                os.mkdir(jobdir)
            fill = run_child("fill", name, str(args.requests), jobdir)
            if jobdir:
                fill["reopen"] = run_child("reopen", name, jobdir)
                fill["file_mib"] = sum(os.path.getsize(os.path.join(jobdir, f)) for f in os.listdir(jobdir)) / 2**20
            results.append(fill)
            print(f"  {name}: done in {fill['seconds']:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0

    print("\nResident memory (VmRSS, MiB) as requests are seen:")
    print(f"{'requests':>12} " + " ".join(f"{r['filter']:>10}" for r in results))
    print(f"{'opened':>12} " + " ".join(f"{r['opened']['VmRSS']:>10.1f}" for r in results))
    for i in range(len(results[0]["samples"])):
        row = [r["samples"][i] for r in results]
        print(f"{row[0]['requests']:>12,} " + " ".join(f"{s['VmRSS']:>10.1f}" for s in row))
    print("\nSummary:")
    header = ["filter", "RSS opened", "RSS end", "growth", "anon end", "file end", "peak", "s", "false pos", "missed"]
    print(" | ".join(header))
    for r in results:
        print(
            " | ".join(
                [
                    r["filter"],
                    f"{r['opened']['VmRSS']:.1f}",
                    f"{r['end']['VmRSS']:.1f}",
                    f"{r['end']['VmRSS'] - r['opened']['VmRSS']:+.1f}",
                    f"{r['end']['RssAnon']:.1f}",
                    f"{r['end']['RssFile'] + r['end'].get('RssShmem', 0):.1f}",
                    f"{r['end']['VmHWM']:.1f}",
                    f"{r['seconds']:.0f}",
                    str(r["false_positives"]),
                    str(r["missed"]),
                ]
            )
        )
    if args.jobdir:
        print("\nResume (a new process opens the JOBDIR file):")
        print("filter | file MiB | open s | RSS after open | growth")
        for r in results:
            ro = r["reopen"]
            print(
                f"{r['filter']} | {r['file_mib']:.1f} | {ro['seconds']:.3f} | {ro['end']['VmRSS']:.1f} | "
                f"{ro['end']['VmRSS'] - ro['start']['VmRSS']:+.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
