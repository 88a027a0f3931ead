"""Options anywhere for every subcommand, the ``remove`` subcommand, and ``--json`` on every
subcommand that reports figures (issue 29, item 21); real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from mmapbloom import CountingBloomFilter
from tests.test_cli import ENV, assert_one_line_error, run
from tests.conftest import ROOT


def ok_json(*args: str, stdin: bytes = b"", status: int = 0) -> Any:
    proc = run(*args, stdin=stdin)
    assert proc.returncode == status, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def two(tmp_path):  # type: ignore[no-untyped-def]
    a, b = str(tmp_path / "a.blm"), str(tmp_path / "b.blm")
    for path, key in ((a, "x"), (b, "y")):
        assert run("create", "-q", path, "-n", "1k", "-p", "1e-6").returncode == 0
        assert run("add", "-q", path, "--key", key, "--key", "both").returncode == 0
    return tmp_path, a, b


def test_merge_takes_options_anywhere(two) -> None:  # type: ignore[no-untyped-def]
    tmp_path, a, b = two
    out = str(tmp_path / "out.blm")
    proc = run("merge", out, "--intersection", a, b, "-q")  # was "unrecognized arguments"
    assert proc.returncode == 0, proc.stderr
    proc = run("check", out, "--key", "both", "--key", "x")
    assert proc.stdout == b"both\n" and proc.returncode == 1
    assert run("merge", out, a, "--force", b, "--quiet").returncode == 0


def test_options_anywhere_in_every_subcommand(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = str(tmp_path / "f.blm")
    assert run("create", f, "-q", "-n", "1k", "-p", "1%").returncode == 0
    assert run("add", f, "--key", "k", "-q").returncode == 0
    assert run("check", f, "-", "--key", "k", "-q", stdin=b"k\n").returncode == 0
    assert json.loads(run("info", f, "--json").stdout)["items_added"] == 1
    assert run("verify", f, "--json", f).returncode == 0
    assert json.loads(run("plan", "-n", "1k", "--json", "-p", "1%").stdout)[0]["n"] == 1000
    assert_one_line_error(run("add", f, "--no-such-option"), "unrecognized arguments")


def test_remove_on_a_counting_filter_and_exit_status(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = str(tmp_path / "c.blc")
    assert run("create", "-q", "--counting", c, "-n", "1k", "-p", "1e-6").returncode == 0
    assert run("add", "-q", c, "-", stdin=b"a\nb\na\n").returncode == 0
    proc = run("remove", c, "-", stdin=b"a\nb\n")
    assert proc.returncode == 0, proc.stderr
    assert b"removed 2 of 2 items" in proc.stderr
    with CountingBloomFilter.open(c, readonly=True) as f:
        assert f.count("a") == 1 and f.count("b") == 0
    proc = run("remove", c, "--key", "a", "--key", "never")  # one certainly absent: exit 1
    assert proc.returncode == 1 and b"1 certainly absent" in proc.stderr, proc.stderr
    record = ok_json("remove", c, "--key", "a", "--json", status=1)  # a was removed already
    assert record == {**record, "items": 1, "removed": 0, "certainly_absent": 1}


def test_remove_refuses_a_kind_without_removal(two) -> None:  # type: ignore[no-untyped-def]
    _, a, _ = two
    assert_one_line_error(run("remove", a, "--key", "x"), "does not support removal", "--counting")


def test_json_create_add_check(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = str(tmp_path / "f.blm")
    rec = ok_json("create", f, "-n", "1k", "-p", "1%", "--json")
    assert rec["num_bits"] == 9586 and rec["num_hashes"] == 7 and rec["items_added"] == 0  # type: ignore[index]
    s = str(tmp_path / "s")
    rec = ok_json("create", s, "--scalable", "-n", "1k", "-p", "1%", "--json")
    assert rec["kind"] == "scalable"  # type: ignore[index]
    rec = ok_json("add", f, "-", "--json", stdin=b"a\nb\na\n")
    assert rec == {**rec, "items": 3, "new": 2, "already_present": 1}  # type: ignore[dict-item]
    rec = ok_json("check", f, "--json", "--key", "a", "--key", "zz", status=1)
    assert rec == {"file": f, "checked": 2, "might_be_present": 1, "certainly_absent": 1}


def test_json_verify_and_merge(two) -> None:  # type: ignore[no-untyped-def]
    tmp_path, a, b = two
    bad = str(tmp_path / "bad.blm")
    with open(a, "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read()[:100])
    rec = ok_json("verify", "--json", a, bad, status=2)
    assert rec["files"] == 2 and rec["failed"] == 1  # type: ignore[index]
    assert [r["ok"] for r in rec["results"]] == [True, False]  # type: ignore[index]
    assert "truncated" in rec["results"][1]["error"]  # type: ignore[index]
    out = str(tmp_path / "u.blm")
    rec = ok_json("merge", "--json", out, a, b)
    assert rec == {**rec, "output": os.path.abspath(out), "shards": 2, "intersection": False}  # type: ignore[dict-item]


def test_every_reporting_subcommand_has_json() -> None:
    for sub in ("plan", "create", "add", "remove", "check", "info", "verify", "merge"):
        proc = run(sub, "--help")
        assert b"--json" in proc.stdout, sub


def test_merge_shards_tool_takes_options_anywhere(two) -> None:  # type: ignore[no-untyped-def]
    tmp_path, a, b = two
    tool = os.path.join(ROOT, "tools", "merge_shards.py")
    proc = subprocess.run(
        [sys.executable, tool, str(tmp_path / "i.blm"), a, "--intersection", b, "--json"], capture_output=True, env=ENV
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["intersection"] is True, proc.stderr


def test_a_new_kind_plugs_into_create_as_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``create`` knows its kinds from one table: an entry (flag, own options, maker) is all
    a new kind needs, and the generic checks refuse its options with another kind."""
    from mmapbloom import cli

    made: list[object] = []

    def make(args: Any) -> int:
        made.append(args.slots)
        return 0

    def arguments(p: Any) -> None:
        p.add_argument("--slots", type=int, default=None)

    fake = cli.CreateKind(
        flag="--fake",
        help="a test kind",
        options={"slots": "--slots"},
        refuses={"sparse": "--sparse"},
        why="fake files are never sparse",
        make=make,
        arguments=arguments,
    )
    monkeypatch.setattr(cli, "CREATE_KINDS", [fake, *cli.CREATE_KINDS])
    assert cli.main(["create", "ignored.blm", "--fake", "--slots", "4"]) == 0 and made == [4]
    with pytest.raises(SystemExit) as exc:
        cli.main(["create", "ignored.blm", "-n", "1k", "-p", "1%", "--slots", "4"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["create", "ignored.blm", "--fake", "--sparse"])
