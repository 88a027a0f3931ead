"""Units: parsing and formatting numbers for humans (counts, rates, bytes), and the one
progress-bar helper (tqdm) used by the command line and the merge tools."""

from __future__ import annotations

import functools
import sys
from typing import Any, Optional

__all__ = [
    "format_bytes",
    "format_count",
    "format_rate",
    "parse_count",
    "parse_duration",
    "parse_fp_rate",
    "parse_mode",
    "progress_bar",
]

_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_count(text: str) -> int:
    """Parse a positive whole number written for humans.

    Accepts digits with ``_`` or ``,`` separators (``1_000``, ``1,000``), decimal and
    scientific notation that comes out whole (``1e6``, ``2.5k``), and the decimal suffixes
    ``k`` (10^3), ``M`` (10^6), ``G`` (10^9) and ``T`` (10^12), in either case.

    Raises:
        ValueError: not a number, not whole, or below 1.

    >>> [parse_count(s) for s in ("50M", "1e6", "1_000", "10k", "2.5K", "9,586")]
    [50000000, 1000000, 1000, 10000, 2500, 9586]
    """
    s = text.strip().replace("_", "").replace(",", "")
    mult = 1
    if s and s[-1].lower() in _SUFFIXES:
        mult = _SUFFIXES[s[-1].lower()]
        s = s[:-1]
    from fractions import Fraction  # here, not at import: check --key and info never parse (issue 28 item 2)

    try:
        value = Fraction(s) * mult
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a number: {text!r} (examples: 1000, 1_000, 10k, 50M, 1e6)") from None
    if value.denominator != 1 or value < 1:
        raise ValueError(f"expected a whole number >= 1, got {text!r}")
    return int(value)


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Parse a duration in seconds: a positive number with an optional unit ``s``
    (seconds, the default), ``m`` (minutes), ``h`` (hours) or ``d`` (days).

    Raises:
        ValueError: not a number, an unknown unit, or not positive and finite.

    >>> [parse_duration(s) for s in ("30d", "12h", "90m", "45s", "2.5", "1e3")]
    [2592000.0, 43200.0, 5400.0, 45.0, 2.5, 1000.0]
    """
    s = text.strip().replace("_", "").lower()
    mult = 1
    if s and s[-1] in _DURATION_UNITS:
        mult = _DURATION_UNITS[s[-1]]
        s = s[:-1]
    from fractions import Fraction

    try:
        value = float(Fraction(s.strip()) * mult)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ValueError(f"not a duration: {text!r} (examples: 30d, 12h, 90m, 45s, 3600)") from None
    if not 0.0 < value < float("inf"):
        raise ValueError(f"a duration must be positive, got {text!r}")
    return value


def parse_fp_rate(text: str) -> float:
    """Parse a false-positive rate: ``0.01``, ``1e-3``, ``1/1000`` or a percentage ``1%``.

    Raises:
        ValueError: not a number, or not strictly between 0 and 1.

    >>> [parse_fp_rate(s) for s in ("1%", "0.1%", "0.01", "1e-3", "1/1000")]
    [0.01, 0.001, 0.01, 0.001, 0.001]
    """
    from fractions import Fraction

    s = text.strip().replace("_", "")
    scale = Fraction(1)
    if s.endswith("%"):
        s, scale = s[:-1], Fraction(1, 100)
    try:
        value = Fraction(s.strip()) * scale
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"not a rate: {text!r} (examples: 1%, 0.1%, 0.01, 1e-3)") from None
    if not 0 < value < 1:
        raise ValueError(f"a false-positive rate must be strictly between 0 and 1 (0% and 100%), got {text!r}")
    rate = float(value)
    if not 0.0 < rate < 1.0:  # 1e-400 is > 0 but rounds to 0.0 as a float
        raise ValueError(f"a false-positive rate of {text!r} is too close to {int(rate)} to compute with")
    return rate


def parse_mode(text: str) -> int:
    """Parse permission bits written in octal, as ``chmod`` takes them: ``664``, ``0664``
    or ``0o664``, in [0, 0o777] (no setuid, setgid or sticky bits).

    Raises:
        ValueError: not an octal number, or outside [0, 0o777] (the message shows the text).

    >>> [oct(parse_mode(s)) for s in ("0664", "640", "0o600", "0")]
    ['0o664', '0o640', '0o600', '0o0']
    """
    s = text.strip()
    digits = s[2:] if s[:2].lower() == "0o" else s
    if not digits or not all(c in "01234567" for c in digits):
        raise ValueError(f"expected octal permission bits such as 0664 or 0640, got {text!r}")
    value = int(digits, 8)
    if value > 0o777:
        raise ValueError(f"expected permission bits in 0000..0777 (no setuid, setgid or sticky bit), got {text!r}")
    return value


def format_bytes(n: float) -> str:
    """Decimal units, one decimal: ``1223`` -> ``'1.2 KB'``; below 1000, ``'999 B'``.

    >>> format_bytes(1223), format_bytes(1_198_157), format_bytes(999)
    ('1.2 KB', '1.2 MB', '999 B')
    """
    if n < 1000:
        return f"{int(n)} B"
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        n /= 1000
        if n < 999.95:
            return f"{n:.1f} {unit}"
    return f"{n / 1000:.1f} EB"


def format_rate(count: float, seconds: float) -> str:
    """A per-second rate with a decimal prefix and a trailing space for the unit:
    ``format_rate(2_500_000, 2) == '1.25 M'``; ``'inf'`` for a zero duration.

    >>> format_rate(2_500_000, 2), format_rate(12, 4)
    ('1.25 M', '3 ')
    """
    if seconds <= 0:
        return "inf"
    per_s = count / seconds
    for div, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if per_s >= div:
            return f"{per_s / div:.2f}{unit}"
    return f"{per_s:.0f} "


def format_count(count: int, noun: str) -> str:
    """``'1 item'``, ``'2,000 items'``: a count with thousands separators and the noun's
    plural when needed (regular English plurals only).

    >>> format_count(1, "item"), format_count(2000, "item"), format_count(0, "file")
    ('1 item', '2,000 items', '0 files')
    """
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def progress_bar(total: Optional[int], desc: str, enabled: Optional[bool] = None) -> Any:
    """A tqdm bar over bytes on stderr, or None. ``enabled=None`` shows it only when stderr
    is a terminal. The caller calls ``update(n)`` and ``close()`` on it.

    The bar starts no thread: tqdm's monitor thread, once started, runs until the process
    ends, and a later ``os.fork()`` of the then multi-threaded process is unsafe (Python
    3.12+ warns). These bars are updated after every chunk, so they do not need it."""
    if sys.stderr is None:  # started with stderr closed (2>&-): no bar, even if asked for
        return None
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    return _bar_class()(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr, leave=False
    )


@functools.lru_cache(maxsize=1)
def _bar_class() -> Any:
    """tqdm's bar class with its monitor thread off (for our bars only; other tqdm bars
    in the process keep tqdm's settings). tqdm is imported here, on first use."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    class _Bar(tqdm):  # type: ignore[misc]
        monitor_interval = 0

    return _Bar
