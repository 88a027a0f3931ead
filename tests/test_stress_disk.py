"""Stress: full disks, on a small tmpfs mounted for the test.

Needs root (``mount -t tmpfs``); otherwise each test is skipped and the reason is both the
skip reason and a printed warning, so a CI log shows that the full-disk promises were not
checked. The file system is unmounted afterwards.

* Creating a filter larger than the free space raises ``OSError(ENOSPC)`` (``create`` and
  ``open_or_create``) and leaves nothing behind: no file at the path, no temporary, and
  the space is free again (no unlinked-but-open temporary holding blocks).
* Out of inodes: the same.
* A filter created (space reserved) before the disk filled up takes writes everywhere in
  it without SIGBUS (README: "Space is reserved at creation").
* ``sparse=True`` is documented to skip the reservation: a write into a hole on a full disk
  kills the process with SIGBUS. The test pins that documented non-promise.
* A merge (``merge_shards`` and ``mmapbloom merge``, into a new file or ``--force`` over an
  existing one) whose output does not fit, or finds no free inode, fails cleanly: OSError
  (ENOSPC) from the library, exit status 2 and one line on stderr from the CLI; the
  destination is untouched (absent, or the old file byte for byte), no temporary is left
  and the space is free again. On a nearly full disk a merge that fits succeeds.
* ``merge_into`` (and ``merge --into``) a target created before the disk filled up works
  without SIGBUS: its space was reserved at creation.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import io
import os
import shutil
import signal
import subprocess
import tempfile
import warnings
from typing import Any, Iterator, cast

import pytest

from mmapbloom import BloomConfig, BloomFilter, NoSpaceError, verify_file
from mmapbloom.kernels import BACKEND
from mmapbloom.cli import main as cli_main
from mmapbloom.merge import merge_into, merge_shards
from tests.conftest import write_shards
from tests.torture_support import run_forked

pytestmark = pytest.mark.slow

MB = 2**20


class TmpfsSkip(UserWarning):
    pass


def _skip(reason: str) -> None:
    warnings.warn(f"full-disk torture tests not run: {reason}", TmpfsSkip, stacklevel=3)
    print(f"\n[test_stress_disk] skipped: {reason}")
    pytest.skip(reason)


def mount_tmpfs(options: str) -> Iterator[str]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        _skip("not running as root, cannot mount a small tmpfs")
    if shutil.which("mount") is None:
        _skip("no mount command")
    where = tempfile.mkdtemp(prefix="mmapbloom-tmpfs-")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", where], capture_output=True, text=True)
    if proc.returncode != 0:
        os.rmdir(where)
        _skip(f"mount -t tmpfs -o {options} failed: {proc.stderr.strip() or proc.returncode}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", where], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", where], capture_output=True)
        os.rmdir(where)


@pytest.fixture
def tmpfs_1m() -> Iterator[str]:
    yield from mount_tmpfs("size=1m,mode=0755")


@pytest.fixture
def tmpfs_no_inodes() -> Iterator[str]:
    yield from mount_tmpfs("size=1m,nr_inodes=1,mode=0755")  # the root directory takes the only inode


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(directory: str, name: str = "filler") -> int:
    """Write zeros until ENOSPC; return the bytes written."""
    written = 0
    with open(os.path.join(directory, name), "wb", buffering=0) as fh:
        chunk = b"\0" * 4096
        while True:
            try:
                written += fh.write(chunk) or 0
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return written


@pytest.mark.parametrize("how", ["create", "open_or_create"])
@pytest.mark.parametrize("size", [2 * MB, 1 * MB + 4096, 64 * MB])
def test_create_larger_than_free_space(tmpfs_1m: str, how: str, size: int) -> None:
    before = free_bytes(tmpfs_1m)
    path = os.path.join(tmpfs_1m, "big.blm")
    config = BloomConfig(num_bits=8 * size, num_hashes=3)
    with pytest.raises(OSError) as info:
        getattr(BloomFilter, how)(path, config)
    assert info.value.errno == errno.ENOSPC
    assert os.listdir(tmpfs_1m) == []  # no file and no temporary
    assert free_bytes(tmpfs_1m) == before  # and no unlinked temporary still holding blocks


def test_create_on_a_nearly_full_disk(tmpfs_1m: str) -> None:
    """Fill the disk but for about 256 kB: a 512 kB filter fails cleanly, a 64 kB one fits."""
    with open(os.path.join(tmpfs_1m, "filler"), "wb") as fh:
        fh.write(b"\0" * (free_bytes(tmpfs_1m) - 256 * 1024))
    with pytest.raises(OSError) as info:
        BloomFilter.create(os.path.join(tmpfs_1m, "big.blm"), BloomConfig(num_bits=8 * 512 * 1024, num_hashes=3))
    assert info.value.errno == errno.ENOSPC
    assert os.listdir(tmpfs_1m) == ["filler"]
    with BloomFilter.create(
        os.path.join(tmpfs_1m, "small.blm"), BloomConfig(num_bits=8 * 64 * 1024, num_hashes=3)
    ) as f:
        f.add("fits")
    with verify_file(os.path.join(tmpfs_1m, "small.blm")) as f:
        assert "fits" in f


def test_out_of_inodes(tmpfs_no_inodes: str) -> None:
    path = os.path.join(tmpfs_no_inodes, "f.blm")
    for how in ("create", "open_or_create"):
        with pytest.raises(OSError) as info:
            getattr(BloomFilter, how)(path, BloomConfig(num_bits=800, num_hashes=3))
        assert info.value.errno == errno.ENOSPC
        assert os.listdir(tmpfs_no_inodes) == []


def test_reserved_filter_keeps_working_on_a_full_disk(tmpfs_1m: str) -> None:
    """Space is reserved at creation: after the disk fills up, writes into every page of
    the filter (through the mapping) succeed, flush succeeds, no SIGBUS."""
    path = os.path.join(tmpfs_1m, "r.blm")
    BloomFilter.create(path, BloomConfig(num_bits=8 * 256 * 1024, num_hashes=7)).close()
    assert fill(tmpfs_1m) > 0
    assert free_bytes(tmpfs_1m) < 4096 * 2
    items = [f"item-{i}" for i in range(100_000)]  # 700,000 bits: every 4 kB page is written

    def writer() -> int:
        with BloomFilter.open(path) as f:
            new = f.update(items[:50_000])
            new += sum(f.add(x) for x in items[50_000:60_000])
            new += f.update(items[60_000:])
            f.flush()
            return new

    assert run_forked(writer) > 99_000  # a SIGBUS would kill the child, and this would fail
    with verify_file(path) as f:
        assert f.contains_many(items).all()


def test_sparse_filter_on_a_full_disk_raises_no_space_error(tmpfs_1m: str) -> None:
    """The documented cost of sparse=True (README, "Full disk"): a sparse filter whose
    disk fills up after it was opened faults (SIGBUS) at a write into a hole. The native
    backend's guard turns that into NoSpaceError (ENOSPC), even after
    ``faulthandler.disable()`` (a batch chunk re-arms the guard); the pure backend has no
    guard and dies with SIGBUS. Pinned so that the README stays true. (A sparse filter
    larger than the free space is refused up front on tmpfs, where even reads allocate:
    tests/test_storage.py; on a disk file system creation only warns.)"""
    path = os.path.join(tmpfs_1m, "s.blm")
    f = BloomFilter.create(path, BloomConfig(num_bits=8 * 768 * 1024, num_hashes=3), sparse=True)  # fits, empty
    assert os.listdir(tmpfs_1m) == ["s.blm"]
    filler = os.open(os.path.join(tmpfs_1m, "filler"), os.O_WRONLY | os.O_CREAT)  # then the disk fills up
    with contextlib.suppress(OSError):
        while True:
            os.write(filler, b"\xff" * 4096)
    os.close(filler)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            faulthandler.disable()  # a SIGBUS on the pure backend: no "Fatal Python error" dump
            f.update([f"x{i}" for i in range(400_000)])
        except NoSpaceError as exc:
            code = 3 if exc.errno == errno.ENOSPC and exc.path == path and "sparse" in str(exc) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    f.close()
    expected = 3 if BACKEND == "native" else -signal.SIGBUS
    assert os.waitstatus_to_exitcode(status) == expected


# -- merges on a full disk ---------------------------------------------------------------------------


def make_shards(directory: Any, body: int, n: int = 2) -> tuple[list[str], list[str]]:
    """n shard files of ``body`` bytes of bits (on the real disk); returns them and their items."""
    parts = [[f"shard{i}-{j}" for j in range(2000)] for i in range(n)]
    paths = write_shards(directory, BloomConfig(num_bits=8 * body, num_hashes=3), parts)
    return paths, [x for part in parts for x in part]


def run_merge(how: str, out: str, shards: list[str], *, replace: bool = False, into: bool = False) -> tuple[int, str]:
    """Run a merge through the library or the CLI's ``main``; return (status, stderr). The
    library's OSError is re-raised (the caller checks it), the CLI's is its exit status."""
    if how == "library":
        if into:
            merge_into(out, shards, chunk_bytes=64 * 1024, progress=False)
        else:
            merge_shards(out, shards, replace=replace, chunk_bytes=64 * 1024, progress=False)
        return 0, ""
    err = io.StringIO()
    args = [
        "merge",
        "-q",
        "--no-progress",
        *(["--force"] if replace else []),
        *(["--into"] if into else []),
        out,
        *shards,
    ]
    with contextlib.redirect_stderr(err):
        code = cli_main(args)
    return code, err.getvalue()


def assert_merge_refused_cleanly(how: str, out: str, shards: list[str], replace: bool) -> None:
    if how == "library":
        with pytest.raises(OSError) as info:
            run_merge(how, out, shards, replace=replace)
        assert info.value.errno == errno.ENOSPC, info.value
    else:
        code, err = run_merge(how, out, shards, replace=replace)
        assert code == 2, err
        assert err.count("\n") == 1 and "No space left on device" in err, err


@pytest.mark.parametrize("how", ["library", "cli"])
@pytest.mark.parametrize("dest", ["new", "replace"])
def test_merge_larger_than_free_space(tmpfs_1m: str, tmp_path: Any, how: str, dest: str) -> None:
    """Two 2 MiB shards merged onto a 1 MB file system: refused with ENOSPC; the old output
    (when replacing) is untouched, no temporary is left, the space is free again."""
    shards, _ = make_shards(tmp_path, 2 * MB)
    out = os.path.join(tmpfs_1m, "out.blm")
    old = b""
    if dest == "replace":
        with BloomFilter.create(out, BloomConfig(num_bits=8 * 64 * 1024, num_hashes=3)) as f:
            f.update(["old-1", "old-2"])
            old = f.to_bytes()
    before = free_bytes(tmpfs_1m)
    assert_merge_refused_cleanly(how, out, shards, replace=dest == "replace")
    if dest == "new":
        assert os.listdir(tmpfs_1m) == []  # no output and no temporary
    else:
        # out.blm.mutex: the write lock's side file, made by the update above (README, locking)
        assert [n for n in os.listdir(tmpfs_1m) if not n.endswith(".mutex")] == ["out.blm"]
        with open(out, "rb") as fh:
            assert fh.read() == old, "the destination was changed"
    assert free_bytes(tmpfs_1m) == before  # no unlinked temporary still holding blocks


@pytest.mark.parametrize("how", ["library", "cli"])
def test_merge_on_a_nearly_full_disk(tmpfs_1m: str, tmp_path: Any, how: str) -> None:
    """About 256 kB free: a merge of 512 kB shards fails cleanly, one of 64 kB shards fits."""
    with open(os.path.join(tmpfs_1m, "filler"), "wb") as fh:
        fh.write(b"\0" * (free_bytes(tmpfs_1m) - 256 * 1024))
    (tmp_path / "big").mkdir()
    (tmp_path / "small").mkdir()
    big, _ = make_shards(tmp_path / "big", 512 * 1024)
    small, items = make_shards(tmp_path / "small", 64 * 1024, n=3)
    out = os.path.join(tmpfs_1m, "out.blm")
    before = free_bytes(tmpfs_1m)
    assert_merge_refused_cleanly(how, out, big, replace=False)
    assert os.listdir(tmpfs_1m) == ["filler"] and free_bytes(tmpfs_1m) == before
    assert run_merge(how, out, small)[0] == 0
    assert sorted(os.listdir(tmpfs_1m)) == ["filler", "out.blm"]
    with verify_file(out) as f:
        assert f.contains_many(items).all()


def test_merge_out_of_inodes(tmpfs_no_inodes: str, tmp_path: Any) -> None:
    shards, _ = make_shards(tmp_path, 4096)
    for how in ("library", "cli"):
        assert_merge_refused_cleanly(how, os.path.join(tmpfs_no_inodes, "out.blm"), shards, replace=False)
        assert os.listdir(tmpfs_no_inodes) == []


@pytest.mark.parametrize("how", ["library", "cli"])
def test_merge_into_a_reserved_target_on_a_full_disk(tmpfs_1m: str, tmp_path: Any, how: str) -> None:
    """The target's space was reserved at creation: merging into it after the disk filled up
    writes every page of it without SIGBUS (in a child, so a SIGBUS fails the test)."""
    target = os.path.join(tmpfs_1m, "live.blm")
    with BloomFilter.create(target, BloomConfig(num_bits=8 * 256 * 1024, num_hashes=3)) as f:
        f.update(["mine-1", "mine-2"])
    assert fill(tmpfs_1m) > 0
    shards, items = make_shards(tmp_path, 256 * 1024, n=3)

    def merge() -> int:
        return run_merge(how, target, shards, into=True)[0]

    assert run_forked(merge) == 0
    with cast(BloomFilter, verify_file(target)) as f:
        assert f.contains_many(items + ["mine-1", "mine-2"]).all()
        body = f.to_bytes()[24:]
        assert all(any(body[i : i + 4096]) for i in range(0, len(body), 4096))  # bits in every page
