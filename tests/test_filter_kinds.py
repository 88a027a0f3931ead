"""One interface for every filter kind (``open_filter``, ``describe``, ``verify``), and the
command line using it the same way for a Bloom filter, a counting filter and a scalable
filter's directory: the same errors as the API, and refusals instead of ignored options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmapbloom import (
    DEFAULT_STRATEGY,
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    ManifestError,
    MergeError,
    ScalableBloomFilter,
    merge_into,
    merge_shards,
    open_filter,
)
from tests.conftest import ROOT, urls

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "OPENBLAS_NUM_THREADS": "1"}

COMMON = {"kind", "path", "strategy", "size_bytes", "items_added", "expected_fp_rate", "approx_items"}


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``python -m mmapbloom ARGS`` in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args], input=stdin, capture_output=True, timeout=120, env=ENV
    )


def one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, proc
    assert "Traceback" not in err and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def make_all_kinds(tmp_path: Path) -> dict[str, str]:
    """A path of each kind, empty: BLM1 file, BLC1 file, scalable directory."""
    cfg = BloomConfig.for_items(5000, 0.001)
    paths = {
        "BloomFilter": str(tmp_path / "plain.blm"),
        "CountingBloomFilter": str(tmp_path / "counting.blc"),
        "scalable": str(tmp_path / "grow"),
    }
    BloomFilter.create(paths["BloomFilter"], cfg).close()
    CountingBloomFilter.create(paths["CountingBloomFilter"], cfg, counter_bits=8).close()
    ScalableBloomFilter.create(paths["scalable"], 1000, 0.001).close()
    return paths


def test_open_filter_gives_each_kind_one_interface(tmp_path: Path) -> None:
    items = urls(3000)  # past the scalable filter's first layer: it grows
    for kind, path in make_all_kinds(tmp_path).items():
        with open_filter(path) as f:
            assert (type(f).__name__ if kind != "scalable" else "scalable") == kind
            new = f.update(items)
            assert 2990 <= new <= 3000  # a few false positives at most
            assert f.contains_many(items).all()  # no false negatives, whatever the kind
            f.check()
            f.verify()
            record = f.describe()
            assert COMMON <= record.keys() and record["kind"] == kind
            assert record["items_added"] == new and record["strategy"] == DEFAULT_STRATEGY.name
            assert os.path.realpath(record["path"]) == os.path.realpath(path)
            json.dumps(record, allow_nan=False)  # JSON-ready
            assert "approx_items" not in f.describe(scan=False)
        with open_filter(path, readonly=True) as f:
            assert f.contains_many(items).all()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with open_filter(make_all_kinds(fresh)["scalable"], readonly=True) as f:
        assert f.describe()["num_layers"] == 1 and f.describe()["items_added"] == 0


def test_cli_add_check_info_verify_on_every_kind(tmp_path: Path) -> None:
    items = b"".join(b"%s\n" % u.encode() for u in urls(3000))
    for kind, path in make_all_kinds(tmp_path).items():
        added = run("add", path, "--key", "solo", stdin=b"")
        assert added.returncode == 0 and "added 1 item from 1 key" in added.stderr.decode(), added.stderr
        assert run("add", "-q", path, stdin=items).returncode == 0
        check = run("check", "--count", path, "--key", "solo", "-", stdin=items)
        assert (check.returncode, check.stdout) == (0, b"3001 checked, 3001 might be present, 0 certainly absent\n")
        record = json.loads(run("info", "--json", path).stdout)
        assert record["kind"] == kind and record["items_added"] <= 3001
        text = run("info", path).stdout.decode()
        assert "items added" in text and "expected fp rate" in text
        assert ("layers:" in text) == (kind == "scalable")
        assert ("counter" in text) == (kind == "CountingBloomFilter")
        verify = run("verify", path)
        assert verify.returncode == 0 and verify.stdout.decode().startswith(f"{path}: OK ("), verify
        assert ("OK (scalable, " in verify.stdout.decode()) == (kind == "scalable")


def test_a_scalable_directory_without_its_manifest_is_a_manifest_error_everywhere(tmp_path: Path) -> None:
    path = str(tmp_path / "grow")
    ScalableBloomFilter.create(path, 1000, 0.01).close()
    os.remove(os.path.join(path, "manifest.json"))
    with pytest.raises(ManifestError, match="manifest is missing"):
        ScalableBloomFilter.open(path)
    with pytest.raises(ManifestError, match="manifest is missing"):
        open_filter(path)
    for args in (["info", path], ["check", path, "--key", "x"], ["add", path, "--key", "x"]):
        err = one_line_error(run(*args), "manifest.json: the manifest is missing")
        assert "not a filter file" not in err
    verify = run("verify", path)
    assert verify.returncode == 2 and "FAILED" in verify.stderr.decode()
    assert "manifest is missing" in verify.stderr.decode()

    # A directory that never was a filter: ManifestError too, saying so.
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ManifestError, match="not a scalable filter's"):
        open_filter(plain)
    one_line_error(run("info", str(plain)), "not a scalable filter's", "no manifest.json and no lock")


def test_create_scalable_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    path = str(tmp_path / "grow")
    assert run("create", "-q", path, "--scalable", "-n", "1000", "-p", "1%").returncode == 0
    err = one_line_error(run("create", path, "--scalable", "-n", "1000", "-p", "1%"), "exists", "remove it first")
    assert "--force" not in err  # --force cannot replace a directory
    for extra, word in (
        (["--force"], "--force"),
        (["--sparse"], "--sparse"),
        (["--counter-bits", "8"], "--counter-bits"),
        (["--counting"], "--counting"),
    ):
        fresh = str(tmp_path / f"new{word}")
        one_line_error(
            run("create", fresh, "--scalable", "-n", "1000", "-p", "1%", *extra),
            f"--scalable and {word} cannot be combined",
        )
        assert not os.path.exists(fresh)  # refused before anything is made
    # the plain kinds still take them
    assert run("create", "-q", str(tmp_path / "s.blm"), "-n", "1000", "-p", "1%", "--sparse").returncode == 0
    assert (
        run(
            "create", "-q", str(tmp_path / "c.blc"), "-n", "1000", "-p", "1%", "--counting", "--counter-bits", "8"
        ).returncode
        == 0
    )


def test_merge_refuses_a_scalable_directory_in_the_api_and_the_cli(tmp_path: Path) -> None:
    path = str(tmp_path / "grow")
    ScalableBloomFilter.create(path, 1000, 0.01).close()
    cfg = BloomConfig.for_items(1000, 0.01)
    shard = str(tmp_path / "shard.blm")
    BloomFilter.create(shard, cfg).close()
    with pytest.raises(MergeError, match="merging scalable filters is not supported"):
        merge_shards(str(tmp_path / "out.blm"), [shard, path])
    with pytest.raises(MergeError, match="merging scalable filters is not supported"):
        merge_into(path, [shard])
    assert not os.path.exists(tmp_path / "out.blm")
    one_line_error(run("merge", str(tmp_path / "out.blm"), shard, path), "merging scalable filters is not supported")
    one_line_error(run("merge", "--into", path, shard), "merging scalable filters is not supported")


def test_merge_into_refuses_force_instead_of_ignoring_it(tmp_path: Path) -> None:
    cfg = BloomConfig.for_items(1000, 0.01)
    target, shard = str(tmp_path / "t.blm"), str(tmp_path / "s.blm")
    for path in (target, shard):
        BloomFilter.create(path, cfg).close()
    with BloomFilter.open(shard) as f:
        f.add("x")
    one_line_error(run("merge", "--into", target, "--force", shard), "--force cannot be combined with --into")
    with BloomFilter.open(target, readonly=True) as f:
        assert "x" not in f  # refused before anything was merged
    assert run("merge", "-q", "--into", target, shard).returncode == 0
    with BloomFilter.open(target, readonly=True) as f:
        assert "x" in f
