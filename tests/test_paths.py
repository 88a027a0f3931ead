"""Stress: permissions and paths.

* A read-only file opens read-only and refuses writes (ReadOnlyFilterError, a
  PermissionError); opening it read-write, or creating in a read-only directory, fails with
  PermissionError and leaves nothing behind. Checked as an unprivileged user (root may
  write anything; when the suite runs as root the checks run in a child that drops to
  ``nobody``), and on a read-only mount (root only).
* Permissions come from the umask and the documented ``mode`` option of create.
* Temporary files are created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW) in the
  destination's directory; a symlink pre-planted at the destination (to an existing file,
  a filter, a directory or a missing file) makes create raise FileExistsError without
  touching the symlink or its target, and open_or_create never creates through it; a
  symlink pre-planted at the temporary name is not followed either.
* Relative paths, non-ASCII and non-UTF-8 names and paths through a symlinked directory
  open the same file as the OS would; so do the shard, output and ``--into`` paths of a
  merge (``mmapbloom.merge``).
"""

from __future__ import annotations

import errno
import os
import pickle
import secrets
import shutil
import stat
import subprocess
import tempfile
from typing import Any, Iterator

import pytest

from mmapbloom import BloomConfig, BloomFilter, FormatError, ReadOnlyFilterError, verify_file
from mmapbloom.merge import merge_into, merge_shards
from tests.torture_support import run_forked

pytestmark = pytest.mark.slow

CFG = BloomConfig(num_bits=1000, num_hashes=3)
NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[str]:
    """A directory an unprivileged user can reach (tmp_path's parents are 0700)."""
    d = tempfile.mkdtemp(prefix="mmapbloom-paths-")
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_unprivileged(fn: Any, *args: Any) -> Any:
    """Run ``fn`` as an unprivileged user: in a child that drops to nobody when we are root."""

    def child() -> Any:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        return fn(*args)

    return run_forked(child)


# -- read-only files, directories and mounts ---------------------------------------------------


def test_read_only_file_as_unprivileged_user(shared_dir: str) -> None:
    path = os.path.join(shared_dir, "ro.blm")
    with BloomFilter.create(path, CFG) as f:
        f.update(["a", "b"])
    os.chmod(path, 0o444)
    image = open(path, "rb").read()

    def check() -> str:
        with pytest.raises(PermissionError):
            BloomFilter.open(path)
        with pytest.raises(PermissionError):
            BloomFilter.open_or_create(path, CFG)
        with BloomFilter.open(path, readonly=True) as r:
            assert r.readonly and "a" in r and r.contains_many(["a", "b"]).all()
            for write in (
                lambda: r.add("c"),
                lambda: r.update(["c"]),
                lambda: r.add_many(["c"]),
                lambda: r.union(BloomFilter(CFG)),
                lambda: r.intersection(BloomFilter(CFG)),
                lambda: r.write_lock(),
            ):
                with pytest.raises(ReadOnlyFilterError) as info:
                    write()
                assert isinstance(info.value, PermissionError)
            again = pickle.loads(pickle.dumps(r))  # travels read-only, opens read-only
            assert again.readonly and "a" in again
            again.close()
            r.flush()  # a no-op on a read-only handle, not an error
        verify_file(path).close()
        return "ok"

    assert as_unprivileged(check) == "ok"
    assert open(path, "rb").read() == image


def test_create_in_read_only_directory(shared_dir: str) -> None:
    ro_dir = os.path.join(shared_dir, "locked")
    os.mkdir(ro_dir, 0o555)

    def check() -> list[str]:
        for how in ("create", "open_or_create"):
            with pytest.raises(PermissionError):
                getattr(BloomFilter, how)(os.path.join(ro_dir, "f.blm"), CFG)
        return os.listdir(ro_dir)

    assert as_unprivileged(check) == []


@pytest.fixture
def read_only_mount() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root")
    where = tempfile.mkdtemp(prefix="mmapbloom-ro-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", where], capture_output=True).returncode:
        os.rmdir(where)
        pytest.skip("mount -t tmpfs failed")
    try:
        with BloomFilter.create(os.path.join(where, "f.blm"), CFG) as f:
            f.add("a")
        subprocess.run(["mount", "-o", "remount,ro", where], check=True, capture_output=True)
        yield where
    finally:
        if subprocess.run(["umount", where], capture_output=True).returncode:
            subprocess.run(["umount", "-l", where], capture_output=True)
        os.rmdir(where)


