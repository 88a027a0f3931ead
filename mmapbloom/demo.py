"""Crawler demo: several processes crawl a real web site and share one Bloom filter file.

The site is the documentation of the running Python, served by its own ``pydoc`` HTTP
server (``python -m pydoc -n 127.0.0.1 -p 0``) in a child process. W worker processes
take URLs from a shared queue, fetch them with ``urllib``, extract links with
``html.parser`` and enqueue a link only if ``filter.add(link)`` returned True, i.e. only
the first process (of all of them) to see a URL gets to enqueue it. The filter is one
memory-mapped file that every worker opens (a file-backed :class:`BloomFilter` pickles as
its path).

Termination protocol: a shared counter ``pending`` holds the number of URLs that are
queued or being processed. A worker increments it *before* it puts a new URL on the
queue and decrements it only *after* it has finished a URL (children counted, result
sent). So ``pending == 0`` means the queue is empty and every worker is idle, and it can
never be 0 while some URL is still in flight. The parent waits for that, for the time
limit, or for a worker to die; it then sets a shared ``stop`` event, collects every
worker's final message and joins (or, after a grace period, terminates) the workers.
The page budget (``--max-pages``) is a shared counter of fetches started: a worker
claims a slot before it fetches and drops the URL if none is left, so at most
``max_pages`` fetches are ever made.

Run ``python examples/crawl.py --help`` or ``mmapbloom demo --help``.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import multiprocessing
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Optional, Sequence

from .filter import BloomFilter
from .sizing import BloomConfig

__all__ = [
    "SKIP_MODULES",
    "SKIP_COMPONENTS",
    "CrawlResult",
    "PageResult",
    "PydocServer",
    "ServerError",
    "crawl",
    "extract_links",
    "is_skipped_module",
    "is_skipped_url",
    "main",
    "normalise_link",
]

#: Modules whose pydoc page is never requested. The pydoc server *imports* (and, with
#: ``forceload``, re-imports) every module it documents, inside the server process, so a
#: page request runs the module's top-level code. A dotted name ``a.b.c`` is skipped when
#: its top-level name (``a``) or its full name is listed here.
SKIP_MODULES: frozenset[str] = frozenset({
    "antigravity",      # opens a web browser (xkcd 353) at import
    "this",             # prints the Zen of Python at import
    "__hello__",        # frozen test module: prints "Hello world!" at import on 3.10
    "__phello__",       # frozen test package, same purpose as __hello__
    "idlelib",          # IDLE: some submodules open Tk windows or start the IDE
    "tkinter",          # Tk GUI toolkit (tkinter.__main__ opens a window)
    "turtle",           # Tk turtle graphics
    "turtledemo",       # opens the Tk turtle demo viewer
    "test",             # CPython's regression tests: test.autotest runs the whole suite
                        # at import; most other test modules are slow to import
    "lib2to3",          # deprecated (warns at import); rebuilds and writes its grammar
                        # pickle files at import when they are missing or stale
    "threading",        # re-imported in the server's request thread, it replaces that
                        # thread's end-of-thread lock, so the server can never be stopped
    "site",             # re-import re-runs site.main(): re-executes every .pth file and
                        # edits sys.path and builtins of the server
    "_distutils_hack",  # setuptools' import hook: re-import stacks more meta-path finders
    "setuptools",       # replaces distutils through that hook at import
    "pkg_resources",    # scans every installed distribution at import (slow, warnings)
    "distutils",        # deprecated; shadowed by setuptools' hook (see above)
    "pip",              # pip/__pip-runner__.py runs pip at import
})

#: Dotted-name components that skip a module wherever they appear (``a.__main__``,
#: ``pkg.tests.x``): ``__main__`` modules run their program at import (``asyncio.__main__``
#: starts a REPL on the server's stdin, ``venv.__main__`` parses the server's argv and
#: exits), and test packages are slow or run tests at import.
SKIP_COMPONENTS: frozenset[str] = frozenset({"__main__", "test", "tests", "idle_test", "conftest"})

#: pydoc pages (first path segment) never followed: ``search?key=`` scans and imports
#: every module on ``sys.path``.
SKIP_PAGES: frozenset[str] = frozenset({"search"})

DEFAULT_WORKERS = 4
DEFAULT_MAX_PAGES = 1000
DEFAULT_TIME_LIMIT = 120.0
DEFAULT_CAPACITY = 20_000
DEFAULT_FP_RATE = 0.01
DEFAULT_FETCH_TIMEOUT = 30.0
#: Bytes read from one response at most (numpy's module page alone is about 4 MB).
MAX_PAGE_BYTES = 32 << 20
#: Seconds to wait for the pydoc server to print its URL.
SERVER_START_TIMEOUT = 30.0
#: Seconds to wait for the pydoc server to exit after "q" before killing it.
SERVER_STOP_TIMEOUT = 10.0
#: Seconds a worker waits on an empty queue before it looks at the stop event again.
_POLL = 0.2

_READY_RE = re.compile(r"Server ready at (http://\S+)")
_USER_AGENT = "mmapbloom-demo/0.1 (+https://pypi.org/project/mmapbloom/)"


# -- links --------------------------------------------------------------------------------
class _LinkParser(HTMLParser):
    """Collects the ``href`` of every ``<a>`` and ``<area>`` element, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        if tag in ("a", "area"):
            for name, value in attrs:
                if name == "href" and value:
                    self.hrefs.append(value)


