"""A lock must not outlive its holder through fork children.

flock belongs to the open file description. A child forked by a writer used to keep the
writer's description (and so its lock) alive through the inherited descriptor: a SIGKILLed
lock holder then left the file locked for everyone until its children exited. These tests
use a real holder process that forks a real child, take the write lock, and are SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, cast

import pytest

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, LockTimeout, open_any
from mmapbloom.base import MappedFilter
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")]

# The holder: open the filter, fork a child that (maybe) writes later, take the write
# lock, report "<child pid>" and sleep until SIGKILLed.
HOLDER = r"""
import os, sys, time
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter, CountingBloomFilter
cls = {cls}
f = cls.open({path!r})
pid = os.fork()
if pid == 0:
    if {child_writes!r}:
        time.sleep(1.0)           # the parent holds the lock and is killed meanwhile
        f.add("from-the-child")   # used to block forever
        os.write(1, b"child-added\n")
    time.sleep(60)
    os._exit(0)
with f.write_lock():
    f.add("from-the-holder")
    os.write(1, f"{{pid}}\n".encode())
    time.sleep(60)
"""


def _can_lock(path: str, seconds: float) -> bool:
    """Whether a fresh handle of ``path`` gets the write lock within ``seconds`` (whichever
    cross-process lock the file uses: the robust mutex or, with MMAPBLOOM_LOCK=flock, flock)."""
    with cast(MappedFilter, open_any(path)) as g:  # a BLM1 / BLC1 file here
        try:
            with g.write_lock(timeout=seconds):
                return True
        except LockTimeout:
            return False


def _kill_holder(tmp_path: Any, cls: Any, child_writes: bool) -> tuple[str, int, subprocess.Popen[bytes]]:
    path = str(tmp_path / ("f.blc" if cls is CountingBloomFilter else "f.blm"))
    cls.create(path, BloomConfig(num_bits=4096, num_hashes=3)).close()
    script = HOLDER.format(root=ROOT, cls=cls.__name__, path=path, child_writes=child_writes)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())  # the holder holds the lock now
    assert not _can_lock(path, 0.1), "the holder should hold the lock"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    return path, child, proc


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
def test_killed_holder_with_idle_fork_child_leaves_no_lock(tmp_path: Any, cls: Any) -> None:
    path, child, _ = _kill_holder(tmp_path, cls, child_writes=False)
    try:
        # The child is alive (it never wrote); the dead holder's lock must be gone anyway.
        os.kill(child, 0)
        assert _can_lock(path, 3.0), "a SIGKILLed holder's lock survived in its fork child"
        with cls.open(path) as g, g.write_lock():
            g.add("after")
    finally:
        os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("cls", [BloomFilter, CountingBloomFilter])
def test_fork_child_writes_after_holder_killed(tmp_path: Any, cls: Any) -> None:
    path, child, proc = _kill_holder(tmp_path, cls, child_writes=True)
    try:
        assert proc.stdout is not None
        # The example: the child's add used to block forever.
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + 10
        got = b""
        while b"child-added" not in got and time.monotonic() < deadline:
            try:
                got += proc.stdout.read() or b""
            except BlockingIOError:
                pass
            time.sleep(0.05)
        assert b"child-added" in got, "the fork child's add blocked after its parent was killed"
        with cls.open(path, readonly=True) as g:
            assert "from-the-child" in g and "from-the-holder" in g
        assert _can_lock(path, 3.0)
    finally:
        os.kill(child, signal.SIGKILL)
