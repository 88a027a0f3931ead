"""mmapbloom.files.about_destination: the one rewording of an error met while a file or a
directory (a scalable or expiring filter) is built under a temporary name, with one
wording of a full disk for every kind and tool (issue 25, item 4)."""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, ExpiringBloomFilter, NoSpaceError, ScalableBloomFilter
from mmapbloom import files
from mmapbloom.files import about_destination
from mmapbloom.units import format_bytes
from mmapbloom import CountingBloomFilter, merge_shards
from mmapbloom.files import ALLOCATE_ON_READ, file_system_type
from tests.cli_support import one_line_error, run_cli
from tests.conftest import write_shards


def _enospc(name: str) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)


def test_enospc_has_one_wording_for_files_and_directories(tmp_path: Any) -> None:
    dest = str(tmp_path / "f")
    tmp = str(tmp_path / ".mmapbloom-1-0123456789abcdef.tmp")
    texts = []
    for exc, what in ((_enospc(tmp), "file"), (_enospc(os.path.join(tmp, "layer-0000.blm")), "directory")):
        out = about_destination(exc, tmp, dest, what=what)
        assert isinstance(out, NoSpaceError) and out.errno == errno.ENOSPC and out.filename == dest
        assert isinstance(out.available, int) and out.available >= 0
        texts.append(re.sub(r"[0-9,]+ bytes free", "N bytes free", str(out)))
    assert texts == [f"{dest}: No space left on device (while writing it; N bytes free)"] * 2, texts
    bare = about_destination(OSError(errno.ENOSPC, "No space left on device"), tmp, dest, what="directory")
    assert isinstance(bare, NoSpaceError) and bare.filename == dest


def test_no_space_error_inside_the_temporary_names_the_destination(tmp_path: Any) -> None:
    dest, tmp = str(tmp_path / "s"), str(tmp_path / ".mmapbloom-1-0123456789abcdef.tmp")
    inner = os.path.join(tmp, "layer-0000.blm")
    exc = NoSpaceError(f"{inner}: not enough space", path=inner, needed=10, available=3)
    out = about_destination(exc, tmp, dest, what="directory")
    layer = os.path.join(dest, "layer-0000.blm")
    assert isinstance(out, NoSpaceError) and str(out) == f"{layer}: not enough space"
    assert (out.filename, out.needed, out.available) == (layer, 10, 3)
    mine = NoSpaceError(f"{dest}: not enough space", path=dest, needed=10, available=3)
    assert about_destination(mine, tmp, dest) is mine


@pytest.mark.parametrize("what", ["file", "directory"])
def test_other_errors_name_the_destination_or_pass_unchanged(tmp_path: Any, what: str) -> None:
    dest, tmp = str(tmp_path / "no" / "s"), str(tmp_path / "no" / ".mmapbloom-1-0123456789abcdef.tmp")
    parent = str(tmp_path / "no")
    missing = about_destination(FileNotFoundError(errno.ENOENT, "No such file or directory", tmp), tmp, dest, what=what)
    assert isinstance(missing, FileNotFoundError) and missing.filename == dest
    assert str(missing) == f"[Errno 2] No such file or directory (directory {parent} does not exist): '{dest}'"
    denied = about_destination(PermissionError(errno.EACCES, "Permission denied", tmp), tmp, dest, what=what)
    assert isinstance(denied, PermissionError) and denied.filename == dest
    assert str(denied).endswith(f"(creating a {what} in {parent}): '{dest}'"), str(denied)
    bare = about_destination(OSError(errno.EIO, "Input/output error"), tmp, dest, what=what)
    assert bare.errno == errno.EIO and bare.filename == dest
    other = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "source.blm"))
    assert about_destination(other, tmp, dest, what=what) is other
    exists = FileExistsError(errno.EEXIST, "file exists", dest)
    assert about_destination(exists, tmp, dest, what=what) is exists


def test_every_kind_names_a_missing_parent_the_same_way(tmp_path: Any) -> None:
    parent = tmp_path / "no"
    builds = {
        "bloom": lambda p: BloomFilter.create(p, BloomConfig(num_bits=800, num_hashes=3)),
        "scalable": lambda p: ScalableBloomFilter.create(p, 100, 0.01),
        "expiring": lambda p: ExpiringBloomFilter.create(p, 60, 100, 0.01),
    }
    for kind, build in builds.items():
        dest = str(parent / kind)
        with pytest.raises(FileNotFoundError) as err:
            build(dest)
        text = str(err.value)
        assert err.value.filename == dest and ".tmp" not in text, (kind, text)
        assert f"(directory {parent} does not exist)" in text, (kind, text)


def test_a_full_disk_at_allocation_has_the_same_wording_with_the_bytes_needed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, size: int, *, sparse: bool) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "reserve_space", full)
    dest = str(tmp_path / "f.blm")
    config = BloomConfig(num_bits=8000, num_hashes=3)
    with pytest.raises(NoSpaceError) as err:
        BloomFilter.create(dest, config)
    text = re.sub(r"[0-9,]+ bytes free", "N bytes free", str(err.value))
    needed = err.value.needed
    assert isinstance(needed, int) and needed > 1000
    expected = f"{dest}: No space left on device (while writing it; {needed:,} bytes ({format_bytes(needed)}) needed, N bytes free)"
    assert text == expected, text
    assert err.value.filename == dest and os.listdir(tmp_path) == []


