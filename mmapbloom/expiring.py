"""Expiring Bloom filters: "was this key added within the last ``window`` seconds?" in
constant space, in a directory of BLM1 period files shared by threads and processes.

The window is approximated by time partitions, the idea of the classic sliding-window and
time-decaying Bloom filters (a ring of sub-filters, each covering a slice of time, the
oldest dropped as time passes: e.g. Yoon, "Aging Bloom Filter with Two Active Buffers for
Dynamic Sets", IEEE TKDE 2010; Shtul, Baquero and Almeida, "Age-Partitioned Bloom
Filters", 2020, which partitions the *hash functions* of one filter by age instead).
Here each partition is a whole BLM1 file:

* time is cut into periods of ``P = window / periods`` seconds, numbered
  ``c = floor(clock() / P)``; period ``n`` starts at ``n * P``;
* a key is added to the current period's file; a query asks every period numbered
  ``>= c - periods`` (the *live* periods, at most ``periods + 1``): a key added at time
  ``t`` lies in period ``floor(t / P)``, which stays live while
  ``floor(now / P) - periods <= floor(t / P)``, that is for at least ``window`` and at
  most ``window + P`` seconds;
* a period older than ``c - periods`` is removed by the first writer that sees a new
  period (the *rotation*), so at most ``periods + 1`` period files exist.

Sizing (the union bound, as for the compound rate of a scalable filter, Almeida,
Baquero, Preguica and Hutchison 2007): at ``capacity`` keys per window each period holds
``n_p = ceil(capacity / periods)`` keys, and a query asks up to ``periods + 1`` of them,
so with each sized for an expected rate ``p_p = fp_rate / (periods + 1)`` at ``n_p``
keys (:func:`mmapbloom.config.config_at_most`)::

    P(false positive) = 1 - prod (1 - p_p) <= (periods + 1) * p_p = fp_rate

On disk (docs/EXPIRING.md)::

    DIR/period-<n>.blm   one BLM1 file per live period n (an ordinary BloomFilter file)
    DIR/manifest.json    the parameters, the generation and the live periods
                         (period number, file, start time), replaced atomically
    DIR/lock             16 bytes: magic "BLEX", version 1, committed generation u32, 0

The manifest, lock-file and publishing code are :mod:`mmapbloom.directory`, shared with
the scalable filter.

Rotation, under the directory-wide write lock (the write lock of ``lock``: its
process-shared mutex side file or an exclusive ``flock``, :mod:`mmapbloom.locking`) and
only when the current period ``c`` is newer than every listed period:

1. if some listed periods are older than ``c - periods``: publish a manifest without
   them (generation g + 1) and store g + 1 in the lock word (the commit point); then (in
   every rotation) remove every ``period-*.blm`` the committed manifest does not list:
   the dropped periods and any leftover of a killed writer;
2. create ``period-c.blm`` complete (atomically, with the lock file's mode and group),
   publish the manifest listing it (g + 2), store g + 2.

Exactly once: the decision "c is newer than every listed period" is taken under the
write lock after re-reading the committed state, so of many processes crossing a
boundary together the first rotates and the others find ``c`` listed. Never half-done
for readers: a reader sees one manifest (old or new, each listing complete files; files
are removed only after a manifest without them is committed, and a file mapped by a
reader stays readable after its removal). Crash-safe: a writer killed after publishing a
manifest but before storing its generation leaves a manifest one generation ahead; it
lists only complete files and no key was added under it, and the next writer commits it
before adding anything. A clock going backwards never rotates (``c`` is not newer), and
keys then go to the newest existing period, so no key is dropped early. After an idle
gap of any length a rotation costs O(periods).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import math
import numbers
import os
import re
import stat
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, Union


from .keys import Item, Keys, PathLike
from .batches import as_batch, encoded_keys
from .config import BloomConfig, StrategyChoice, config_at_most, resolve_strategy
from .directory import (
    LOCK_NAME,
    LOCK_SIZE,
    MANIFEST_NAME,
    WORD_OFFSET,
    apply_shared_mode,
    build_directory,
    check_file_mode,
    check_lock_image,
    lock_image,
    manifest_field,
    publish_json,
    read_json,
    read_word,
    shared_mode,
    store_word,
    strip_path,
)
from .errors import (
    ConfigError,
    ConfigMismatchError,
    FilterClosedError,
    LayerMismatchError,
    ManifestError,
    MissingLayerError,
    ReadOnlyFilterError,
)
from .filter import BloomFilter
from .hashing import HashStrategy, encode_key, get_strategy
from .lifecycle import Lifecycle
from .locking import SIDE_SUFFIX, WriteLock, deferred_signals
from .files import atomic_file

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt
from ._lazy import is_ndarray

__all__ = ["DEFAULT_PERIODS", "ExpiringBloomFilter", "ExpiringRule", "is_expiring", "period_name"]


DEFAULT_PERIODS = 8
#: The most periods a filter may have (each is a file; a query asks every live one).
MAX_PERIODS = 4096
MANIFEST_FORMAT = "mmapbloom-expiring"
MANIFEST_VERSION = 1
LOCK_MAGIC = b"BLEX"
LOCK_VERSION = 1
_WORD_WHAT = "committed generation"
#: Keys per write-lock hold in :meth:`ExpiringBloomFilter.update`.
_CHUNK = 1 << 16
#: Generations a dropped period's handle stays open (each rotation adds one or two).
_RETIRE_AFTER = 4
_PERIOD_FILE = re.compile(r"^period-(-?[0-9]+)\.blm$")

# Test hook: called as ``_ROTATE_HOOK(stage, period)`` during a rotation to period
# ``period``, with stage "dropped-published", "dropped-committed", "files-removed",
# "period-created", "manifest-published", "committed". The crash tests set it in a child
# to SIGKILL it at those points; the process tests count rotations with it.
_ROTATE_HOOK: Optional[Callable[[str, int], None]] = None

_LIVE: "weakref.WeakSet[ExpiringBloomFilter]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for handle in list(_LIVE):
        handle._reload_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def period_name(number: int) -> str:
    """The file name of period ``number``: ``period-<number>.blm``."""
    return f"period-{number}.blm"


def is_expiring(path: PathLike) -> bool:
    """True if ``path`` is a directory whose lock file has the expiring magic ``BLEX`` (a
    cheap check; :meth:`ExpiringBloomFilter.open` validates the directory)."""
    p = strip_path(path)
    try:
        with open(os.path.join(p, LOCK_NAME), "rb") as fh:
            return fh.read(4) == LOCK_MAGIC
    except OSError:
        return False


def _window_seconds(window: object) -> float:
    if isinstance(window, datetime.timedelta):
        w = window.total_seconds()
    elif isinstance(window, numbers.Real) and not isinstance(window, bool):
        try:
            w = float(window)
        except OverflowError:
            w = math.inf
    else:
        raise ConfigError(f"window must be seconds (int or float) or a datetime.timedelta, got {window!r}")
    if not (math.isfinite(w) and w > 0.0):
        raise ConfigError(f"window must be a finite positive number of seconds, got {window!r}")
    return w


def _check_periods(periods: object) -> int:
    if isinstance(periods, bool) or not isinstance(periods, numbers.Integral) or not 1 <= int(periods) <= MAX_PERIODS:
        raise ConfigError(f"periods must be an integer in [1, {MAX_PERIODS}], got {periods!r}")
    return int(periods)


def _check_clock(clock: object) -> Callable[[], float]:
    if clock is None:
        import time

        return time.time
    if not callable(clock):
        raise ConfigError(f"clock must be a zero-argument callable returning seconds, got {clock!r}")
    return clock


@dataclasses.dataclass(frozen=True)
class ExpiringRule:
    """The parameters of an expiring filter and the shape they give each period.

    Attributes:
        window: seconds a key is remembered at least (> 0, finite).
        periods: the number of periods per window (1 to 4096).
        capacity: distinct keys expected per window (>= 1).
        fp_rate: bound on the false-positive rate at that rate of adds, in (0, 1).
        strategy: the hash strategy's registered name.
    """

    window: float
    periods: int
    capacity: int
    fp_rate: float
    strategy: str

    @staticmethod
    def checked(window: object, capacity: object, fp_rate: object, periods: object, strategy: str) -> "ExpiringRule":
        """The rule from user values, validated. Raises ConfigError."""
        w = _window_seconds(window)
        k = _check_periods(periods)
        probe = BloomConfig.for_items(capacity, fp_rate)  # type: ignore[arg-type]
        assert probe.capacity is not None and probe.fp_rate is not None
        if not w / k > 0.0:
            raise ConfigError(f"window {w!r} s over {k} periods gives a period of 0 s")
        return ExpiringRule(w, k, probe.capacity, probe.fp_rate, strategy)

    @property
    def period_seconds(self) -> float:
        """P = window / periods, the length of a period in seconds."""
        return self.window / self.periods

    @property
    def period_capacity(self) -> int:
        """n_p = ceil(capacity / periods), the keys a period holds at the design rate."""
        return -(-self.capacity // self.periods)

    @property
    def period_fp_rate(self) -> float:
        """p_p = fp_rate / (periods + 1): a query asks up to periods + 1 periods."""
        return self.fp_rate / (self.periods + 1)

    def config(self, strategy: HashStrategy) -> BloomConfig:
        """Every period's shape: the smallest m whose expected rate at n_p is <= p_p
        (:func:`~mmapbloom.config.config_at_most`). Raises ConfigError."""
        return _period_config(self, strategy)

    def number(self, t: float) -> int:
        """``floor(t / P)``, the period holding time ``t``. Raises ConfigError for a
        clock value that is not a finite number."""
        try:
            return math.floor(t / self.period_seconds)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"the clock returned {t!r}, not a finite number of seconds") from None

    def start(self, number: int) -> float:
        """The start time of period ``number`` (``number * P``)."""
        return number * self.period_seconds


_CONFIGS: dict[tuple[ExpiringRule, str], BloomConfig] = {}


def _period_config(rule: ExpiringRule, strategy: HashStrategy) -> BloomConfig:
    key = (rule, strategy.name)
    cfg = _CONFIGS.get(key)
    if cfg is None:
        cfg = _CONFIGS[key] = config_at_most(rule.period_capacity, rule.period_fp_rate, strategy)
    return cfg


# -- the manifest -----------------------------------------------------------------------------
def _manifest_doc(rule: ExpiringRule, cfg: BloomConfig, generation: int, numbers_: list[int]) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "generation": generation,
        "strategy": rule.strategy,
        "window": rule.window,
        "periods": rule.periods,
        "capacity": rule.capacity,
        "fp_rate": rule.fp_rate,
        "period_seconds": rule.period_seconds,
        "period_capacity": rule.period_capacity,
        "period_fp_rate": rule.period_fp_rate,
        "num_bits": cfg.num_bits,
        "num_hashes": cfg.num_hashes,
        "live": [{"period": n, "file": period_name(n), "start": rule.start(n)} for n in numbers_],
    }


def _read_manifest(directory: str) -> tuple[ExpiringRule, HashStrategy, int, list[int]]:
    """Read and validate the manifest: ``(rule, strategy, generation, live period
    numbers ascending)``. Raises ManifestError, UnknownStrategyError."""
    source = os.path.join(directory, MANIFEST_NAME)
    doc = read_json(directory, MANIFEST_FORMAT, MANIFEST_VERSION, "expiring filter")
    strategy_name = manifest_field(doc, "strategy", str, source)
    strategy = get_strategy(strategy_name, source=source)
    try:
        rule = ExpiringRule.checked(
            manifest_field(doc, "window", (int, float), source),
            manifest_field(doc, "capacity", int, source),
            manifest_field(doc, "fp_rate", (int, float), source),
            manifest_field(doc, "periods", int, source),
            strategy_name,
        )
        cfg = rule.config(strategy)
    except ConfigError as exc:
        raise ManifestError(
            f"invalid parameters: {exc}", source=source, expected="valid parameters", actual=str(exc)
        ) from None
    generation = manifest_field(doc, "generation", int, source)
    if generation < 1:
        raise ManifestError(f"generation is {generation}", source=source, expected=">= 1", actual=generation)
    for name, want in (("num_bits", cfg.num_bits), ("num_hashes", cfg.num_hashes)):
        got = manifest_field(doc, name, int, source)
        if got != want:
            raise ManifestError(
                f"{name} is {got}, the parameters give {want}", source=source, expected=want, actual=got
            )
    live = manifest_field(doc, "live", list, source)
    out: list[int] = []
    for i, entry in enumerate(live):
        if not isinstance(entry, dict):
            raise ManifestError(f"live entry {i} is not an object", source=source, expected="object", actual=entry)
        n = manifest_field(entry, "period", int, source)
        if entry.get("file") != period_name(n):
            raise ManifestError(
                f"live entry {i}: file is {entry.get('file')!r}, expected {period_name(n)!r}",
                source=source,
                expected=period_name(n),
                actual=entry.get("file"),
            )
        if out and n <= out[-1]:
            raise ManifestError(
                f"live entry {i}: period {n} is not after {out[-1]}", source=source, expected=f"> {out[-1]}", actual=n
            )
        out.append(n)
    if out and out[-1] - out[0] > rule.periods:
        raise ManifestError(
            f"live periods {out[0]} to {out[-1]} span more than {rule.periods} periods",
            source=source,
            expected=rule.periods,
            actual=out[-1] - out[0],
        )
    return rule, strategy, generation, out


def _is_array(items: object) -> bool:
    """A 1-dimensional numpy array without Python objects: its subsets are taken with
    numpy indexing and read in place by each period's kernels."""
    return is_ndarray(items) and items.ndim == 1 and items.dtype.kind in "iuSU"


