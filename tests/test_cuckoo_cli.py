"""The command line with a cuckoo filter: create --cuckoo, add, check, remove, info, verify,
plan --cuckoo, and merge's refusal of a CKF1 shard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mmapbloom import CuckooFilter
from tests.conftest import ROOT


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "mmapbloom", *args], input=stdin, capture_output=True, cwd=ROOT)


def test_cuckoo_from_the_command_line(tmp_path: Path) -> None:
    path = str(tmp_path / "c.ckf")
    made = run("create", path, "--cuckoo", "-n", "1000", "-p", "0.001")
    assert made.returncode == 0, made.stderr
    assert b"cuckoo filter" in made.stderr
    assert run("add", path, stdin=b"a\nb\nc\n").returncode == 0
    checked = run("check", path, stdin=b"a\nzz\n")
    assert checked.returncode == 1 and checked.stdout == b"a\n"
    info = run("info", path, "--json")
    record = json.loads(info.stdout)
    assert record["kind"] == "CuckooFilter" and record["items_added"] == 3 and record["fingerprint_bits"] == 13
    assert b"cuckoo" in run("verify", path).stdout
    with CuckooFilter.open(path) as f:
        assert f.contains_many(["a", "b", "c"]).all()
    removed = run("remove", path, stdin=b"b\nzz\n")  # zz certainly absent: exit 1, b removed
    assert removed.returncode == 1 and b"removed 1 of 2" in removed.stderr, removed.stderr
    assert run("remove", path, "--key", "c").returncode == 0
    with CuckooFilter.open(path) as f:
        assert "a" in f and "b" not in f and "c" not in f and f.items_added == 1
        f.check()
    merged = run("merge", str(tmp_path / "out"), path, path)  # merge takes BLM1 shards only
    assert merged.returncode == 2 and b"CKF1" in merged.stderr and b"cuckoo" in merged.stderr
    assert not (tmp_path / "out").exists()
    assert run("create", path, "--cuckoo", "-n", "10", "-p", "0.01").returncode == 2  # exists
    assert run("create", str(tmp_path / "x"), "--cuckoo", "--bits", "100", "--hashes", "2").returncode == 2
    assert run("create", str(tmp_path / "y"), "-n", "10", "-p", "0.01", "--fingerprint-bits", "8").returncode == 2


def test_plan_cuckoo(tmp_path: Path) -> None:
    planned = run("plan", "--cuckoo", "-n", "1M", "-p", "1%", "0.1%", "--json")
    assert planned.returncode == 0, planned.stderr
    rows = json.loads(planned.stdout)
    assert [(r["fingerprint_bits"], r["bucket_size"], r["num_buckets"]) for r in rows] == [
        (10, 4, 263_158),
        (13, 4, 263_158),
    ]
    with CuckooFilter(1_000_000, 0.001) as f:  # plan agrees with the filter it sizes
        assert rows[1]["size_bytes"] == f.size_bytes and rows[1]["bits_per_item"] == f.bits_per_item()
    assert all(r["expected_fp_rate"] <= r["p"] for r in rows)
    text = run("plan", "--cuckoo", "-n", "100k", "-p", "1%", "--bucket-size", "2", "--fingerprint-bits", "16")
    assert text.returncode == 0 and b"buckets" in text.stdout and b" 16 " in text.stdout
    assert run("plan", "-n", "1M", "-p", "1%", "--fingerprint-bits", "8").returncode == 2  # needs --cuckoo
    assert run("plan", "--cuckoo", "-n", "1M", "-p", "1%", "--strategy", "M3B2").returncode == 2
    too_low = run("plan", "--cuckoo", "-n", "1M", "-p", "1e-12")
    assert too_low.returncode == 2 and b"32" in too_low.stderr
