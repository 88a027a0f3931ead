"""The parts of the crawler example (``examples/crawl.py``, the entry point).

* :mod:`crawler.links`: link extraction and normalisation, and the skip list of modules
  whose pydoc page is never requested (:data:`~crawler.links.SKIP_MODULES`);
* :mod:`crawler.server`: the pydoc HTTP server of the running Python in a child process;
* :mod:`crawler.workers`: the worker processes that share one Bloom filter file, and the
  parent's loop with its termination protocol (:func:`~crawler.workers.crawl`).

Only the public API of mmapbloom is used (``from mmapbloom import BloomConfig, BloomFilter``).
"""

from .links import (
    SKIP_COMPONENTS,
    SKIP_MODULES,
    SKIP_PAGES,
    extract_links,
    is_skipped_module,
    is_third_party,
    is_skipped_url,
    normalise_link,
)
from .server import PydocServer, ServerError
from .workers import (
    DEFAULT_FETCH_TIMEOUT,
    DEFAULT_MAX_PAGES,
    DEFAULT_TIME_LIMIT,
    DEFAULT_WORKERS,
    CrawlResult,
    PageResult,
    crawl,
)

__all__ = [
    "DEFAULT_FETCH_TIMEOUT",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_TIME_LIMIT",
    "DEFAULT_WORKERS",
    "SKIP_COMPONENTS",
    "SKIP_MODULES",
    "SKIP_PAGES",
    "CrawlResult",
    "PageResult",
    "PydocServer",
    "ServerError",
    "crawl",
    "extract_links",
    "is_skipped_module",
    "is_third_party",
    "is_skipped_url",
    "normalise_link",
]
