"""The crawl: worker processes that share one Bloom filter file, and the parent's loop.

Termination protocol: a shared counter ``pending`` holds the number of URLs that are
queued or being processed. A worker increments it *before* it puts a new URL on the
queue and decrements it only *after* it has finished a URL (children counted, result
sent). So ``pending == 0`` means the queue is empty and every worker is idle, and it can
never be 0 while some URL is still in flight. The parent waits for that, for the time
limit, or for a worker to die; it then sets a shared ``stop`` event, collects every
worker's final message and joins (or, after a grace period, terminates) the workers.
The page budget (``max_pages``) is a shared counter of fetches started: a worker
claims a slot before it fetches and drops the URL if none is left, so at most
``max_pages`` fetches are ever made.

Part of the crawler example (``examples/crawl.py``). The only mmapbloom calls are the
public ``BloomFilter`` API: ``add`` (True if the key was new), ``path``, ``readonly`` and
``close``; a file-backed filter pickles as its path, so each spawned worker opens the
same file.
"""

from __future__ import annotations

import collections
import http.client
import multiprocessing
import queue
import signal
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from mmapbloom import BloomFilter

from .links import extract_links, is_skipped_url, normalise_link

__all__ = [
    "DEFAULT_FETCH_TIMEOUT",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_TIME_LIMIT",
    "DEFAULT_WORKERS",
    "CrawlResult",
    "PageResult",
    "crawl",
]

DEFAULT_WORKERS = 4
DEFAULT_MAX_PAGES = 1000
DEFAULT_TIME_LIMIT = 120.0
DEFAULT_FETCH_TIMEOUT = 30.0
#: Bytes read from one response at most (numpy's module page alone is about 4 MB).
MAX_PAGE_BYTES = 32 << 20
#: Seconds a worker waits on an empty queue before it looks at the stop event again.
_POLL = 0.2

_USER_AGENT = "mmapbloom-crawl-example/0.1 (+https://pypi.org/project/mmapbloom/)"


@dataclass
class PageResult:
    """What a worker reports about one fetch.

    Attributes:
        url: the URL fetched.
        ok: True if a 2xx response was read; False for an HTTP error, timeout or
            connection failure (then ``error`` says which).
        error: the failure, or ``None``.
        status: the HTTP status, or ``None`` when no response arrived.
        size: bytes read.
        seconds: time spent fetching and parsing.
        links_found: ``href`` values on the page (raw, with repeats).
        links_ignored: distinct links dropped as off-site, not ``http`` or skip-listed.
        new_links: distinct same-site links for which ``filter.add`` returned True.
        dup_links: distinct same-site links for which it returned False (seen before).
        enqueued: how many of ``new_links`` were queued (not after the page budget ran
            out or the crawl was stopped).
    """

    url: str
    ok: bool
    error: Optional[str] = None
    status: Optional[int] = None
    size: int = 0
    seconds: float = 0.0
    links_found: int = 0
    links_ignored: int = 0
    new_links: list[str] = field(default_factory=list)
    dup_links: list[str] = field(default_factory=list)
    enqueued: int = 0


def _fetch(opener: urllib.request.OpenerDirector, url: str, timeout: float) -> tuple[Optional[str], PageResult]:
    """GET ``url``; return the decoded body (``None`` unless it is HTML) and a result."""
    result = PageResult(url=url, ok=False)
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        with opener.open(request, timeout=timeout) as response:
            result.status = response.status
            data = response.read(MAX_PAGE_BYTES)
            result.size = len(data)
            content_type = response.headers.get_content_type()
            charset = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        result.status = exc.code
        result.error = f"HTTP {exc.code} {exc.reason}"
        exc.close()
        return None, result
    except urllib.error.URLError as exc:
        result.error = f"{type(exc.reason).__name__}: {exc.reason}"
        return None, result
    except (OSError, http.client.HTTPException, ValueError) as exc:  # timeouts, resets, bad responses
        result.error = f"{type(exc).__name__}: {exc}"
        return None, result
    result.ok = True
    if content_type != "text/html":
        return None, result
    try:
        return data.decode(charset, errors="replace"), result
    except LookupError:  # unknown charset
        return data.decode("utf-8", errors="replace"), result


