"""The Scrapy filter with ``MMAPBLOOM_DUPEFILTER_WINDOW``: real crawls of a real HTTP
server, driven by an injected clock (``MMAPBLOOM_DUPEFILTER_CLOCK``, a file read by the
crawl process): a site crawled again within the window fetches nothing, and
after the window and one period the whole site again."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy", reason="scrapy is in the test extra (and the scrapy extra)")

from mmapbloom import ExpiringBloomFilter  # noqa: E402
from tests.conftest import ROOT  # noqa: E402
from tests.expiring_workers import FileClock  # noqa: E402
from tests.test_scrapy import crawl, make_site, Server  # noqa: E402

pytestmark = pytest.mark.slow


def test_requests_are_crawled_again_after_the_window(tmp_path: Path, monkeypatch: Any) -> None:
    paths = make_site(tmp_path / "site", pages=60)
    server = Server(tmp_path / "site", tmp_path / "server.log")
    clock = FileClock(str(tmp_path / "clock"))
    monkeypatch.setenv("MMAPBLOOM_TEST_CLOCK", clock.path)
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    directory = str(tmp_path / "seen")
    settings = {
        "MMAPBLOOM_DUPEFILTER_PATH": directory,
        "MMAPBLOOM_DUPEFILTER_WINDOW": "1d",
        "MMAPBLOOM_DUPEFILTER_PERIODS": 4,
        "MMAPBLOOM_DUPEFILTER_CAPACITY": 10_000,
        "MMAPBLOOM_DUPEFILTER_CLOCK": "tests.expiring_workers.env_clock",
    }
    try:
        day = 86400.0
        runs = []
        for i, t in enumerate([1000.0, 1000.0 + day * 0.9, 1000.0 + day * 1.3]):
            clock.set(t)
            server.fetched()
            result = crawl(server.url, tmp_path / f"run{i}.jsonl", settings=settings)
            assert result.returncode == 0, result.log
            runs.append(server.fetched())
        assert runs[0] == collections.Counter(paths)  # the whole site, each page once
        # within the window: nothing, not even the start page (the example's spider lets
        # its start request through the filter)
        assert runs[1] == collections.Counter()
        # past window + period: everything is crawled again, once
        assert runs[2] == collections.Counter(paths)
        with ExpiringBloomFilter.open(directory, readonly=True, clock=clock) as f:
            f.verify()
            assert f.window == 86400.0 and f.periods == 4
    finally:
        server.close()
