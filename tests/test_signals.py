"""Termination signals Python does not turn into exceptions.

SIGTERM (``timeout``, ``kill``) and SIGHUP used to kill a merge or create without running
its cleanup, leaving a large ``.mmapbloom-*.tmp`` file; SIGINT cleaned up. Now the CLI and
the tools end the same way for all three (temporary removed, exit 128 + signal number),
and a temporary left by a SIGKILLed run carries its writer's pid and is removed by the next
create or merge in that directory, never while that pid is alive.

Real subprocesses and real signals. To land a signal while the temporary file exists, a
``sitecustomize`` module slows the real code down (it sleeps inside ``os.preadv`` or after
``os.posix_fallocate``); the programs themselves run unchanged.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Optional

import pytest

from mmapbloom import BloomConfig, BloomFilter, verify_file
from mmapbloom.files import remove_stale_temporaries
from tests.conftest import ROOT, write_shards

pytestmark = pytest.mark.slow

TEMP = re.compile(r"\.mmapbloom-([0-9]+)-[0-9a-f]{16}\.tmp\Z")

SLOW = r"""
import os, time
_preadv, _fallocate = os.preadv, os.posix_fallocate
def preadv(*a, **k):
    time.sleep(0.05)
    return _preadv(*a, **k)
def posix_fallocate(*a, **k):
    _fallocate(*a, **k)
    time.sleep(30)
os.preadv = preadv
os.posix_fallocate = posix_fallocate
"""


def _env(tmp_path: Any) -> dict[str, str]:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SLOW)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hook), ROOT])
    return env


def _temps(directory: Any) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(".mmapbloom-"))


def _start(argv: list[str], env: dict[str, str], directory: Any) -> subprocess.Popen[str]:
    """Start ``argv`` and return once its temporary file exists in ``directory``."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _temps(directory):
        assert proc.poll() is None, f"ended before writing its temporary: {proc.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.1)  # inside the work now
    return proc


def _merge_argv(out: str, shards: list[str]) -> list[str]:
    # The example: the real tool, as a user runs it.
    return [sys.executable, os.path.join(ROOT, "tools", "merge_shards.py"), "--chunk-mib", "1", out, *shards]


@pytest.fixture
def shards(tmp_path: Any) -> list[str]:
    src = tmp_path / "shards"
    src.mkdir()
    return write_shards(src, BloomConfig(num_bits=8 * 4 * 2**20, num_hashes=3), [["a", "b"], ["c"]])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_merge_tool_cleans_up_on_signal(tmp_path: Any, shards: list[str], sig: int) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _start(_merge_argv(str(out_dir / "m.blm"), shards), _env(tmp_path), out_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert os.listdir(out_dir) == [], "a temporary (or a torn output) was left behind"
    assert "interrupted" in err and "Traceback" not in err, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("how", ["cli-merge", "cli-create"])
def test_cli_cleans_up_on_signal(tmp_path: Any, shards: list[str], sig: int, how: str) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = str(out_dir / "m.blm")
    cli = [sys.executable, "-m", "mmapbloom"]
    argv = (
        cli + ["merge", "--chunk-mib", "1", out, *shards]
        if how == "cli-merge"
        else cli + ["create", out, "--bits", str(8 * 2**20), "--hashes", "3"]
    )
    proc = _start(argv, _env(tmp_path), out_dir)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert f"interrupted by {signal.Signals(sig).name}" in err, err
    assert os.listdir(out_dir) == []


def _wait_until_caught(pid: int, sig: int, timeout: float = 60.0) -> None:
    """Wait until process ``pid`` has a handler for ``sig`` (Linux: the SigCgt mask of
    /proc/PID/status), so a signal sent next tests the handler, not a start-up still under
    way on a loaded machine. Elsewhere, wait 1 s."""
    status = f"/proc/{pid}/status"
    if not os.path.exists(status):
        time.sleep(1.0)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(status) as fh:
            caught = next(int(line.split()[1], 16) for line in fh if line.startswith("SigCgt:"))
        if caught >> (sig - 1) & 1:
            return
        time.sleep(0.02)


def test_add_exits_128_plus_signal(tmp_path: Any) -> None:
    path = str(tmp_path / "a.blm")
    BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)).close()
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", "add", path], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )  # waits on stdin
    _wait_until_caught(proc.pid, signal.SIGTERM)
    time.sleep(0.2)  # and is reading stdin
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    verify_file(path).close()


def test_nohup_keeps_sighup_ignored(tmp_path: Any, shards: list[str]) -> None:
    """A SIGHUP the parent ignores (nohup) stays ignored: the merge completes."""
    out = str(tmp_path / "m.blm")
    env = _env(tmp_path)
    env["PYTHONPATH"] = ROOT  # no slowdown needed beyond a short merge
    proc = subprocess.Popen(
        _merge_argv(out, shards),
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    verify_file(out).close()


def _kill9_leftover(tmp_path: Any, shards: list[str], out_dir: Any) -> str:
    proc = _start(_merge_argv(str(out_dir / "m.blm"), shards), _env(tmp_path), out_dir)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    (left,) = _temps(out_dir)
    match = TEMP.match(left)
    assert match and int(match.group(1)) == proc.pid, left  # recognisable: the writer's pid
    return left


@pytest.mark.parametrize("next_run", ["merge", "create"])
def test_stale_temporary_removed_by_next_run(tmp_path: Any, shards: list[str], next_run: str) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    left = _kill9_leftover(tmp_path, shards, out_dir)
    if next_run == "merge":
        code = subprocess.run(
            _merge_argv(str(out_dir / "m.blm"), shards), env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True
        ).returncode
        assert code == 0
        assert os.listdir(out_dir) == ["m.blm"]
    else:
        BloomFilter.create(out_dir / "other.blm", BloomConfig(num_bits=800, num_hashes=3)).close()
        assert os.listdir(out_dir) == ["other.blm"], f"{left} was not removed"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_live_writers_temporaries_are_never_removed(tmp_path: Any, shards: list[str]) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # 1. A live process writing its temporary: another create in the directory leaves it.
    proc = _start(
        [sys.executable, "-m", "mmapbloom", "create", str(out_dir / "slow.blm"), "--bits", "8000000", "--hashes", "3"],
        _env(tmp_path),
        out_dir,
    )
    try:
        (live,) = _temps(out_dir)
        BloomFilter.create(out_dir / "x.blm", BloomConfig(num_bits=800, num_hashes=3)).close()
        assert remove_stale_temporaries(str(out_dir)) == []
        assert live in os.listdir(out_dir)
    finally:
        proc.kill()
        proc.wait()
    # 2. A dead pid, but a writer (e.g. in another pid namespace) still holds the flock.
    held = out_dir / f".mmapbloom-{_dead_pid()}-{'ab' * 8}.tmp"
    held.write_bytes(b"x")
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    # 3. A symlink with a stale-looking name is not followed, and its target survives.
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    link = out_dir / f".mmapbloom-{_dead_pid()}-{'cd' * 8}.tmp"
    os.symlink(victim, link)
    # 4. Other names are not ours.
    other = out_dir / ".mmapbloom-0123456789abcdef.tmp"  # an older version's name: no pid
    other.write_bytes(b"x")
    removed: Optional[list[str]] = remove_stale_temporaries(str(out_dir))
    assert removed is not None and os.path.basename(live) in " ".join(removed)  # the killed create's
    assert held.exists() and os.path.islink(link) and victim.read_bytes() == b"precious" and other.exists()
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    assert remove_stale_temporaries(str(out_dir)) == [str(held)]
