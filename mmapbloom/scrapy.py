"""A Scrapy duplicate-request filter kept in a shared, memory-mapped Bloom filter file.

Scrapy's default filter, :class:`scrapy.dupefilters.RFPDupeFilter`, holds every request
fingerprint in a Python ``set`` (about 90 bytes per request, so gigabytes at tens of
millions of requests) and, with ``JOBDIR``, appends each one to ``requests.seen``, which a
resumed crawl reads back in full. :class:`BloomDupeFilter` keeps the fingerprints in an
mmapbloom file instead: memory stays at the size of the file (34.3 MiB for the default 10
million requests at a false-positive rate of 1e-6) whatever the number of requests, a
resumed crawl opens the file in O(1), and several Scrapy processes on one machine can
share one file, so that no request is crawled by two of them.

Install with the ``scrapy`` extra, from the checkout or the wheel (``pip install -e '.[scrapy]'``;
mmapbloom is on no package index, so never by name); this module needs
Scrapy (2.11 or later) and imports it. Enable it in a project's ``settings.py``::

    DUPEFILTER_CLASS = "mmapbloom.scrapy.BloomDupeFilter"
    # optional, see BloomDupeFilter for the defaults:
    MMAPBLOOM_DUPEFILTER_PATH = "/var/tmp/mycrawl.blm"      # share it between processes
    MMAPBLOOM_DUPEFILTER_CAPACITY = 10_000_000
    MMAPBLOOM_DUPEFILTER_FP_RATE = 1e-6

Settings (read by :meth:`BloomDupeFilter.from_crawler`; docs/SCRAPY.md has the table):

``MMAPBLOOM_DUPEFILTER_PATH``
    The filter file. Default: ``JOBDIR/requests.blm`` when ``JOBDIR`` is set, else a new
    temporary file that is removed when the spider closes.
``MMAPBLOOM_DUPEFILTER_CAPACITY``
    Expected number of distinct requests, default ``10_000_000``.
``MMAPBLOOM_DUPEFILTER_FP_RATE``
    Target false-positive rate at that capacity, default ``1e-6``.
``MMAPBLOOM_DUPEFILTER_REUSE``
    Open an existing file and keep what it has seen (default ``True``); if ``False`` an
    existing file is atomically replaced by an empty one when the spider opens.
``MMAPBLOOM_DUPEFILTER_STRATEGY``
    Name of the hash strategy (see :func:`mmapbloom.get_strategy`), default the package's
    default strategy.
``MMAPBLOOM_DUPEFILTER_WINDOW``
    Seconds (a number, or a string such as ``"30d"``, ``"12h"``): use an
    :class:`~mmapbloom.ExpiringBloomFilter` directory instead of a file, so that a request
    is crawled again once the window has passed (a re-crawl policy: seen within the
    window means filtered). ``MMAPBLOOM_DUPEFILTER_CAPACITY`` is then the number of
    distinct requests per window. Default: none (requests are filtered forever). With
    ``JOBDIR`` the directory is ``JOBDIR/requests.expiring``.
``MMAPBLOOM_DUPEFILTER_PERIODS``
    Periods per window of an expiring filter (default 8): a request is forgotten at most
    window/periods after its window.
``MMAPBLOOM_DUPEFILTER_CLOCK``
    An expiring filter's clock: a zero-argument callable returning seconds, or its dotted
    import path (default ``time.time``; for tests).
``DUPEFILTER_DEBUG``
    As for Scrapy's default filter: log every filtered request, not only the first.

Retry recipe (cuckoo kind): forget a request whose download failed, in an errback, so
that this crawl (yield it again) or a later one schedules it again::

    def errback(self, failure):
        df = self.crawler.engine.slot.scheduler.df   # the BloomDupeFilter
        df.forget(failure.request)                     # True if it was remembered
        # yield failure.request.replace()  # to retry now: it is no longer a duplicate
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional

from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.job import job_dir
from scrapy.utils.misc import load_object
from scrapy.utils.request import RequestFingerprinter, RequestFingerprinterProtocol, referer_str

from .errors import ConfigError, ConfigMismatchError
from .expiring import DEFAULT_PERIODS, ExpiringBloomFilter
from .filter import BloomFilter
from .hashing import get_strategy
from .config import BloomConfig
from .units import parse_duration

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http.request import Request
    from scrapy.spiders import Spider
    from typing_extensions import Self

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_FP_RATE",
    "JOBDIR_EXPIRING_NAME",
    "JOBDIR_CUCKOO_FILE_NAME",
    "JOBDIR_FILE_NAME",
    "KINDS",
    "BloomDupeFilter",
]

#: Default ``MMAPBLOOM_DUPEFILTER_CAPACITY``: the number of distinct requests the filter is
#: sized for. Past it the false-positive rate grows (an ``OverCapacityWarning`` is logged).
DEFAULT_CAPACITY = 10_000_000

#: Default ``MMAPBLOOM_DUPEFILTER_FP_RATE``. A false positive makes Scrapy drop a request it
#: never made, so the rate is set low: the expected number of distinct requests wrongly
#: dropped over a whole crawl that fills the filter to capacity is
#: ``sum_{i < n} (1 - exp(-k i / m))**k`` (the false-positive rate after ``i`` insertions,
#: Bloom 1970; Broder and Mitzenmacher 2004), about 0.66 for 10 million requests at 1e-6
#: (and 7.7 at 1e-5, 96 at 1e-4), for a file of 34.3 MiB (m = 287,551,752 bits, k = 20).
DEFAULT_FP_RATE = 1e-6

#: File name of the filter inside ``JOBDIR`` (next to Scrapy's own ``requests.seen``,
#: which this filter does not write).
JOBDIR_FILE_NAME = "requests.blm"
#: Directory name of an expiring filter (``MMAPBLOOM_DUPEFILTER_WINDOW``) inside ``JOBDIR``.
JOBDIR_EXPIRING_NAME = "requests.expiring"
#: The same for ``MMAPBLOOM_DUPEFILTER_KIND = "cuckoo"``.
JOBDIR_CUCKOO_FILE_NAME = "requests.ckf"
#: The values of ``MMAPBLOOM_DUPEFILTER_KIND``.
KINDS = ("bloom", "cuckoo")

logger = logging.getLogger(__name__)


def _number(settings: Any, name: str, default: float) -> float:
    """Setting ``name`` as an int or float (strings from ``-s NAME=VALUE`` are parsed:
    ``"10000000"``, ``"1e7"``, ``"1e-6"``); :class:`BloomConfig` checks the range.

    Raises:
        ConfigError (a ``ValueError``): not a number; the message shows the value.
    """
    raw = settings.get(name, default)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        for convert in (int, float):
            try:
                return convert(raw.strip().replace("_", ""))
            except ValueError:
                pass
    raise ConfigError(f"{name} must be a number, got {raw!r}")


class BloomDupeFilter(BaseDupeFilter):
    """Scrapy duplicate filter (``DUPEFILTER_CLASS``) backed by an mmapbloom file.

    A drop-in for :class:`scrapy.dupefilters.RFPDupeFilter`: it uses the crawler's request
    fingerprinter (``crawler.request_fingerprinter``, the ``REQUEST_FINGERPRINTER_CLASS``
    setting), so it treats the same requests as duplicates; logs filtered requests the
    same way (the first one only, or all with ``DUPEFILTER_DEBUG``); and counts them in the
    ``dupefilter/filtered`` stat.

    Differences from the default filter:

    * Memory: the fingerprints live in a memory-mapped file of fixed size (see
      :data:`DEFAULT_FP_RATE`), not in a Python set.
    * False positives: a request never seen before is taken for a duplicate, and dropped,
      with probability at most about ``MMAPBLOOM_DUPEFILTER_FP_RATE`` while fewer than
      ``MMAPBLOOM_DUPEFILTER_CAPACITY`` distinct requests were seen. A request seen before
      is always filtered (no false negatives).
    * Sharing: :meth:`request_seen` is :meth:`mmapbloom.BloomFilter.add`, an atomic
      test-and-set across processes (``flock``), so any number of Scrapy processes on one
      machine given the same ``MMAPBLOOM_DUPEFILTER_PATH`` never both schedule the same
      request: exactly one of them gets ``False``. A request is claimed when it is
      scheduled: if the process that claimed it stops before fetching it (without a
      ``JOBDIR`` to resume its queue), no process fetches it. Not for network file
      systems whose ``flock`` is not coherent (NFS). ``reuse=False`` replaces the file, so
      processes that already had it open no longer share with the new one.
    * Resume: with ``JOBDIR``, the filter is ``JOBDIR/requests.blm``; a resumed crawl
      opens it in O(1) instead of reading every fingerprint back.

    The file is opened (or created) when the filter is built, which Scrapy does when the
    spider opens, so a file of another shape is refused before any request is made
    (:meth:`open` has nothing left to do, as for the default filter).

    One instance belongs to one crawler; its methods are called from Scrapy's reactor
    thread. The file may be shared by any number of processes and threads.

    >>> from scrapy import Request
    >>> df = BloomDupeFilter()  # a temporary file; Scrapy builds it with from_crawler
    >>> [df.request_seen(Request(u)) for u in ("https://a.example/?x=1&y=2", "https://a.example/?y=2&x=1#top")]
    [False, True]
    >>> df.close("finished")

    Args:
        path: the filter file, or ``None`` for a new temporary file removed by
            :meth:`close`.
        debug: log every filtered request (``DUPEFILTER_DEBUG``), not only the first.
        fingerprinter: object with ``fingerprint(request) -> bytes``; default Scrapy's
            :class:`~scrapy.utils.request.RequestFingerprinter`.
        capacity: expected number of distinct requests (a positive integer; an integral
            float such as ``1e7`` is accepted).
        fp_rate: false-positive rate at ``capacity``, strictly between 0 and 1.
        reuse: open an existing file at ``path`` (True) or replace it by an empty one.
        strategy: hash-strategy name, ``None`` for the package default.
        window: seconds, or None (default): with a window the filter is an
            :class:`~mmapbloom.ExpiringBloomFilter` directory at ``path`` and a request is
            filtered only if it was seen within the last ``window`` seconds (``capacity``
            is then per window); ``reuse=False`` removes an existing directory first.
        periods: periods per window of the expiring filter (default 8).
        clock: the expiring filter's clock (default ``time.time``).

    Raises:
        ConfigMismatchError (a ``ValueError``): ``reuse`` is True and the existing file has
            another num_bits, num_hashes or hash strategy than ``capacity``, ``fp_rate`` and
            ``strategy`` give. The error is also logged with the settings to change.
        ConfigError (a ``ValueError``): bad ``capacity`` or ``fp_rate``.
        FormatError (a ``ValueError``): the existing file is not a sound Bloom filter file.
        UnknownStrategyError (a ``FormatError``): unknown ``strategy`` name.
        OSError: the file cannot be created or opened (missing directory, permissions,
            full disk).
    """

    def __init__(
        self,
        path: Optional[str] = None,
        debug: bool = False,
        *,
        fingerprinter: Optional[RequestFingerprinterProtocol] = None,
        capacity: float = DEFAULT_CAPACITY,
        fp_rate: float = DEFAULT_FP_RATE,
        reuse: bool = True,
        strategy: Optional[str] = None,
        window: Optional[float] = None,
        periods: int = DEFAULT_PERIODS,
        clock: Optional[Callable[[], float]] = None,
        kind: str = "bloom",
    ) -> None:
        if kind not in KINDS:
            raise ConfigError(f"MMAPBLOOM_DUPEFILTER_KIND must be one of {KINDS}, got {kind!r}")
        if kind == "cuckoo" and strategy:
            raise ConfigError("MMAPBLOOM_DUPEFILTER_STRATEGY applies to the bloom kind only")
        if kind == "cuckoo" and window is not None:
            raise ConfigError(
                "MMAPBLOOM_DUPEFILTER_WINDOW and MMAPBLOOM_DUPEFILTER_KIND = 'cuckoo' cannot be combined "
                "(an expiring filter forgets by time, a cuckoo filter by forget(request))"
            )
        self.kind = kind
        self.fingerprinter: RequestFingerprinterProtocol = fingerprinter or RequestFingerprinter()
        self.debug = debug
        self.logdupes = True
        self.logger = logger
        try:
            # The error names the setting a user sets (not "<bytes>", the lookup's default).
            chosen = get_strategy(strategy, source="MMAPBLOOM_DUPEFILTER_STRATEGY") if strategy else None
            config = BloomConfig.for_items(capacity, fp_rate, chosen)
        except ConfigError as exc:
            raise ConfigError(
                f"MMAPBLOOM_DUPEFILTER_CAPACITY={capacity!r}, MMAPBLOOM_DUPEFILTER_FP_RATE={fp_rate!r}: {exc}"
            ) from exc
        self._tempdir: Optional[str] = None
        if path is None:
            self._tempdir = tempfile.mkdtemp(prefix="mmapbloom-scrapy-")
            # Removed by close(), or at garbage collection / interpreter exit if never closed.
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._tempdir, True)
            name = JOBDIR_CUCKOO_FILE_NAME if kind == "cuckoo" else JOBDIR_FILE_NAME
            path = os.path.join(self._tempdir, name if window is None else JOBDIR_EXPIRING_NAME)
        self.filter: Any
        try:
            if window is not None:
                if not reuse and os.path.isdir(path):
                    shutil.rmtree(path)
                self.filter = ExpiringBloomFilter.open_or_create(
                    path, window, config.capacity or 1, fp_rate, periods=periods, strategy=chosen, clock=clock
                )
            elif kind == "cuckoo":
                from .cuckoo import CuckooFilter

                if reuse:
                    self.filter = CuckooFilter.open_or_create(path, int(capacity), fp_rate)
                else:
                    self.filter = CuckooFilter.create(path, int(capacity), fp_rate, overwrite=True)
            elif reuse:
                self.filter = BloomFilter.open_or_create(path, config)
            else:
                self.filter = BloomFilter.create(path, config, overwrite=True)
        except ConfigMismatchError as exc:
            self.logger.error(
                "The existing duplicate filter file %(path)s has %(field)s %(actual)r, but the settings"
                " (MMAPBLOOM_DUPEFILTER_CAPACITY=%(capacity)r, MMAPBLOOM_DUPEFILTER_FP_RATE=%(fp_rate)r,"
                " MMAPBLOOM_DUPEFILTER_STRATEGY=%(strategy)r) give %(expected)r: set them as when the file"
                " was made, or set MMAPBLOOM_DUPEFILTER_REUSE=False to start from an empty filter, or"
                " use another MMAPBLOOM_DUPEFILTER_PATH",
                {
                    "path": exc.path,
                    "field": exc.field,
                    "actual": exc.actual,
                    "expected": exc.expected,
                    "capacity": capacity,
                    "fp_rate": fp_rate,
                    "strategy": strategy,
                },
            )
            self._remove_tempdir()
            raise
        except BaseException:
            self._remove_tempdir()
            raise
        self.path = path
        if kind == "cuckoo":
            self.logger.info(
                "Duplicate filter: %(path)s (cuckoo, %(mib).1f MiB, %(n)d buckets, %(f)d-bit fingerprints,"
                " %(items)d requests already seen)",
                {
                    "path": path,
                    "mib": self.filter.size_bytes / 2**20,
                    "n": self.filter.num_buckets,
                    "f": self.filter.fingerprint_bits,
                    "items": self.filter.items_added,
                },
            )
            return
        self.logger.info(
            "Duplicate filter: %(path)s (%(mib).1f MiB, %(m)d bits, %(k)d hashes, %(strategy)s,"
            " %(items)d requests already seen)",
            {
                "path": path,
                "mib": self.filter.size_bytes / 2**20,
                "m": self.filter.config.num_bits,
                "k": self.filter.config.num_hashes,
                "strategy": self.filter.strategy.name,
                "items": self.filter.items_added,
            },
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build the filter from the crawler's settings (module docstring) and fingerprinter.

        Raises:
            ConfigError (a ``ValueError``): a setting of the wrong type or out of range.
            And whatever the constructor raises.
        """
        settings = crawler.settings
        path = settings.get("MMAPBLOOM_DUPEFILTER_PATH") or None
        raw_window = settings.get("MMAPBLOOM_DUPEFILTER_WINDOW") or None
        window: Optional[float] = None
        if raw_window is not None:
            try:
                window = parse_duration(raw_window) if isinstance(raw_window, str) else float(raw_window)
            except (TypeError, ValueError):
                raise ConfigError(f"MMAPBLOOM_DUPEFILTER_WINDOW must be seconds, got {raw_window!r}") from None
        clock = settings.get("MMAPBLOOM_DUPEFILTER_CLOCK") or None
        if isinstance(clock, str):
            clock = load_object(clock)
        kind = settings.get("MMAPBLOOM_DUPEFILTER_KIND") or "bloom"
        if path is None:
            jobdir = job_dir(settings)
            if jobdir:
                name = JOBDIR_CUCKOO_FILE_NAME if kind == "cuckoo" else JOBDIR_FILE_NAME
                path = os.path.join(jobdir, name if window is None else JOBDIR_EXPIRING_NAME)
        return cls(
            os.fspath(path) if path is not None else None,
            settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            capacity=_number(settings, "MMAPBLOOM_DUPEFILTER_CAPACITY", DEFAULT_CAPACITY),
            fp_rate=_number(settings, "MMAPBLOOM_DUPEFILTER_FP_RATE", DEFAULT_FP_RATE),
            reuse=settings.getbool("MMAPBLOOM_DUPEFILTER_REUSE", True),
            strategy=settings.get("MMAPBLOOM_DUPEFILTER_STRATEGY") or None,
            window=window,
            periods=int(_number(settings, "MMAPBLOOM_DUPEFILTER_PERIODS", DEFAULT_PERIODS)),
            clock=clock,
            kind=kind,
        )

    def request_seen(self, request: Request) -> bool:
        """Return True if ``request``'s fingerprint was seen before (by this or any process
        sharing the file), else record it and return False; one atomic step.

        May return True for a request never seen, with the probability described in the
        class docstring; never returns False for one already seen.

        Raises:
            FilterClosedError: after :meth:`close`.
        """
        return not self.filter.add(self.fingerprinter.fingerprint(request))

    def forget(self, request: Request) -> bool:
        """Forget ``request`` (``MMAPBLOOM_DUPEFILTER_KIND = "cuckoo"`` only), so that it is
        scheduled again, by this or any process sharing the file: the retry recipe for a
        request whose download failed. Returns True if its fingerprint was removed, False if
        it was not remembered. Only forget requests this filter has seen: forgetting one
        never seen that is a false positive forgets another request.

        Raises:
            TypeError: the filter is a Bloom filter (it cannot remove anything).
            FilterClosedError: after :meth:`close`.
        """
        if self.kind != "cuckoo":
            raise TypeError('forget needs MMAPBLOOM_DUPEFILTER_KIND = "cuckoo" (a Bloom filter cannot remove)')
        return bool(self.filter.discard(self.fingerprinter.fingerprint(request)))

    def close(self, reason: str) -> None:
        """Close the file (flushing nothing: the mapping is shared, every add is already in
        the file), and remove it if it was the temporary default. Idempotent.

        Args:
            reason: why the spider closed (Scrapy's close reason); logged.
        """
        if not self.filter.closed:
            self.logger.info(
                "Duplicate filter closed (%(reason)s): %(path)s holds about %(items)d requests,"
                " expected false-positive rate now %(fp).3g",
                {
                    "reason": reason,
                    "path": self.path,
                    "items": self.filter.items_added,
                    "fp": self.filter.expected_fp_rate(),
                },
            )
            self.filter.close()
        self._remove_tempdir()

    def _remove_tempdir(self) -> None:
        if self._tempdir is not None:
            self._cleanup()  # shutil.rmtree(tempdir, ignore_errors=True), once
            self._tempdir = None

    def log(self, request: Request, spider: Spider) -> None:
        """Log a filtered request (all of them with ``DUPEFILTER_DEBUG``, else only the
        first) and increment the ``dupefilter/filtered`` stat, as Scrapy's default does."""
        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args: dict[str, Any] = {"request": request, "referer": referer_str(request)}
            self.logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request: %(request)s"
                " - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            self.logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        crawler = getattr(spider, "crawler", None)
        if crawler is not None and crawler.stats is not None:
            crawler.stats.inc_value("dupefilter/filtered")
