"""Holes found in review of the mutex-mode write lock (branch lock2 at 8573db0), now fixed.

Each test reproduces, with real processes, a case where the lock let two writers in at
once (a writer in another pid namespace) or made a writer wait for as long as another
process kept the file open (another user of the file's group; a readonly handle that took
its first snapshot before any side file existed, also within one thread).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, LockTimeout
from mmapbloom.locking import LOCK_ENV
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and flock")

CFG = BloomConfig(num_bits=1 << 12, num_hashes=3)


def _mutex_here(tmp_path: Any) -> bool:
    f = BloomFilter.create(str(tmp_path / "probe.blm"), CFG)
    try:
        f.add("x")
        return bool(f._storage.lock.mode == "mutex")
    finally:
        f.close()


@pytest.fixture
def mutex_mode(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    if not _mutex_here(tmp_path):
        pytest.skip("no robust process-shared mutex on this platform / file system")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(LOCK_ENV, None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _new_file(tmp_path: Any) -> str:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    return path


def _can_unshare_pid() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-pf", "true"], capture_output=True, timeout=10)
    return r.returncode == 0


# Holds the write lock until its stdin closes; its main thread is tid 1 in its own pid namespace.
HOLDER = r"""
import os, sys, threading
from mmapbloom import BloomFilter
f = BloomFilter.open({path!r})
with f.write_lock():
    f.add("holder")
    print(threading.get_native_id(), f._storage.lock.mode, flush=True)
    sys.stdin.read()
"""

# Waits for the write lock: without a timeout (killed while waiting), or with one (times out).
WAITER = r"""
import sys, threading
from mmapbloom import BloomFilter, LockTimeout
f = BloomFilter.open({path!r})
print(threading.get_native_id(), flush=True)
try:
    with f.write_lock(timeout={timeout}):
        print("got it", flush=True)
except LockTimeout:
    print("timed out", flush=True)