def _worker(
    worker_id: int,
    bloom: BloomFilter,
    tasks: Any,
    results: Any,
    pending: Any,
    claimed: Any,
    stop: Any,
    max_pages: int,
    fetch_timeout: float,
    origin: tuple[str, int],
) -> None:
    """Worker process body: see the module docstring for the protocol.

    Messages on ``results``: ``("page", id, PageResult)`` per fetch, ``("crash", id,
    traceback)`` if the worker fails, and always a last ``("done", id, None)``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    parent = multiprocessing.parent_process()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        while not stop.is_set():
            try:
                url = tasks.get(timeout=_POLL)
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    break
                continue
            try:
                with claimed.get_lock():
                    go = not stop.is_set() and claimed.value < max_pages
                    if go:
                        claimed.value += 1
                if not go:
                    continue  # budget spent or stopping: drop it (finally: pending -= 1)
                start = time.perf_counter()
                body, result = _fetch(opener, url, fetch_timeout)
                if body is not None:
                    hrefs = extract_links(body)
                    result.links_found = len(hrefs)
                    links: dict[str, None] = {}  # distinct, in page order
                    ignored: set[str] = set()
                    for href in hrefs:
                        link = normalise_link(url, href, origin)
                        if link is None or is_skipped_url(link):
                            ignored.add(href)
                        else:
                            links[link] = None
                    result.links_ignored = len(ignored)
                    for link in links:
                        if bloom.add(link):
                            result.new_links.append(link)
                            if not stop.is_set() and claimed.value < max_pages:
                                with pending.get_lock():
                                    pending.value += 1  # before the put: see the module docstring
                                tasks.put(link)
                                result.enqueued += 1
                        else:
                            result.dup_links.append(link)
                result.seconds = time.perf_counter() - start
                results.put(("page", worker_id, result))
            finally:
                with pending.get_lock():
                    pending.value -= 1
    except BaseException:
        results.put(("crash", worker_id, traceback.format_exc()))
        raise
    finally:
        results.put(("done", worker_id, None))
        bloom.close()


# -- the crawl ----------------------------------------------------------------------------
@dataclass
class CrawlResult:
    """Totals of a crawl (see :func:`crawl`).

    Attributes:
        stop_reason: why the crawl ended.
        pages_fetched: successful fetches.
        fetch_errors: fetches that failed (HTTP error, timeout, connection error).
        links_seen: distinct same-site links per page, summed over pages: the number of
            ``filter.add`` calls the workers made.
        duplicates_skipped: of those, how many ``add`` calls returned False.
        links_new: how many returned True.
        links_enqueued: new links put on the queue.
        links_ignored: distinct off-site, non-http or skip-listed links, summed over pages.
        pages_fetched_twice: URLs fetched more than once, from an exact record (must be 0).
        distinct_links: distinct same-site links seen, from an exact record.
        false_positives: distinct links for which every ``add`` returned False although
            no one had added them: the filter's false positives (pages missed).
        crawl_seconds: time from starting the workers to the last one joined.
        workers_crashed: tracebacks of workers that failed.
        workers_killed: workers that had to be terminated.
        error_samples: up to five ``(url, error)`` pairs.
        site_lost: why the site went away during the crawl (the server exited), or ``""``.
    """

    stop_reason: str = ""
    pages_fetched: int = 0
    fetch_errors: int = 0
    links_seen: int = 0
    duplicates_skipped: int = 0
    links_new: int = 0
    links_enqueued: int = 0
    links_ignored: int = 0
    pages_fetched_twice: int = 0
    distinct_links: int = 0
    false_positives: int = 0
    crawl_seconds: float = 0.0
    workers_crashed: list[str] = field(default_factory=list)
    workers_killed: int = 0
    error_samples: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False
    site_lost: str = ""


class _Tally:
    """The parent's bookkeeping of worker messages."""

    def __init__(self, root: str, root_was_new: bool) -> None:
        self.result = CrawlResult()
        # Exact records, kept only to check the filter: every URL fetched (with counts),
        # every link seen, and every link some add() judged new.
        self.fetched: collections.Counter[str] = collections.Counter()
        self.seen: set[str] = {root}
        self.judged_new: set[str] = {root} if root_was_new else set()
        self.done: set[int] = set()

    def handle(self, message: tuple[str, int, Any]) -> bool:
        """Record one message; return True if it was a page."""
        kind, worker_id, payload = message
        r = self.result
        if kind == "done":
            self.done.add(worker_id)
            return False
        if kind == "crash":
            r.workers_crashed.append(f"worker {worker_id}:\n{payload}")
            return False
        page: PageResult = payload
        self.fetched[page.url] += 1
        if page.ok:
            r.pages_fetched += 1
        else:
            r.fetch_errors += 1
            if len(r.error_samples) < 5:
                r.error_samples.append((page.url, page.error or "?"))
        r.links_seen += len(page.new_links) + len(page.dup_links)
        r.duplicates_skipped += len(page.dup_links)
        r.links_new += len(page.new_links)
        r.links_enqueued += page.enqueued
        r.links_ignored += page.links_ignored
        self.seen.update(page.new_links)
        self.seen.update(page.dup_links)
        self.judged_new.update(page.new_links)
        return True

    def finish(self) -> CrawlResult:
        r = self.result
        r.pages_fetched_twice = sum(1 for n in self.fetched.values() if n > 1)
        r.distinct_links = len(self.seen)
        r.false_positives = len(self.seen - self.judged_new)
        return r


