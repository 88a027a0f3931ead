"""mmapbloom.scrapy.BloomDupeFilter in real Scrapy crawls of a real HTTP server on 127.0.0.1.

Every crawl is a ``python -m scrapy runspider examples/scrapy_crawl.py`` subprocess
(Twisted's reactor cannot be restarted in one process) running the example's spider; every
site is served by ``python -m http.server`` (the example's ``Server``), whose request log
tells which pages were really fetched and how often. The example is loaded by path.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import json
import logging
import os
import re
import subprocess
import sysconfig
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

pytest.importorskip("scrapy", reason="scrapy is in the test extra (and the scrapy extra)")

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    ConfigError,
    ConfigMismatchError,  # noqa: E402
    UnknownSchemeError,
    get_strategy,
)
from tests.conftest import ROOT  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(ROOT, "examples", "scrapy_crawl.py")


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("scrapy_crawl_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()
Server = example.Server
BLOOM = "mmapbloom.scrapy.BloomDupeFilter"
DEFAULT = "scrapy.dupefilters.RFPDupeFilter"
PAGES = 200  # p0.html ... p199.html and index.html; "/" is the index under a second URL


# -- in-process: settings, fingerprints, logging --------------------------------------------
def test_settings(tmp_path: Path) -> None:
    from scrapy.utils.test import get_crawler

    from mmapbloom.scrapy import DEFAULT_CAPACITY, DEFAULT_FP_RATE, BloomDupeFilter

    df = BloomDupeFilter.from_crawler(get_crawler(settings_dict={"JOBDIR": str(tmp_path / "job")}))
    assert df.path == str(tmp_path / "job" / "requests.blm") and os.path.isfile(df.path)
    assert df.filter.config == BloomConfig.for_items(DEFAULT_CAPACITY, DEFAULT_FP_RATE, df.filter.strategy)
    df.close("finished")
    assert os.path.isfile(df.path)  # a JOBDIR file is kept for the resume

    df = BloomDupeFilter.from_crawler(
        get_crawler(
            settings_dict={
                "JOBDIR": str(tmp_path / "job"),
                "MMAPBLOOM_DUPEFILTER_PATH": str(tmp_path / "mine.blm"),
                "MMAPBLOOM_DUPEFILTER_CAPACITY": "5e3",
                "MMAPBLOOM_DUPEFILTER_FP_RATE": "0.001",
                "MMAPBLOOM_DUPEFILTER_STRATEGY": "M3KM",
            }
        )
    )
    assert df.path == str(tmp_path / "mine.blm")  # the path setting wins over JOBDIR
    assert df.filter.config == BloomConfig.for_items(5000, 0.001, get_strategy("M3KM"))
    df.close("finished")

    df = BloomDupeFilter.from_crawler(
        get_crawler(
            settings_dict={
                "MMAPBLOOM_DUPEFILTER_PATH": str(tmp_path / "blocked.blm"),
                "MMAPBLOOM_DUPEFILTER_STRATEGY": "M3B2",
            }
        )
    )
    assert df.filter.config == BloomConfig.for_items(DEFAULT_CAPACITY, DEFAULT_FP_RATE, get_strategy("M3B2"))
    df.close("finished")

    df = BloomDupeFilter.from_crawler(get_crawler())
    assert df.filter.strategy.name == "M3M2"  # the package default
    temporary = df.path
    assert os.path.isfile(temporary)
    df.close("finished")
    df.close("finished")  # idempotent
    assert not os.path.exists(os.path.dirname(temporary))  # the temporary default is removed

    for bad in (
        {"MMAPBLOOM_DUPEFILTER_CAPACITY": "many"},
        {"MMAPBLOOM_DUPEFILTER_CAPACITY": 0},
        {"MMAPBLOOM_DUPEFILTER_CAPACITY": "12.5"},
        {"MMAPBLOOM_DUPEFILTER_FP_RATE": "1.5"},
        {"MMAPBLOOM_DUPEFILTER_FP_RATE": True},
    ):
        with pytest.raises(ConfigError, match=re.escape(str(next(iter(bad.values()))))):
            BloomDupeFilter.from_crawler(get_crawler(settings_dict=bad))
    with pytest.raises(UnknownSchemeError) as unknown:
        BloomDupeFilter.from_crawler(get_crawler(settings_dict={"MMAPBLOOM_DUPEFILTER_STRATEGY": "NOPE"}))
    # The message names the setting to change, the value and the registered names.
    assert str(unknown.value).startswith("MMAPBLOOM_DUPEFILTER_STRATEGY: unknown hash strategy 'NOPE'")
    assert "<bytes>" not in str(unknown.value) and "M3MX" in str(unknown.value)


def test_same_decisions_as_the_default_filter() -> None:
    """Scrapy's fingerprinter: canonical URL (query order, fragment), method and body."""
    import scrapy
    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.utils.test import get_crawler

    from mmapbloom.scrapy import BloomDupeFilter

    crawler = get_crawler()
    requests = [
        scrapy.Request(u)
        for u in (
            "http://h/a?x=1&y=2",
            "http://h/a?y=2&x=1",
            "http://h/a?x=1&y=2#f",
            "http://h/a?x=1",
            "http://H/a?x=1",
            "http://h/b",
        )
    ]
    requests += [
        scrapy.Request("http://h/a?x=1", method="POST"),
        scrapy.Request("http://h/a?x=1", method="POST"),
        scrapy.Request("http://h/a?x=1", method="POST", body=b"1"),
    ]
    default, bloom = RFPDupeFilter.from_crawler(crawler), BloomDupeFilter.from_crawler(crawler)
    expected = [False, True, True, False, True, False, False, True, False]
    assert [default.request_seen(r) for r in requests] == expected
    assert [bloom.request_seen(r) for r in requests] == expected
    bloom.close("finished")


