"""The crawler demo, end to end: a real pydoc server, real worker processes, one shared
filter file, run through the command line in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mmapbloom.demo import SKIP_MODULES, is_skipped_url, normalise_link

MAX_PAGES = 60


@pytest.fixture(scope="module")
def report() -> dict:
    # "--" gets the options past the ``mmapbloom`` parser to ``mmapbloom.demo.main``.
    cmd = [sys.executable, "-m", "mmapbloom", "demo", "--",
           "--max-pages", str(MAX_PAGES), "--workers", "3", "--time-limit", "45", "--json"]
    # About 5 s on an idle machine; the limits leave room for a loaded one.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout)


def test_crawl_fetches_the_budget_and_no_page_twice(report: dict) -> None:
    assert report["ok"] is True and report["problems"] == []
    assert report["stop_reason"] == "page limit reached"
    assert report["fetch_attempts"] == MAX_PAGES
    assert MAX_PAGES - 5 <= report["pages_fetched"] <= MAX_PAGES
    assert report["pages_fetched_twice"] == 0


def test_filter_numbers_agree_with_the_crawl(report: dict) -> None:
    f = report["filter"]
    assert f["items_added"] >= report["pages_fetched"]
    # Every add that returned True counts once: the root (added by the parent) and the
    # links the workers judged new.
    assert f["items_added"] == f["items_added_this_run"] == report["links_new"] + 1
    assert report["links_seen"] == report["links_new"] + report["duplicates_skipped"]
    assert report["duplicates_skipped"] > 0  # pydoc pages link to each other a lot
    assert report["distinct_links"] == report["links_new"] + 1 + report["false_positives"]
    assert 0 < f["fill_ratio"] < 0.5
    assert 0 <= f["expected_fp_rate"] < 0.01 and 0 <= f["observed_fp_rate"] < 0.01


def test_shutdown_was_clean(report: dict) -> None:
    assert report["server_stopped_cleanly"] is True
    assert report["workers_killed"] == 0
    assert 0 < report["crawl_time_s"] <= report["wall_time_s"]


def test_skip_list_and_link_normalisation() -> None:
    assert {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"} <= SKIP_MODULES
    origin = ("127.0.0.1", 8080)
    base = "http://127.0.0.1:8080/os.html"
    assert normalise_link(base, "posixpath.html#join", origin) == "http://127.0.0.1:8080/posixpath.html"
    assert normalise_link(base, "HTTP://127.0.0.1:8080/x.html", origin) == "http://127.0.0.1:8080/x.html"
    assert normalise_link(base, "http://localhost:8080/x.html", origin) is None
    assert normalise_link(base, "mailto:a@b.c", origin) is None
    for path in ("idlelib.html", "idlelib.pyshell.html", "turtledemo.__main__.html", "venv.__main__.html",
                 "this.html", "tkinter.ttk.html", "get?key=antigravity"):
        assert is_skipped_url("http://127.0.0.1:8080/" + path), path
    for path in ("", "index.html", "os.path.html", "topic?key=ASSERTION", "json.tool.html"):
        assert not is_skipped_url("http://127.0.0.1:8080/" + path), path