def extract_links(html_text: str) -> list[str]:
    """Extract the raw ``href`` values of the links of an HTML document.

    Args:
        html_text: the document; malformed HTML is tolerated (``html.parser`` is lenient).

    Returns:
        The ``href`` attribute of every ``<a>`` and ``<area>`` element, in document order,
        unresolved and with duplicates.

    >>> extract_links('<p><a href="os.html#x">os</a> <A HREF=sys.html>sys</A><a name=top>')
    ['os.html#x', 'sys.html']
    """
    parser = _LinkParser()
    parser.feed(html_text)
    parser.close()
    return parser.hrefs


def _format_netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def normalise_link(base: str, href: str, origin: tuple[str, int]) -> Optional[str]:
    """Resolve ``href`` against ``base`` and keep it only if it is on the same site.

    The result is ``http://HOST:PORT/PATH[?QUERY]``: resolved with ``urljoin``, without
    fragment, with a lower-case host, an explicit port and a non-empty path.

    Args:
        base: URL of the page the link is on.
        href: the raw attribute value.
        origin: ``(host, port)`` of the site, host in lower case.

    Returns:
        The normalised URL, or ``None`` for an empty, malformed, non-``http`` or
        off-site link (another host or port).

    >>> o = ("127.0.0.1", 8000)
    >>> normalise_link("http://127.0.0.1:8000/os.html", "sys.html#path", o)
    'http://127.0.0.1:8000/sys.html'
    >>> normalise_link("http://127.0.0.1:8000/os.html", ".", o)
    'http://127.0.0.1:8000/'
    >>> [normalise_link("http://127.0.0.1:8000/", h, o) for h in
    ...  ("https://docs.python.org/", "file:/usr/lib/os.py", "http://127.0.0.1:8001/", "#top")]
    [None, None, None, 'http://127.0.0.1:8000/']
    """
    href = href.strip()
    if not href:
        return None
    try:
        url, _fragment = urllib.parse.urldefrag(urllib.parse.urljoin(base, href))
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() != "http":
            return None
        host = (parts.hostname or "").lower()
        port = parts.port if parts.port is not None else 80
    except ValueError:  # bad port, bad IPv6 literal
        return None
    if (host, port) != origin:
        return None
    return urllib.parse.urlunsplit(("http", _format_netloc(host, port), parts.path or "/", parts.query, ""))


def is_skipped_module(name: str) -> bool:
    """True if the pydoc page of module (or object) ``name`` must not be requested.

    Skipped when the top-level name or the full dotted name is in :data:`SKIP_MODULES`,
    or when any component is in :data:`SKIP_COMPONENTS`.

    >>> [is_skipped_module(n) for n in ("os.path", "idlelib.pyshell", "this", "venv.__main__", "json")]
    [False, True, True, True, False]
    """
    parts = name.split(".")
    return parts[0] in SKIP_MODULES or name in SKIP_MODULES or any(p in SKIP_COMPONENTS for p in parts)


def _pydoc_target(url: str) -> tuple[str, Optional[str]]:
    """``(page, name)`` of a pydoc URL: the first path segment and the module or object
    the page imports (``/a.b.html`` and ``/get?key=a.b`` name ``a.b``), if any."""
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.unquote(parts.path).lstrip("/")
    page = path.split("/", 1)[0]
    if parts.query:
        # pydoc splits "get?key=NAME" at the first "=" itself; do the same.
        _, _, key = urllib.parse.unquote(parts.query).partition("=")
        return page, key or None
    if path.endswith(".html"):
        return page, path[:-5] or None
    return page, None


def is_skipped_url(url: str) -> bool:
    """True if a normalised same-site URL must not be crawled (see :data:`SKIP_MODULES`,
    :data:`SKIP_COMPONENTS` and :data:`SKIP_PAGES`).

    >>> [is_skipped_url("http://h:1/" + p) for p in ("os.html", "antigravity.html", "tkinter.ttk.html",
    ...  "get?key=this", "search?key=x", "topic?key=ASSERTION", "")]
    [False, True, True, True, True, False, False]
    """
    page, name = _pydoc_target(url)
    if page in SKIP_PAGES:
        return True
    return name is not None and is_skipped_module(name)


