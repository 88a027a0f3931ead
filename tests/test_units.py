"""mmapbloom.units: the numbers a user types (counts, durations, rates, modes) with each
refusal's message, the numbers printed for them (bytes, rates, counts), and the progress
bar (none unless asked for or on a terminal)."""

from __future__ import annotations

import io

import pytest

from mmapbloom import units


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", 1),
        ("1_000", 1000),
        ("9,586", 9586),
        ("1e6", 10**6),
        ("2.5k", 2500),
        ("50M", 5 * 10**7),
        ("3g", 3 * 10**9),
        ("1T", 10**12),
        (" 7 ", 7),
    ],
)
def test_parse_count(text: str, value: int) -> None:
    assert units.parse_count(text) == value


@pytest.mark.parametrize(
    "text, match",
    [
        ("abc", "not a number: 'abc'"),
        ("k", "not a number"),
        ("1/0", "not a number"),
        ("0", "expected a whole number >= 1, got '0'"),
        ("2.5", "whole number"),
        ("-3", "whole number"),
    ],
)
def test_parse_count_refusals(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        units.parse_count(text)


@pytest.mark.parametrize(
    "text, value",
    [
        ("30d", 2592000.0),
        ("12h", 43200.0),
        ("90m", 5400.0),
        ("45s", 45.0),
        ("2.5", 2.5),
        ("1_000", 1000.0),
        ("1e3", 1000.0),
    ],
)
def test_parse_duration(text: str, value: float) -> None:
    assert units.parse_duration(text) == value


@pytest.mark.parametrize(
    "text, match",
    [
        ("soon", "not a duration: 'soon'"),
        ("3w", "not a duration"),
        ("0s", "must be positive, got '0s'"),
        ("-1h", "must be positive"),
        ("1e999d", "not a duration: '1e999d'"),
    ],
)
def test_parse_duration_refusals(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        units.parse_duration(text)


@pytest.mark.parametrize(
    "text, value", [("1%", 0.01), ("0.1%", 0.001), ("0.01", 0.01), ("1e-3", 0.001), ("1/1000", 0.001), ("5 %", 0.05)]
)
def test_parse_fp_rate(text: str, value: float) -> None:
    assert units.parse_fp_rate(text) == pytest.approx(value)


@pytest.mark.parametrize(
    "text, match",
    [
        ("often", "not a rate: 'often'"),
        ("1/0", "not a rate"),
        ("0", "strictly between 0 and 1"),
        ("100%", "strictly between 0 and 1"),
        ("1.5", "strictly between"),
        ("1e-400", "too close to 0 to compute with"),
    ],
)
def test_parse_fp_rate_refusals(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        units.parse_fp_rate(text)


@pytest.mark.parametrize("text, value", [("0664", 0o664), ("640", 0o640), ("0o600", 0o600), ("0O755", 0o755), ("0", 0)])
def test_parse_mode(text: str, value: int) -> None:
    assert units.parse_mode(text) == value


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "octal permission bits"),
        ("0o", "octal"),
        ("rw-", "octal"),
        ("0689", "octal"),
        ("4755", "no setuid, setgid or sticky bit"),
        ("1000", "0000..0777"),
    ],
)
def test_parse_mode_refusals(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        units.parse_mode(text)


def test_format_bytes_every_unit() -> None:
    assert [units.format_bytes(n) for n in (0, 999, 1223, 1_198_157, 5e9, 7.2e12, 3e15)] == [
        "0 B",
        "999 B",
        "1.2 KB",
        "1.2 MB",
        "5.0 GB",
        "7.2 TB",
        "3.0 PB",
    ]
    assert units.format_bytes(999_960) == "1.0 MB"  # never '1000.0 KB'


def test_format_bytes_exabytes() -> None:
    assert units.format_bytes(4e18) == "4.0 EB"


def test_format_rate_every_prefix() -> None:
    assert units.format_rate(2_500_000, 2) == "1.25 M"
    assert units.format_rate(3e9, 1) == "3.00 G"
    assert units.format_rate(4500, 1) == "4.50 k"
    assert units.format_rate(12, 4) == "3 "
    assert units.format_rate(10, 0) == "inf"


def test_format_count_plural() -> None:
    assert [units.format_count(n, "item") for n in (0, 1, 2, 2000)] == ["0 items", "1 item", "2 items", "2,000 items"]


def test_progress_bar_only_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    class NotATerminal(io.StringIO):
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr("sys.stderr", NotATerminal())
    assert units.progress_bar(100, "x") is None
    assert units.progress_bar(100, "x", enabled=False) is None
    bar = units.progress_bar(1000, "copy", enabled=True)
    assert bar is not None
    try:
        bar.update(500)
        assert bar.n == 500 and bar.total == 1000 and bar.monitor_interval == 0  # no monitor thread
    finally:
        bar.close()
