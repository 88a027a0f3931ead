"""CuckooFilter on a file truncated inside its mapping's last page (issue 29 item 1, issue
26): the rest of that page reads as zeros without SIGBUS, so every per-item operation
touching it, and every batch, must raise LengthMismatchError on both backends (the native
handle checks the file's size first, as the Bloom handle does), never answer from the
zeros: no false negative, no lost write."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from mmapbloom import CuckooFilter, LengthMismatchError
from mmapbloom.cuckoo_kernels import CuckooPyHandle, alt_index
from mmapbloom.kernels import native_module

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
        return max(i1, alt_index(i1, fp, cells.n)) >= first_last

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