def test_read_only_mount(read_only_mount: str) -> None:
    path = os.path.join(read_only_mount, "f.blm")
    with pytest.raises(OSError) as info:
        BloomFilter.open(path)
    assert info.value.errno == errno.EROFS
    with BloomFilter.open(path, readonly=True) as r:
        assert "a" in r
        with pytest.raises(ReadOnlyFilterError):
            r.add("b")
    for how in ("create", "open_or_create"):
        with pytest.raises(OSError) as info:
            getattr(BloomFilter, how)(os.path.join(read_only_mount, "new.blm"), CFG)
        assert info.value.errno == errno.EROFS
    assert [n for n in os.listdir(read_only_mount) if not n.endswith(".mutex")] == ["f.blm"]  # made before the mount


# -- permissions from the umask and mode ------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o000, 0o027])
@pytest.mark.parametrize("mode", [None, 0o600, 0o640, 0o660, 0o644, 0o666])
@pytest.mark.parametrize("how", ["create", "open_or_create"])
def test_mode_and_umask(tmp_path: Any, umask: int, mode: Any, how: str) -> None:
    path = tmp_path / "m.blm"
    old = os.umask(umask)
    try:
        kwargs = {} if mode is None else {"mode": mode}
        getattr(BloomFilter, how)(path, CFG, **kwargs).close()
    finally:
        os.umask(old)
    expected = (0o666 if mode is None else mode) & ~umask
    assert stat.S_IMODE(os.stat(path).st_mode) == expected
    assert os.listdir(tmp_path) == ["m.blm"]


# Regression (found by this suite; fixed at the root in mmapbloom.storage).
@pytest.mark.parametrize("mode, umask", [(0o444, 0o022), (0o666, 0o277)], ids=["mode-444", "umask-277"])
def test_create_with_read_only_mode_as_unprivileged_user(shared_dir: str, mode: int, umask: int) -> None:
    """Either the handle is returned (the creator writes through the descriptor it made),
    or an error is raised and nothing is left at the path."""
    path = os.path.join(shared_dir, "m.blm")

    def check() -> str:
        os.umask(umask)
        try:
            f = BloomFilter.create(path, CFG, mode=mode)
        except OSError:
            return "refused, left behind" if os.path.lexists(path) else "refused cleanly"
        f.add("x")
        f.close()
        return "created"

    assert as_unprivileged(check) in ("created", "refused cleanly")


# -- temporary files and pre-planted symlinks ------------------------------------------------------------


