"""mmapbloom.files, the file procedures in one process: stale temporaries of dead writers
removed and every other one left alone, the temporary directory's lock, publishing by
link or rename, and the free-space checks before a file is allocated (a full disk
simulated by the free-space figure), each refusal naming the path and both sizes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Iterator

import pytest

from mmapbloom import NoSpaceError, SparseFileWarning
from mmapbloom import files


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def name(pid: int, tag: str = "0" * 16) -> str:
    return f".mmapbloom-{pid}-{tag}.tmp"


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = dead_pid()
    stale_file = tmp_path / name(dead, "a" * 16)
    stale_file.write_bytes(b"half a filter")
    stale_dir = tmp_path / name(dead, "b" * 16)
    stale_dir.mkdir()
    (stale_dir / "layer-0.blm").write_bytes(b"x")
    live = tmp_path / name(os.getpid(), "c" * 16)
    live.write_bytes(b"mine")
    locked = tmp_path / name(dead, "d" * 16)
    locked.write_bytes(b"a writer in another pid namespace")
    link = tmp_path / name(dead, "e" * 16)
    link.symlink_to(tmp_path / "target")
    (tmp_path / "target").write_bytes(b"t")
    other = tmp_path / ".mmapbloom-old.tmp"  # an older version's name: no pid
    other.write_bytes(b"")
    fd = os.open(locked, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        removed = files.remove_stale_temporaries(str(tmp_path))
    finally:
        os.close(fd)
    assert sorted(removed) == sorted([str(stale_file), str(stale_dir)])
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, locked.name, link.name, "target", other.name])
    assert files.remove_stale_temporaries(str(tmp_path / "missing")) == []


def test_pid_alive() -> None:
    assert files._pid_alive(os.getpid()) and files._pid_alive(0) and files._pid_alive(1)
    assert not files._pid_alive(dead_pid())
    assert files._pid_alive(2**62)  # cannot be asked (overflow): counted alive


def test_temporary_directory_is_locked_while_it_is_built(tmp_path: Path) -> None:
    with files.temporary_directory(str(tmp_path)) as (path, fd):
        assert os.path.isdir(path) and files._STALE_TEMP.match(os.path.basename(path))
        probe = os.open(path, os.O_RDONLY)
        try:
            assert not files._try_flock(probe)  # the builder holds it
        finally:
            os.close(probe)
    os.rmdir(path)
    with pytest.raises(FileNotFoundError):
        with files.temporary_directory(str(tmp_path / "missing")):
            pass


def test_publish_file_links_or_replaces(tmp_path: Path) -> None:
    dest = str(tmp_path / "f.blm")
    tmp = files.temporary_path(str(tmp_path))
    Path(tmp).write_bytes(b"one")
    files.publish_file(tmp, dest, replace=False)
    assert Path(dest).read_bytes() == b"one" and not os.path.exists(tmp)
    tmp2 = files.temporary_path(str(tmp_path))
    Path(tmp2).write_bytes(b"two")
    with pytest.raises(FileExistsError) as info:
        files.publish_file(tmp2, dest, replace=False)
    assert info.value.filename == dest and Path(dest).read_bytes() == b"one"
    files.publish_file(tmp2, dest, replace=True)
    assert Path(dest).read_bytes() == b"two" and sorted(os.listdir(tmp_path)) == ["f.blm"]


def test_absolute_path_is_not_normalised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert files.absolute_path("a/../b/") == os.path.join(str(tmp_path), "a/../b/")
    assert files.absolute_path("/x//y") == "/x//y"
    assert files.absolute_path("") == ""


# -- free space --------------------------------------------------------------------------------------
@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    handle = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    yield handle
    os.close(handle)


def test_check_space_refuses_what_cannot_fit(fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_free_bytes", lambda fd: 1000)
    files.check_space(fd, "f.blm", 1000, sparse=False)  # fits exactly
    with pytest.raises(
        NoSpaceError, match=r"f.blm: not enough space for a filter of 5,000 bytes \(5.0 KB\): only 1,000"
    ) as info:
        files.check_space(fd, "f.blm", 5000, sparse=False)
    assert (info.value.needed, info.value.available, info.value.filename) == (5000, 1000, "f.blm")


def test_sparse_beyond_free_space_warns_on_disk_and_is_refused_on_tmpfs(
    fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_free_bytes", lambda fd: 1000)
    monkeypatch.setattr(files, "file_system_type", lambda fd: "ext4")
    with pytest.warns(SparseFileWarning, match="larger than the 1,000 bytes"):
        files.check_space(fd, "s.blm", 5000, sparse=True)
    monkeypatch.setattr(files, "file_system_type", lambda fd: "tmpfs")
    with pytest.raises(NoSpaceError, match="does not fit on tmpfs"):
        files.check_space(fd, "s.blm", 5000, sparse=True)


def test_check_backing_of_a_sparse_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "holes"
    with open(path, "wb") as fh:
        fh.truncate(1 << 20)  # all hole
    handle = os.open(path, os.O_RDONLY)
    try:
        monkeypatch.setattr(files, "_free_bytes", lambda fd: 4096)
        monkeypatch.setattr(files, "file_system_type", lambda fd: "ext4")
        files.check_backing(handle, str(path), 1 << 20, readonly=False)  # a disk: reads do not allocate
        monkeypatch.setattr(files, "file_system_type", lambda fd: "tmpfs")
        with pytest.raises(NoSpaceError, match="holes need backing but only 4,096") as info:
            files.check_backing(handle, str(path), 1 << 20, readonly=False)
        assert info.value.available == 4096 and (info.value.needed or 0) > 4096
        with pytest.warns(SparseFileWarning, match="SIGBUS"):
            files.check_backing(handle, str(path), 1 << 20, readonly=True)
        monkeypatch.setattr(files, "_free_bytes", lambda fd: 1 << 30)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            files.check_backing(handle, str(path), 1 << 20, readonly=True)  # room enough: silent
    finally:
        os.close(handle)


def test_reserve_space_allocates_unless_sparse(tmp_path: Path) -> None:
    for sparse in (False, True):
        path = tmp_path / f"r{sparse}"
        handle = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            files.reserve_space(handle, 1 << 20, sparse=sparse)
            st = os.fstat(handle)
            assert st.st_size == 1 << 20
            if not sparse:
                assert st.st_blocks * 512 >= 1 << 20
        finally:
            os.close(handle)


def test_file_system_type_is_named() -> None:
    handle = os.open("/", os.O_RDONLY)
    try:
        kind = files.file_system_type(handle)
    finally:
        os.close(handle)
    assert kind is None or (isinstance(kind, str) and kind)