def crawl(
    root: str,
    bloom: BloomFilter,
    *,
    workers: int = DEFAULT_WORKERS,
    max_pages: int = DEFAULT_MAX_PAGES,
    time_limit: float = DEFAULT_TIME_LIMIT,
    fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
    start_method: Optional[str] = None,
    progress: Optional[bool] = None,
    site_alive: Optional[Callable[[], Optional[str]]] = None,
) -> CrawlResult:
    """Crawl the site at ``root`` with ``workers`` processes sharing the file-backed ``bloom``.

    The parent adds ``root`` to the filter and queues it; the workers do the rest (see the
    module docstring for the termination protocol). Returns when the frontier is empty and
    every worker is idle, the page budget is spent, ``time_limit`` has passed, a worker
    died, or on Ctrl-C; every worker is joined or terminated before it returns.

    Args:
        root: the start URL (``http`` only); only links to its host and port are followed.
        bloom: a read-write, file-backed filter (each worker opens the same file).
        workers: number of worker processes, at least 1.
        max_pages: at most this many fetches are made.
        time_limit: seconds after which no new fetch starts; fetches in progress finish
            (each is bounded by ``fetch_timeout``).
        fetch_timeout: ``urllib`` timeout per fetch, in seconds.
        start_method: ``multiprocessing`` start method; default ``"spawn"`` (workers then
            receive the filter pickled as its path and open it themselves).
        progress: show a tqdm progress bar on stderr; default: if stderr is a terminal.
        site_alive: called about every 0.1 s; a string (why the site went away, such as
            "the pydoc server exited with status -11") stops the crawl, recorded as
            ``site_lost``.

    Returns:
        The totals, with the exact cross-checks filled in.

    Raises:
        ValueError: ``bloom`` is in memory or read-only, or ``root`` is not ``http``.
    """
    from tqdm import tqdm  # type: ignore[import-untyped]

    if bloom.path is None or bloom.readonly:
        raise ValueError("crawl needs a read-write, file-backed filter")
    parts = urllib.parse.urlsplit(root)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"root must be an http URL, got {root!r}")
    origin = ((parts.hostname or "").lower(), parts.port if parts.port is not None else 80)
    root = normalise_link(root, root, origin) or root
    if progress is None:
        progress = sys.stderr.isatty()

    ctx: Any = multiprocessing.get_context(start_method or "spawn")
    tasks = ctx.Queue()
    results = ctx.Queue()
    pending = ctx.Value("q", 0)
    claimed = ctx.Value("q", 0)
    stop = ctx.Event()

    tally = _Tally(root, bloom.add(root))
    pending.value = 1
    tasks.put(root)

    t0 = time.monotonic()
    deadline = t0 + time_limit
    procs = [
        ctx.Process(
            target=_worker,
            name=f"crawl-worker-{i}",
            daemon=True,
            args=(i, bloom, tasks, results, pending, claimed, stop, max_pages, fetch_timeout, origin),
        )
        for i in range(workers)
    ]
    bar = tqdm(
        total=max_pages,
        unit="page",
        desc="crawling",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
        leave=True,
    )
    r = tally.result
    try:
        for p in procs:
            p.start()
        try:
            while True:
                try:
                    message = results.get(timeout=0.1)
                except queue.Empty:
                    message = None
                if message is not None and tally.handle(message):
                    bar.update(1)
                    bar.set_postfix(errors=r.fetch_errors, frontier=max(pending.value, 0), refresh=False)
                if r.workers_crashed:
                    r.stop_reason = "a worker crashed"
                    break
                lost = site_alive() if site_alive is not None else None
                if lost:
                    r.site_lost = lost
                    r.stop_reason = f"the site went away: {lost}"
                    break
                if pending.value == 0:
                    r.stop_reason = (
                        "page limit reached"
                        if claimed.value >= max_pages
                        else "frontier exhausted: every reachable page was fetched"
                    )
                    break
                if time.monotonic() >= deadline:
                    r.stop_reason = f"time limit ({time_limit:g} s) reached"
                    break
                dead = [p for p in procs if p.exitcode is not None]
                if dead:
                    r.stop_reason = f"worker {dead[0].name} exited unexpectedly (exit code {dead[0].exitcode})"
                    r.workers_crashed.append(r.stop_reason)
                    break
        except KeyboardInterrupt:
            r.stop_reason = "interrupted"
            r.interrupted = True
    finally:
        stop.set()
        _shut_down(procs, tasks, results, tally, bar, grace=fetch_timeout + 5.0)
        bar.close()
        r.crawl_seconds = time.monotonic() - t0
    return tally.finish()


