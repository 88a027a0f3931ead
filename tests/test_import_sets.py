"""What a fresh interpreter imports for the everyday calls (issue 28, item 2): opening a
filter of each kind and calling ``in``, ``add``, ``update`` with a list and ``close``, and
the CLI's ``--version``, ``check --key`` and ``info``, import neither numpy nor
portalocker (nor tqdm, pyarrow, pandas), and a kind's open loads none of the other kinds'
modules. numpy is imported when a numpy array is given or returned (``contains_many``),
portalocker when the file lock needs it (a timed wait). Each scenario runs in its own
``python -c`` on both backends where it applies.

Where a backend really needs numpy, the test says so: the pure backend's batch kernels are
numpy code (``update`` of a list imports it there; ``add`` and ``in`` do not), and ``info``
of a counting filter counts its counters with numpy."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import mmapbloom
from mmapbloom.kernels import native_module
from tests.conftest import ROOT

HEAVY = ("numpy", "portalocker", "tqdm", "pyarrow", "pandas")
#: standard-library modules the everyday calls do not use either (issue 28 item 2)
LIGHT = ("fractions", "decimal", "json")
KIND_MODULES = {
    "BloomFilter": set(),
    "CountingBloomFilter": {"mmapbloom.counting"},
    "ScalableBloomFilter": {
        "mmapbloom.scalable",
        "mmapbloom.scalable_format",
        "mmapbloom.scalable_growth",
        "mmapbloom.scalable_stats",
        "mmapbloom.directory",
    },
    "CuckooFilter": {"mmapbloom.cuckoo", "mmapbloom.cuckoo_kernels"},
    "ExpiringBloomFilter": {"mmapbloom.expiring", "mmapbloom.directory"},
}
DIRECTORY_KINDS = ("ScalableBloomFilter", "ExpiringBloomFilter")
OTHERS = {"mmapbloom.cli", "mmapbloom.merge", "mmapbloom.verify", "mmapbloom.dask", "mmapbloom.scrapy"}
BACKENDS = [
    pytest.param("", id="native", marks=pytest.mark.skipif(native_module() is None, reason="no compiled kernels")),
    pytest.param("1", id="pure"),
]


def _probe(code: str, pure: str, *args: str) -> dict[str, list[str]]:
    """Run ``code`` in a fresh interpreter; return the HEAVY modules, the LIGHT ones and the
    package's modules left in ``sys.modules`` (printed as a repr: the probe imports nothing)."""
    tail = (
        "\nimport sys\n"
        f"print(repr({{'heavy': [m for m in {HEAVY!r} if m in sys.modules], "
        f"'light': [m for m in {LIGHT!r} if m in sys.modules], "
        "'mine': sorted(m for m in sys.modules if m.startswith('mmapbloom.'))}))\n"
    )
    env = {**os.environ, "MMAPBLOOM_PURE": pure}
    proc = subprocess.run(
        [sys.executable, "-c", code + tail, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("kinds")
    cfg = mmapbloom.BloomConfig.for_items(1000, 0.01)
    paths = {
        "BloomFilter": str(d / "p.blm"),
        "CountingBloomFilter": str(d / "c.blc"),
        "ScalableBloomFilter": str(d / "s"),
        "CuckooFilter": str(d / "k.ckf"),
        "ExpiringBloomFilter": str(d / "e"),
    }
    mmapbloom.BloomFilter.create(paths["BloomFilter"], cfg).close()
    mmapbloom.CountingBloomFilter.create(paths["CountingBloomFilter"], cfg).close()
    with mmapbloom.ScalableBloomFilter.create(paths["ScalableBloomFilter"], 10, 0.01) as s:
        s.update([f"grow-{i}" for i in range(100)])  # several layers: update asks the older ones
        assert len(s.layers) > 1
    mmapbloom.CuckooFilter.create(paths["CuckooFilter"], 1000, 0.01).close()
    mmapbloom.ExpiringBloomFilter.create(paths["ExpiringBloomFilter"], 80, 1000, 0.01, periods=4).close()
    return paths


OPEN_ADD_IN_CLOSE = (
    "import sys\nfrom mmapbloom import {kind}\n"
    "f = {kind}.open(sys.argv[1])\n"
    "assert f.add('a') in (True, False) and 'a' in f and f.might_contain('a')\n"
)


@pytest.mark.parametrize("pure", BACKENDS)
@pytest.mark.parametrize("kind", sorted(KIND_MODULES))
def test_open_add_in_update_close(files: dict[str, str], kind: str, pure: str) -> None:
    code = OPEN_ADD_IN_CLOSE.format(kind=kind) + "assert f.update(['b', 'c', 'a']) >= 0\nf.close()\n"
    got = _probe(code, pure, files[kind])
    if pure and kind != "CuckooFilter":
        assert got["heavy"] == ["numpy"], got  # the pure batch kernels are numpy code
    else:
        assert got["heavy"] == [], got
    others = set().union(*(m for k, m in KIND_MODULES.items() if k != kind)) - KIND_MODULES[kind]
    assert not (set(got["mine"]) & (others | OTHERS)), got["mine"]


@pytest.mark.parametrize("pure", BACKENDS)
@pytest.mark.parametrize("kind", sorted(KIND_MODULES))
def test_open_add_in_close_without_a_batch(files: dict[str, str], kind: str, pure: str) -> None:
    got = _probe(OPEN_ADD_IN_CLOSE.format(kind=kind) + "f.close()\n", pure, files[kind])
    assert got["heavy"] == [], got


def test_a_numpy_answer_or_argument_imports_numpy(files: dict[str, str]) -> None:
    code = (
        "import sys\nfrom mmapbloom import BloomFilter\nf = BloomFilter.open(sys.argv[1])\n"
        "r = f.contains_many(['a', 'zz'])\nassert type(r).__module__ == 'numpy', type(r)\n"
    )
    assert _probe(code, "", files["BloomFilter"])["heavy"] == ["numpy"]


def test_a_timed_lock_wait_imports_portalocker(files: dict[str, str]) -> None:
    """The slow path that needs portalocker still finds it: a write_lock(timeout=...) that
    must wait (another handle holds the lock) polls with portalocker and times out. That is
    the flock mode's wait (MMAPBLOOM_LOCK=flock here); the mutex mode's needs no portalocker."""
    code = (
        "import os\nos.environ['MMAPBLOOM_LOCK'] = 'flock'\n"
        "import sys\nfrom mmapbloom import BloomFilter, LockTimeout\n"
        "a, b = BloomFilter.open(sys.argv[1]), BloomFilter.open(sys.argv[1])\n"
        "import threading\nheld, done = threading.Event(), threading.Event()\n"
        "def hold():\n    with a.write_lock():\n        held.set(); done.wait(10)\n"
        "t = threading.Thread(target=hold); t.start(); held.wait(10)\n"
        "try:\n    b.write_lock(timeout=0.05).__enter__()\nexcept LockTimeout:\n    pass\n"
        "else:\n    raise SystemExit('no LockTimeout')\n"
        "done.set(); t.join()\n"
    )
    assert "portalocker" in _probe(code, "", files["BloomFilter"])["heavy"]


CLI = (
    "import sys, runpy\nsys.argv = ['mmapbloom'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('mmapbloom', run_name='__main__')\n"
    "except SystemExit as e:\n    assert not e.code, e.code\n"
)


@pytest.mark.parametrize("pure", BACKENDS)
@pytest.mark.parametrize("kind", sorted(KIND_MODULES))
def test_cli_check_key(files: dict[str, str], kind: str, pure: str) -> None:
    got = _probe(CLI, pure, "check", files[kind], "--key", "a")
    assert got["heavy"] == [], got
    # The command line imports the counting kind with the plain one, and a directory's open
    # both directory kinds (it tells them apart); no other kind's modules.
    allowed = {"mmapbloom.counting"}
    if kind in DIRECTORY_KINDS:
        allowed |= set().union(*(KIND_MODULES[k] for k in DIRECTORY_KINDS))
    others = set().union(*(m for k, m in KIND_MODULES.items() if k != kind)) - KIND_MODULES[kind]
    assert not (set(got["mine"]) & (others - allowed)), got["mine"]


@pytest.mark.parametrize("pure", BACKENDS)
def test_cli_version(pure: str) -> None:
    assert _probe(CLI, pure, "--version")["heavy"] == []


@pytest.mark.parametrize("kind", sorted(KIND_MODULES))
def test_cli_info(files: dict[str, str], kind: str) -> None:
    """``info`` of a small filter counts its set bits with ``int.bit_count``; a counting
    filter's counters are still counted with numpy. No lock is taken."""
    heavy = _probe(CLI, "", "info", files[kind])["heavy"]
    assert heavy == (["numpy"] if kind == "CountingBloomFilter" else []), heavy


def test_the_probe_sees_an_import(tmp_path: pathlib.Path) -> None:
    """The check above would fail if numpy were imported."""
    assert _probe("import numpy", "")["heavy"] == ["numpy"]


@pytest.mark.parametrize("pure", BACKENDS)
def test_cli_check_key_leaves_unused_stdlib_modules_alone(tmp_path: pathlib.Path, pure: str) -> None:
    """``check --key`` parses no number and writes no JSON: fractions (and decimal under
    it) and json are imported where they are used, not at the CLI's import."""
    path = str(tmp_path / "a.blm")
    with mmapbloom.BloomFilter.create(path, mmapbloom.BloomConfig.for_items(1000, 0.01)) as f:
        f.add("a")  # check exits 0 (present)
    assert _probe(CLI, pure, "check", path, "--key", "a")["light"] == []