def test_log_and_stat(caplog: pytest.LogCaptureFixture) -> None:
    import scrapy
    from scrapy.utils.test import get_crawler

    from mmapbloom.scrapy import BloomDupeFilter

    for debug, shown in ((False, 1), (True, 3)):
        crawler = get_crawler(settings_dict={"DUPEFILTER_DEBUG": debug})
        spider = scrapy.Spider.from_crawler(crawler, name="s")
        df = BloomDupeFilter.from_crawler(crawler)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="mmapbloom.scrapy"):
            for _ in range(3):
                df.log(scrapy.Request("http://h/a", headers={"Referer": "http://h/"}), spider)
        assert crawler.stats is not None and crawler.stats.get_value("dupefilter/filtered") == 3
        messages = [r.getMessage() for r in caplog.records if "Filtered duplicate request" in r.getMessage()]
        assert len(messages) == shown
        assert ("(referer: http://h/)" in messages[0]) == debug
        assert ("no more duplicates will be shown" in messages[0]) != debug
        df.close("finished")


# -- real crawls ----------------------------------------------------------------------------
def make_site(directory: Path, pages: int = PAGES) -> set[str]:
    """Write ``pages`` linked HTML pages; return every path a crawl from "/" must fetch.

    Page i links to i + 1, 2i, 7i + 3 and i*i (mod pages), each twice (once with a
    fragment, which Scrapy's fingerprint ignores), and to index.html: about 9 links per
    page, so most requests a crawl makes are duplicates."""
    directory.mkdir()
    for i in range(pages):
        targets = sorted({(i + 1) % pages, 2 * i % pages, (7 * i + 3) % pages, i * i % pages})
        links = "".join(f'<a href="p{j}.html">p{j}</a> <a href="p{j}.html#top">again</a>\n' for j in targets)
        html = f"<html><body><h1>page {i}</h1>\n{links}<a href='index.html'>home</a></body></html>\n"
        (directory / f"p{i}.html").write_text(html)
        if i == 0:
            (directory / "index.html").write_text(html)
    return {"/", "/index.html"} | {f"/p{i}.html" for i in range(pages)}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, set[str]]]:
    base = tmp_path_factory.mktemp("scrapy")
    paths = make_site(base / "site")
    server = Server(base / "site", base / "server.log")
    try:
        yield server, paths
    finally:
        server.close()


def start_crawl(
    start: str,
    out: Path,
    dupefilter: str = BLOOM,
    settings: Optional[dict[str, Any]] = None,
    go_file: Optional[Path] = None,
) -> "subprocess.Popen[bytes]":
    """Start one crawl by the example's spider; items (one per page) to ``out`` (JSON
    lines), log to ``out.log``."""
    proc: "subprocess.Popen[bytes]" = example.start_crawl(
        [start], str(out), {"DUPEFILTER_CLASS": dupefilter, **(settings or {})}, str(go_file or "")
    )
    return proc


