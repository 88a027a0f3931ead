"""``mmapbloom.cli.main`` called in this process (no subprocess): every subcommand with its
options and refusals, what it prints and its exit status, for every filter kind. The
subprocess tests (test_cli.py) check the framing of a real process; these check the
branches of each subcommand, and are what the coverage of the pure tier measures."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter, get_strategy
from mmapbloom import format as fmt
from mmapbloom.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``mmapbloom ARGV``; a usage error is status 2."""
    try:
        status = main(list(argv))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return status, out, err


def feed(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make ``data`` the standard input the subcommands read (a pipe, not a terminal)."""

    class Stdin(io.TextIOWrapper):
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr("sys.stdin", Stdin(io.BytesIO(data)))


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status, _, err = run(capsys, *argv)
    assert status == 2, (argv, err)
    assert "error:" in err and "Traceback" not in err, err
    return err


# -- plan -----------------------------------------------------------------------------------------
def test_plan_prints_one_row_per_capacity_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "plan", "-n", "1000", "-n", "1M", "-p", "1%", "-p", "0.001")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["n", "p", "m", "(bits)"]
    assert len(lines) == 1 + 4  # 2 capacities x 2 rates
    cfg = BloomConfig.for_items(1_000_000, 0.001)
    assert any(f"{cfg.num_bits:,}" in line and line.split()[0] == "1,000,000" for line in lines[1:]), out


def test_plan_json_matches_the_sizing(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "plan", "-n", "5000", "-p", "1e-4", "--json", "--strategy", "m3b2")
    assert status == 0
    (row,) = json.loads(out)
    cfg = BloomConfig.for_items(5000, 1e-4, strategy=get_strategy("M3B2"))
    assert row["num_bits"] == cfg.num_bits and row["num_hashes"] == cfg.num_hashes
    assert row["size_bytes"] == fmt.HEADER_SIZE + fmt.body_size(cfg.num_bits)
    assert row["bits_per_item"] == pytest.approx(cfg.num_bits / 5000)


def test_plan_cuckoo_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "plan", "--cuckoo", "-n", "10000", "-p", "0.001", "--json")
    assert status == 0
    (row,) = json.loads(out)
    assert row["kind"] == "CuckooFilter" and row["bucket_size"] == 4
    assert 0 < row["load_at_n"] <= 1 and row["expected_fp_rate"] <= 0.001
    status, out, _ = run(capsys, "plan", "--cuckoo", "-n", "10000", "-p", "0.001", "--bucket-size", "2")
    assert status == 0 and out.splitlines()[0].split()[:5] == ["n", "p", "buckets", "b", "f"]
    assert out.splitlines()[1].split()[3] == "2"


def test_plan_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "plan", "-n", "1000", "-p", "1%", "--fingerprint-bits", "8")
    assert "add --cuckoo" in err
    err = usage_error(capsys, "plan", "--cuckoo", "-n", "1000", "-p", "1%", "--strategy", "M3B2")
    assert "M3C1" in err


# -- create -------------------------------------------------------------------------------------
def test_create_with_bits_and_hashes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "b.blm")
    status, out, _ = run(capsys, "create", path, "--bits", "8000", "--hashes", "5", "--json")
    assert status == 0
    record = json.loads(out)
    assert record["num_bits"] == 8000 and record["num_hashes"] == 5
    with BloomFilter.open(path, readonly=True) as f:
        assert f.num_bits == 8000 and f.num_hashes == 5


def test_create_text_report_mode_and_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "m.blm")
    status, _, err = run(capsys, "create", path, "-n", "1000", "-p", "1%", "--mode", "600", "--strategy", "m3b2")
    assert status == 0 and "created" in err and "strategy M3B2" in err
    assert os.stat(path).st_mode & 0o777 == 0o600
    status, out, err = run(capsys, "create", str(tmp_path / "q.blm"), "-n", "1000", "-p", "1%", "-q")
    assert status == 0 and out == "" and err == ""
    status, _, err = run(capsys, "create", path, "-n", "1000", "-p", "1%")
    assert status == 2 and "use --force to replace it" in err
    status, _, _ = run(capsys, "create", path, "-n", "1000", "-p", "1%", "--force", "-q")
    assert status == 0


def test_create_counting_with_8_bit_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "c.blc")
    status, out, _ = run(
        capsys, "create", path, "-n", "1000", "-p", "1%", "--counting", "--counter-bits", "8", "--json"
    )
    assert status == 0 and json.loads(out)["counter_bits"] == 8
    with CountingBloomFilter.open(path, readonly=True) as f:
        assert f.counter_bits == 8


def test_create_cuckoo_and_its_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "k.ckf")
    status, _, err = run(capsys, "create", path, "--cuckoo", "-n", "2000", "-p", "1e-3", "--fingerprint-bits", "16")
    assert status == 0 and "cuckoo filter" in err and "16-bit fingerprints" in err
    with CuckooFilter.open(path, readonly=True) as f:
        assert f.fingerprint_bits == 16 and f.capacity >= 2000
    status, _, err = run(capsys, "create", path, "--cuckoo", "-n", "2000", "-p", "1e-3")
    assert status == 2 and "use --force to replace it" in err
    assert "--bits/--hashes" in usage_error(
        capsys, "create", str(tmp_path / "x"), "--cuckoo", "--bits", "80", "--hashes", "3"
    )
    err = usage_error(capsys, "create", str(tmp_path / "y"), "-n", "10", "-p", "1%", "--fingerprint-bits", "8")
    assert "--fingerprint-bits needs --cuckoo" in err


def test_create_kinds_that_cannot_be_combined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(tmp_path / "z")
    err = usage_error(capsys, "create", target, "-n", "10", "-p", "1%", "--scalable", "--counting")
    assert "--scalable and --counting cannot be combined" in err
    err = usage_error(capsys, "create", target, "-n", "10", "-p", "1%", "--scalable", "--sparse")
    assert "--scalable and --sparse cannot be combined" in err
    err = usage_error(capsys, "create", target, "-n", "10", "-p", "1%", "--counting", "--growth", "3")
    assert "--counting and --growth cannot be combined" in err
    err = usage_error(capsys, "create", target, "-n", "10", "-p", "1%", "--window", "1h", "--force")
    assert "--window and --force cannot be combined" in err
    assert "--scalable needs -n" in usage_error(capsys, "create", target, "--scalable", "--bits", "80", "--hashes", "3")
    assert "--window needs -n" in usage_error(
        capsys, "create", target, "--window", "1h", "--bits", "80", "--hashes", "3"
    )
    assert "not both" in usage_error(capsys, "create", target, "-n", "10", "-p", "1%", "--bits", "80")
    assert "go together" in usage_error(capsys, "create", target, "-n", "10")
    assert "--bits M --hashes K" in usage_error(capsys, "create", target, "--bits", "80")
    assert os.listdir(tmp_path) == []


def test_create_scalable_with_growth_and_tightening(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "grow")
    argv = ["create", path, "--scalable", "-n", "500", "-p", "1%", "--growth", "4", "--tightening", "0.7"]
    status, _, err = run(capsys, *argv)
    assert status == 0 and "growth 4, tightening 0.7" in err
    status, _, err = run(capsys, *argv)
    assert status == 2 and path in err
    status, out, _ = run(capsys, "create", str(tmp_path / "g2"), "--scalable", "-n", "500", "-p", "1%", "--json")
    assert status == 0 and json.loads(out)["kind"] == "scalable"


def test_create_expiring_and_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "exp")
    status, _, err = run(capsys, "create", path, "--window", "1h", "--periods", "4", "-n", "1000", "-p", "1%")
    assert status == 0 and "expiring filter, window 3600 s in 4 periods" in err
    feed_items = ["add", path, "--key", "a", "--key", "b", "-q"]
    assert run(capsys, *feed_items)[0] == 0
    status, out, _ = run(capsys, "info", path)
    assert status == 0 and "expiring filter (window 3600 s, 4 periods)" in out and "items per window" in out
    status, out, _ = run(capsys, "verify", path)
    assert status == 0 and out.startswith(f"{path}: OK (m=")


# -- add, check, remove ------------------------------------------------------------------------------
@pytest.fixture
def bloom(tmp_path: Path) -> str:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, BloomConfig.for_items(10_000, 1e-6)).close()
    return path


def test_add_from_stdin_keys_and_files(
    bloom: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = tmp_path / "items.txt"
    listing.write_bytes(b"f1\nf2\n")
    status, _, err = run(capsys, "add", bloom, str(listing), "--key", "k1")
    assert status == 0 and "added 3 items from 1 key and 1 input" in err and "3 new" in err
    feed(monkeypatch, b"s1\ns2\nf1\n")
    status, out, _ = run(capsys, "add", bloom, "--json")
    assert status == 0
    assert json.loads(out) | {"seconds": 0} == {
        "file": bloom,
        "items": 3,
        "new": 2,
        "already_present": 1,
        "seconds": 0,
    }
    with BloomFilter.open(bloom, readonly=True) as f:
        assert all(x in f for x in ("f1", "f2", "k1", "s1", "s2")) and f.items_added == 5


def test_add_null_separated(bloom: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "items.bin"
    listing.write_bytes(b"a b\0line\nwith newline\0")
    assert run(capsys, "add", bloom, "-0", str(listing), "-q")[0] == 0
    with BloomFilter.open(bloom, readonly=True) as f:
        assert "a b" in f and "line\nwith newline" in f and f.items_added == 2


def test_add_missing_input_is_refused_before_adding(
    bloom: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "add", bloom, "--key", "x", str(tmp_path / "missing.txt"))
    assert status == 2 and "missing.txt" in err
    with BloomFilter.open(bloom, readonly=True) as f:
        assert f.items_added == 0


def test_check_prints_present_absent_counts_and_json(
    bloom: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "add", bloom, "--key", "yes1", "--key", "yes2", "-q")[0] == 0
    feed(monkeypatch, b"yes1\nno1\nyes2\n")
    status, out, _ = run(capsys, "check", bloom)
    assert status == 1 and out == "yes1\nyes2\n"  # one certainly absent: status 1
    feed(monkeypatch, b"yes1\nno1\nyes2\n")
    status, out, _ = run(capsys, "check", bloom, "--absent")
    assert status == 1 and out == "no1\n"  # some might be present: status 1 with --absent
    status, out, _ = run(capsys, "check", bloom, "-c", "--key", "yes1", "--key", "no2")
    assert status == 1 and out.strip() == "2 checked, 1 might be present, 1 certainly absent"
    status, out, _ = run(capsys, "check", bloom, "--json", "--key", "yes1")
    assert status == 0
    assert json.loads(out) == {"file": bloom, "checked": 1, "might_be_present": 1, "certainly_absent": 0}
    status, out, _ = run(capsys, "check", bloom, "-q", "--key", "no3")
    assert status == 1 and out == ""
    status, out, _ = run(capsys, "check", bloom, "--absent", "--key", "no3")
    assert status == 0 and out == "no3\n"


def test_check_many_items_uses_the_batch_answer(bloom: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    keys = [f"item-{i}" for i in range(300)]
    listing = tmp_path / "many.txt"
    listing.write_text("".join(k + "\n" for k in keys))
    assert run(capsys, "add", bloom, str(listing), "-q")[0] == 0
    status, out, _ = run(capsys, "check", bloom, str(listing))
    assert status == 0 and out.splitlines() == keys


def test_remove_on_counting_and_cuckoo_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counting = str(tmp_path / "c.blc")
    cuckoo = str(tmp_path / "k.ckf")
    assert run(capsys, "create", counting, "-n", "1000", "-p", "1e-4", "--counting", "-q")[0] == 0
    assert run(capsys, "create", cuckoo, "--cuckoo", "-n", "1000", "-p", "1e-4", "-q")[0] == 0
    for path in (counting, cuckoo):
        assert run(capsys, "add", path, "--key", "a", "--key", "b", "-q")[0] == 0
        status, _, err = run(capsys, "remove", path, "--key", "a", "--key", "zz")
        assert status == 1 and "removed 1 of 2 items" in err and "1 certainly absent" in err, err
        status, out, _ = run(capsys, "remove", path, "--key", "b", "--json")
        assert status == 0
        report = json.loads(out)
        assert report["removed"] == 1 and report["certainly_absent"] == 0 and report["items"] == 1
        status, out, _ = run(capsys, "check", path, "--key", "a", "--key", "b", "-c")
        assert status == 1 and "0 might be present" in out


def test_remove_on_a_bloom_filter_is_refused(bloom: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "remove", bloom, "--key", "a")
    assert status == 2 and "does not support removal" in err and bloom in err


# -- info and verify ------------------------------------------------------------------------------------
def test_info_text_for_each_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = {
        "bloom": str(tmp_path / "b.blm"),
        "counting": str(tmp_path / "c.blc"),
        "cuckoo": str(tmp_path / "k.ckf"),
        "scalable": str(tmp_path / "s"),
    }
    assert run(capsys, "create", paths["bloom"], "-n", "100", "-p", "1%", "-q")[0] == 0
    assert run(capsys, "create", paths["counting"], "-n", "100", "-p", "1%", "--counting", "-q")[0] == 0
    assert run(capsys, "create", paths["cuckoo"], "--cuckoo", "-n", "100", "-p", "1%", "-q")[0] == 0
    assert run(capsys, "create", paths["scalable"], "--scalable", "-n", "100", "-p", "1%", "-q")[0] == 0
    keys = [f"--key=u{i}" for i in range(300)]
    for path in paths.values():
        if path != paths["cuckoo"]:
            assert run(capsys, "add", path, *keys, "-q")[0] == 0
    assert run(capsys, "add", paths["cuckoo"], "--key", "c1", "-q")[0] == 0
    texts = {}
    for kind, path in paths.items():
        status, out, _ = run(capsys, "info", path)
        assert status == 0, kind
        texts[kind] = out
    assert "over design point  yes" in texts["bloom"] and "observed fp rate" in texts["bloom"]
    assert "(4-bit counters, 0 saturated)" in texts["counting"]
    assert "fingerprint bits" in texts["cuckoo"] and "victim slot" in texts["cuckoo"] and "free" in texts["cuckoo"]
    assert "layers:" in texts["scalable"] and "growth / tightening" in texts["scalable"]
    assert "compound, from items added" in texts["scalable"]
    status, out, _ = run(capsys, "verify", *paths.values())
    assert status == 0 and out.splitlines()[-1] == "all 4 files OK"
    assert "cuckoo," in out and "scalable, " in out


def test_verify_json_reports_a_damaged_file(bloom: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.blm"
    bad.write_bytes(b"not a filter at all, just bytes")
    status, out, err = run(capsys, "verify", bloom, str(bad), "--json")
    assert status == 2 and err == ""
    report: dict[str, Any] = json.loads(out)
    assert report["files"] == 2 and report["failed"] == 1
    assert report["results"][0]["ok"] is True and report["results"][1]["ok"] is False
    assert str(bad) in report["results"][1]["error"]
    status, _, err = run(capsys, "verify", str(bad))
    assert status == 2 and "FAILED" in err and str(bad) in err


# -- merge -----------------------------------------------------------------------------------------
@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    cfg = BloomConfig(num_bits=4096, num_hashes=3)
    paths = []
    for i, keys in enumerate((["a", "b"], ["b", "c"])):
        path = str(tmp_path / f"s{i}.blm")
        with BloomFilter.create(path, cfg) as f:
            f.update(keys)
        paths.append(path)
    return paths


def test_merge_union_intersection_and_into(
    shards: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    union, inter = str(tmp_path / "u.blm"), str(tmp_path / "i.blm")
    status, _, err = run(capsys, "merge", union, *shards, "--no-progress")
    assert status == 0 and "2 shards" in err
    status, out, _ = run(capsys, "merge", inter, *shards, "--intersection", "--json", "--no-progress")
    assert status == 0 and json.loads(out)["shards"] == 2
    with BloomFilter.open(union, readonly=True) as u, BloomFilter.open(inter, readonly=True) as i:
        assert all(x in u for x in "abc") and "b" in i
    status, _, err = run(capsys, "merge", union, *shards, "-q")
    assert status == 2 and "use --force to replace it" in err
    assert run(capsys, "merge", union, *shards, "-q", "--force")[0] == 0
    target = str(tmp_path / "t.blm")
    with BloomFilter.create(target, BloomConfig(num_bits=4096, num_hashes=3)) as f:
        f.add("z")
    assert run(capsys, "merge", "--into", target, *shards, "-q")[0] == 0
    with BloomFilter.open(target, readonly=True) as t:
        assert all(x in t for x in "abcz")


def test_merge_refusals(shards: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "at least one SHARD" in usage_error(capsys, "merge", str(tmp_path / "o.blm"))
    assert "--force cannot be combined with --into" in usage_error(
        capsys, "merge", "--into", shards[0], shards[1], "--force"
    )
    status, _, err = run(capsys, "merge", "--into", shards[0], shards[1], "--intersection")
    assert status == 2 and "--intersection cannot be combined with --into" in err