# -- the per-period record --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _View:
    word: int  # the lock word read before the manifest
    generation: int  # the manifest's generation (word or word + 1)
    numbers: tuple[int, ...]  # ascending
    filters: tuple[BloomFilter, ...]


_EMPTY = _View(-1, 0, (), ())


class ExpiringBloomFilter(Lifecycle):
    """A filter answering "was this key added within the last ``window`` seconds?", in a
    directory of at most ``periods + 1`` BLM1 period files (see the module docstring and
    docs/EXPIRING.md for the window's approximation, the sizing and the rotation).

    Semantics, with ``P = window / periods`` and periods numbered ``floor(clock() / P)``:

    * :meth:`add` is an atomic test-and-set across threads and processes: True if no live
      period holds the key (it is then set in the current period), False otherwise
      (nothing changes); of several processes adding one key in one period exactly one
      gets True;
    * ``key in f`` is True for every key added at most ``window`` seconds ago (no false
      negatives inside the window) and, for a key last added more than ``window + P``
      seconds ago, False except with probability <= ``fp_rate`` (at ``capacity`` adds per
      window);
    * a clock going backwards never loses a key inside its window: no period is dropped,
      and adds go to the newest existing period.

    Concurrency: writers hold the directory-wide write lock (a thread lock plus the
    write lock of ``lock``: its mutex side file or an exclusive ``flock``); queries take
    no lock: each reads the committed generation (a ``pread`` of the lock file; the
    native ``in`` reads it through a mapping under the SIGBUS guard, see
    :meth:`might_contain`) and re-reads the manifest only when it changed (``add``'s
    lock-free pre-check asks the handle's last view instead: see :meth:`add`).
    Fork-safe. Sharing between users: new period files copy the permission bits and
    group of the lock file, and a period this user cannot write is opened read-only.
    Not safe on file systems whose ``flock`` is not coherent (NFS).

    >>> import tempfile, os
    >>> now = [0.0]
    >>> d = tempfile.mkdtemp()
    >>> f = ExpiringBloomFilter.create(os.path.join(d, "seen"), 80, 1000, 0.01, clock=lambda: now[0])
    >>> f.add("a"), f.add("a"), "a" in f
    (True, False, True)
    >>> now[0] = 80.0; "a" in f            # within the window
    True
    >>> now[0] = 90.0; "a" in f, f.add("a")  # past window + period: forgotten
    (False, True)
    >>> f.close()
    """

    __slots__ = (
        "_path",
        "_lock_path",
        "_rule",
        "_strategy",
        "_config",
        "_clock",
        "_period",
        "_readonly",
        "_no_write",
        "_closed",
        "_lock",
        "_lock_fd",
        "_view",
        "_retired",
        "_reload_lock",
        "_hot",
        "_word",
        "_word_map",
        "__weakref__",
    )

    _path: str
    _lock_path: str
    _rule: ExpiringRule
    _strategy: HashStrategy
    _config: BloomConfig
    _clock: Callable[[], float]
    _period: float
    _readonly: bool
    _no_write: bool
    _closed: bool
    _lock: WriteLock
    _lock_fd: int
    _view: _View
    _retired: list[tuple[int, BloomFilter]]  # (generation when dropped, handle)
    _reload_lock: threading.Lock
    _hot: tuple[Any, ...]  # (view, now, newest live handle or None, older live handles)
    _word: Optional[memoryview]  # the committed generation through a mapping (native only)
    _word_map: Any  # that mapping (mmap.mmap) or None

    def __init__(self) -> None:
        raise TypeError("use ExpiringBloomFilter.create(), open() or open_or_create()")

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: PathLike,
        window: Union[float, datetime.timedelta],
        capacity: int,
        fp_rate: float,
        *,
        periods: int = DEFAULT_PERIODS,
        strategy: StrategyChoice = None,
        clock: Optional[Callable[[], float]] = None,
        mode: Optional[int] = None,
    ) -> "ExpiringBloomFilter":
        """Create a new expiring filter directory (its current period, manifest and lock
        file, built under a temporary name and renamed into place) and open it read-write.

        Args:
            path: the directory to create; it must not exist.
            window: seconds (int or float, > 0) or a ``datetime.timedelta``: keys are
                found for at least this long after their last successful add.
            capacity: distinct keys expected per window (a positive integer).
            fp_rate: false-positive rate for a key not added within the window, at that
                rate of adds, in (0, 1).
            periods: periods per window (1 to 4096, default 8): a key is forgotten at
                most ``window / periods`` seconds after its window; more periods forget
                sooner but ask more files per query.
            strategy: hash strategy of every period file: a registered strategy or its
                name (``"M3B2"``), default the package default; UnknownSchemeError for an
                unknown name.
            clock: zero-argument callable returning seconds (default ``time.time``).
                Not stored: each handle uses its own.
            mode: exact permission bits for every file (not masked by the umask; the
                directory gets ``x`` where ``r`` is set); later period files copy the lock
                file's bits and group. None: the umask's.

        Raises:
            ConfigError: a value out of range (window, capacity, fp_rate, periods, clock),
                or a period shape beyond BLM1's limits.
            UnknownSchemeError (a ``ValueError``): an unregistered strategy name.
            TypeError: ``mode`` is not permission bits (an int in [0, 0o777]).
            FileExistsError: ``path`` exists.
            NoSpaceError, OSError: from the OS, naming ``path``.
        """
        strat = resolve_strategy(strategy)
        rule = ExpiringRule.checked(window, capacity, fp_rate, periods, strat.name)
        cfg = rule.config(strat)
        tick = _check_clock(clock)
        file_mode = check_file_mode(mode)
        first = rule.number(tick())

        def fill(tmp: str) -> None:
            p0 = os.path.join(tmp, period_name(first))
            BloomFilter.create(p0, cfg).close()
            if file_mode is not None:
                os.chmod(p0, file_mode)
            publish_json(tmp, _manifest_doc(rule, cfg, 1, [first]), mode=file_mode)
            with atomic_file(os.path.join(tmp, LOCK_NAME), replace=False) as fd:
                if file_mode is not None:
                    os.fchmod(fd, file_mode)
                os.write(fd, lock_image(LOCK_MAGIC, LOCK_VERSION, 1))

        dest = build_directory(path, fill, file_mode)
        return cls.open(dest, clock=tick)

    @classmethod
    def open(
        cls, path: PathLike, readonly: bool = False, clock: Optional[Callable[[], float]] = None
    ) -> "ExpiringBloomFilter":
        """Open an existing expiring filter directory. Costs O(periods): the lock file,
        the manifest and each live period's header are read and checked.

        Args:
            path: the directory.
            readonly: open every file read-only; writes then raise ReadOnlyFilterError
                (queries still see periods other processes add).
            clock: zero-argument callable returning seconds (default ``time.time``).

        Raises:
            FileNotFoundError, NotADirectoryError, PermissionError: from the OS.
            ManifestError: damaged or missing manifest or lock file.
            MissingLayerError: a listed period file is missing.
            LayerMismatchError, FormatError subclasses: a period file is damaged.
            ConfigError: ``clock`` is not callable.
        """
        tick = _check_clock(clock)
        dest = strip_path(path)
        st = os.stat(dest)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "an expiring filter is a directory; this is not one", dest)
        self = cls.__new__(cls)
        self._path = dest
        self._clock = tick
        self._readonly = bool(readonly)
        self._no_write = self._readonly
        self._closed = False
        self._view = _EMPTY
        self._retired = []
        self._reload_lock = threading.Lock()
        self._hot = (None, None, None, ())
        self._word = self._word_map = None
        lock_path = self._lock_path = os.path.join(dest, LOCK_NAME)
        flags = (os.O_RDONLY if readonly else os.O_RDWR) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(lock_path, flags)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        try:
            lst = os.fstat(fd)
            if not stat.S_ISREG(lst.st_mode):
                raise ManifestError(
                    "the lock file is not a regular file",
                    source=lock_path,
                    expected="regular file",
                    actual=stat.filemode(lst.st_mode),
                )
            word = self._check_lock(os.pread(fd, LOCK_SIZE, 0), lst.st_size)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        self._lock = WriteLock(fd, lock_path)
        try:
            self._rule, self._strategy, _, _ = _read_manifest(dest)
            self._config = self._rule.config(self._strategy)
            self._period = self._rule.period_seconds
            view = self._reload(word)
            if view.filters and view.filters[0].kernel_module is not None:
                self._map_word(fd)
        except BaseException:
            self._close_files()
            raise
        _LIVE.add(self)
        return self

    def _map_word(self, fd: int) -> None:
        """Map the lock file read-only for :meth:`might_contain`, which hands the
        generation word to the native ``Handle.contains_any`` (read there under the SIGBUS
        guard: about 60 ns against a ``pread``'s 1 to 2 us). Without a mapping (an OS
        refusal) queries keep the ``pread``."""
        import mmap

        try:
            mm = mmap.mmap(fd, LOCK_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            return
        self._word_map = mm
        self._word = memoryview(mm)[WORD_OFFSET : WORD_OFFSET + 4]

    @classmethod
    def open_or_create(
        cls,
        path: PathLike,
        window: Union[float, datetime.timedelta],
        capacity: int,
        fp_rate: float,
        *,
        periods: int = DEFAULT_PERIODS,
        strategy: StrategyChoice = None,
        clock: Optional[Callable[[], float]] = None,
        mode: Optional[int] = None,
    ) -> "ExpiringBloomFilter":
        """Open ``path`` if it exists, else create it with these parameters; safe when many
        processes race on the same new path (one directory is created, all open it).

        Raises:
            ConfigMismatchError: the existing filter's window, periods, capacity, fp_rate
                or strategy differ (the message names the field and both values).
            And whatever :meth:`open` and :meth:`create` raise.
        """
        strat = resolve_strategy(strategy)
        want = ExpiringRule.checked(window, capacity, fp_rate, periods, strat.name)
        for _ in range(100):
            try:
                f = cls.open(path, clock=clock)
            except FileNotFoundError:
                try:
                    return cls.create(
                        path, window, capacity, fp_rate, periods=periods, strategy=strategy, clock=clock, mode=mode
                    )
                except FileExistsError:
                    continue
            try:
                for field in ("window", "periods", "capacity", "fp_rate", "strategy"):
                    if getattr(want, field) != getattr(f._rule, field):
                        raise ConfigMismatchError(f._path, field, getattr(want, field), getattr(f._rule, field))
            except BaseException:
                f.close()
                raise
            return f
        raise FileExistsError(f"{path}: directory keeps appearing and disappearing")  # pragma: no cover

    # -- the committed state -----------------------------------------------------------------
    def _check_lock(self, head: bytes, size: int) -> int:
        return check_lock_image(
            head, size, self._lock_path, magic=LOCK_MAGIC, version=LOCK_VERSION, what=_WORD_WHAT, minimum=1
        )

    def _read_word(self) -> int:
        try:
            raw = os.pread(self._lock_fd, 4, WORD_OFFSET)
            if len(raw) == 4:
                word = int.from_bytes(raw, "little")
                if word >= 1:
                    return word
            return read_word(self._lock_fd, self._lock_path, what=_WORD_WHAT, minimum=1)  # raises
        except OSError:  # EBADF: closed by another thread
            self._check_open()
            raise

    def _current(self) -> _View:
        """The committed view, after re-reading the manifest if the generation changed
        (one ``pread`` when nothing changed)."""
        self._check_open()
        view = self._view
        word = self._read_word()
        if word == view.word:
            return view
        return self._reload(word)

    def _reload(self, word: int) -> _View:
        """Read the manifest (the word was read first: the manifest is published before
        the word is stored, so its generation is ``word`` or ``word + 1``) and open the
        periods it lists, reusing this handle's open ones. A period removed by a rotation
        between the two reads is found missing: read both again."""
        with self._reload_lock:
            view = self._view
            if word == view.word:
                return view
            for attempt in range(1000):
                rule, _, generation, numbers_ = _read_manifest(self._path)
                if rule != self._rule:
                    raise ManifestError(
                        f"the manifest's parameters changed under the handle: {rule} != {self._rule}",
                        source=os.path.join(self._path, MANIFEST_NAME),
                        expected=self._rule,
                        actual=rule,
                    )
                if generation < word:
                    again = self._read_word()
                    if again != word:  # a rotation committed between the two reads
                        word = again
                        continue
                    raise ManifestError(
                        f"the manifest's generation {generation} is behind the committed {word}",
                        source=os.path.join(self._path, MANIFEST_NAME),
                        expected=f">= {word}",
                        actual=generation,
                    )
                old = dict(zip(view.numbers, view.filters, strict=True))
                opened: list[BloomFilter] = []
                try:
                    filters = []
                    for i, n in enumerate(numbers_):
                        f = old.get(n)
                        if f is None:
                            f = self._open_period(n, writable=i == len(numbers_) - 1)
                            opened.append(f)
                        filters.append(f)
                except MissingLayerError:
                    for f in opened:
                        f.close()
                    again = self._read_word()
                    if again == word and attempt > 2:
                        raise
                    word = again
                    continue
                except BaseException:
                    for f in opened:
                        f.close()
                    raise
                new = _View(word, generation, tuple(numbers_), tuple(filters))
                kept = set(map(id, filters))
                # Handles of dropped periods are closed only once the generation moved on by
                # _RETIRE_AFTER (two rotations, at least a period of time): a query of another
                # thread that read the old view may still be probing them. Until then the
                # removed files' blocks stay allocated (at most two periods' files).
                retired = []
                for g, f in self._retired:
                    if g + _RETIRE_AFTER > word:
                        retired.append((g, f))
                    else:
                        f.close()
                retired += [(word, f) for f in view.filters if id(f) not in kept]
                self._retired = retired
                self._view = new
                return new
            raise ManifestError(  # pragma: no cover - a directory rotating 1000 times under us
                "the manifest kept changing while it was read",
                source=os.path.join(self._path, MANIFEST_NAME),
                expected=None,
                actual=None,
            )

    def _period_path(self, n: int) -> str:
        return os.path.join(self._path, period_name(n))

    def _open_period(self, n: int, *, writable: bool) -> BloomFilter:
        path = self._period_path(n)
        try:
            if writable and not self._readonly:
                try:
                    f = BloomFilter.open(path)
                except PermissionError:
                    f = BloomFilter.open(path, readonly=True)
            else:
                f = BloomFilter.open(path, readonly=True)
        except FileNotFoundError:
            raise MissingLayerError(
                f"period {n} is missing", source=path, expected=period_name(n), actual=None
            ) from None
        try:
            self._check_shape(n, f.config, path)
        except BaseException:
            f.close()
            raise
        return f

    def _check_shape(self, n: int, config: BloomConfig, path: str) -> None:
        diff = self._config.difference(config)
        if diff is not None:
            field, want, got = diff
            raise LayerMismatchError(
                f"period {n} has {field} {got!r}, the manifest says {want!r}", source=path, expected=want, actual=got
            )

    def _now(self) -> int:
        t = self._clock()
        try:
            return math.floor(t / self._period)
        except (TypeError, ValueError, OverflowError):
            return self._rule.number(t)  # raises ConfigError naming the value

    def _live(self, view: _View, now: int) -> list[BloomFilter]:
        """The filters of ``view`` numbered >= ``now - periods``, newest first."""
        low = now - self._rule.periods
        out = []
        for n, f in zip(reversed(view.numbers), reversed(view.filters), strict=True):
            if n < low:
                break
            out.append(f)
        return out

    def _handles(self, view: _View, now: int) -> tuple[Any, tuple[Any, ...]]:
        """The kernel handles of ``view``'s live periods at ``now``: ``(newest, older)``
        (``newest`` None when no period is live), cached for the last (view, now): the
        per-item paths ask the C handle once, ``newest.contains_any(older, key)``."""
        hot = self._hot
        if hot[0] is view and hot[1] == now:
            return hot[2], hot[3]
        live = self._live(view, now)
        newest = live[0].kernel_handle if live else None
        older = tuple(f.kernel_handle for f in live[1:])
        self._hot = (view, now, newest, older)
        return newest, older

    def _query_handles(self) -> tuple[Any, tuple[Any, ...]]:
        """:meth:`_handles` of the committed view at the clock's period, for the per-item
        queries: :meth:`_current` and :meth:`_now` inlined (one ``pread``, one clock read)."""
        view = self._view
        try:
            raw = os.pread(self._lock_fd, 4, WORD_OFFSET)
        except OSError:  # closed (fd -1) or EBADF: _current raises what applies
            raw = b""
        if self._closed or len(raw) != 4 or int.from_bytes(raw, "little") != view.word:
            view = self._current()
        t = self._clock()
        try:
            now = math.floor(t / self._period)
        except (TypeError, ValueError, OverflowError):
            now = self._rule.number(t)  # raises ConfigError naming the value
        hot = self._hot
        if hot[0] is view and hot[1] == now:
            return hot[2], hot[3]
        return self._handles(view, now)

    # -- writes: the view under the lock, and rotation ---------------------------------------
    def _locked_view(self) -> tuple[_View, int]:
        """Under the write lock: the committed view (an interrupted rotation committed
        first), rotated to the current period if it is newer than every listed one.
        Returns ``(view, now)``."""
        view = self._current()
        if view.generation != view.word:  # a manifest published by a killed writer: commit it
            store_word(self._lock_fd, view.generation)
            view = self._current()
            self._sweep(view)
        now = self._now()
        if not view.numbers or now > view.numbers[-1]:
            view = self._rotate(view, now)
        return view, now

    def _sweep(self, view: _View) -> None:
        """Remove every ``period-*.blm`` the committed ``view`` does not list (dropped
        periods, leftovers of a killed writer; temporaries are storage's). O(files)."""
        keep = set(view.numbers)
        try:
            names = os.listdir(self._path)
        except OSError:
            return
        for name in names:
            m = _PERIOD_FILE.match(name)
            if m is not None and int(m.group(1)) not in keep:
                for gone in (name, name + SIDE_SUFFIX):  # and its write lock's side file (mutex mode)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self._path, gone))

    def _publish(self, view: _View, numbers_: list[int], mode: Optional[int]) -> int:
        generation = view.generation + 1
        publish_json(self._path, _manifest_doc(self._rule, self._config, generation, numbers_), mode=mode)
        return generation

    def _rotate(self, view: _View, now: int) -> _View:
        """Make ``now`` the newest period (the caller holds the write lock, ``view`` is
        committed and ``now`` is newer than every listed period). O(periods) whatever the
        gap since the last rotation."""
        hook = _ROTATE_HOOK
        mode, gid = shared_mode(self._lock_path)
        low = now - self._rule.periods
        keep = [n for n in view.numbers if n >= low]
        if len(keep) != len(view.numbers):
            gen = self._publish(view, keep, mode)
            if hook is not None:
                hook("dropped-published", now)
            store_word(self._lock_fd, gen)
            if hook is not None:
                hook("dropped-committed", now)
            view = self._current()
        # Dropped periods, and leftovers of a writer killed before it removed them or
        # before it published the file it created: at most periods + 1 files remain.
        self._sweep(view)
        if hook is not None:
            hook("files-removed", now)
        path = self._period_path(now)
        BloomFilter.create(path, self._config, overwrite=True).close()  # never listed: now > every listed
        apply_shared_mode(path, mode, gid)
        if hook is not None:
            hook("period-created", now)
        gen = self._publish(view, keep + [now], mode)
        if hook is not None:
            hook("manifest-published", now)
        store_word(self._lock_fd, gen)
        if hook is not None:
            hook("committed", now)
        return self._current()

    def _writable_newest(self, view: _View) -> BloomFilter:
        """The newest period, open read-write (reopened if it was opened read-only because
        this user could not write it). The caller holds the write lock."""
        newest = view.filters[-1]
        if not newest.readonly:
            return newest
        n = view.numbers[-1]
        path = self._period_path(n)
        try:
            f = BloomFilter.open(path)
        except PermissionError as exc:
            st = os.stat(path)
            raise PermissionError(
                exc.errno,
                f"{exc.strerror}: the current period (mode {stat.filemode(st.st_mode)}, owner uid "
                f"{st.st_uid}, gid {st.st_gid}) is not writable by this user, so keys cannot be added "
                "(queries work)",
                path,
            ) from None
        with self._reload_lock:
            if self._view is view:
                self._retired.append((view.word, newest))
                self._view = dataclasses.replace(view, filters=view.filters[:-1] + (f,))
            else:  # pragma: no cover - the view cannot change under the write lock
                self._retired.append((view.word, f))
        return f

    def _refuse_write(self) -> None:
        self._check_open()
        if not self._readonly:
            raise FilterClosedError(f"{self._path}: filter is closed")
        raise ReadOnlyFilterError(f"{self._path}: filter was opened read-only; writes are refused")

    def add(self, item: Item) -> bool:
        """Add ``item``; True if no live period held it (it is then set in the current
        period, or in the newest period if the clock went back), False if one may hold it
        (nothing is written). Atomic across threads and processes: the live periods are
        tested and the current one set under the directory-wide write lock, so of several
        processes adding one new key exactly one gets True. Rotates first when a new
        period began (exactly once across processes; O(periods)).

        Cost: a lock-free pre-check on this handle's last view (a clock read, one hash,
        the live periods probed in C by ``Handle.contains_any``; no ``pread``: a key found
        is answered False without the lock), then under the lock a clock read and
        ``Handle.add_unless`` (one hash, the older live periods probed and the newest
        tested-and-set in C), one lock pair for the directory and one for the period
        file. The committed generation is read on the native backend through the lock
        file's mapping inside that C call, under the SIGBUS guard; a word that moved (a
        rotation by another process since this handle's view), a view to rotate or a
        read-only newest period take the ``pread`` path (the pure backend always does:
        one ``pread``).

        Raises TypeError, ReadOnlyFilterError, FilterClosedError, ConfigError (the clock
        returned a non-number), ManifestError (the lock file or manifest damaged under the
        handle), OSError (a rotation failed: nothing was added)."""
        if self._no_write:
            self._refuse_write()
        # The lock-free pre-check asks this handle's last committed view, without reading
        # the generation word: a view older than the committed one lacks only newer
        # periods (a key it finds is in a period live at this clock reading, so "found
        # within the window" holds); a key it misses is decided under the lock, on the
        # committed view. Saves one pread per add (docs/EXPIRING.md, Costs).
        newest, older = self._handles(self._view, self._now())
        if newest is None:
            encode_key(item)  # TypeError for a bad key, as with live periods
        elif newest.contains_any(older, item):
            return False
        with self._lock:
            word = self._word
            view = self._view
            if word is not None and view.generation == view.word and view.numbers:
                # Native: the generation read through the lock file's mapping inside the C
                # call instead of a pread (half of an add's cost), for a committed view only
                # (a killed writer's published manifest is committed on the pread path).
                # Under the lock no other writer can move it; a word that moved before the
                # lock was taken (another process rotated) writes nothing and answers None:
                # the pread path below then reloads the view. No close() can release the
                # word meanwhile: close takes this lock's thread lock too.
                now = self._now()
                newest_filter = view.filters[-1]
                if now <= view.numbers[-1] and not newest_filter.readonly:
                    _, older = self._handles(view, now)
                    new = newest_filter.kernel_handle.add_unless(older, item, word, view.word)
                    if new is not None:
                        return bool(new)
            view, now = self._locked_view()
            writable = self._writable_newest(view)
            _, older = self._handles(self._view, now)
            return bool(writable.kernel_handle.add_unless(older, item))

    def update(self, items: Keys) -> int:
        """Add many keys; return how many were new. Equivalent to :meth:`add` on each in
        order (a duplicate within the batch is new once). Keys: an iterable of str,
        bytes-like and int, a numpy array or an Arrow column (nulls are never added).

        Every key is validated before anything is written. The write lock is taken once
        per chunk of 65,536 keys (the clock is read once per chunk). Any exception leaving
        this method carries ``committed_items``: how many leading keys were committed
        (each added or already present).

        Raises TypeError, ValueError (malformed batch), ReadOnlyFilterError,
        FilterClosedError, OSError (a rotation failed)."""
        start = 0
        done = [0]
        try:
            if self._no_write:  # a refusal carries committed_items = 0 too (issue 29)
                self._refuse_write()
            self._check_open()
            keys: Any = items if _is_array(items) else encoded_keys(items)[0]  # type: ignore[arg-type]  # checked at run time
            total = 0
            for start in range(0, len(keys), _CHUNK):
                done[0] = 0
                chunk = keys[start : start + _CHUNK]
                with self._lock, deferred_signals():
                    total += self._update_locked(chunk, done)
        except BaseException as exc:
            exc.committed_items = start + done[0]  # type: ignore[attr-defined]
            raise
        return total

    def _update_locked(self, keys: Any, done: list[int]) -> int:
        """One chunk under the write lock: the keys no older live period may hold are
        tested-and-set in the newest period, each key hashed once for every period
        (``Handle.add_many_unless``)."""
        view, now = self._locked_view()
        newest = self._writable_newest(view)
        others = [f.kernel_handle for f in self._live(view, now) if f is not view.filters[-1] and f is not newest]
        try:
            new = int(newest.kernel_handle.add_many_unless(others, as_batch(keys, newest.kernel_module)))
        except BaseException as exc:
            done[0] = getattr(exc, "committed_items", 0)
            raise
        done[0] = len(keys)
        return new

    def write_lock(self) -> WriteLock:
        """The directory-wide write lock as a context manager, for loops of :meth:`add`
        (inside the block adds re-enter it). Raises ReadOnlyFilterError,
        FilterClosedError."""
        if self._no_write:
            self._refuse_write()
        return self._lock

    # -- queries ------------------------------------------------------------------------------
    def might_contain(self, item: Item) -> bool:
        """True if ``item`` may have been added within the window (always True for a key
        added at most ``window`` seconds ago); False if it certainly was not added in the
        last ``window`` seconds. Takes no lock: a read of the committed generation, a
        clock read, one hash and the live periods probed in C (``Handle.contains_any``:
        each position computed once for every period, the newest period first). On the
        native backend the generation is read through a mapping of the lock file inside
        that C call, under the SIGBUS guard, before the probes; a word that moved (or a
        lock file truncated under the mapping) sends the query to the ``pread`` path,
        which re-reads the manifest (or raises ManifestError). On the pure backend: one
        ``pread``.

        Raises TypeError, FilterClosedError, ManifestError (lock file or manifest damaged
        under the handle)."""
        word = self._word
        if word is not None:
            view = self._view
            t = self._clock()
            try:
                now = math.floor(t / self._period)
            except (TypeError, ValueError, OverflowError):
                now = self._rule.number(t)  # raises ConfigError naming the value
            # The handles of this very view (not self._hot read again: another thread may
            # have cached an older view's there meanwhile), and this view's word expected.
            hot = self._hot
            if hot[0] is view and hot[1] == now:
                newest, older = hot[2], hot[3]
            else:
                newest, older = self._handles(view, now)
            if newest is not None:
                try:
                    found = newest.contains_any(older, item, word, view.word)
                except ValueError:  # the word released by a close() in another thread
                    if not self.closed:
                        raise  # a bad key (KeyEncodingError), a damaged period
                    found = None  # _query_handles raises FilterClosedError
                if found is not None:
                    return bool(found)
        newest, older = self._query_handles()
        if newest is None:
            encode_key(item)  # TypeError for a bad key, as with live periods
            return False
        return bool(newest.contains_any(older, item))

    __contains__ = might_contain

    def contains_many(self, items: Keys) -> npt.NDArray[np.bool_]:
        """Vectorised :meth:`might_contain`: a ``bool`` array of the batch's length (nulls
        answer False). Each key is hashed once and probed in the live periods until one
        may hold it (``Handle.contains_many_any``; the GIL is released on the native
        backend). Takes no lock.

        Raises TypeError, ValueError (malformed batch), FilterClosedError."""
        self._check_open()
        view = self._current()
        live = self._live(view, self._now())
        batch = as_batch(items, live[0].kernel_module if live else None, query=True)  # type: ignore[arg-type]  # checked at run time
        out = np.zeros(len(batch), dtype=np.bool_)
        if live:
            live[0].kernel_handle.contains_many_any([f.kernel_handle for f in live[1:]], batch, out)
        return out

    # -- statistics ---------------------------------------------------------------------------
    @property
    def items_added(self) -> int:
        """Keys added within the live periods (the sum of their header counts: adds that
        returned True in the last ``window`` to ``window + P`` seconds)."""
        view = self._current()
        return sum(f.items_added for f in self._live(view, self._now()))

    def expected_fp_rate(self) -> float:
        """``1 - prod (1 - P_i)`` over the live periods, ``P_i = (1 - e^(-k n_i / m))^k``
        at each period's item count (Bloom 1970)."""
        keep = 1.0
        view = self._current()
        for f in self._live(view, self._now()):
            keep *= 1.0 - f.expected_fp_rate()
        return 1.0 - keep

    @property
    def size_bytes(self) -> int:
        """Bytes of the listed period files (manifest and lock file excluded)."""
        return sum(f.size_bytes for f in self._current().filters)

    def info(self, *, scan: bool = False) -> dict[str, Any]:
        """A JSON-ready description: the parameters, the current period, and one entry per
        listed period (``period``, ``file``, ``start``, ``end`` in clock seconds,
        ``live``, ``items_added``, ``size_bytes``; with ``scan=True`` also
        ``count_ones`` and ``fill_ratio``, reading every bit)."""
        view = self._current()
        now = self._now()
        low = now - self._rule.periods
        rule = self._rule
        entries = []
        for n, f in zip(view.numbers, view.filters, strict=True):
            entry: dict[str, Any] = {
                "period": n,
                "file": period_name(n),
                "start": rule.start(n),
                "end": rule.start(n + 1),
                "live": n >= low,
                "items_added": f.items_added,
                "size_bytes": f.size_bytes,
            }
            if scan:
                ones = f.count_ones()
                entry.update(count_ones=ones, fill_ratio=ones / f.num_bits)
            entries.append(entry)
        return {
            "kind": "expiring",
            "path": self._path,
            "strategy": rule.strategy,
            "window": rule.window,
            "periods": rule.periods,
            "period_seconds": rule.period_seconds,
            "capacity": rule.capacity,
            "fp_rate": rule.fp_rate,
            "period_capacity": rule.period_capacity,
            "period_fp_rate": rule.period_fp_rate,
            "num_bits": self._config.num_bits,
            "num_hashes": self._config.num_hashes,
            "generation": view.word,
            "current_period": now,
            "items_added": sum(e["items_added"] for e in entries if e["live"]),
            "expected_fp_rate": self.expected_fp_rate(),
            "size_bytes": sum(e["size_bytes"] for e in entries),
            "readonly": self._readonly,
            "live_periods": entries,
        }

    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """:meth:`info` under the name every filter kind shares (``kind`` is
        ``"expiring"``); ``progress`` is accepted and not used."""
        return self.info(scan=scan)

    # -- properties ---------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Absolute path of the directory."""
        return self._path

    @property
    def window(self) -> float:
        """The window in seconds."""
        return self._rule.window

    @property
    def periods(self) -> int:
        """Periods per window."""
        return self._rule.periods

    @property
    def period_seconds(self) -> float:
        """P = window / periods."""
        return self._rule.period_seconds

    @property
    def capacity(self) -> int:
        """Distinct keys expected per window."""
        return self._rule.capacity

    @property
    def fp_rate(self) -> float:
        """The bound on the false-positive rate at ``capacity`` keys per window."""
        return self._rule.fp_rate

    @property
    def config(self) -> BloomConfig:
        """The shape of every period file."""
        return self._config

    @property
    def strategy(self) -> HashStrategy:
        """The hash strategy of every period."""
        return self._strategy

    @property
    def readonly(self) -> bool:
        """True if opened read-only."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    # -- verification -------------------------------------------------------------------------
    def check(self) -> None:
        """Check the directory against the handle: the lock file (size, magic, version,
        generation, not replaced), the manifest (fields, parameters, generation equal to
        the committed one or one ahead, at most ``periods + 1`` periods), and every listed
        period file: present, the manifest's shape, a sound header, length and padding.

        Raises ManifestError, MissingLayerError, LayerMismatchError, FormatError
        subclasses, FilterClosedError."""
        self._check_open()
        lock_path = self._lock_path
        try:
            lst = os.stat(lock_path)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        mine = os.fstat(self._lock_fd)
        if (lst.st_dev, lst.st_ino) != (mine.st_dev, mine.st_ino):
            raise ManifestError(
                "the lock file was replaced since the handle opened it",
                source=lock_path,
                expected=(mine.st_dev, mine.st_ino),
                actual=(lst.st_dev, lst.st_ino),
            )
        self._check_lock(os.pread(self._lock_fd, LOCK_SIZE, 0), mine.st_size)
        view = self._current()
        for n, f in zip(view.numbers, view.filters, strict=True):
            path = self._period_path(n)
            if not os.path.exists(path):
                if self._read_word() != view.word:
                    continue  # rotated away since the view was read
                raise MissingLayerError(f"period {n} is missing", source=path, expected=period_name(n), actual=None)
            self._check_shape(n, f.config, path)
            f.check()

    def verify(self) -> None:
        """:meth:`check`, then every listed period file opened afresh read-only and checked
        from its own header (as ``mmapbloom.verify_file``). Raises as :meth:`check`."""
        self.check()
        view = self._current()
        for n in view.numbers:
            path = self._period_path(n)
            try:
                fresh = BloomFilter.open(path, readonly=True)
            except FileNotFoundError:
                if self._read_word() != view.word:
                    continue
                raise MissingLayerError(
                    f"period {n} is missing", source=path, expected=period_name(n), actual=None
                ) from None
            try:
                self._check_shape(n, fresh.config, path)
                fresh.check()
            finally:
                fresh.close()

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self) -> None:
        """``msync`` the writable period files (writes already survive the process being
        killed; this is for power loss)."""
        for f in self._current().filters:
            if not f.readonly:
                f.flush()

    def close(self) -> None:
        """Close every period file and the lock file (idempotent); later use raises
        FilterClosedError."""
        Lifecycle.close(self)

    def _describe(self) -> str:
        return self._path

    def _close_lock(self) -> Any:
        return self._lock.thread_lock

    def _release(self) -> None:
        self._no_write = True
        self._closed = True
        self._close_files()

    def _close_files(self) -> None:
        _LIVE.discard(self)
        self._closed = True
        word, self._word = self._word, None
        if word is not None:  # a query in flight in another thread holds it: freed by the GC then
            with contextlib.suppress(BufferError):
                word.release()
                self._word_map.close()
        self._word_map = None
        if hasattr(self, "_lock"):
            self._lock.close()
        view, self._view = self._view, _EMPTY
        for f in list(view.filters) + [f for _, f in self._retired]:
            f.close()
        self._retired = []
        fd, self._lock_fd = self._lock_fd, -1
        os.close(fd)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the directory path and mode (the clock is not pickled: the receiver
        uses ``time.time``)."""
        self._check_open()
        return (type(self).open, (self._path, self._readonly))

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self._readonly else "read-write")
        return (
            f"<ExpiringBloomFilter {self._path} window={self._rule.window}s periods={self._rule.periods} "
            f"n={self._rule.capacity} p={self._rule.fp_rate} {state}>"
        )


def verify_expiring(path: PathLike) -> ExpiringBloomFilter:
    """Open ``path`` read-only and run :meth:`ExpiringBloomFilter.verify`; return the open
    handle (the caller closes it). Raises as :meth:`ExpiringBloomFilter.open`."""
    f = ExpiringBloomFilter.open(path, readonly=True)
    try:
        f.verify()
    except BaseException:
        f.close()
        raise
    return f
