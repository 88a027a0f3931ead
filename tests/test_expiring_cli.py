"""The command line on an expiring filter: ``create --window 30d`` (units s, m, h, d),
then ``add``, ``check``, ``info`` and ``verify`` on the directory."""

from __future__ import annotations

import json

import pytest

from mmapbloom import ExpiringBloomFilter
from mmapbloom.units import parse_duration
from tests.test_cli import run


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 2592000.0), ("12h", 43200.0), ("90m", 5400.0), ("45s", 45.0), ("7", 7.0), ("1.5D", 129600.0)],
)
def test_parse_duration(text, seconds) -> None:  # type: ignore[no-untyped-def]
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-1d", "3w", "d", "inf", "nan"])
def test_parse_duration_refuses(text) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        parse_duration(text)


def test_create_add_check_info_verify(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "seen")
    r = run("create", d, "--window", "30d", "--periods", "10", "-n", "10k", "-p", "1%")
    assert r.returncode == 0, r.stderr
    assert b"expiring filter, window 2.592e+06 s in 10 periods" in r.stderr
    with ExpiringBloomFilter.open(d, readonly=True) as f:
        assert f.window == 30 * 86400 and f.periods == 10 and f.capacity == 10_000
    r = run("add", d, stdin=b"a\nb\na\n")
    assert r.returncode == 0, r.stderr
    assert b"2 new" in r.stderr
    r = run("check", d, stdin=b"a\nb\n")
    assert r.returncode == 0, r.stderr
    r = run("check", d, stdin=b"a\nzzz-never\n")
    assert r.returncode == 1
    r = run("info", d, "--json")
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert record["kind"] == "expiring" and record["items_added"] == 2 and record["periods"] == 10
    r = run("info", d)
    assert b"expiring filter (window 2.592e+06 s, 10 periods)" in r.stdout
    assert b"10,000 items per window" in r.stdout
    r = run("verify", d)
    assert r.returncode == 0 and b"OK" in r.stdout, r


def test_create_window_refusals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "seen")
    for extra in (
        ["--window", "3w"],
        ["--window", "1d", "--scalable"],
        ["--periods", "4"],
        ["--window", "1d", "--bits", "100"],
    ):
        r = run("create", d, "-n", "1000", "-p", "0.01", *extra)
        assert r.returncode == 2, (extra, r)
    assert not (tmp_path / "seen").exists()
    assert run("create", d, "-n", "1000", "-p", "0.01", "--window", "1h").returncode == 0
    r = run("create", d, "-n", "1000", "-p", "0.01", "--window", "1h")
    assert r.returncode != 0
