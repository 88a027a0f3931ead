"""The command line's item input: framing of long items across read blocks, several inputs
(all opened before anything is added; what was committed is reported on a failure), and
keys given with ``--key``."""

from __future__ import annotations

import io
import os
import pty
import random
import select
import time
from typing import Any

import pytest
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from mmapbloom import BloomConfig, BloomFilter, open_filter
from mmapbloom import cli
from tests.cli_support import run_cli
from tests.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "OPENBLAS_NUM_THREADS": "1"}


def run(*args: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``python -m mmapbloom ARGS`` in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args], input=stdin, capture_output=True, timeout=120, env=ENV
    )


class Pieces(io.RawIOBase):
    """A stream whose ``read1`` returns the data in the given piece sizes (cycled), so that
    items and ``\\r\\n`` terminators fall across read blocks at chosen places."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data, self._sizes, self._pos, self._i = data, sizes, 0, 0

    def read1(self, n: int = -1) -> bytes:
        size = min(n, self._sizes[self._i % len(self._sizes)])
        self._i += 1
        out = self._data[self._pos : self._pos + size]
        self._pos += len(out)
        return out


def frame(data: bytes, null: bool, sizes: list[int]) -> tuple[list[bytes], int]:
    items: list[bytes] = []
    consumed = 0
    for block, nbytes in cli._split_items(Pieces(data, sizes), null):  # type: ignore[arg-type]
        items.extend(block)
        consumed += nbytes
    return items, consumed


def reference(data: bytes, null: bool) -> list[bytes]:
    """The documented framing, stated directly on the whole input."""
    sep = b"\0" if null else b"\n"
    parts = data.split(sep)
    last = parts.pop()
    if not null:
        parts = [p[:-1] if p.endswith(b"\r") else p for p in parts]
    return parts + ([last] if last else [])


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\0", b"\xff", b""]), max_size=60).map(
        b"".join
    ),
    null=st.booleans(),
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=5),
)
def test_framing_does_not_depend_on_where_reads_end(data: bytes, null: bool, sizes: list[int]) -> None:
    items, consumed = frame(data, null, sizes)
    assert items == reference(data, null)
    assert consumed == len(data)


def test_items_longer_than_a_read_block(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli, "READ_BYTES", 64)
    rng = random.Random(7)
    long_items = [
        bytes(rng.getrandbits(8) | 1 for _ in range(n)).replace(b"\n", b"x").replace(b"\r", b"y")
        for n in (0, 63, 64, 65, 640, 6401)
    ]
    data = b"".join(item + (b"\r\n" if i % 2 else b"\n") for i, item in enumerate(long_items)) + b"tail" * 100
    items, consumed = frame(data, False, [64])
    assert items == long_items + [b"tail" * 100]
    assert consumed == len(data)
    # A \r\n split by a read boundary: the \r ends one block, the \n starts the next.
    data = b"z" * 63 + b"\r\n" + b"w" * 200 + b"\r\n"
    assert frame(data, False, [64])[0] == [b"z" * 63, b"w" * 200]


def test_a_line_of_many_megabytes_is_one_item(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 10 MiB: three 4 MiB reads for one item, then a short item (the real block size).
    big = bytes(range(32, 127)) * (10 * 2**20 // 95)
    path = tmp_path / "big.txt"
    path.write_bytes(big + b"\r\nshort\n")
    with open(path, "rb") as stream:
        items = [item for block, _ in cli._split_items(stream, False) for item in block]
    assert len(items) == 2 and items[0] == big and items[1] == b"short"
    filt = str(tmp_path / "f.blm")
    assert run("create", "-q", filt, "-n", "100", "-p", "1e-6").returncode == 0
    proc = run("add", filt, str(path))
    assert proc.returncode == 0, proc.stderr
    assert "added 2 items" in proc.stderr.decode()
    with BloomFilter.open(filt, readonly=True) as f:
        assert big in f and b"short" in f and big + b"\r" not in f


# -- several inputs ----------------------------------------------------------------------------
def make_filter(tmp_path) -> str:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "f.blm")
    assert run("create", "-q", path, "-n", "200k", "-p", "1e-6").returncode == 0
    return path


def items_added(path: str) -> int:
    with BloomFilter.open(path, readonly=True) as f:
        return f.items_added


def one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, proc
    assert "Traceback" not in err and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_add_with_a_directory_among_the_inputs_adds_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    filt = make_filter(tmp_path)
    a = tmp_path / "a.txt"
    a.write_bytes(b"".join(b"%d\n" % i for i in range(100_000)))  # more than one 65,536-item chunk
    (tmp_path / "dir").mkdir()
    one_line_error(run("add", filt, str(a), str(tmp_path / "dir")), "dir: is a directory")
    assert items_added(filt) == 0
    with BloomFilter.open(filt, readonly=True) as f:
        assert f.count_ones() == 0


def test_add_with_a_missing_input_after_stdin_reads_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    filt = make_filter(tmp_path)
    stdin = b"".join(b"%d\n" % i for i in range(1, 1001))
    one_line_error(
        run("add", filt, "-", str(tmp_path / "nonexistent"), stdin=stdin), "nonexistent: No such file or directory"
    )
    assert items_added(filt) == 0
    # check refuses the same way, before printing any answer
    proc = run("check", filt, "-", str(tmp_path / "nonexistent"), stdin=stdin)
    one_line_error(proc, "nonexistent")
    assert proc.stdout == b""


def test_add_unreadable_input_is_refused_before_adding(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() == 0:
        import pytest

        pytest.skip("root reads any file")
    filt = make_filter(tmp_path)
    a, locked = tmp_path / "a.txt", tmp_path / "locked.txt"
    a.write_bytes(b"x\n")
    locked.write_bytes(b"y\n")
    locked.chmod(0)
    one_line_error(run("add", filt, str(a), str(locked)), "locked.txt: Permission denied")
    assert items_added(filt) == 0


def test_add_failing_while_reading_reports_what_it_committed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # /proc/self/mem passes every check (a readable regular file) and then fails at its
    # first read with EIO: a real read error after the first chunk of a.txt was committed.
    filt = make_filter(tmp_path)
    a = tmp_path / "a.txt"
    a.write_bytes(b"".join(b"%d\n" % i for i in range(100_000)))
    err = one_line_error(
        run("add", filt, str(a), "/proc/self/mem"),
        "Input/output error",
        f"the first 65,536 items were committed to {filt}",
        "the rest were not added",
    )
    assert err.startswith("mmapbloom: error: /proc/self/mem")
    assert items_added(filt) == 65_536
    with BloomFilter.open(filt, readonly=True) as f:
        assert all(b"%d" % i in f for i in range(65_536))


def test_add_to_a_scalable_filter_that_cannot_grow_reports_what_it_committed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A directory whose growth rule underflows after 300 items (as an older version could
    # make): the update fails at its growth; the error line tells how far it got.
    from tests.test_scalable import make_unchecked

    make_unchecked(tmp_path / "old", 100, 0.01, tightening=1e-300).close()
    lines = tmp_path / "in.txt"
    lines.write_bytes(b"".join(b"line-%d\n" % i for i in range(1000)))
    err = one_line_error(run("add", str(tmp_path / "old"), str(lines)), "underflowed", "the rest were not added")
    committed = int(err.split("; the first ")[1].split(" items were committed")[0].replace(",", ""))
    assert 290 <= committed <= 1000
    with open_filter(str(tmp_path / "old"), readonly=True) as f:
        assert f.contains_many([b"line-%d" % i for i in range(committed)]).all()


# -- keys on the command line ------------------------------------------------------------------
def test_keys_on_the_command_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    filt = make_filter(tmp_path)
    proc = run(
        "add", filt, "--key", "https://example.org/a", "--key", "", "--key", b"\xff not utf-8", "--key", " spaced\r"
    )
    assert proc.returncode == 0, proc.stderr
    assert "added 4 items from 4 keys" in proc.stderr.decode()
    with BloomFilter.open(filt, readonly=True) as f:
        assert all(k in f for k in (b"https://example.org/a", b"", b"\xff not utf-8", b" spaced\r"))
        assert b"spaced" not in f and b" spaced" not in f
    # stdin is not read when only keys are given: this would hang on a terminal otherwise
    proc = run("check", filt, "--key", "https://example.org/a", "--key", "nope", stdin=b"https://example.org/a\n")
    assert (proc.returncode, proc.stdout) == (1, b"https://example.org/a\n")
    proc = run("check", filt, "--key", "nope", "--absent")
    assert (proc.returncode, proc.stdout) == (0, b"nope\n")
    # keys first, then the inputs, in order, also with an INPUT after the option
    proc = run("check", filt, "--key", b"\xff not utf-8", "-", stdin=b"x\n\n")
    assert (proc.returncode, proc.stdout) == (1, b"\xff not utf-8\n\n")
    proc = run("add", filt, "--key", "k1", "-", stdin=b"s1\n")
    assert "added 2 items from 1 key and 1 input" in proc.stderr.decode()
    assert items_added(filt) == 6


# -- add and check read stdin by default (moved from test_errors.py) --
@pytest.mark.slow
def test_add_usage_does_not_require_input(tmp_path: Any) -> None:
    err = run_cli("add", cwd=tmp_path).stderr
    assert "required: file" in err and "INPUT" not in err.split("required")[1], err
    path = str(tmp_path / "a.blm")
    BloomFilter.create(path, BloomConfig.for_items(100, 0.01)).close()
    proc = run_cli("add", path, stdin=b"x\ny\n")
    assert proc.returncode == 0 and "2 items" in proc.stderr  # stdin is the default
    assert "until end of input" not in proc.stderr  # a pipe: no prompt


@pytest.mark.slow
@pytest.mark.parametrize("sub", ["add", "check"])
def test_terminal_stdin_says_what_it_waits_for(tmp_path: Any, sub: str) -> None:
    path = str(tmp_path / "a.blm")
    BloomFilter.create(path, BloomConfig.for_items(100, 0.01)).close()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", sub, path], stdin=slave, stdout=subprocess.DEVNULL, stderr=slave, env=ENV
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"end of input" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        assert b"stdin" in seen and b"end of input" in seen, seen
        os.write(master, b"item\n\x04")  # one item, then end of input (Ctrl-D)
        assert proc.wait(30) in (0, 1)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    if sub == "add":
        with BloomFilter.open(path) as f:
            assert "item" in f
