"""Errors that name the wrong thing or come too late.

* A create or merge into a missing directory, or with --force onto a directory, named the
  internal ``.mmapbloom-<random>.tmp`` path instead of the user's path.
* ``verify`` (and any subcommand) printed an OS error without the file's name.
* ``create -n 1e12 -p 1%`` started allocating 1.2 TB and failed midway with a bare
  ``No space left on device``: it now shows the size first and refuses at once with the
  path, the bytes needed and the bytes free; ``--sparse`` beyond the free space warns.
* ``BloomConfig.for_items(10**309, 0.5)`` raised a bare OverflowError and ``plan -n 1e309``
  printed a traceback: any capacity beyond the float range is a ``ConfigError``.
* ``add`` with no argument said INPUT is required (stdin is the default), and waiting on a
  terminal stdin showed nothing.
* "use --force to replace it" and "replace it with --force": one wording.
"""

from __future__ import annotations

import errno
import fractions
import mmap
import os
import pty
import select
import subprocess
import sys
import time
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, ConfigError, CountingBloomFilter, merge_shards
from mmapbloom.cli import main as cli_main
from mmapbloom.files import ALLOCATE_ON_READ, file_system_type
from tests.conftest import ROOT, write_shards

pytestmark = pytest.mark.slow

ENV = dict(os.environ, PYTHONPATH=ROOT)


def run_cli(*args: str, cwd: Any = None, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=120,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert ".mmapbloom-" not in err, f"names the internal temporary: {err}"
    return err


@pytest.fixture
def shard(tmp_path: Any) -> str:
    (path,) = write_shards(tmp_path, BloomConfig(num_bits=800, num_hashes=3), [["a"]])
    return path


# -- the user's path, not the temporary's ----------------------------------------------------------
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


def test_one_wording_for_force(tmp_path: Any, shard: str) -> None:
    (tmp_path / "e.blm").write_bytes(b"")
    a = one_line_error(run_cli("create", "e.blm", "--bits", "80", "--hashes", "3", cwd=tmp_path), "e.blm")
    b = one_line_error(run_cli("merge", "e.blm", shard, cwd=tmp_path), "e.blm")
    assert a.endswith("file exists (use --force to replace it)"), a
    assert b.endswith("file exists (use --force to replace it)"), b


# -- OS errors without a file name ------------------------------------------------------------------
def test_verify_and_info_name_the_file_on_a_bare_os_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = str(tmp_path / "v.blm")
    BloomFilter.create(path, BloomConfig(num_bits=800, num_hashes=3)).close()

    def no_memory(*a: Any, **k: Any) -> Any:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_memory)
    assert cli_main(["verify", path]) == 2
    err = capsys.readouterr().err
    assert "FAILED" in err and path in err and "Cannot allocate memory" in err, err
    for sub in (["info", path], ["check", path], ["add", path]):
        assert cli_main(sub) == 2
        err = capsys.readouterr().err
        assert path in err and "Cannot allocate memory" in err, (sub, err)


# -- too large: say so first, refuse before allocating ----------------------------------------------
def _free(directory: Any) -> int:
    """Bytes an unprivileged process may allocate there (what the free-space check counts,
    even for root: never the blocks reserved for root)."""
    v = os.statvfs(directory)
    return v.f_bavail * v.f_frsize


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


# -- capacities beyond the float range ------------------------------------------------------------
@pytest.mark.parametrize(
    "capacity",
    [10**309, 10**5000, fractions.Fraction(10**400), 2**1024],
    ids=["1e309", "1e5000", "Fraction-1e400", "2^1024"],
)
def test_for_items_beyond_float_range_is_a_config_error(capacity: Any) -> None:
    with pytest.raises(ConfigError, match="capacity"):
        BloomConfig.for_items(capacity, 0.5)


@pytest.mark.parametrize("sub", ["plan", "create"])
def test_cli_capacity_beyond_float_range(tmp_path: Any, sub: str) -> None:
    args = ["plan", "-n", "1e309", "-p", "1%"] if sub == "plan" else ["create", "x.blm", "-n", "1e309", "-p", "1%"]
    one_line_error(run_cli(*args, cwd=tmp_path), "capacity")
    assert os.listdir(tmp_path) == []


def test_fp_rate_that_rounds_to_zero_is_refused_by_the_parser(tmp_path: Any) -> None:
    err = run_cli("plan", "-n", "1000", "-p", "1e-400", cwd=tmp_path).stderr
    assert "1e-400" in err and "Traceback" not in err, err


# -- add and check read stdin by default ------------------------------------------------------------
def test_add_usage_does_not_require_input(tmp_path: Any) -> None:
    err = run_cli("add", cwd=tmp_path).stderr
    assert "required: file" in err and "INPUT" not in err.split("required")[1], err
    path = str(tmp_path / "a.blm")
    BloomFilter.create(path, BloomConfig.for_items(100, 0.01)).close()
    proc = run_cli("add", path, stdin=b"x\ny\n")
    assert proc.returncode == 0 and "2 items" in proc.stderr  # stdin is the default
    assert "until end of input" not in proc.stderr  # a pipe: no prompt


@pytest.mark.parametrize("sub", ["add", "check"])
def test_terminal_stdin_says_what_it_waits_for(tmp_path: Any, sub: str) -> None:
    path = str(tmp_path / "a.blm")
    BloomFilter.create(path, BloomConfig.for_items(100, 0.01)).close()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", sub, path], stdin=slave, stdout=subprocess.DEVNULL, stderr=slave, env=ENV
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"end of input" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        assert b"stdin" in seen and b"end of input" in seen, seen
        os.write(master, b"item\n\x04")  # one item, then end of input (Ctrl-D)
        assert proc.wait(30) in (0, 1)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    if sub == "add":
        with BloomFilter.open(path) as f:
            assert "item" in f
