"""mmapbloom.files.about_destination: the one rewording of an error met while a file or a
directory (a scalable or expiring filter) is built under a temporary name, with one
wording of a full disk for every kind and tool (issue 25, item 4)."""

from __future__ import annotations

import errno
import os
import re
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, ExpiringBloomFilter, NoSpaceError, ScalableBloomFilter
from mmapbloom import files
from mmapbloom.files import about_destination
from mmapbloom.units import format_bytes


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
