"""The ``mmapbloom`` command line, run as a real subprocess: output, exit codes, framing."""

from __future__ import annotations

import errno
import functools
import math
import mmap
import signal
import struct
import time
from pathlib import Path
from typing import Any
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from mmapbloom import BloomConfig, BloomFilter
from mmapbloom import CountingBloomFilter
from mmapbloom.cli import main as cli_main
from tests.cli_support import cli
from tests.conftest import ROOT, run_on_terminal

# One BLAS thread: numpy's import then costs a third less CPU in each of the many processes.
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "OPENBLAS_NUM_THREADS": "1"}


def run(
    *args: str, stdin: bytes = b"", cwd: str | None = None, umask: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m mmapbloom ARGS`` in a subprocess (stderr is a pipe, not a terminal),
    with ``umask`` set in the child if given."""
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=ENV,
        cwd=cwd,
        preexec_fn=None if umask is None else functools.partial(os.umask, umask),
    )


def run_all(*calls: tuple[list[str], bytes]) -> list[subprocess.CompletedProcess[bytes]]:
    """Run several independent ``python -m mmapbloom`` commands concurrently (each a real
    process); return their results in order."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mmapbloom", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        for args, _ in calls
    ]
    results = []
    for proc, (_args, stdin) in zip(procs, calls, strict=True):
        out, err = proc.communicate(stdin, timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def assert_one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    assert proc.returncode == 2, proc
    err = proc.stderr.decode()
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture
def filt(tmp_path):  # type: ignore[no-untyped-def]
    """A fresh filter file with a tiny false-positive rate, so that "absent" is exact here."""
    path = str(tmp_path / "f.blm")
    proc = run("create", path, "-n", "10k", "-p", "1e-9")
    assert proc.returncode == 0, proc.stderr
    return path


def items_in(path: str, items: list[bytes]) -> list[bool]:
    with BloomFilter.open(path, readonly=True) as f:
        return [f.might_contain(x) for x in items]


# -- plan --------------------------------------------------------------------------------
def test_plan_golden_table_and_human_numbers() -> None:
    proc, text, big = run_all(
        (["plan", "-n", "1_000", "1e6", "-p", "1%", "0.1%", "--json"], b""),
        (["plan", "-n", "1M", "-n", "1000", "-p", "0.01"], b""),
        (["plan", "-n", "50M", "10k", "-p", "1%"], b""),
    )
    assert proc.returncode == 0, proc.stderr
    rows = {(r["n"], r["p"]): r for r in json.loads(proc.stdout)}
    assert len(rows) == 4
    assert (rows[1000, 0.01]["num_bits"], rows[1000, 0.01]["num_hashes"], rows[1000, 0.01]["size_human"]) == (
        9586,
        7,
        "1.2 KB",
    )
    assert (rows[10**6, 0.01]["num_bits"], rows[10**6, 0.01]["size_human"]) == (9_585_059, "1.2 MB")
    assert (rows[10**6, 0.001]["num_bits"], rows[10**6, 0.001]["num_hashes"], rows[10**6, 0.001]["size_human"]) == (
        14_377_588,
        10,
        "1.8 MB",
    )
    assert rows[1000, 0.01]["size_bytes"] == 24 + (9586 + 7) // 8
    assert rows[1000, 0.01]["expected_fp_rate"] == pytest.approx(0.01, rel=0.01)
    assert rows[1000, 0.01]["bits_per_item"] == pytest.approx(9.586)

    assert text.returncode == 0
    out = text.stdout.decode()
    assert "9,585,059" in out and "9,586" in out and "1.2 MB" in out and "1.2 KB" in out
    assert len(out.strip().splitlines()) == 3  # header and one row per n

    assert big.returncode == 0 and b"50,000,000" in big.stdout and b"10,000 " in big.stdout


BAD_USAGE = [
    (["plan", "-n", "lots", "-p", "1%"], "not a number"),
    (["plan", "-n", "0", "-p", "1%"], "whole number"),
    (["plan", "-n", "1.5", "-p", "1%"], "whole number"),
    (["plan", "-n", "1000", "-p", "100%"], "between 0 and 1"),
    (["plan", "-n", "1000"], "required"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
]


def test_bad_usage_exit_2_one_line() -> None:
    for proc, (_, needle) in zip(run_all(*[(args, b"") for args, _ in BAD_USAGE]), BAD_USAGE, strict=True):
        assert_one_line_error(proc, needle)


# -- create ------------------------------------------------------------------------------
def test_create_refuses_existing_and_force_replaces_atomically(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "c.blm")
    proc = run("create", path, "-n", "1000", "-p", "1%")
    assert proc.returncode == 0, proc.stderr
    with BloomFilter.open(path) as f:
        assert f.config == BloomConfig(num_bits=9586, num_hashes=7)
        f.add("keep me")
    before = open(path, "rb").read()
    assert_one_line_error(run("create", path, "--bits", "100", "--hashes", "3"), "exists", "--force")
    assert open(path, "rb").read() == before  # untouched

    ino = os.stat(path).st_ino
    with BloomFilter.open(path, readonly=True) as old_reader:
        proc = run("create", path, "--bits", "1_000", "--hashes", "3", "--force")
        assert proc.returncode == 0, proc.stderr
        assert "keep me" in old_reader  # a reader of the old file keeps the old file
    assert os.stat(path).st_ino != ino  # replaced by rename, not rewritten in place
    with BloomFilter.open(path) as f:
        assert (f.num_bits, f.num_hashes, f.items_added, f.count_ones()) == (1000, 3, 0, 0)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_create_bad_usage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "x.blm")
    cases = [
        (["-n", "1000"], "-n and -p"),
        (["-n", "1000", "-p", "1%", "--bits", "100"], "not both"),
        ([], "give -n N -p P"),
        (["--bits", "0", "--hashes", "3"], "whole number"),
        (["--bits", "10", "--hashes", "3", "--bogus"], "unrecognized arguments"),
    ]
    for proc, (_, needle) in zip(run_all(*[(["create", path, *args], b"") for args, _ in cases]), cases, strict=True):
        assert_one_line_error(proc, needle)
    assert not os.path.exists(path)


def test_create_in_missing_directory_is_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(
        run("create", str(tmp_path / "no" / "x.blm"), "-n", "10", "-p", "1%"), "No such file or directory"
    )


def modes(directory: str) -> dict[str, int]:
    return {n: stat.S_IMODE(os.stat(os.path.join(directory, n)).st_mode) for n in sorted(os.listdir(directory))}


def test_create_mode_sets_exact_bits_and_growths_of_a_scalable_filter_keep_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A private umask (077) in every process: only --mode can make the files group-readable.
    path = str(tmp_path / "shared")
    proc = run("create", "-q", path, "--scalable", "-n", "100", "-p", "1%", "--mode", "0664", umask=0o077)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o775  # x where r is set
    assert modes(path) == {"layer-0000.blm": 0o664, "lock": 0o664, "manifest.json": 0o664}
    lines = b"".join(b"item-%d\n" % i for i in range(1000))
    proc = run("add", path, stdin=lines, umask=0o077)  # the growths: layers 1..3 and new manifests
    assert proc.returncode == 0, proc.stderr
    got = modes(path)
    assert [n for n in got if n.startswith("layer-") and n.endswith(".blm")] == [f"layer-{i:04d}.blm" for i in range(4)]
    assert set(got.values()) == {0o664}, {n: oct(m) for n, m in got.items()}  # side files (.mutex) too
    assert run("check", "-q", path, stdin=lines, umask=0o077).returncode == 0  # every item found

    # The plain kinds: the exact bits too (0640 is not what umask 077 would give).
    for name, extra, mode in (("p.blm", [], "640"), ("c.blc", ["--counting"], "0o604")):
        made = str(tmp_path / name)
        proc = run("create", "-q", made, "-n", "1000", "-p", "1%", "--mode", mode, *extra, umask=0o077)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(os.stat(made).st_mode) == int(mode.removeprefix("0o"), 8)
    with BloomFilter.open(str(tmp_path / "p.blm")) as f:  # still a sound, writable filter
        assert f.add("x") and "x" in f


@pytest.mark.parametrize("kind", [["--scalable"], []])
def test_create_mode_refuses_what_is_not_permission_bits(tmp_path, kind: list[str]) -> None:  # type: ignore[no-untyped-def]
    bad = ["0899", "1777", "4755", "rw-r--r--", "", "-644", "0o"]
    path = str(tmp_path / "x")
    procs = run_all(*[(["create", path, *kind, "-n", "100", "-p", "1%", "--mode", value], b"") for value in bad])
    for proc, value in zip(procs, bad, strict=True):
        err = assert_one_line_error(proc, "argument --mode", repr(value))
        assert "octal permission bits" in err or "permission bits in 0000..0777" in err, err
    assert not os.path.exists(path)


# -- add and check: framing --------------------------------------------------------------
def test_add_lf_crlf_invalid_utf8_empty_line_last_line(filt: str) -> None:
    data = b"plain\ncrlf\r\n  spaced  \n\xff\xfe not utf-8\n\ntab\tinside\r\nlast-no-newline"
    proc = run("add", filt, stdin=data)
    assert proc.returncode == 0, proc.stderr
    expected = [b"plain", b"crlf", b"  spaced  ", b"\xff\xfe not utf-8", b"", b"tab\tinside", b"last-no-newline"]
    assert all(items_in(filt, expected))
    # Only the terminator goes: no \r, no stripped whitespace, no added newline.
    assert not any(items_in(filt, [b"crlf\r", b"spaced", b"tab\tinside\r", b"plain\n", b"last-no-newline\n"]))
    with BloomFilter.open(filt) as f:
        assert f.items_added == len(expected)
    assert "7 new, 0 already present" in proc.stderr.decode()

    # check prints the same bytes back, one per line, in input order; CRLF input matches.
    proc = run("check", filt, stdin=b"\xff\xfe not utf-8\r\nplain\nnever added\ncrlf\r\n\n")
    assert proc.returncode == 1  # one item is absent
    assert proc.stdout == b"\xff\xfe not utf-8\nplain\ncrlf\n\n"


def test_add_null_framing(filt: str) -> None:
    data = b"multi\nline\0with\r\n\0\0trailing-nul-optional"
    proc = run("add", "-0", filt, stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert all(items_in(filt, [b"multi\nline", b"with\r\n", b"", b"trailing-nul-optional"]))
    assert not any(items_in(filt, [b"multi", b"line", b"with", b"with\r"]))
    proc = run("check", "-0", filt, stdin=b"with\r\n\0nope\0multi\nline\0")
    assert (proc.returncode, proc.stdout) == (1, b"with\r\n\0multi\nline\0")
    proc = run("check", "-0", "--absent", filt, stdin=b"with\r\n\0nope\0")
    assert (proc.returncode, proc.stdout) == (1, b"nope\0")


def test_empty_input(filt: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    proc = run("add", filt, str(empty))
    assert proc.returncode == 0 and "added 0 items" in proc.stderr.decode()
    proc = run("check", filt, stdin=b"")
    assert (proc.returncode, proc.stdout) == (0, b"")
    proc = run("check", "--count", filt, stdin=b"")
    assert (proc.returncode, proc.stdout) == (0, b"0 checked, 0 might be present, 0 certainly absent\n")
    with BloomFilter.open(filt) as f:
        assert f.items_added == 0 and f.count_ones() == 0


def test_add_files_and_stdin_and_duplicate_counts(filt: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"".join(b"a%d\n" % i for i in range(1000)))
    b.write_bytes(b"".join(b"b%d\n" % i for i in range(500)))
    proc = run("add", filt, str(a), "-", str(b), stdin=b"s1\ns2\na1\n")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "added 1,503 items from 3 inputs" in err and "1,502 new, 1 already present" in err
    assert "items/s" in err
    proc = run("add", filt, str(a))
    assert "0 new, 1,000 already present" in proc.stderr.decode()
    proc = run("check", "--count", filt, str(a), str(b), "-", stdin=b"s2\nzz\n")
    assert proc.returncode == 1
    assert proc.stdout == b"1502 checked, 1501 might be present, 1 certainly absent\n"


def test_check_exit_status_absent_count_quiet(filt: str) -> None:
    assert run("add", filt, stdin=b"x\ny\n").returncode == 0
    present, mixed, absent, all_absent, quiet, quiet_ok, count = run_all(
        (["check", filt], b"x\ny\n"),
        (["check", filt], b"x\nnot-there\ny\n"),
        (["check", "--absent", filt], b"x\nnot-there\n"),
        (["check", "--absent", filt], b"p\nq\n"),
        (["check", "-q", filt], b"x\nnot-there\n"),
        (["check", "--quiet", filt], b"x\n"),
        (["check", "--count", filt], b"x\nnot-there\ny\n"),
    )
    assert (present.returncode, present.stdout) == (0, b"x\ny\n")
    assert (mixed.returncode, mixed.stdout) == (1, b"x\ny\n")
    assert (absent.returncode, absent.stdout) == (1, b"not-there\n")  # x answered "might be present"
    assert (all_absent.returncode, all_absent.stdout) == (0, b"p\nq\n")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, b"", b"")
    assert (quiet_ok.returncode, quiet_ok.stdout) == (0, b"")
    assert (count.returncode, count.stdout) == (1, b"3 checked, 2 might be present, 1 certainly absent\n")


def test_check_works_on_a_read_only_file(filt: str) -> None:
    assert run("add", filt, stdin=b"ro\n").returncode == 0
    os.chmod(filt, 0o444)
    try:
        if os.access(filt, os.W_OK):  # root ignores permission bits
            pytest.skip("running as root: permission bits are not enforced")
        assert run("check", filt, stdin=b"ro\n").returncode == 0
        assert_one_line_error(run("add", filt, stdin=b"x\n"), "Permission denied")
    finally:
        os.chmod(filt, 0o644)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to count flock calls")
def test_add_takes_the_lock_once_per_chunk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Count the real flock(LOCK_EX) calls of one `add` of 200,000 lines (strace; the native
    # handle locks in C, where no Python hook sees it).
    filt = str(tmp_path / "big.blm")
    cfg = BloomConfig.for_items(200_000, 1e-6)
    BloomFilter.create(filt, cfg).close()
    src = tmp_path / "many.txt"
    src.write_bytes(b"".join(b"line-%d\n" % i for i in range(200_000)))
    log = tmp_path / "strace.log"
    proc = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=flock",
            "-o",
            str(log),
            sys.executable,
            "-m",
            "mmapbloom",
            "add",
            "-q",
            filt,
            str(src),
        ],
        capture_output=True,
        timeout=300,
        env={**ENV, "MMAPBLOOM_LOCK": "flock"},  # the mutex takes no syscall: count the flock fallback's locks
    )
    if proc.returncode != 0 and b"ptrace" in proc.stderr:
        pytest.skip(f"strace cannot trace here: {proc.stderr.decode().strip()}")
    assert proc.returncode == 0, proc.stderr
    locks = [line for line in log.read_text().splitlines() if "LOCK_EX" in line and line.rstrip().endswith("= 0")]
    # `add` reads 65,536 lines per chunk (4 chunks: 3 x 65,536 and 3,392). The batch writer
    # locks once per CHUNK_KEYS keys; the native one once per min(CHUNK_KEYS, 2**20 // k)
    # (its staging buffer): one lock per batch of keys, never per line.
    from mmapbloom import BACKEND
    from mmapbloom.base import CHUNK_KEYS

    per_lock = min(CHUNK_KEYS, 2**20 // cfg.num_hashes) if BACKEND == "native" else CHUNK_KEYS
    assert len(locks) == sum(-(-n // per_lock) for n in (65_536, 65_536, 65_536, 200_000 - 3 * 65_536)), locks
    with BloomFilter.open(filt) as f:
        assert f.items_added == 200_000
        assert f.contains_many([b"line-0", b"line-199999"]).all()


def test_check_into_a_closed_pipe_exits_quietly(filt: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "many.txt"
    src.write_bytes(b"".join(b"line-%d\n" % i for i in range(100_000)))  # > a pipe buffer of output
    assert run("add", "-q", filt, str(src)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", "check", filt, str(src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"line-0\n"
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    assert proc.wait(60) == 141
    assert err == b""


def test_add_progress_bar_only_on_a_terminal(filt: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(b"p%d\n" % i for i in range(1000)))
    status, text = run_on_terminal([sys.executable, "-m", "mmapbloom", "add", filt, str(src)], ENV)
    assert status == 0
    assert "add:" in text and "B/s" in text and "added 1,000 items" in text, text  # tqdm over bytes, then the summary
    piped = run("add", filt, str(src))  # stderr is a pipe: the summary line only
    assert piped.stderr.decode().count("\n") == 1 and "add:" not in piped.stderr.decode()


# -- info and verify -------------------------------------------------------------------------
def test_info_json_and_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "i.blm")
    assert run("create", path, "-n", "1000", "-p", "1%").returncode == 0
    assert run("add", path, stdin=b"".join(b"k%d\n" % i for i in range(1000))).returncode == 0
    proc, text = run_all((["info", path, "--json"], b""), (["info", path], b""))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["strategy"], info["num_bits"], info["num_hashes"], info["size_bytes"]) == ("M3M2", 9586, 7, 1223)
    assert info["items_added"] in range(985, 1001)  # a few adds may set no new bit
    assert info["approx_items"] == pytest.approx(1000, rel=0.05)
    assert info["fill_ratio"] == pytest.approx(0.518, abs=0.02)  # 1 - e^(-kn/m) at capacity
    assert info["expected_fp_rate"] == pytest.approx(0.01, rel=0.1)
    assert info["observed_fp_rate"] == pytest.approx(0.01, rel=0.2)
    assert info["over_capacity"] is False
    out = text.stdout.decode()
    assert text.returncode == 0
    for needle in ("M3M2", "9,586", "1,223 bytes (1.2 KB)", "approx items", "over design point  no"):
        assert needle in out, out


def test_info_over_design_point_and_warning_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "small.blm")
    assert run("create", path, "-n", "100", "-p", "1%").returncode == 0
    proc = run("add", "-q", path, stdin=b"".join(b"k%d\n" % i for i in range(1000)))
    assert proc.returncode == 0
    err = proc.stderr.decode()
    assert err.startswith("mmapbloom: warning: ") and err.count("\n") == 1, err
    as_json, as_text = run_all((["info", "--json", path], b""), (["info", path], b""))
    assert json.loads(as_json.stdout)["over_capacity"] is True
    assert "over design point  yes" in as_text.stdout.decode()


def damaged_files(tmp_path) -> dict[str, tuple[str, str]]:  # type: ignore[no-untyped-def]
    """name -> (path, expected words in the error)."""
    good = BloomFilter(BloomConfig(num_bits=100, num_hashes=3))
    good.add("x")
    image = good.to_bytes()  # 24 + 13 bytes; bits 100..103 of the last byte are padding
    variants = {
        "truncated": (image[:-1], "truncated"),
        "overlong": (image + b"\0", "over-long"),
        "magic": (b"XXXX" + image[4:], "bad magic"),
        "scheme": (image[:4] + b"NOPE" + image[8:], "unknown hash strategy"),
        "zero_k": (image[:16] + b"\0\0\0\0" + image[20:], "num_hashes is 0"),
        "padding": (image[:-1] + bytes([image[-1] | 0x80]), "padding"),
        "short_header": (image[:10], "truncated header"),
        "empty": (b"", "truncated header"),
    }
    out = {}
    for name, (data, words) in variants.items():
        p = tmp_path / f"{name}.blm"
        p.write_bytes(data)
        out[name] = (str(p), words)
    return out


def test_verify_good_and_each_kind_of_damage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = str(tmp_path / "good.blm")
    assert run("create", good, "--bits", "100", "--hashes", "3").returncode == 0
    damaged = damaged_files(tmp_path)
    ok, bad_one, everything = run_all(
        (["verify", good], b""),
        (["verify", damaged["padding"][0]], b""),
        (["verify", good, *[p for p, _ in damaged.values()], str(tmp_path / "missing.blm"), str(tmp_path)], b""),
    )
    assert ok.returncode == 0 and ok.stdout == f"{good}: OK (m=100, k=3, strategy M3M2, 37 bytes)\n".encode()
    assert_one_line_error(bad_one, "FAILED", "padding", "padding.blm")
    assert everything.returncode == 2
    assert everything.stdout.decode().count(": OK") == 1
    lines = everything.stderr.decode().splitlines()
    assert len(lines) == len(damaged) + 2 and all("FAILED" in line for line in lines)
    for (path, words), line in zip(damaged.values(), lines[:-2], strict=True):  # the last two: checked below
        assert path in line and words in line, (path, words, line)
    assert "missing.blm: No such file" in lines[-2] and "directory" in lines[-1]


def test_damaged_or_missing_file_is_exit_2_without_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path, words = damaged_files(tmp_path)["truncated"]
    missing = str(tmp_path / "nope.blm")
    calls = [
        (["info", path], b""),
        (["add", path], b"x\n"),
        (["check", path], b"x\n"),
        (["info", missing], b""),
        (["add", missing], b"x\n"),
        (["check", str(tmp_path)], b"x\n"),
    ]
    info, add, check, info_missing, add_missing, check_dir = run_all(*calls)
    for proc in (info, add, check):
        assert_one_line_error(proc, words, path)
    assert_one_line_error(info_missing, "No such file", missing)
    assert_one_line_error(add_missing, "No such file", missing)
    assert_one_line_error(check_dir, "directory")


# -- merge, entry points ------------------------------------------------------------------------
def test_merge_subcommand_and_tools_script_agree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(1000, 0.01)
    shards = []
    for i in range(3):
        p = str(tmp_path / f"s{i}.blm")
        with BloomFilter.create(p, cfg) as f:
            f.update(f"{i}-{j}" for j in range(200))
        shards.append(p)
    a = run("merge", str(tmp_path / "a.blm"), *shards)
    assert a.returncode == 0, a.stderr
    assert "merged 3 shards (OR)" in a.stderr.decode() and "GB/s" in a.stderr.decode()
    tool = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "merge_shards.py"),
            str(tmp_path / "b.blm"),
            str(tmp_path / "s*.blm"),
        ],
        capture_output=True,
        timeout=120,
        env=ENV,
    )
    assert tool.returncode == 0, tool.stderr
    assert (tmp_path / "a.blm").read_bytes() == (tmp_path / "b.blm").read_bytes()
    bad = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "merge_shards.py"), str(tmp_path / "c.blm")],
        capture_output=True,
        timeout=120,
        env=ENV,
    )
    assert_one_line_error(bad, "merge_shards.py: error:")