class Crawl:
    """The outcome of a finished crawl: exit status, log, pages (paths, in fetch order)
    and the stats Scrapy dumped."""

    def __init__(self, proc: "subprocess.Popen[bytes]", out: Path):
        self.returncode = proc.wait(120)
        self.log = Path(f"{out}.log").read_text()
        self.pages = [
            re.sub(r"^http://[^/]+", "", json.loads(line)["url"])
            for line in (out.read_text().splitlines() if out.exists() else [])
        ]

    def stat(self, name: str) -> Optional[Any]:
        match = re.search(rf"'{re.escape(name)}': ([^,\n]+)", self.log)
        return None if match is None else ast.literal_eval(match.group(1))  # an int or a str


def crawl(start: str, out: Path, dupefilter: str = BLOOM, settings: Optional[dict[str, Any]] = None) -> Crawl:
    """Run one crawl to its end."""
    return Crawl(start_crawl(start, out, dupefilter, settings), out)


@pytest.fixture(scope="module")
def baseline(site: tuple[Any, set[str]], tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    """The generated site crawled once with Scrapy's default filter."""
    server, paths = site
    server.fetched()
    result = crawl(server.url, tmp_path_factory.mktemp("baseline") / "default.jsonl", DEFAULT)
    assert result.returncode == 0, result.log
    assert server.fetched() == collections.Counter(paths)  # the whole site, each page once
    return result


def test_same_pages_as_the_default_filter(site: tuple[Any, set[str]], baseline: Crawl, tmp_path: Path) -> None:
    server, paths = site
    server.fetched()
    bloom = crawl(server.url, tmp_path / "bloom.jsonl")
    assert bloom.returncode == 0, bloom.log
    fetched = server.fetched()
    assert fetched == collections.Counter(paths), "each page fetched exactly once"
    assert sorted(bloom.pages) == sorted(baseline.pages) == sorted(paths)
    # The same duplicates were filtered (same fingerprints), and there were many.
    filtered = bloom.stat("dupefilter/filtered")
    assert isinstance(filtered, int) and filtered > 3 * len(paths)
    assert filtered == baseline.stat("dupefilter/filtered")
    assert "Filtered duplicate request" not in bloom.log  # logged at DEBUG only, as the default does
    opened = re.search(r"\[mmapbloom.scrapy\] INFO: Duplicate filter: (\S+) .* 0 requests already seen", bloom.log)
    assert opened, bloom.log
    assert not os.path.exists(opened.group(1))  # the temporary default file is removed at close


def test_two_processes_share_one_file(site: tuple[Any, set[str]], baseline: Crawl, tmp_path: Path) -> None:
    server, paths = site
    shared = {"MMAPBLOOM_DUPEFILTER_PATH": tmp_path / "shared.blm"}
    go = tmp_path / "go"
    server.fetched()
    procs = [
        start_crawl(server.url + start, tmp_path / f"{i}.jsonl", settings=shared, go_file=go)
        for i, start in enumerate(["", f"p{PAGES // 2}.html"])
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.ready.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    go.touch()  # both filters are open and both spiders wait: start them together
    a, b = (Crawl(p, tmp_path / f"{i}.jsonl") for i, p in enumerate(procs))
    assert a.returncode == b.returncode == 0, a.log + b.log
    # Both really crawled (each at least its own start page); how the rest splits between
    # them depends on scheduling (seen: 8 and 194 on a loaded machine), so no more is asked.
    assert a.pages and b.pages, (len(a.pages), len(b.pages))
    assert not set(a.pages) & set(b.pages), "a page fetched by both processes"
    assert len(set(a.pages)) == len(a.pages) and len(set(b.pages)) == len(b.pages)
    assert set(a.pages) | set(b.pages) == set(baseline.pages)
    assert server.fetched() == collections.Counter(paths), "each page fetched exactly once by the pair"
    with BloomFilter.open(tmp_path / "shared.blm", readonly=True) as f:
        assert f.items_added == len(paths)


def test_interrupt_and_resume_with_jobdir(site: tuple[Any, set[str]], tmp_path: Path) -> None:
    server, paths = site
    jobdir = {"JOBDIR": tmp_path / "job"}
    server.fetched()
    first = crawl(server.url, tmp_path / "first.jsonl", settings={**jobdir, "CLOSESPIDER_PAGECOUNT": 40})
    assert first.returncode == 0, first.log
    assert first.stat("finish_reason") == "closespider_pagecount"
    fetched_first = server.fetched()
    assert 40 <= sum(fetched_first.values()) < len(paths) / 2
    assert (tmp_path / "job" / "requests.blm").is_file()
    assert not (tmp_path / "job" / "requests.seen").exists()  # the default filter's file is not used

    second = crawl(server.url, tmp_path / "second.jsonl", settings=jobdir)
    assert second.returncode == 0, second.log
    assert second.stat("finish_reason") == "finished"
    fetched_second = server.fetched()
    assert not set(fetched_first) & set(fetched_second), "a page fetched again after the resume"
    assert fetched_first + fetched_second == collections.Counter(paths)  # all of them, each once
    # The first run recorded every request it scheduled, fetched or still queued in JOBDIR.
    seen = re.search(r"(\d+) requests already seen", second.log)
    assert seen and int(seen.group(1)) > sum(fetched_first.values()), second.log


def test_another_shape_is_refused_at_spider_open(site: tuple[Any, set[str]], tmp_path: Path) -> None:
    server, paths = site
    path = tmp_path / "small.blm"
    BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)).close()
    before = path.read_bytes()
    server.fetched()
    refused = crawl(server.url, tmp_path / "refused.jsonl", settings={"MMAPBLOOM_DUPEFILTER_PATH": path})
    # (Scrapy 2.19 exits with status 1 here; 2.11 logs the error and exits with 0.)
    assert f"{ConfigMismatchError.__module__}.ConfigMismatchError: {path}: existing filter has num_bits" in refused.log
    assert "MMAPBLOOM_DUPEFILTER_REUSE=False" in refused.log  # the logged advice
    assert refused.pages == [] and not server.fetched(), "nothing may be crawled"
    assert path.read_bytes() == before

    # REUSE=False replaces it with an empty filter of the configured shape. (And
    # DUPEFILTER_DEBUG logs every filtered request with its referer, as for the default.)
    fresh = crawl(
        server.url,
        tmp_path / "fresh.jsonl",
        settings={
            "MMAPBLOOM_DUPEFILTER_PATH": path,
            "MMAPBLOOM_DUPEFILTER_REUSE": False,
            "MMAPBLOOM_DUPEFILTER_CAPACITY": 5000,
            "DUPEFILTER_DEBUG": True,
            "LOG_LEVEL": "DEBUG",
        },
    )
    assert fresh.returncode == 0, fresh.log
    assert sorted(fresh.pages) == sorted(paths)
    logged = re.findall(r"Filtered duplicate request: <GET \S+> \(referer: \S+\)", fresh.log)
    filtered = fresh.stat("dupefilter/filtered")
    assert isinstance(filtered, int) and len(logged) == filtered > 0
    with BloomFilter.open(path, readonly=True) as f:
        assert f.config == BloomConfig.for_items(5000, 1e-6, f.strategy) and f.items_added == len(paths)


def test_stdlib_directory_listing(tmp_path: Path) -> None:
    """http.server's own listing of a directory of the installed standard library: every
    file and subdirectory listing fetched, each once."""
    directory = Path(sysconfig.get_paths()["stdlib"]) / "email"
    server = Server(directory, tmp_path / "server.log")
    try:
        bloom = crawl(server.url, tmp_path / "bloom.jsonl")
        fetched = server.fetched()
    finally:
        server.close()
    assert bloom.returncode == 0, bloom.log
    expected = {"/"}  # every listing and file, except in the directories the spider skips
    for here, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = [d for d in dirs if d not in example.SKIP_DIRS]
        rel = Path(here).relative_to(directory).as_posix()
        prefix = "/" if rel == "." else f"/{rel}/"
        expected |= {urllib.parse.quote(f"{prefix}{d}/") for d in dirs}
        expected |= {urllib.parse.quote(f"{prefix}{f}") for f in files}
    assert len(expected) > 20
    assert sorted(bloom.pages) == sorted(expected)
    assert fetched == collections.Counter(expected)
