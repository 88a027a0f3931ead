#!/usr/bin/env python3
"""Two Scrapy processes crawl one local site and share one mmapbloom duplicate filter.

The site is this Python's standard library directory served by ``python -m http.server``
on 127.0.0.1 (its directory listings link to every file and subdirectory). Three crawls of
it are made, each by ``python -m scrapy runspider`` processes running the spider below:

1. one process with Scrapy's default filter (``RFPDupeFilter``): the reference;
2. one process with ``mmapbloom.scrapy.BloomDupeFilter`` (a temporary file): the same
   pages, and the same number of duplicate requests filtered;
3. two processes at once, each with the default filter (a set in each process): they
   fetch many of the same pages;
4. two processes at once, both with ``BloomDupeFilter`` and the same
   ``MMAPBLOOM_DUPEFILTER_PATH``: no page is fetched by both, and together they fetch the
   pages of crawl 1.

Process A starts from the root listing, process B from the top-level subdirectories (a
start URL both had would simply be fetched by one of them and filtered in the other).
The server's own request log counts what was really fetched::

    python examples/scrapy_crawl.py                  # the stdlib, minus site-packages, test, __pycache__
    python examples/scrapy_crawl.py --max-pages 200  # each process stops after 200 pages (CLOSESPIDER_PAGECOUNT)
    python examples/scrapy_crawl.py --json

Needs the ``scrapy`` extra (from the checkout: ``pip install -e '.[scrapy]'``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any, Iterator, Optional

import scrapy
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor

#: Subdirectories of the stdlib directory that are not crawled: installed packages,
#: CPython's test suite (tens of thousands of files) and bytecode caches.
SKIP_DIRS = ("site-packages", "test", "__pycache__", "idle_test", "lib2to3/tests", "tkinter/test")

#: Default ``--max-pages``: bounds the run time on a larger standard library.
DEFAULT_MAX_PAGES = 2000


class StdlibSpider(scrapy.Spider):
    """Follow every link of the start URLs' site, except into :data:`SKIP_DIRS`; one item
    ``{"url": ...}`` per page. Start requests go through the duplicate filter.

    Arguments (``-a``): ``start_urls``, URLs separated by spaces; ``go_file`` (optional):
    before its first request the spider creates ``go_file + ".ready.<pid>"`` and waits
    (at most 60 s) until ``go_file`` exists, so that processes can start crawling together."""

    name = "stdlib"

    def __init__(self, start_urls: str = "", go_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.go_file = go_file
        self.start_urls = start_urls.split()
        origin = re.match(r"https?://[^/]+/", self.start_urls[0]).group(0)  # type: ignore[union-attr]
        deny = r"/(%s)/" % "|".join(map(re.escape, SKIP_DIRS))
        self.links = LinkExtractor(allow=[re.escape(origin)], deny=[deny], deny_extensions=[])

    async def start(self) -> Any:  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # Scrapy < 2.13
        if self.go_file:  # blocks the reactor, which has nothing else to do yet
            open(f"{self.go_file}.ready.{os.getpid()}", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(self.go_file) and time.monotonic() < deadline:
                time.sleep(0.02)
        for url in self.start_urls:
            yield scrapy.Request(url, dont_filter=False)  # the default start requests skip the filter

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url}
        if isinstance(response, HtmlResponse):
            for link in self.links.extract_links(response):
                yield response.follow(link.url, callback=self.parse)


class Server:
    """``python -m http.server`` over ``directory`` on 127.0.0.1 (a free port); its request
    log on stderr goes to ``log``."""

    def __init__(self, directory: "str | os.PathLike[str]", log: "str | os.PathLike[str]"):
        self.log = log
        self._stderr = open(log, "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                os.fspath(directory),
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port 40211 (http://127.0.0.1:40211/) ..."
        match = re.search(r"port (\d+)", line)
        if not match:
            self.close()
            raise RuntimeError(f"http.server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{match.group(1)}/"
        self._offset = 0

    def fetched(self) -> collections.Counter[str]:
        """GET requests per path since the previous call."""
        with open(self.log) as f:
            f.seek(self._offset)
            text = f.read()
            self._offset = f.tell()
        return collections.Counter(re.findall(r'"GET (\S+) HTTP/[\d.]+" \d+', text))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._stderr.close()


def start_crawl(
    start_urls: list[str], out: str, settings: dict[str, Any], go_file: str = ""
) -> "subprocess.Popen[bytes]":
    """One ``scrapy runspider`` process running :class:`StdlibSpider` (see there for
    ``go_file``); items to ``out`` (JSON lines), log to ``out + ".log"``."""
    argv = [
        sys.executable,
        "-m",
        "scrapy",
        "runspider",
        os.path.abspath(__file__),
        "-a",
        "start_urls=" + " ".join(start_urls),
        "-a",
        f"go_file={go_file}",
        "-O",
        out,
    ]
    for key, value in {
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        **settings,
    }.items():
        argv += ["-s", f"{key}={value}"]
    with open(out + ".log", "w") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def pages_of(out: str, proc: "subprocess.Popen[bytes]") -> tuple[list[str], int]:
    """Wait for the process; the paths of the pages it scraped, and the number of
    duplicate requests its filter dropped (the ``dupefilter/filtered`` stat it logged)."""
    if proc.wait() != 0:
        raise RuntimeError(f"scrapy exited with {proc.returncode}; see {out}.log")
    with open(out + ".log") as f:
        filtered = re.search(r"'dupefilter/filtered': (\d+)", f.read())
    with open(out) as f:
        return [re.sub(r"^https?://[^/]+", "", json.loads(line)["url"]) for line in f], int(
            filtered.group(1)
        ) if filtered else 0


def run(
    n: int, label: str, server: Server, starts: list[list[str]], settings: dict[str, Any], tmp: str
) -> dict[str, Any]:
    """Run one process per entry of ``starts``, all starting to crawl at the same moment;
    what each fetched, and the overlap."""
    server.fetched()
    go = os.path.join(tmp, f"run{n}.go")
    procs = []
    for i, start in enumerate(starts):
        out = os.path.join(tmp, f"{os.path.basename(go)}-{i}.jsonl")
        procs.append((out, start_crawl(start, out, settings, go)))
    deadline = time.monotonic() + 60
    while len([f for f in os.listdir(tmp) if f.startswith(os.path.basename(go) + ".ready.")]) < len(starts):
        if time.monotonic() > deadline or any(p.poll() is not None for _, p in procs):
            break  # a process failed: pages_of reports it
        time.sleep(0.02)
    open(go, "w").close()
    t0 = time.monotonic()
    pages, filtered = zip(*(pages_of(out, proc) for out, proc in procs), strict=True)
    seconds = time.monotonic() - t0
    fetched = server.fetched()
    sets = [set(p) for p in pages]
    overlap = set.intersection(*sets) if len(sets) > 1 else set()
    return {
        "label": label,
        "pages": [len(p) for p in pages],
        "overlap": len(overlap),
        "union": len(set.union(*sets)),
        "filtered": sum(filtered),
        "requests": sum(fetched.values()),
        "fetched_twice": sum(1 for c in fetched.values() if c > 1),
        "seconds": round(seconds, 1),
        "_union": set.union(*sets),
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--directory",
        default=sysconfig.get_paths()["stdlib"],
        help="directory to serve (default: this Python's standard library)",
    )
    parser.add_argument(
        "--max-pages",
        type=int,
        default=DEFAULT_MAX_PAGES,
        help="pages per process before it stops (CLOSESPIDER_PAGECOUNT; 0: no limit; default "
        f"{DEFAULT_MAX_PAGES}, more than the about 1,000 pages of a CPython 3.11 stdlib)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    from mmapbloom import cli

    print(cli.backend_note("scrapy_crawl.py"), file=sys.stderr)  # which backend runs, and why

    skip = set(SKIP_DIRS)
    subdirs = sorted(e.name for e in os.scandir(args.directory) if e.is_dir() and e.name not in skip)
    limit = {"CLOSESPIDER_PAGECOUNT": args.max_pages} if args.max_pages else {}
    with tempfile.TemporaryDirectory(prefix="scrapy-crawl-") as tmp:
        server = Server(args.directory, os.path.join(tmp, "server.log"))
        try:
            root = [server.url]
            others = [server.url + d + "/" for d in reversed(subdirs)]
            default = {"DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter", **limit}
            bloom = {
                "DUPEFILTER_CLASS": "mmapbloom.scrapy.BloomDupeFilter",
                "MMAPBLOOM_DUPEFILTER_PATH": os.path.join(tmp, "shared.blm"),
                **limit,
            }
            results = [
                run(1, "one process, default filter", server, [root], default, tmp),
                run(2, "one process, BloomDupeFilter", server, [root], {**bloom, "MMAPBLOOM_DUPEFILTER_PATH": ""}, tmp),
                run(3, "two processes, default filter each", server, [root, others], default, tmp),
                run(4, "two processes, one shared BloomDupeFilter file", server, [root, others], bloom, tmp),
            ]
        finally:
            server.close()
    same = results[3]["_union"] == results[1]["_union"] == results[0]["_union"]
    for r in results:
        del r["_union"]
    if args.json:
        print(
            json.dumps(
                {
                    "site": args.directory,
                    "scrapy": scrapy.__version__,
                    "max_pages": args.max_pages,
                    "union_equals_single_process": same,
                    "runs": results,
                },
                indent=1,
            )
        )
        return 0
    print(
        f"site: {args.directory} served by http.server (Scrapy {scrapy.__version__}"
        + (f", at most {args.max_pages} pages per process)" if args.max_pages else ")")
    )
    print(
        f"{'crawl':<48} {'pages A':>8} {'pages B':>8} {'overlap':>8} {'union':>7} {'filtered':>9} {'GETs':>6} "
        f"{'fetched twice':>14} {'s':>6}"
    )
    for r in results:
        a, b = (r["pages"] + ["-"])[:2]
        print(
            f"{r['label']:<48} {a:>8} {b:>8} {r['overlap'] if len(r['pages']) > 1 else '-':>8} {r['union']:>7} "
            f"{r['filtered']:>9} {r['requests']:>6} {r['fetched_twice']:>14} {r['seconds']:>6}"
        )
    print(
        "filtered: duplicate requests dropped (dupefilter/filtered, summed); GETs: requests the server"
        " answered, any status"
    )
    print(
        "one process with BloomDupeFilter and the shared pair fetched the pages of the reference crawl:",
        same,
        "(expected only when no process reached --max-pages)" if args.max_pages else "",
    )
    return 0


if __name__ == "__main__":  # not run when scrapy runspider loads this file for the spider
    sys.exit(main())