"""


@pytest.mark.parametrize("how", ["waiter_killed", "waiter_timed_out"])
def test_writer_in_another_pid_namespace_cannot_break_exclusion(tmp_path: Any, mutex_mode: None, how: str) -> None:
    """Robust futexes name their owner by a tid local to its pid namespace: a waiter in another
    namespace with the holder's tid used to unlock it (timed out: unconditional release) or,
    SIGKILLed while waiting, made the kernel mark the live holder dead (list_op_pending). The
    side file records its creator's pid namespace; other namespaces never touch the mutex."""
    if not _can_unshare_pid():
        pytest.skip("needs root and unshare -p (pid namespaces)")
    path = _new_file(tmp_path)
    holder = subprocess.Popen(
        ["unshare", "-pf", "--kill-child", sys.executable, "-c", HOLDER.format(path=path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        tid, mode = holder.stdout.readline().split()
        assert (tid, mode) == ("1", "mutex")
        timeout = "None" if how == "waiter_killed" else "0.3"
        waiter = subprocess.Popen(
            ["unshare", "-pf", "--kill-child", sys.executable, "-c", WAITER.format(path=path, timeout=timeout)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=_env(),
        )
        assert waiter.stdout is not None
        assert waiter.stdout.readline().strip() == "1"  # same tid as the holder, in its own namespace
        if how == "waiter_killed":
            time.sleep(0.5)  # inside pthread_mutex_timedlock
            waiter.kill()  # unshare --kill-child: the waiter gets SIGKILL
        else:  # refused: the side file was made in the holder's pid namespace
            assert waiter.stdout.readline().strip() == "timed out"
        waiter.wait(timeout=10)
        # The holder is still inside its write_lock() block: no one else may get the lock.
        with BloomFilter.open(path) as f:
            with pytest.raises(LockTimeout, match="pid namespace"):
                with f.write_lock(timeout=0.5):
                    pass
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=10)


def test_group_member_writes_after_another_user_made_the_side_file(tmp_path: Any, mutex_mode: None) -> None:
    """The side file used to take its creator's primary group: another member of the file's
    group could not open it and waited while the creator's writers had the file open. It
    now gets the locked file's group (and bits), so both users write in mutex mode."""
    if os.geteuid() != 0:
        pytest.skip("needs root (switches to two unprivileged users)")
    group, alice, bob = 61000, 61001, 61002
    shared = tempfile.mkdtemp(prefix="mmapbloom-group-")  # tmp_path's parents are root's 0o700
    os.chmod(shared, 0o777)
    path = _new_file(Path(shared))
    os.chown(path, alice, group)
    os.chmod(path, 0o664)
    alice_pid, alice_says = _as_user(alice, group, path, hold=8.0)
    bob_pid = -1
    try:
        assert os.read(alice_says, 16) == b"mutex"  # alice made the side file and is in mutex mode
        st = os.stat(path + ".mutex")
        assert (st.st_mode & 0o777, st.st_gid) == (0o664, group)
        bob_pid, bob_says = _as_user(bob, group, path, hold=0.0)
        deadline = time.monotonic() + 3.0
        while os.waitpid(bob_pid, os.WNOHANG)[0] == 0:
            if time.monotonic() >= deadline:
                pytest.fail(f"bob (group {group}) waited > 3 s: the side file is {st.st_uid}:{st.st_gid} mode 0o664")
            time.sleep(0.02)
        bob_pid = -1  # reaped
        assert os.read(bob_says, 16) == b"mutex"
    finally:
        for pid in (alice_pid, bob_pid):
            if pid > 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        shutil.rmtree(shared, ignore_errors=True)


def _as_user(uid: int, group: int, path: str, hold: float) -> tuple[int, int]:
    """Fork a child that becomes uid (primary group uid, member of group), adds a key to
    path, writes its lock mode to the returned pipe and keeps the file open hold seconds.
    (Forked, not exec'd: this interpreter's files may be unreadable to that user.)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([group])
            os.setgid(uid)
            os.setuid(uid)
            f = BloomFilter.open(path)
            f.add(str(uid))
            os.write(w, str(f._storage.lock.mode).encode())
            time.sleep(hold)
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


SAME_THREAD = r"""
from mmapbloom import BloomFilter
r = BloomFilter.open({path!r}, readonly=True)
r.to_bytes()  # first lock use of this handle: no side file yet -> flock mode for its lifetime
w = BloomFilter.open({path!r})
w.add("x")  # mutex mode: LOCK_SH on the file until w closes
r.to_bytes()  # LOCK_EX on r's description: waits for this very process
print("ok", flush=True)
"""


def test_readonly_snapshot_after_a_mutex_writer_in_the_same_thread(tmp_path: Any, mutex_mode: None) -> None:
    """A readonly handle that snapshotted before any side file existed stayed in flock mode:
    its next snapshot waited for LOCK_EX, held off by this process's own mutex-mode handle
    (LOCK_SH until close): one thread hung forever. Now it switches to the side file."""
    path = _new_file(tmp_path)
    try:
        out = subprocess.run(
            [sys.executable, "-c", SAME_THREAD.format(path=path)], capture_output=True, text=True, env=_env(), timeout=3
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the second to_bytes() of the readonly handle hung (> 3 s)")
    assert out.stdout.strip() == "ok", out.stderr


WRITER_OPEN = r"""
import sys
from mmapbloom import BloomFilter
with BloomFilter.open({path!r}) as f:
    f.add("w")
    print(f._storage.lock.mode, flush=True)
    sys.stdin.read()  # keeps the file open (no lock held) until told
"""


def test_readonly_snapshot_waits_only_for_a_write(tmp_path: Any, mutex_mode: None) -> None:
    """A readonly handle in flock mode (no side file at its first snapshot) used to wait for
    LOCK_EX as long as any mutex-mode writer kept the file open, with no write in progress."""
    path = _new_file(tmp_path)
    with BloomFilter.open(path, readonly=True) as r:
        r.to_bytes()
        assert not os.path.exists(path + ".mutex")
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER_OPEN.format(path=path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        try:
            assert writer.stdout is not None and writer.stdin is not None
            assert writer.stdout.readline().strip() == "mutex"
            done = threading.Event()

            def read_all() -> None:
                r.to_bytes()
                done.set()

            reader = threading.Thread(target=read_all, daemon=True)
            reader.start()
            assert done.wait(2.0), "to_bytes() of the readonly handle waited > 2 s with no write in progress"
        finally:
            if writer.stdin is not None:
                writer.stdin.close()
            writer.wait(timeout=10)
        if "reader" in locals():
            reader.join(10)  # the writer is gone: the blocked snapshot ends


FLOCK_WRITER = r"""
from mmapbloom import BloomFilter
with BloomFilter.open({path!r}) as f:
    f.add("old")
    print(f._storage.lock.mode, flush=True)
"""


def test_long_lived_reader_never_keeps_flock_writers_out(tmp_path: Any, mutex_mode: None) -> None:
    """A readonly handle in mutex mode held LOCK_SH until it closed, so a flock-mode writer
    (an older mmapbloom, MMAPBLOOM_LOCK=flock) waited for a monitor's whole life. It now
    holds LOCK_SH only while it holds the mutex, for its snapshot."""
    path = _new_file(tmp_path)
    with BloomFilter.open(path) as w:
        w.add("new")  # makes the side file
    with BloomFilter.open(path, readonly=True) as r:
        r.to_bytes()  # through the side file's mutex (it exists now)
        env = _env()
        env[LOCK_ENV] = "flock"
        out = subprocess.run(
            [sys.executable, "-c", FLOCK_WRITER.format(path=path)], capture_output=True, text=True, env=env, timeout=5
        )
        assert out.stdout.strip() == "flock", out.stderr
        assert "old" in r and "new" in r
