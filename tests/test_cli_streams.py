"""The command line with closed or failing standard streams (issue 29, item 8), each run
as a real process whose fds are really closed (bash ``<&-`` / ``>&-``) or really fail
(``> /dev/full``): one line on stderr naming the stream, exit 2 (never 1, which means "an
item was absent", and never a silent 0), and never the filter file blamed for stdout."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from tests.test_cli import ENV, run

HAS_DEV_FULL = os.path.exists("/dev/full")


def shell(command: str, cwd: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m mmapbloom`` as ``$M`` inside ``bash -c COMMAND`` (the redirections are
    the shell's, so the process starts with the fds closed, as a user's would)."""
    env = {**ENV, "M": f"{shlex.quote(sys.executable)} -m mmapbloom"}
    return subprocess.run(["bash", "-c", command], capture_output=True, timeout=120, env=env, cwd=cwd)


def assert_stream_error(proc: subprocess.CompletedProcess[bytes], stream: str, *needles: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"error: {stream}: " in err, err
    assert "f.blm" not in err, err  # never the filter file
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture
def wd(tmp_path):  # type: ignore[no-untyped-def]
    assert run("create", "-q", str(tmp_path / "f.blm"), "-n", "1k", "-p", "1%").returncode == 0
    assert run("add", "-q", str(tmp_path / "f.blm"), "--key", "a").returncode == 0  # so check prints it
    assert run("create", "-q", "--counting", str(tmp_path / "c.blc"), "-n", "1k", "-p", "1%").returncode == 0
    assert run("add", "-q", str(tmp_path / "c.blc"), "--key", "a").returncode == 0
    return str(tmp_path)


@pytest.mark.parametrize(
    "command",
    [
        "$M add f.blm - <&-",
        "$M add f.blm <&-",
        "$M check f.blm - <&-",
        "$M check f.blm <&-",
        "$M remove c.blc - <&-",
    ],
)
def test_closed_stdin(wd: str, command: str) -> None:
    proc = shell(command, wd)
    assert_stream_error(proc, "stdin", "not open")


def test_closed_stdin_adds_nothing_even_after_keys(wd: str) -> None:
    proc = shell("$M add f.blm --key x - <&-; $M check -q f.blm --key x", wd)
    assert proc.returncode == 1, proc.stderr  # the check: x was never added (refused up front)
    assert proc.stderr.decode().count("stdin: not open") == 1


@pytest.mark.parametrize(
    "command",
    [
        "$M check f.blm --key a >&-",
        "$M check --count f.blm --key a >&-",
        "$M check --json f.blm --key a >&-",
        "$M info f.blm >&-",
        "$M info --json f.blm >&-",
        "$M verify f.blm >&-",
        "$M plan -n 1k -p 1% >&-",
        "$M add --json f.blm --key a >&-",
        "$M --version >&-",
        "$M info --help >&-",
    ],
)
def test_closed_stdout(wd: str, command: str) -> None:
    proc = shell(command, wd)
    assert_stream_error(proc, "stdout", "not open")


@pytest.mark.skipif(not HAS_DEV_FULL, reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "command",
    [
        "$M check f.blm --key a > /dev/full",
        "$M info f.blm > /dev/full",
        "$M verify f.blm > /dev/full",
        "$M plan -n 1k -p 1% > /dev/full",
        "$M create --json g.blm -n 1k -p 1% > /dev/full",
        "$M --version > /dev/full",
    ],
)
def test_failing_stdout(wd: str, command: str) -> None:
    proc = shell(command, wd)
    assert_stream_error(proc, "stdout", os.strerror(28))


def test_commands_that_do_not_write_stdout_work_with_it_closed(wd: str) -> None:
    proc = shell("$M add -q f.blm --key z >&- && $M check -q f.blm --key z >&- && echo ok", wd)
    assert proc.returncode == 0 and proc.stdout == b"ok\n", proc.stderr


# -- stderr closed (``2>&-``) or failing (``2>/dev/full``) ---------------------------------
# Found by the issue 29 audit: a progress bar asked ``sys.stderr.isatty()`` of None (an
# AttributeError traceback, exit 1), every error and report went to *stdout* instead
# (``print(file=None)``), and a failed write to a full stderr exited 1. The rule now: a write
# command's report that cannot be written is a stream error (exit 2, as for stdout; -q asks
# for none); an error line that cannot be written is dropped (the status tells); nothing
# meant for stderr ever reaches stdout.
STDERR_CASES = [
    # (command, status, stdout)
    ("$M add f.blm - < in.txt", 2, b""),
    ("$M add -q f.blm - < in.txt", 0, b""),
    ("$M add f.blm --key q", 2, b""),
    ("$M check f.blm - < in.txt", 0, b"a\n"),
    ("$M check f.blm --key a", 0, b"a\n"),
    ("$M check f.blm --key nope", 1, b""),
    ("$M remove c.blc --key a", 2, b""),
    ("$M create g.blm -n 1k -p 1%", 2, b""),
    ("$M create -q g2.blm -n 1k -p 1%", 0, b""),
    ("$M create f.blm -n 1k -p 1%", 2, b""),  # exists: the error line is dropped
    ("$M merge out.blm f.blm f2.blm", 2, b""),
    ("$M merge -q out2.blm f.blm f2.blm", 0, b""),
    ("$M verify missing.blm", 2, b""),
    ("$M check missing.blm --key a", 2, b""),
    ("$M info f.blm --bogus", 2, b""),
]


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full"])
@pytest.mark.parametrize(("command", "status", "stdout"), STDERR_CASES)
def test_closed_or_failing_stderr(wd: str, redirect: str, command: str, status: int, stdout: bytes) -> None:
    if redirect.endswith("/dev/full") and not HAS_DEV_FULL:
        pytest.skip("no /dev/full on this system")
    with open(os.path.join(wd, "in.txt"), "wb") as fh:
        fh.write(b"a\n")
    assert run("create", "-q", os.path.join(wd, "f2.blm"), "-n", "1k", "-p", "1%").returncode == 0
    proc = shell(f"{command} {redirect}", wd)
    assert (proc.returncode, proc.stdout) == (status, stdout), (proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("command", "unchanged"),
    [
        ("$M add --json f.blm --key new >&-", "$M check -q f.blm --key new"),  # 1: never added
        ("$M remove --json c.blc --key a >&-", "$M check -q c.blc --key a"),  # still there
        ("$M create --json g.blm -n 1k -p 1% >&-", "! test -e g.blm"),
        ("$M merge --json out.blm f.blm f.blm >&-", "! test -e out.blm"),
    ],
)
def test_closed_stdout_with_json_changes_nothing(wd: str, command: str, unchanged: str) -> None:
    """``--json`` with stdout closed is refused before anything is written (as a closed
    stdin is), so exit 2 never leaves the user guessing whether the write happened."""
    proc = shell(command, wd)
    assert_stream_error(proc, "stdout", "not open")
    after = shell(unchanged, wd)
    assert after.returncode == (1 if "check -q f.blm" in unchanged else 0), (after.returncode, after.stderr)