def _shut_down(procs: list[Any], tasks: Any, results: Any, tally: _Tally, bar: Any, grace: float) -> None:
    """After ``stop`` is set: collect the workers' last messages, join them, terminate
    those that do not finish within ``grace`` seconds."""
    deadline = time.monotonic() + grace
    started = [p for p in procs if p.pid is not None]
    ids = {i for i, p in enumerate(procs) if p.pid is not None}
    try:
        while not ids <= tally.done and time.monotonic() < deadline:
            # Empty the task queue too: a worker exits only once its queue feeder thread
            # has written everything it put, which needs room in the pipe.
            try:
                while True:
                    tasks.get_nowait()
            except queue.Empty:
                pass
            try:
                message = results.get(timeout=0.1)
            except queue.Empty:
                if all(p.exitcode is not None for p in started):
                    break  # all gone, some without a "done" (killed from outside)
                continue
            if tally.handle(message):
                bar.update(1)
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: stop waiting, terminate below
    for p in started:
        p.join(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        if p.is_alive():
            tally.result.workers_killed += 1
            p.terminate()
            p.join(timeout=2.0)
            if p.is_alive():  # pragma: no cover
                p.kill()
                p.join(timeout=2.0)
    # Our own puts (the root) are long flushed; do not wait for the rest of the queue.
    tasks.cancel_join_thread()
    tasks.close()
    results.close()
