"""Mapped pages the file system cannot supply (SIGBUS).

* A file truncated by another process under an open handle: ``check()`` used to die with
  SIGBUS although it says it verifies the length; every read path that scans the mapping
  (``check``, ``to_bytes``, ``copy``, ``|``, statistics, batch queries and writes,
  ``to_bloom``, ``items_added``) now compares the file's real size (``os.fstat``) with the
  mapping first and raises ``LengthMismatchError``. Run in a child process, so that a
  regression shows as a failed test rather than a crashed suite.
* A sparse file on tmpfs (which allocates memory for a hole even when it is only read
  through a shared mapping) larger than the free space: creating it is refused, opening it
  read-write is refused, opening it read-only warns.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import warnings
from typing import Any, Iterator

import pytest

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    LengthMismatchError,
    NoSpaceError,
    SparseFileWarning,
)
from mmapbloom.cli import main as cli_main
from tests.conftest import ROOT
from tests.test_stress_disk import mount_tmpfs

pytestmark = pytest.mark.slow

TRUNCATED = r"""
import os, sys, signal
sys.path.insert(0, {root!r})
import faulthandler; faulthandler.enable()
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, LengthMismatchError
cls = {cls}
path = {path!r}
f = cls.create(path, BloomConfig(num_bits=8 * 65536 * 4, num_hashes=3))
f.update(["a", "b"])
r = cls.open(path, readonly=True)
# Another process truncates the file under both handles.
pid = os.fork()
if pid == 0:
    os.truncate(path, {size})
    os._exit(0)
os.waitpid(pid, 0)
ops = {{
    "check": lambda h: h.check(),
    "to_bytes": lambda h: h.to_bytes(),
    "copy": lambda h: h.copy(),
    "or": lambda h: h | cls(h.config, **({{"counter_bits": h.counter_bits}} if cls is CountingBloomFilter else {{}})),
    "count_ones": lambda h: h.count_ones(),
    "fill_ratio": lambda h: h.fill_ratio(),
    "approx_items": lambda h: h.approx_items(),
    "observed_fp_rate": lambda h: h.observed_fp_rate(),
    "contains_many": lambda h: h.contains_many(["a", "zz"]),
    "items_added": lambda h: h.items_added,
    "expected_fp_rate": lambda h: h.expected_fp_rate(),
    "eq": lambda h: h == h.copy(),
}}
if cls is CountingBloomFilter:
    ops["to_bloom"] = lambda h: h.to_bloom()
    ops["saturated_counters"] = lambda h: h.saturated_counters()
writes = {{"update": lambda h: h.update(["c"]), "union": lambda h: h.union(cls(h.config, **({{"counter_bits": h.counter_bits}} if cls is CountingBloomFilter else {{}})))}}
if cls is BloomFilter:
    writes["add_many"] = lambda h: h.add_many(["c"])
for name, op in list(ops.items()) + [("w-" + n, o) for n, o in writes.items()]:
    for h in ((f, r) if not name.startswith("w-") else (f,)):
        try:
            op(h)
        except LengthMismatchError as exc:
            assert "truncated" in str(exc) and path in str(exc), (name, str(exc))
            assert exc.actual == {size} and exc.expected == h.size_bytes, (name, exc.expected, exc.actual)
        else:
            print("NO ERROR", name, flush=True)
            sys.exit(3)
print("ok", flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.parametrize("cls", ["BloomFilter", "CountingBloomFilter"])
@pytest.mark.parametrize("size", [0, 20, 100, 4096 + 10])
def test_truncated_under_the_handle_raises_instead_of_sigbus(tmp_path: Any, cls: str, size: int) -> None:
    script = TRUNCATED.format(root=ROOT, cls=cls, path=str(tmp_path / "t.bin"), size=size)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit {proc.returncode} (-7 is SIGBUS): {proc.stdout[-500:]} {proc.stderr[-1500:]}"
    )


def test_grown_file_fails_check(tmp_path: Any) -> None:
    path = str(tmp_path / "g.blm")
    with BloomFilter.create(path, BloomConfig(num_bits=800, num_hashes=3)) as f:
        with open(path, "ab") as out:
            out.write(b"\0" * 10)
        with pytest.raises(LengthMismatchError, match="over-long"):
            f.check()
        assert f.count_ones() == 0  # a longer file maps fine: reads need not fail


@pytest.fixture
def tmpfs_8m() -> Iterator[str]:
    yield from mount_tmpfs("size=8m,mode=0755")


def test_sparse_on_tmpfs_beyond_free_space(tmpfs_8m: str, capsys: Any) -> None:
    big = BloomConfig(num_bits=8 * 64 * 2**20, num_hashes=7)  # 64 MiB of bits on an 8 MiB tmpfs
    path = os.path.join(tmpfs_8m, "s.blm")
    for cls in (BloomFilter, CountingBloomFilter):
        with pytest.raises(NoSpaceError) as info:
            cls.create(path, big, sparse=True)
        exc = info.value
        assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        assert exc.path == path and "tmpfs" in str(exc) and f"{exc.needed:,}" in str(exc)
        assert exc.needed >= 64 * 2**20 and exc.available <= 8 * 2**20  # type: ignore[operator]  # both set here
        assert os.listdir(tmpfs_8m) == []  # nothing published, no temporary left
    # The example, through the CLI: a clean refusal, not a bus error.
    code = cli_main(["create", "--sparse", path, "--bits", str(8 * 64 * 2**20), "--hashes", "7"])
    err = capsys.readouterr().err
    assert code == 2 and path in err and "tmpfs" in err and "SIGBUS" in err, err
    assert os.listdir(tmpfs_8m) == []
    # A sparse file made another way (plain ftruncate): read-write refused, read-only warned.
    header = BloomFilter(big).to_bytes()[:24]
    with open(path, "wb") as out:
        out.write(header)
        out.truncate(24 + 64 * 2**20)
    with pytest.raises(NoSpaceError, match="tmpfs"):
        BloomFilter.open(path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with BloomFilter.open(path, readonly=True) as f:
            assert "x" not in f  # a few pages of holes are fine
    sparse = [w for w in seen if issubclass(w.category, SparseFileWarning) and "tmpfs" in str(w.message)]
    assert sparse and sparse[0].filename == __file__, [(w.filename, w.lineno) for w in seen]  # at the caller
    os.unlink(path)
    # A sparse filter that fits in the free space is accepted without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with BloomFilter.create(path, BloomConfig(num_bits=8 * 2**20, num_hashes=3), sparse=True) as f:
            f.add("x")
        with BloomFilter.open(path) as f:
            assert "x" in f