# -- the user's path, not the temporary's; too large: say so first, refuse before allocating
# (moved from test_errors.py) --
@pytest.fixture
def shard(tmp_path: Any) -> str:
    (path,) = write_shards(tmp_path, BloomConfig(num_bits=800, num_hashes=3), [["a"]])
    return path


@pytest.mark.slow
def test_missing_directory_names_the_users_path(tmp_path: Any, shard: str) -> None:
    err = one_line_error(run_cli("create", "nodir/x.blm", "-n", "1000", "-p", "1%", cwd=tmp_path), "nodir/x.blm")
    assert "does not exist" in err
    one_line_error(run_cli("merge", "nodir/m.blm", shard, cwd=tmp_path), "nodir/m.blm", "does not exist")
    for cls in (BloomFilter, CountingBloomFilter):
        with pytest.raises(FileNotFoundError) as info:
            cls.create(str(tmp_path / "nodir" / "x.blm"), BloomConfig(num_bits=800, num_hashes=3))
        assert info.value.filename == str(tmp_path / "nodir" / "x.blm")
    with pytest.raises(FileNotFoundError) as info:
        merge_shards(str(tmp_path / "nodir" / "m.blm"), [shard], progress=False)
    assert info.value.filename == str(tmp_path / "nodir" / "m.blm")
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(shard)]


@pytest.mark.slow
def test_force_onto_a_directory_names_it_and_fails_first(tmp_path: Any, shard: str) -> None:
    (tmp_path / "d").mkdir()
    for force in (["--force"], []):
        err = one_line_error(run_cli("create", *force, "d", "-n", "1000", "-p", "1%", cwd=tmp_path), "d: ")
        assert "directory" in err
        err = one_line_error(run_cli("merge", *force, "d", shard, cwd=tmp_path), "d: ")
        assert "directory" in err
    with pytest.raises(IsADirectoryError) as info:
        BloomFilter.create(str(tmp_path / "d"), BloomConfig(num_bits=800, num_hashes=3), overwrite=True)
    assert info.value.filename == str(tmp_path / "d")
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(shard), "d"])  # no temporary left
    assert os.listdir(tmp_path / "d") == []


@pytest.mark.slow
def test_one_wording_for_force(tmp_path: Any, shard: str) -> None:
    (tmp_path / "e.blm").write_bytes(b"")
    a = one_line_error(run_cli("create", "e.blm", "--bits", "80", "--hashes", "3", cwd=tmp_path), "e.blm")
    b = one_line_error(run_cli("merge", "e.blm", shard, cwd=tmp_path), "e.blm")
    assert a.endswith("file exists (use --force to replace it)"), a
    assert b.endswith("file exists (use --force to replace it)"), b


def _free(directory: Any) -> int:
    """Bytes an unprivileged process may allocate there (what the free-space check counts,
    even for root: never the blocks reserved for root)."""
    v = os.statvfs(directory)
    return v.f_bavail * v.f_frsize


@pytest.mark.slow
def test_create_that_cannot_fit_is_refused_before_allocating(tmp_path: Any) -> None:
    free = _free(tmp_path)
    bits = 8 * 2 * max(free, 2**30)  # twice the free space
    t0 = time.monotonic()
    proc = run_cli("create", "big.blm", "--bits", str(bits), "--hashes", "7", cwd=tmp_path)
    assert time.monotonic() - t0 < 30
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    size = 24 + bits // 8
    assert len(lines) == 2 and lines[0].startswith("creating big.blm"), lines
    assert f"{size:,} bytes" in lines[0], lines  # the size first, then the refusal
    assert "big.blm" in lines[-1] and f"{size:,}" in lines[-1] and "free" in lines[-1], lines
    assert os.listdir(tmp_path) == []  # nothing allocated, no temporary
    # The example where it cannot fit either: -n 1e12 -p 1% is 1.2 TB.
    if free < 1_198_132_297_195:
        proc = run_cli("create", "-n", "1e12", "-p", "1%", "t.blm", cwd=tmp_path)
        assert proc.returncode == 2 and "1,198,132,297,195 bytes" in proc.stderr and "t.blm" in proc.stderr
        assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_sparse_create_beyond_free_space_warns(tmp_path: Any) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fstype = file_system_type(fd)
    finally:
        os.close(fd)
    free = _free(tmp_path)
    bits = 8 * 2 * max(free, 2**30)
    proc = run_cli("create", "--sparse", "s.blm", "--bits", str(bits), "--hashes", "7", cwd=tmp_path)
    if fstype in ALLOCATE_ON_READ:  # tmpfs: refused (tests/test_storage.py)
        assert proc.returncode == 2 and "SIGBUS" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "SIGBUS" in proc.stderr and f"{free:,}"[:2] in proc.stderr, proc.stderr
    assert os.stat(tmp_path / "s.blm").st_blocks * 512 < 2**20  # sparse indeed