def test_help_on_every_subcommand() -> None:
    subs = ("plan", "create", "add", "check", "info", "verify", "merge")
    for sub, proc in zip(subs, run_all(*[([sub, "--help"], b"") for sub in subs]), strict=True):
        assert proc.returncode == 0, (sub, proc.stderr)
        assert proc.stdout.startswith(b"usage: mmapbloom " + sub.encode()), sub
        if sub in ("add", "check"):
            framing = proc.stdout.decode()
            assert "\\r\\n" in framing and "NUL" in framing and "nothing" in framing


def test_console_script() -> None:
    script = os.path.join(os.path.dirname(sys.executable), "mmapbloom")
    if not os.path.exists(script):
        pytest.skip("package not installed with its console script")
    proc = subprocess.run([script, "plan", "-n", "1000", "-p", "1%"], capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"9,586" in proc.stdout


# -- interrupted add, numbers a user reads wrong, the CLI on counting and scalable filters,
# OS errors named with the file (moved from test_edge_cases.py and test_errors.py) --
def test_cli_add_interrupted_reports_what_was_committed(tmp_path: Path) -> None:
    path = str(tmp_path / "i.blm")
    assert cli("create", path, "-n", "5M", "-p", "1e-6").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", "add", path], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None
    for i in range(4):
        proc.stdin.write(b"".join(b"line-%d\n" % j for j in range(i * 100_000, (i + 1) * 100_000)))
        proc.stdin.flush()
    deadline = time.time() + 60
    with BloomFilter.open(path, readonly=True) as f:
        while f.items_added == 0 and time.time() < deadline:
            time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    text = err.decode()
    committed = int(text.split("the first ")[1].split(" item")[0].replace(",", ""))
    with BloomFilter.open(path, readonly=True) as f:
        present = f.contains_many([f"line-{j}" for j in range(400_000)])
        assert f.items_added == committed == int(present.sum()) and present[:committed].all()


def test_empty_filter_numbers_are_not_negative_zero(tmp_path: Path) -> None:
    f = BloomFilter(BloomConfig.for_items(1000, 0.01))
    for value in (f.approx_items(), f.expected_fp_rate(), f.observed_fp_rate(), f.fill_ratio()):
        assert value == 0 and math.copysign(1, value) == 1
    path = str(tmp_path / "e.blm")
    assert cli("create", path, "-n", "1000", "-p", "1%").returncode == 0
    text, js = cli("info", path).stdout.decode(), cli("info", path, "--json").stdout.decode()
    # the path itself may hold "-0" (pytest's basetemp is often .../pytest-0/...)
    assert "-0" not in text.replace(path, "FILE") and "-0" not in js.replace(path, "FILE")
    report = json.loads(js)
    assert report["approx_items"] == 0 and report["expected_fp_rate"] == 0


def test_saturated_items_counter_is_labelled(tmp_path: Path) -> None:
    path = tmp_path / "s.blm"
    with BloomFilter.create(path, BloomConfig(num_bits=1000, num_hashes=3)) as f:
        f.add("x")
    data = bytearray(path.read_bytes())
    data[20:24] = struct.pack("<I", 2**32 - 1)
    path.write_bytes(bytes(data))
    text = cli("info", str(path)).stdout.decode()
    assert "4,294,967,295 (saturated" in text
    assert json.loads(cli("info", str(path), "--json").stdout)["items_saturated"] is True


def test_plural_in_add_report(tmp_path: Path) -> None:
    path = str(tmp_path / "p.blm")
    assert cli("create", path, "-n", "1000", "-p", "1%").returncode == 0
    err = cli("add", path, stdin=b"one\n").stderr.decode()
    assert "added 1 item from 1 input to" in err


def test_cli_add_and_check_on_a_counting_filter(tmp_path: Path) -> None:
    path = str(tmp_path / "c.blc")
    made = cli("create", path, "-n", "1000", "-p", "1%", "--counting", "--counter-bits", "8")
    assert made.returncode == 0 and b"counting filter, 8-bit counters" in made.stderr
    assert cli("add", path, stdin=b"a\nb\n").returncode == 0
    check = cli("check", path, stdin=b"a\nb\nzz\n")
    assert check.returncode == 1 and check.stdout == b"a\nb\n"
    info = json.loads(cli("info", path, "--json").stdout)
    assert info["kind"] == "CountingBloomFilter" and info["counter_bits"] == 8 and info["items_added"] == 2
    assert cli("verify", path).returncode == 0
    with CountingBloomFilter.open(path) as f:
        f.remove("a")
        assert "a" not in f and "b" in f


def test_cli_on_a_scalable_filter(tmp_path: Path) -> None:
    path = str(tmp_path / "grow")
    made = cli("create", path, "--scalable", "-n", "1000", "-p", "1%")
    assert made.returncode == 0 and b"scalable filter" in made.stderr
    assert cli("add", path, stdin=b"".join(b"u%d\n" % i for i in range(5000))).returncode == 0
    check = cli("check", path, "-c", stdin=b"".join(b"u%d\n" % i for i in range(5000)))
    assert check.returncode == 0 and b"5000 might be present" in check.stdout
    info = json.loads(cli("info", path, "--json").stdout)
    assert info["kind"] == "scalable" and info["num_layers"] == 3 and len(info["layers"]) == 3
    assert "layers:" in cli("info", path).stdout.decode()
    assert cli("verify", path).returncode == 0
    assert cli("create", path, "--scalable", "-n", "10", "-p", "1%").returncode == 2  # exists


@pytest.mark.slow
def test_verify_and_info_name_the_file_on_a_bare_os_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = str(tmp_path / "v.blm")
    BloomFilter.create(path, BloomConfig(num_bits=800, num_hashes=3)).close()

    def no_memory(*a: Any, **k: Any) -> Any:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_memory)
    assert cli_main(["verify", path]) == 2
    err = capsys.readouterr().err
    assert "FAILED" in err and path in err and "Cannot allocate memory" in err, err
    for sub in (["info", path], ["check", path], ["add", path]):
        assert cli_main(sub) == 2
        err = capsys.readouterr().err
        assert path in err and "Cannot allocate memory" in err, (sub, err)