# -- the server ---------------------------------------------------------------------------
class ServerError(RuntimeError):
    """The pydoc server could not be started."""


class PydocServer:
    """The pydoc HTTP server of the running interpreter (``sys.executable``), in a child
    process. Use as a context manager, or call :meth:`start` and (always) :meth:`stop`.

    The server runs in an empty temporary working directory (pydoc documents the modules
    of its current directory too), in its own session (so Ctrl-C reaches only us, and we
    stop it), with its stdout and stderr drained by threads into short logs.

    Args:
        host: address to bind.
        start_timeout: seconds to wait for "Server ready at URL".
        stop_timeout: seconds to wait for it to exit after "q" before killing it.
    """

    def __init__(self, host: str = "127.0.0.1", start_timeout: float = SERVER_START_TIMEOUT,
                 stop_timeout: float = SERVER_STOP_TIMEOUT) -> None:
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.url: Optional[str] = None
        self.proc: Optional[subprocess.Popen[str]] = None
        #: None while running or never started; True if it exited by itself after "q";
        #: False if it had to be killed.
        self.stopped_cleanly: Optional[bool] = None
        self.returncode: Optional[int] = None
        self._ready = threading.Event()
        self._stdout: collections.deque[str] = collections.deque(maxlen=50)
        self._stderr: collections.deque[str] = collections.deque(maxlen=50)
        self._threads: list[threading.Thread] = []
        self._workdir: Optional[str] = None

    def _drain(self, stream: Any, log: "collections.deque[str]", look_for_url: bool) -> None:
        try:
            for line in stream:
                log.append(line.rstrip("\n"))
                if look_for_url and not self._ready.is_set():
                    match = _READY_RE.search(line)
                    if match:
                        self.url = match.group(1)
                        self._ready.set()
        except (OSError, ValueError):  # pragma: no cover - stream closed under us
            pass

    def start(self) -> str:
        """Start the server and wait until it serves.

        Returns:
            The root URL, such as ``http://127.0.0.1:40767/``.

        Raises:
            ServerError: it exited, or printed no URL within ``start_timeout`` seconds
                (it is stopped, and the message shows its last output).
            OSError: the interpreter could not be run.
        """
        if self.proc is not None:
            raise RuntimeError("server already started")
        self._workdir = tempfile.mkdtemp(prefix="mmapbloom-pydoc-")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pydoc", "-n", self.host, "-p", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", errors="replace",
            cwd=self._workdir, env=env, start_new_session=True,
        )
        for stream, log, look in ((self.proc.stdout, self._stdout, True), (self.proc.stderr, self._stderr, False)):
            t = threading.Thread(target=self._drain, args=(stream, log, look), daemon=True,
                                 name="pydoc-server-drain")
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                why = (f"exited with status {self.proc.returncode}" if self.proc.returncode is not None
                       else f"printed no URL within {self.start_timeout:g} s")
                self.stop()
                tail = "\n".join(list(self._stdout)[-5:] + list(self._stderr)[-10:])
                raise ServerError(f"pydoc server {why}" + (f":\n{tail}" if tail else ""))
        assert self.url is not None
        return self.url

    def stop(self) -> None:
        """Ask the server to quit ("q" on its stdin, then EOF), wait up to ``stop_timeout``
        seconds, kill it if it is still running, and remove its working directory.
        Idempotent; never raises for a server that already died."""
        proc = self.proc
        if proc is not None and self.returncode is None:
            if proc.stdin is not None:
                try:
                    proc.stdin.write("q\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    pass
                try:
                    proc.stdin.close()
                except (OSError, ValueError):
                    pass
            try:
                proc.wait(timeout=self.stop_timeout)
                self.stopped_cleanly = True
            except subprocess.TimeoutExpired:
                self.stopped_cleanly = False
                proc.kill()
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
                    pass
            self.returncode = proc.returncode
            for t in self._threads:
                t.join(timeout=2.0)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except (OSError, ValueError):  # pragma: no cover
                        pass
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "PydocServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- workers ------------------------------------------------------------------------------
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


def _worker(worker_id: int, bloom: BloomFilter, tasks: Any, results: Any, pending: Any, claimed: Any,
            stop: Any, max_pages: int, fetch_timeout: float, origin: tuple[str, int]) -> None:
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


def crawl(root: str, bloom: BloomFilter, *, workers: int = DEFAULT_WORKERS, max_pages: int = DEFAULT_MAX_PAGES,
          time_limit: float = DEFAULT_TIME_LIMIT, fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
          start_method: Optional[str] = None, progress: Optional[bool] = None) -> CrawlResult:
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
        ctx.Process(target=_worker, name=f"crawl-worker-{i}", daemon=True,
                    args=(i, bloom, tasks, results, pending, claimed, stop, max_pages, fetch_timeout, origin))
        for i in range(workers)
    ]
    bar = tqdm(total=max_pages, unit="page", desc="crawling", file=sys.stderr, disable=not progress,
               dynamic_ncols=True, leave=True)
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
                if pending.value == 0:
                    r.stop_reason = ("page limit reached" if claimed.value >= max_pages
                                     else "frontier exhausted: every reachable page was fetched")
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
        f"pages fetched twice  {report['pages_fetched_twice']}  (exact check over "
        f"{report['fetch_attempts']} fetches)",
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
        f"server stopped       {'cleanly' if report['server_stopped_cleanly'] else 'by kill'}",
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
    """The argument parser of the demo.

    Returns:
        A parser for ``mmapbloom demo`` / ``examples/crawl.py``.
    """
    parser = argparse.ArgumentParser(
        prog="mmapbloom demo",
        description="Crawl the pydoc documentation site of this Python with several processes "
                    "that share one Bloom filter file to avoid fetching a page twice.",
    )
    parser.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS,
                        help=f"worker processes (default {DEFAULT_WORKERS})")
    parser.add_argument("--max-pages", type=_positive_int, default=DEFAULT_MAX_PAGES,
                        help=f"fetch at most this many pages (default {DEFAULT_MAX_PAGES})")
    parser.add_argument("--time-limit", type=_positive_float, default=DEFAULT_TIME_LIMIT, metavar="SECONDS",
                        help=f"start no fetch after this many seconds (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--timeout", type=_positive_float, default=DEFAULT_FETCH_TIMEOUT, metavar="SECONDS",
                        help=f"timeout of one fetch (default {DEFAULT_FETCH_TIMEOUT:g})")
    parser.add_argument("--filter", metavar="PATH",
                        help="filter file to use (opened, or created if missing); default: a new "
                             "file in a temporary directory, removed at the end")
    parser.add_argument("--capacity", type=_positive_int, default=DEFAULT_CAPACITY,
                        help=f"items the filter is sized for (default {DEFAULT_CAPACITY})")
    parser.add_argument("--fp-rate", type=_probability, default=DEFAULT_FP_RATE,
                        help=f"target false-positive rate at capacity (default {DEFAULT_FP_RATE})")
    parser.add_argument("--start-method", choices=multiprocessing.get_all_start_methods(), default="spawn",
                        help="multiprocessing start method (default spawn)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (it is off anyway "
                        "when stderr is not a terminal)")
    parser.add_argument("--json", action="store_true", help="print the final numbers as JSON")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the crawler demo.

    Starts the pydoc server, crawls it (see :func:`crawl`), stops the server, prints the
    totals (text, or JSON with ``--json``).

    Args:
        argv: the arguments, without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 if the crawl fetched pages and none twice; 1 if a check failed
        (a page fetched twice, no page fetched, a worker crashed), the server did not
        start or the filter could not be opened; 130 on Ctrl-C; 2 for bad arguments
        (argparse exits).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        # ``mmapbloom demo -- --json``: the "--" that gets options past the ``mmapbloom``
        # parser arrives here; it is not ours.
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    server = PydocServer()
    try:
        return _run(args, server)
    except KeyboardInterrupt:  # before or after the crawl (crawl() handles it during)
        print("mmapbloom demo: interrupted", file=sys.stderr)
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
            print(f"mmapbloom demo: error: cannot start the pydoc server: {exc}", file=sys.stderr)
            return 1
        config = BloomConfig.for_items(args.capacity, args.fp_rate)
        if args.filter:
            path = args.filter
        else:
            tmpdir = tempfile.mkdtemp(prefix="mmapbloom-demo-")
            path = os.path.join(tmpdir, "urls.blm")
        try:
            bloom = BloomFilter.open_or_create(path, config)
        except (OSError, ValueError) as exc:
            print(f"mmapbloom demo: error: cannot open the filter: {exc}", file=sys.stderr)
            return 1
        items_before = bloom.items_added
        if items_before and not args.json:
            print(f"note: {path} already holds {items_before} items", file=sys.stderr)
        result = crawl(root, bloom, workers=args.workers, max_pages=args.max_pages,
                       time_limit=args.time_limit, fetch_timeout=args.timeout,
                       start_method=args.start_method, progress=False if args.no_progress else None)
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
        "workers_killed": result.workers_killed,
        "error_samples": [list(e) for e in result.error_samples],
        "ok": not problems,
        "problems": problems,
    }
    for crash in result.workers_crashed:
        print(f"mmapbloom demo: {crash}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_text(report)
    if result.interrupted:
        return 130
    return 0 if not problems else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
