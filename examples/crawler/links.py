"""Links of a pydoc site: extraction, normalisation, and the modules never requested.

Part of the crawler example (``examples/crawl.py``); standard library only.
"""

from __future__ import annotations

import sys
import urllib.parse
from html.parser import HTMLParser
from typing import Optional

__all__ = [
    "SKIP_COMPONENTS",
    "SKIP_MODULES",
    "SKIP_PAGES",
    "extract_links",
    "is_third_party",
    "is_skipped_module",
    "is_skipped_url",
    "normalise_link",
]

#: Modules whose pydoc page is never requested. The pydoc server *imports* (and, with
#: ``forceload``, re-imports) every module it documents, inside the server process, so a
#: page request runs the module's top-level code. A dotted name ``a.b.c`` is skipped when
#: its top-level name (``a``) or its full name is listed here.
SKIP_MODULES: frozenset[str] = frozenset(
    {
        "antigravity",  # opens a web browser (xkcd 353) at import
        "this",  # prints the Zen of Python at import
        "__hello__",  # frozen test module: prints "Hello world!" at import on 3.10
        "__phello__",  # frozen test package, same purpose as __hello__
        "idlelib",  # IDLE: some submodules open Tk windows or start the IDE
        "tkinter",  # Tk GUI toolkit (tkinter.__main__ opens a window)
        "turtle",  # Tk turtle graphics
        "turtledemo",  # opens the Tk turtle demo viewer
        "test",  # CPython's regression tests: test.autotest runs the whole suite
        # at import; most other test modules are slow to import
        "lib2to3",  # deprecated (warns at import); rebuilds and writes its grammar
        # pickle files at import when they are missing or stale
        "threading",  # re-imported in the server's request thread, it replaces that
        # thread's end-of-thread lock, so the server can never be stopped
        "site",  # re-import re-runs site.main(): re-executes every .pth file and
        # edits sys.path and builtins of the server
        "_distutils_hack",  # setuptools' import hook: re-import stacks more meta-path finders
        "setuptools",  # replaces distutils through that hook at import
        "pkg_resources",  # scans every installed distribution at import (slow, warnings)
        "distutils",  # deprecated; shadowed by setuptools' hook (see above)
        "pip",  # pip/__pip-runner__.py runs pip at import
    }
)

#: Dotted-name components that skip a module wherever they appear (``a.__main__``,
#: ``pkg.tests.x``): ``__main__`` modules run their program at import (``asyncio.__main__``
#: starts a REPL on the server's stdin, ``venv.__main__`` parses the server's argv and
#: exits), and test packages are slow or run tests at import.
SKIP_COMPONENTS: frozenset[str] = frozenset({"__main__", "test", "tests", "idle_test", "conftest"})

#: pydoc's own pages (not modules): never skipped as third-party modules.
PYDOC_PAGES: frozenset[str] = frozenset({"index", "topics", "keywords"})

#: The top-level modules of the standard library (``sys.stdlib_module_names``, 3.10+).
STDLIB: frozenset[str] = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names)


def is_third_party(name: str) -> bool:
    """True if ``name`` is a module (or object) outside the standard library. Its pydoc page
    is never requested: pydoc imports the module inside the server, and an installed
    extension module can crash or hang it (in the test virtualenv, pydoc stopped answering
    after documenting ``_polars_runtime_32._polars_runtime``, and a fifth of the fetches
    failed). The crawl documents the standard library only.

    >>> [is_third_party(n) for n in ("os.path", "json", "_abc", "numpy", "_polars_runtime_32.x")]
    [False, False, False, True, True]
    """
    return name.split(".", 1)[0] not in STDLIB


#: pydoc pages (first path segment) never followed: ``search?key=`` scans and imports
#: every module on ``sys.path``.
SKIP_PAGES: frozenset[str] = frozenset({"search"})


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
    ...  "get?key=this", "search?key=x", "topic?key=ASSERTION", "", "numpy.html", "get?key=polars")]
    [False, True, True, True, True, False, False, True, True]
    """
    page, name = _pydoc_target(url)
    if page in SKIP_PAGES:
        return True
    if name is None:
        return False
    module_page = page == "get" or (page.endswith(".html") and name not in PYDOC_PAGES)
    return is_skipped_module(name) or (module_page and is_third_party(name))
