"""The LSM example (examples/lsm.py) on a small slice of the standard library's identifiers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SLICE = 30  # files of the standard library, in sorted order


@pytest.fixture(scope="module")
def lsm():  # type: ignore[no-untyped-def]
    path = os.path.join(ROOT, "examples", "lsm.py")
    spec = importlib.util.spec_from_file_location("lsm_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lsm_example"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def identifiers(lsm):  # type: ignore[no-untyped-def]
    corpus = lsm.Corpus(lsm.sysconfig.get_paths()["stdlib"])
    pairs = list(lsm.stdlib_identifiers(corpus, lsm.stdlib_files(corpus.root, SLICE)))
    assert corpus.files > 0 and len(pairs) > 1500
    return [(name.encode(), where.encode()) for name, where in pairs]


def test_no_stored_key_is_ever_missing(lsm, identifiers, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store_dir = str(tmp_path / "store")
    with lsm.LSMStore(store_dir, memtable_keys=300, fp_rate=0.01) as store:
        for key, value in identifiers:
            store.put(key, value)
        store.flush()
        assert not store.memtable
        assert len(store.segments) == -(-len(identifiers) // 300)
        # Every stored key, from the segments on disk (none is in the memtable any more).
        for key, value in identifiers:
            assert store.get(key) == value, key
        present = store.stats
        assert present.memtable_hits == 0 and present.lookups == len(identifiers)
        # A stored key is read from disk exactly once, from its own segment, plus false positives.
        assert present.disk_reads == len(identifiers) + present.false_positive_reads
        # Newer segments were skipped by their filters, not read.
        assert present.reads_avoided > 0.9 * (present.probes - len(identifiers))

        store.stats = lsm.LookupStats()
        for key, _ in identifiers:
            assert store.get(lsm.absent_key(key)) is None
        absent = store.stats
        assert absent.probes == len(identifiers) * len(store.segments)
        assert absent.disk_reads == absent.false_positive_reads  # every read was a false positive
        assert absent.reads_avoided + absent.disk_reads == absent.probes
        assert 0 < absent.measured_fp_rate < 0.03  # configured 0.01; the filters do their job

    # Segments and filters are real files that a new store opens again.
    names = sorted(n for n in os.listdir(store_dir) if not n.endswith(".mutex"))  # the write locks' side files aside
    assert names[:2] == ["seg-000001.blm", "seg-000001.dat"] and len(names) == 2 * -(-len(identifiers) // 300)
    with lsm.LSMStore(store_dir) as again:
        for key, value in identifiers[::7]:
            assert again.get(key) == value
        again.put(identifiers[0][0], b"newer")
        again.flush()
        assert again.get(identifiers[0][0]) == b"newer"  # the newest segment wins


def test_run_reports_and_exits_zero(lsm, tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = lsm.run(str(tmp_path / "r"), max_files=SLICE, memtable_keys=500, fp_rate=0.02)
    assert (report["missing"], report["wrong_value"], report["absent_found"]) == (0, 0, 0)
    assert report["keys"] == sum(s["keys"] for s in report["segments"]) and len(report["segments"]) >= 3
    assert report["absent"]["reads_avoided"] > 0.9 * report["absent"]["probes"]
    text = lsm.report(report)
    for needle in (
        "segments",
        "filter bytes",
        "avoided",
        "disk reads",
        "measured false-positive rate",
        "configured 2.000%",
        "0 stored keys reported missing",
    ):
        assert needle in text, needle

    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "lsm.py"), "--max-files", "5", "--memtable-keys", "200"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert b"0 stored keys reported missing" in proc.stdout and b"disk reads" in proc.stdout
