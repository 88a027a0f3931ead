"""CuckooFilter on a file truncated inside its mapping's last page (issue 29 item 1, issue
26): the rest of that page reads as zeros without SIGBUS, so every per-item operation
touching it, and every batch, must raise LengthMismatchError on both backends (the native
handle checks the file's size first, as the Bloom handle does), never answer from the
zeros: no false negative, no lost write."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from mmapbloom import CuckooFilter, LengthMismatchError
from mmapbloom.cuckoo_kernels import CuckooPyHandle, alt_index
from mmapbloom.kernels import native_module
from tests.conftest import ROOT

BACKENDS = ["pure", "native"]


def _open(path: Path, backend: str) -> CuckooFilter:
    f = CuckooFilter.open(path)
    if backend == "pure":
        f._h.close()
        f._h = CuckooPyHandle.attach(f._storage, f._geometry, pure=True)
    assert f._h.backend == ("python" if backend == "pure" else "native")
    return f


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_touching_a_cut_last_page_raise(backend: str, tmp_path: Path) -> None:
    if backend == "native" and native_module() is None:
        pytest.skip("native backend not in use")
    path = tmp_path / "cut.ckf"
    with CuckooFilter.create(path, 5654, 0.1, fingerprint_bits=8) as w:
        size = w.size_bytes
        assert 4096 + 200 < size <= 8192, size  # two pages: the cut lies inside the last one
        w.update(f"k{i}" for i in range(4000))
    page = mmap.PAGESIZE
    f = _open(path, backend)
    cells = f._h.cells
    first_last = (page - 48) // 4 - 2  # a bucket (4 bytes) from here on may reach the last page

    def in_last_page(key: str) -> bool:
        i1, fp, _ = cells.hash(key)
        return bool(max(i1, alt_index(i1, fp, cells.n)) >= first_last)

    present = [f"k{i}" for i in range(4000)]
    touching = [k for k in present if in_last_page(k)][:40]
    safe = [k for k in present if not in_last_page(k)][:40]
    fresh = [k for k in (f"new{i}" for i in range(2000)) if in_last_page(k)][:40]  # absent keys
    assert len(touching) == 40 and len(safe) == 40 and len(fresh) == 40
    os.truncate(path, size - 100)  # inside the last page: no SIGBUS there, zeros
    ops: dict[str, Callable[[str], Any]] = {
        "in": lambda k: k in f,
        "count": lambda k: f.count(k),
        "add": lambda k: f.add(fresh[touching.index(k)]),
        "remove": lambda k: f.remove(k),
        "discard": lambda k: f.discard(k),
        "contains_many": lambda k: f.contains_many([k]),
        "update": lambda k: f.update([fresh[touching.index(k) + 10]]),
    }
    try:
        for op in ops.values():
            for key in touching[:5]:  # present keys (add, update: absent ones)
                with pytest.raises(LengthMismatchError):
                    op(key)
        for key in safe:  # cells wholly inside the file: the native handle may answer, rightly
            try:
                assert key in f and f.count(key) >= 1
            except LengthMismatchError:
                pass
    finally:
        f.close()


HOLDER = r"""
import os, sys, time
from mmapbloom import CuckooFilter
path, size = sys.argv[1], int(sys.argv[2])
with CuckooFilter.open(path) as f, f.write_lock():
    print("held", flush=True)
    time.sleep(0.4)   # the victim's write is waiting now
    os.truncate(path, size)
"""

VICTIM = r"""
import os, subprocess, sys
from mmapbloom import CuckooFilter, LengthMismatchError
from mmapbloom.cuckoo_kernels import alt_index
tmp, holder = sys.argv[1], sys.argv[2]
SIZE = 4200
ops = {
    "add": lambda f, k: f.add(k["absent"]),
    "update": lambda f, k: f.update([k["absent"]]),
    "add_many": lambda f, k: f.add_many([k["absent"]]),
    "remove": lambda f, k: f.remove(k["present"]),
    "discard": lambda f, k: f.discard(k["present"]),
    "remove_many": lambda f, k: f.remove_many([k["present"]]),
}
for name, op in ops.items():
    path = os.path.join(tmp, name + ".ckf")
    with CuckooFilter.create(path, 5654, 0.1, fingerprint_bits=8) as f:
        assert 4096 + 200 < f.size_bytes <= 8192 and SIZE < f.size_bytes, f.size_bytes
        cells = f._h.cells
        def first_page(key):   # both buckets (4 bytes each) wholly in the first page
            i1, fp, _ = cells.hash(key)
            return max(i1, alt_index(i1, fp, cells.n)) < (4096 - 48) // 4 - 2
        present = next(k for k in (f"p{i}" for i in range(1000)) if first_page(k))
        absent = next(k for k in (f"a{i}" for i in range(1000)) if first_page(k))
        assert f.add(present) and absent not in f
        proc = subprocess.Popen([sys.executable, "-c", holder, path, str(SIZE)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "held"
        try:
            got = op(f, {"present": present, "absent": absent})   # waits; the holder truncates
        except LengthMismatchError as exc:
            assert exc.actual == SIZE, (name, exc.actual)
        else:
            print("NO ERROR", name, got, flush=True)
            sys.exit(3)
        assert proc.wait(timeout=30) == 0
print("ok", flush=True)
"""


# A write that waited for the lock while the holder truncated the file inside its last page
# raises LengthMismatchError even when its key's buckets lie wholly in the first page (the
# native handle checks the size again after a real wait, as _handle.c does; without that
# check add / remove / discard answered from the cut file). Native: the mutex (the wait is
# inside the C lock path) and the file lock (WriteLock.acquire); pure: the mutex.
@pytest.mark.parametrize("backend,lock", [("native", "mutex"), ("native", "flock"), ("pure", "mutex")])
def test_write_waiting_for_the_lock_sees_a_truncation(tmp_path: Path, backend: str, lock: str) -> None:
    if backend == "native" and native_module() is None:
        pytest.skip("native backend not in use")
    env = dict(os.environ)
    env.pop("MMAPBLOOM_PURE", None)
    env.pop("MMAPBLOOM_LOCK", None)
    if backend == "pure":
        env["MMAPBLOOM_PURE"] = "1"
    if lock == "flock":
        env["MMAPBLOOM_LOCK"] = "flock"
    run = subprocess.run(
        [sys.executable, "-c", VICTIM, str(tmp_path), HOLDER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), (run.returncode, run.stdout, run.stderr[-3000:])