def test_temporary_files_exclusive_in_destination_directory(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file create() makes is opened O_CREAT|O_EXCL|O_NOFOLLOW in the destination's
    directory (so it can neither follow nor reuse anything planted there)."""
    real_open = os.open
    created: list[tuple[str, int]] = []

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            created.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)

    dest_dir = tmp_path / "dest"
    dest_dir.mkdir()
    monkeypatch.setattr(os, "open", spy)
    for i, how in enumerate(["create", "open_or_create", "create"]):
        getattr(BloomFilter, how)(dest_dir / f"f{i}.blm", CFG, **({"sparse": True} if i == 2 else {})).close()
    monkeypatch.undo()
    assert created, "create() made no file with O_CREAT?"
    for path, flags in created:
        assert os.path.dirname(os.path.abspath(path)) == str(dest_dir), path
        assert flags & os.O_EXCL and flags & os.O_NOFOLLOW, (path, oct(flags))
    assert sorted(os.listdir(dest_dir)) == ["f0.blm", "f1.blm", "f2.blm"]  # temporaries removed


@pytest.mark.parametrize("target_kind", ["file", "filter", "directory", "missing", "missing-in-other-dir"])
@pytest.mark.parametrize("how", ["create", "open_or_create"])
def test_preplanted_symlink_at_destination(tmp_path: Any, target_kind: str, how: str) -> None:
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    target = victim_dir / "target"
    if target_kind == "file":
        target.write_bytes(b"precious data\n")
    elif target_kind == "filter":
        with BloomFilter.create(target, CFG) as g:
            g.add("theirs")
    elif target_kind == "directory":
        target.mkdir()
    elif target_kind == "missing-in-other-dir":
        target = victim_dir / "sub" / "target"
    dest_dir = tmp_path / "dest"
    dest_dir.mkdir()
    dest = dest_dir / "f.blm"
    os.symlink(target, dest)
    before = target.read_bytes() if target.is_file() else None
    before_stat = os.stat(target) if target.exists() else None

    if how == "create":
        with pytest.raises(FileExistsError):  # create refuses any existing path, links included
            BloomFilter.create(dest, CFG)
    elif target_kind == "filter":  # open_or_create opens what the symlink names, like open
        with BloomFilter.open_or_create(dest, CFG) as f:
            assert "theirs" in f
    else:  # ... and refuses anything else, never creating through the link
        expected = {"file": FormatError, "directory": IsADirectoryError}.get(target_kind, FileExistsError)
        with pytest.raises(expected):
            BloomFilter.open_or_create(dest, CFG)

    assert os.path.islink(dest) and os.readlink(dest) == str(target)  # the symlink is untouched
    if before is not None and target_kind == "file":
        assert target.read_bytes() == before
    if before_stat is not None and target_kind == "file":
        assert os.stat(target).st_mtime_ns == before_stat.st_mtime_ns
    if target_kind.startswith("missing"):
        assert not os.path.lexists(target), "created a file through a dangling symlink"
    assert sorted(os.listdir(dest_dir)) == ["f.blm"]  # no temporary left


def test_preplanted_symlink_at_temporary_name(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant symlinks at the temporary name create() will pick: it must not follow them."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    dest = tmp_path / "f.blm"
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: "0" * (2 * (n or 16)))
    for name in (
        f".mmapbloom-{'0' * 16}.tmp",
        f".mmapbloom-{os.getpid()}-{'0' * 16}.tmp",
        f".f.blm.{'0' * 12}.tmp",
        f".f.blm.{'0' * 32}.tmp",
        "f.blm.tmp",
        ".f.blm.tmp",
    ):
        os.symlink(victim, tmp_path / name)
    try:
        BloomFilter.create(dest, CFG).close()
    except FileExistsError:
        pass  # refusing is fine; following the symlink is not
    monkeypatch.undo()
    assert victim.read_bytes() == b"precious"
    if os.path.lexists(dest):
        assert not os.path.islink(dest)
        verify_file(dest).close()


# -- the same file through different paths ---------------------------------------------------------------

NAMES = [
    "plain.blm",
    "café-фильтр-過濾器.blm",
    "emoji-😀.blm",
    "with space 'and' \"quotes\".blm",
    "new\nline.blm",
    "-starts-with-dash.blm",
    ".hidden.blm",
    "bad-utf8-\udcff\udcfe.blm",
    "x" * 200 + ".blm",
]


@pytest.mark.parametrize("name", NAMES, ids=[f"name{i}" for i in range(len(NAMES))])
def test_same_file_through_different_paths(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = tmp_path / "real" / "sub"
    real.mkdir(parents=True)
    os.symlink(real, tmp_path / "link")
    absolute = str(real / name)
    with BloomFilter.create(absolute, CFG) as f:
        f.add("via-absolute")
        inode = os.stat(absolute).st_ino
    monkeypatch.chdir(tmp_path)
    paths = [
        os.path.join("real", "sub", name),  # relative
        os.path.join(".", "real", ".", "sub", name),  # with dots
        os.path.join("link", name),  # through a symlinked directory
        str(tmp_path / "link" / name),  # absolute through the symlink
        tmp_path / "link" / name,  # a pathlib.Path
    ]
    for i, p in enumerate(paths):
        assert os.stat(p).st_ino == inode
        with BloomFilter.open(p) as g:
            assert "via-absolute" in g
            assert os.path.isabs(g.path) and os.stat(g.path).st_ino == inode  # type: ignore[arg-type]  # a file: str
            g.add(f"via-{i}")
            h = pickle.loads(pickle.dumps(g))  # pickles as the absolute path
            assert f"via-{i}" in h
            h.close()
        with BloomFilter.open_or_create(p, CFG) as g:
            assert f"via-{i}" in g
    with verify_file(absolute) as v:
        assert v.contains_many([f"via-{i}" for i in range(len(paths))]).all()


def test_create_through_relative_and_symlinked_paths(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    for i, p in enumerate(["link/a.blm", "real/b.blm", "./link/c.blm", "é.blm"]):
        with BloomFilter.create(p, CFG) as f:
            f.add(str(i))
            assert os.stat(p).st_ino == os.stat(f.path).st_ino  # type: ignore[arg-type]  # a file: str
    # FILE.mutex, the write lock's side file where it is a mutex (README, locking), aside
    assert sorted(n for n in os.listdir(real) if not n.endswith(".mutex")) == ["a.blm", "b.blm", "c.blm"]
    assert sorted(n for n in os.listdir(tmp_path) if not n.endswith(".mutex")) == ["link", "real", "é.blm"]


def real_and_decoy(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, name: str, item: str) -> None:
    """In ``tmp_path`` (made the working directory): ``real/sub/``, a symlink ``link`` to
    it, ``real/<name>`` holding ``item`` and a decoy ``<name>`` holding "a decoy". The OS
    resolves ``link/../<name>`` to ``real/<name>``; a lexical normalisation to the decoy."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    os.symlink(tmp_path / "real" / "sub", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    with BloomFilter.create(f"real/{name}", CFG) as f:
        f.add(item)
    with BloomFilter.create(name, CFG) as f:
        f.add("a decoy")


# Regression (found by this suite; fixed at the root in mmapbloom.storage).
@pytest.mark.parametrize("case", ["dotdot-open", "dotdot-create", "trailing-slash"])
def test_paths_resolve_like_the_os(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    real_and_decoy(tmp_path, monkeypatch, "f.blm", "the real one")
    if case == "dotdot-open":
        # The OS resolves link/.. to real/, so this is real/f.blm.
        assert os.stat("link/../f.blm").st_ino == os.stat("real/f.blm").st_ino
        with BloomFilter.open("link/../f.blm") as g:
            assert "the real one" in g and os.stat(g.path).st_ino == os.stat("real/f.blm").st_ino  # type: ignore[arg-type]
    elif case == "dotdot-create":
        BloomFilter.create("link/../new.blm", CFG).close()
        assert os.path.exists("real/new.blm") and not os.path.exists("new.blm")
    else:
        with pytest.raises(NotADirectoryError):
            open("real/f.blm/", "rb")  # what the OS says
        with pytest.raises(NotADirectoryError):
            BloomFilter.open("real/f.blm/")


# Regression (found by this suite; fixed at the root in mmapbloom.storage).
def test_create_with_longest_legal_name(tmp_path: Any) -> None:
    name = "n" * 251 + ".blm"  # 255 bytes, NAME_MAX on Linux file systems
    (tmp_path / name).write_bytes(b"")  # the OS accepts it
    os.unlink(tmp_path / name)
    with BloomFilter.create(tmp_path / name, CFG) as f:
        f.add("x")
    assert os.listdir(tmp_path) == [name]


# Regression (found by this suite; fixed at the root in mmapbloom.merge, 23d0367): merge made
# shard and output paths absolute with the lexical os.path.abspath, so "link/../s.blm" was
# taken as ./s.blm where the OS means real/s.blm (another file was merged, or the output
# landed elsewhere), and a trailing slash was dropped ("s.blm/" accepted, "out.blm/"
# created out.blm) where the OS says NotADirectoryError / IsADirectoryError.
@pytest.mark.parametrize(
    "case", ["dotdot-shard", "dotdot-output", "dotdot-into-shard", "trailing-slash-shard", "trailing-slash-output"]
)
def test_merge_paths_resolve_like_the_os(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    real_and_decoy(tmp_path, monkeypatch, "s.blm", "the real shard")
    assert os.stat("link/../s.blm").st_ino == os.stat("real/s.blm").st_ino  # what the OS says
    if case == "dotdot-shard":
        merge_shards("out.blm", ["link/../s.blm"], progress=False)
        with BloomFilter.open("out.blm") as g:
            assert "the real shard" in g and "a decoy" not in g
    elif case == "dotdot-output":
        result = merge_shards("link/../out.blm", ["real/s.blm"], progress=False)
        assert os.path.exists("real/out.blm") and not os.path.exists("out.blm")
        assert os.stat(result.output).st_ino == os.stat("real/out.blm").st_ino
    elif case == "dotdot-into-shard":
        BloomFilter.create("real/t.blm", CFG).close()
        merge_into("real/t.blm", ["link/../s.blm"], progress=False)
        with BloomFilter.open("real/t.blm") as g:
            assert "the real shard" in g and "a decoy" not in g
    elif case == "trailing-slash-shard":
        with pytest.raises(NotADirectoryError):
            open("real/s.blm/", "rb")  # what the OS says
        with pytest.raises(NotADirectoryError):
            merge_shards("out.blm", ["real/s.blm/"], progress=False)
        assert not os.path.exists("out.blm")
    else:
        with pytest.raises(IsADirectoryError):
            BloomFilter.create("new.blm/", CFG)  # what create says (the OS: EISDIR)
        with pytest.raises(OSError):
            merge_shards("out.blm/", ["real/s.blm"], progress=False)
        assert not os.path.exists("out.blm")
