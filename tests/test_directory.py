"""mmapbloom.directory, what the directory kinds (scalable, expiring) share: the manifest
read and its refusals, the lock file's 16 bytes and its word, building a directory whole
under a temporary name, and the access bits new files copy. Each refusal is a
ManifestError naming the file, with the expected and the actual value."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mmapbloom import ManifestError
from mmapbloom import directory as d


def manifest(tmp_path: Path, content: bytes) -> str:
    (tmp_path / d.MANIFEST_NAME).write_bytes(content)
    return str(tmp_path)


def refused(directory: str, match: str) -> ManifestError:
    with pytest.raises(ManifestError, match=match) as info:
        d.read_json(directory, "demo", 1, "demo filter")
    assert info.value.source == os.path.join(directory, d.MANIFEST_NAME)
    return info.value


# -- the manifest -----------------------------------------------------------------------------------
def test_publish_then_read_round_trips(tmp_path: Path) -> None:
    doc = {"format": "demo", "version": 1, "layers": [1, 2, 3]}
    d.publish_json(str(tmp_path), doc, mode=0o640)
    assert d.read_json(str(tmp_path), "demo", 1, "demo filter") == doc
    assert stat.S_IMODE(os.stat(tmp_path / d.MANIFEST_NAME).st_mode) == 0o640
    d.publish_json(str(tmp_path), {**doc, "layers": []})  # replaced whole
    assert d.read_json(str(tmp_path), "demo", 1, "demo filter")["layers"] == []
    assert sorted(os.listdir(tmp_path)) == [d.MANIFEST_NAME]  # no temporary left


def test_missing_manifest(tmp_path: Path) -> None:
    err = refused(str(tmp_path), "the manifest is missing \\(not a demo filter directory")
    assert err.actual is None


def test_manifest_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / d.MANIFEST_NAME).mkdir()
    err = refused(str(tmp_path), "not a regular file")
    assert err.expected == "regular file" and err.actual.startswith("d")


def test_manifest_too_large_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / d.MANIFEST_NAME
    with open(path, "wb") as fh:
        fh.truncate(d.MAX_MANIFEST_BYTES + 1)
    err = refused(str(tmp_path), f"more than {d.MAX_MANIFEST_BYTES}")
    assert err.actual == d.MAX_MANIFEST_BYTES + 1


@pytest.mark.parametrize(
    "content, match",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version": 1}', "manifest has no field 'format'"),
        (b'{"format": 7, "version": 1}', "field 'format' has type int"),
        (b'{"format": "demo", "version": true}', "field 'version' has type bool"),
        (b'{"format": "other", "version": 1}', "manifest format is 'other', expected 'demo'"),
        (b'{"format": "demo", "version": 2}', "manifest version is 2, expected 1"),
    ],
    ids=["syntax", "not-utf8", "array", "no-format", "format-int", "version-bool", "other-format", "version-2"],
)
def test_damaged_manifest(tmp_path: Path, content: bytes, match: str) -> None:
    refused(manifest(tmp_path, content), match)


def test_manifest_field_checks_presence_and_type() -> None:
    doc = {"n": 3, "flag": True, "name": "x"}
    assert d.manifest_field(doc, "n", int, "src") == 3
    with pytest.raises(ManifestError, match="has type bool") as info:
        d.manifest_field(doc, "flag", int, "src")
    assert info.value.actual is True
    with pytest.raises(ManifestError, match="no field 'missing'") as info:
        d.manifest_field(doc, "missing", str, "src")
    assert info.value.actual == ["flag", "n", "name"]


# -- the lock file ------------------------------------------------------------------------------------
def test_lock_image_round_trips() -> None:
    image = d.lock_image(b"DEMO", 1, 5)
    assert len(image) == d.LOCK_SIZE == 16
    assert d.check_lock_image(image, 16, "lock", magic=b"DEMO", version=1, what="word", minimum=1) == 5


@pytest.mark.parametrize(
    "image, size, match",
    [
        (b"DEMO" + bytes(8), 12, "lock file is 12 bytes, expected 16"),
        (d.LOCK.pack(b"XXXX", 1, 5, 0), 16, "lock file magic is b'XXXX', expected b'DEMO'"),
        (d.LOCK.pack(b"DEMO", 9, 5, 0), 16, "lock file version is 9, expected 1"),
        (d.LOCK.pack(b"DEMO", 1, 5, 3), 16, "reserved word is 3, expected 0"),
        (d.LOCK.pack(b"DEMO", 1, 0, 0), 16, "committed count is 0, expected at least 1"),
    ],
    ids=["short", "magic", "version", "reserved", "below-minimum"],
)
def test_damaged_lock_image(image: bytes, size: int, match: str) -> None:
    with pytest.raises(ManifestError, match=match) as info:
        d.check_lock_image(image, size, "the-lock", magic=b"DEMO", version=1, what="committed count", minimum=1)
    assert info.value.source == "the-lock"


def test_word_is_stored_and_read_with_pread(tmp_path: Path) -> None:
    path = tmp_path / d.LOCK_NAME
    path.write_bytes(d.lock_image(b"DEMO", 1, 1))
    fd = os.open(path, os.O_RDWR)
    try:
        d.store_word(fd, 42)
        assert d.read_word(fd, str(path), what="generation", minimum=0) == 42
        assert d.LOCK.unpack(path.read_bytes()) == (b"DEMO", 1, 42, 0)
        with pytest.raises(ManifestError, match="generation is 42, expected at least 50"):
            d.read_word(fd, str(path), what="generation", minimum=50)
        os.truncate(path, 10)  # truncated under the open handle: short read, not SIGBUS
        with pytest.raises(ManifestError, match="lock file is 10 bytes, expected 16 \\(truncated") as info:
            d.read_word(fd, str(path), what="generation", minimum=0)
        assert info.value.actual == 10
    finally:
        os.close(fd)


# -- building a directory, sharing bits -------------------------------------------------------------
def test_build_directory_publishes_whole_with_the_mode(tmp_path: Path) -> None:
    def fill(tmp: str) -> None:
        with open(os.path.join(tmp, "a"), "w") as fh:
            fh.write("x")

    dest = d.build_directory(str(tmp_path / "built") + "//", fill, 0o640)
    assert dest == str(tmp_path / "built")
    assert os.listdir(dest) == ["a"]
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o750  # x where r is set
    with pytest.raises(FileExistsError) as info:
        d.build_directory(dest, fill, None)
    assert info.value.filename == dest


def test_build_directory_removes_the_temporary_when_fill_fails(tmp_path: Path) -> None:
    def fill(tmp: str) -> None:
        raise RuntimeError("fill failed")

    with pytest.raises(RuntimeError, match="fill failed"):
        d.build_directory(str(tmp_path / "never"), fill, None)
    assert os.listdir(tmp_path) == []


def test_build_directory_in_a_missing_parent_names_the_destination(tmp_path: Path) -> None:
    dest = str(tmp_path / "nodir" / "built")
    with pytest.raises(FileNotFoundError) as info:
        d.build_directory(dest, lambda tmp: None, None)
    assert info.value.filename == dest and ".mmapbloom-" not in str(info.value)


def test_check_file_mode() -> None:
    assert d.check_file_mode(None) is None and d.check_file_mode(0o644) == 0o644
    for bad in (True, -1, 0o1000, "644", 6.0):
        with pytest.raises(TypeError, match="mode must be permission bits"):
            d.check_file_mode(bad)  # type: ignore[arg-type]


def test_strip_path() -> None:
    assert d.strip_path("/") == "/"
    assert d.strip_path("/a/b///") == "/a/b"
    assert d.strip_path("rel") == os.path.join(os.getcwd(), "rel")


def test_shared_mode_is_copied_to_a_new_file(tmp_path: Path) -> None:
    model, new = tmp_path / "model", tmp_path / "new"
    model.write_bytes(b"")
    new.write_bytes(b"")
    os.chmod(model, 0o660)
    os.chmod(new, 0o600)
    mode, gid = d.shared_mode(str(model))
    assert mode == 0o660 and gid == os.stat(model).st_gid
    d.apply_shared_mode(str(new), mode, gid)
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o660
    assert d.shared_mode(str(tmp_path / "absent")) == (None, None)
    d.apply_shared_mode(str(new), None, None)  # nothing to copy: unchanged
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o660
    d.apply_shared_mode(str(new), 0o640, os.getegid() + 12345)  # a group not ours: bits only
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o640


def test_manifest_json_is_what_publish_wrote(tmp_path: Path) -> None:
    d.publish_json(str(tmp_path), {"format": "demo", "version": 1})
    assert json.loads((tmp_path / d.MANIFEST_NAME).read_text()) == {"format": "demo", "version": 1}
