"""The robust process-shared mutex of the write lock (mutex mode) and its flock fallback.

Real processes throughout: exact-once ``add`` on each lock mode, SIGKILLed holders, and every
mixed case that could let one process take the mutex while another takes the flock (each
must be excluded: the second waits, or both use the same lock).
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter, LockTimeout
from mmapbloom.locking import LOCK_ENV, SIDE_SUFFIX, WriteLock
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() and flock")

CFG = BloomConfig.for_items(20_000, 1e-6)


def _mutex_here(tmp_path: Any) -> bool:
    f = BloomFilter.create(str(tmp_path / "probe.blm"), BloomConfig(num_bits=64, num_hashes=1))
    try:
        f.add("x")
        return f._storage.lock.mode == "mutex"
    finally:
        f.close()


@pytest.fixture
def mutex_mode(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    if not _mutex_here(tmp_path):
        pytest.skip("no robust process-shared mutex on this platform / file system")


def within_seconds(seconds: float, fn: Any) -> Any:
    """fn() run in a thread; fails the test if it has not returned within ``seconds``."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"{fn} did not return within {seconds} s"
    return out[0]


def _lock(f: Any) -> WriteLock:
    lock = f._storage.lock
    assert isinstance(lock, WriteLock)
    return lock


# A writer process: open PATH, add KEYS one by one (lock per call), print how many were new
# and the lock mode it used.
ADDER = r"""
import sys
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter
keys = [f"k{{i}}" for i in range({n})]
with BloomFilter.open({path!r}) as f:
    new = sum(1 for k in keys if f.add(k))
    print(new, f._storage.lock.mode)
"""


def _env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(LOCK_ENV, None)
    if mode == "flock":
        env[LOCK_ENV] = "flock"
    return env


@pytest.mark.parametrize("mode", ["auto", "flock"])
def test_exact_once_add_eight_processes(tmp_path: Any, mode: str, monkeypatch: Any) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)  # _mutex_here: this process as an "auto" one
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    n = 3000
    script = ADDER.format(root=ROOT, path=path, n=n)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=_env(mode)) for _ in range(8)]
    outs = [p.communicate(timeout=60)[0].decode().split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(int(o[0]) for o in outs) == n  # each key new exactly once across the 8
    modes = {o[1] for o in outs}
    expected = {"flock"} if mode == "flock" else ({"mutex"} if _mutex_here(tmp_path) else {"flock"})
    assert modes == expected
    with BloomFilter.open(path, readonly=True) as f:
        assert all(f"k{i}" in f for i in range(n))
        assert f.items_added == n
    assert os.path.exists(path + SIDE_SUFFIX) == (expected == {"mutex"})


def test_sigkill_holder_loop(tmp_path: Any, mutex_mode: None) -> None:
    """100 holders SIGKILLed at random points of their adds: a waiter in another process
    never waits longer than the recovery, and no reported add is lost."""
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, BloomConfig.for_items(2_000_000, 1e-3)).close()
    stop_r, stop_w = os.pipe()
    waiter = os.fork()
    if waiter == 0:  # adds all along, each with a 5 s timeout: a stuck lock fails it
        code = 0
        try:
            with BloomFilter.open(path) as g:
                j = 0
                while not select.select([stop_r], [], [], 0)[0]:
                    with g.write_lock(timeout=5):
                        g.add(f"w{j}")
                    j += 1
                os.write(stop_w, f"{j}\n".encode())
        except BaseException:
            code = 1
        os._exit(code)
    reported: list[str] = []
    rng = random.Random(28)
    t0 = time.monotonic()
    for i in range(100):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            with BloomFilter.open(path) as h:
                j = 0
                while True:  # reports each add once it returned; odd i: inside the lock
                    if i % 2:
                        with h.write_lock():
                            h.add(f"h{i}-{j}")
                            os.write(w, f"{j}\n".encode())
                    else:
                        h.add(f"h{i}-{j}")
                        os.write(w, f"{j}\n".encode())
                    j += 1
        os.close(w)
        first = os.read(r, 64)  # it took the lock at least once
        time.sleep(rng.random() * 0.003)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = first
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        done = [int(x) for x in data.decode().split("\n")[:-1]]  # complete lines: returned adds
        reported += [f"h{i}-{j}" for j in done]
    elapsed = time.monotonic() - t0
    os.write(stop_w, b"stop")
    _, status = os.waitpid(waiter, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the waiter timed out or failed"
    with BloomFilter.open(path) as f:
        assert all(k in f for k in reported), "an add reported done was lost"
        f.add("after")  # the lock is free and consistent (no ENOTRECOVERABLE)
        assert _lock(f).mode == "mutex"
        recoveries = _lock(f)._mutex.recoveries
    assert elapsed < 30
    # a kill between two adds leaves the mutex free (no recovery); one inside write_lock() does
    assert 1 <= recoveries <= 100, recoveries
    print("recoveries", recoveries, "elapsed", round(elapsed, 2))


def test_eownerdead_recovered_in_process(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        g = BloomFilter.open(path)
        with g.write_lock():
            g.add("from-the-dead")
            os.write(w, b"1")
            time.sleep(60)
        os._exit(0)
    os.read(r, 1)
    with BloomFilter.open(path) as f:
        with pytest.raises(LockTimeout):
            with f.write_lock(timeout=0.2):
                pass
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        t0 = time.monotonic()
        with f.write_lock(timeout=5):
            f.add("after")
        assert time.monotonic() - t0 < 1
        assert _lock(f)._mutex.recoveries == 1
        assert "from-the-dead" in f and "after" in f


HOLD = r"""
import os, sys, time
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter
f = BloomFilter.open({path!r})
with f.write_lock():
    f.add("held")
print(f._storage.lock.mode, flush=True)
sys.stdin.read()   # keeps the file open (in its lock mode) until the test closes stdin
f.add("closing")
f.close()
"""

TRY = r"""
import sys
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter, LockTimeout
with BloomFilter.open({path!r}) as f:
    try:
        with f.write_lock(timeout={timeout}):
            f.add("second")
    except LockTimeout as exc:
        print("timeout", f._storage.lock.mode, exc)
    else:
        print("locked", f._storage.lock.mode)
"""


def _holder(path: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(root=ROOT, path=path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(mode),
    )
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def _try(path: str, mode: str, timeout: float = 0.5) -> str:
    out = subprocess.run(
        [sys.executable, "-c", TRY.format(root=ROOT, path=path, timeout=timeout)],
        capture_output=True,
        text=True,
        env=_env(mode),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _finish(p: subprocess.Popen[str]) -> None:
    p.communicate("", timeout=60)
    assert p.returncode == 0


def test_forced_flock_and_mutex_processes_exclude_each_other(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    p, mode = _holder(path, "auto")
    assert mode == "mutex"
    # A forced-flock writer cannot write while a mutex-mode writer has the file open.
    assert _try(path, "flock").startswith("timeout flock")
    _finish(p)
    assert _try(path, "flock") == "locked flock"
    # And the reverse: a mutex-mode writer waits while a flock writer is inside its write.
    with open(path, "rb") as raw:
        import fcntl

        fcntl.flock(raw.fileno(), fcntl.LOCK_EX)  # what a flock-mode (or old) writer holds per write
        assert _try(path, "auto").startswith("timeout")
        fcntl.flock(raw.fileno(), fcntl.LOCK_UN)
    assert _try(path, "auto") == "locked mutex"


def test_side_file_deleted_under_a_running_writer(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    p, mode = _holder(path, "auto")
    assert mode == "mutex"
    os.unlink(path + SIDE_SUFFIX)
    out = _try(path, "auto")
    assert out.startswith("timeout") and path + SIDE_SUFFIX in out and "missing" in out
    _finish(p)
    assert _try(path, "auto") == "locked mutex"  # remade once no writer holds it
    assert os.path.exists(path + SIDE_SUFFIX)


def test_side_file_replaced_by_a_copy(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    side = path + SIDE_SUFFIX
    BloomFilter.create(path, CFG).close()
    p, mode = _holder(path, "auto")
    assert mode == "mutex"
    shutil.copy(side, side + ".copy")
    os.rename(side + ".copy", side)
    out = _try(path, "auto")
    assert out.startswith("timeout") and side in out and "a copy" in out
    _finish(p)
    assert _try(path, "auto") == "locked mutex"


def test_side_file_for_another_inode_is_not_used(tmp_path: Any, mutex_mode: None) -> None:
    a, b = str(tmp_path / "a.blm"), str(tmp_path / "b.blm")
    for x in (a, b):
        with BloomFilter.create(x, CFG) as f:
            f.add("x")
    os.rename(a + SIDE_SUFFIX, b + SIDE_SUFFIX)  # a's mutex is not b's: remade (no writer holds b)
    with BloomFilter.open(b) as f:
        f.add("y")
        assert _lock(f).mode == "mutex" and os.stat(b + SIDE_SUFFIX).st_ino == _lock(f)._mutex.side_ino


def test_side_file_gets_the_files_permissions_whatever_the_umask(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    os.chmod(path, 0o664)
    old = os.umask(0o077)
    try:
        with BloomFilter.open(path) as f:
            f.add("x")
    finally:
        os.umask(old)
    assert os.stat(path + SIDE_SUFFIX).st_mode & 0o777 == 0o664


def test_side_file_impossible_falls_back_to_flock_for_everyone(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    os.mkdir(path + SIDE_SUFFIX)  # neither openable as the side file nor replaceable by one
    n = 1500
    script = ADDER.format(root=ROOT, path=path, n=n)
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=_env("auto")) for _ in range(4)
    ]
    outs = [p.communicate(timeout=60)[0].decode().split() for p in procs]
    assert sum(int(o[0]) for o in outs) == n and {o[1] for o in outs} == {"flock"}
    assert sorted(os.listdir(tmp_path)) == ["f.blm", "f.blm.mutex", "probe.blm", "probe.blm.mutex"]


def test_readonly_open_creates_nothing(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    with BloomFilter.open(path, readonly=True) as g:
        assert "x" not in g
        g.to_bytes()  # a snapshot takes the lock: flock, since no side file exists
        assert _lock(g).mode == "flock"
    with BloomFilter.open(path) as h:
        assert "x" not in h  # readers never lock either
    assert not os.path.exists(path + SIDE_SUFFIX)
    # Once a writer made the side file, a readonly handle's snapshot joins the mutex instead
    # of waiting (LOCK_EX) for the writer to close.
    with BloomFilter.open(path, readonly=True) as g, BloomFilter.open(path) as w:
        g.to_bytes()
        assert _lock(g).mode == "flock"
        w.add("x")
        assert _lock(w).mode == "mutex"
        assert b"" != within_seconds(5, g.to_bytes)
        assert _lock(g).mode == "mutex"


def test_two_handles_one_process_share_the_mutex(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    a = BloomFilter.create(path, CFG)
    b = BloomFilter.open(path)
    a.add("a")
    os.unlink(path + SIDE_SUFFIX)  # b still joins a's mutex: a holds LOCK_SH, so it is current
    b.add("b")
    assert _lock(a)._mutex is _lock(b)._mutex
    done = threading.Event()

    def other() -> None:
        b.add("from-thread")
        done.set()

    with a.write_lock():
        t = threading.Thread(target=other)
        t.start()
        assert not done.wait(0.2)  # excluded by a's hold
    t.join(5)
    assert done.is_set()
    a.close()
    b.close()


def test_fork_with_lock_held_by_another_thread(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    f = BloomFilter.create(path, CFG)
    f.add("first")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with f.write_lock():
            holding.set()
            release.wait(30)
            f.add("from-thread")

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(10)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            f.add("from-child")  # waits for the parent's thread, then takes the lock itself
            os.write(w, b"ok" if _lock(f).mode == "mutex" else b"??")
        finally:
            os._exit(0)
    os.close(w)
    assert not select.select([r], [], [], 0.3)[0]  # still waiting for the parent's thread
    release.set()
    assert os.read(r, 2) == b"ok"
    os.waitpid(pid, 0)
    t.join(10)
    assert "from-child" in f and "from-thread" in f
    f.close()


INTERRUPTED = r"""
import os, signal, sys, threading, time
sys.path.insert(0, {root!r})
from mmapbloom import BloomFilter
f = BloomFilter.open({path!r})
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    f.add("waits")  # another process holds the mutex: the C path waits, GIL released
except KeyboardInterrupt:
    print("interrupted", round(time.monotonic() - t0, 1), f._storage.lock.mode, flush=True)
sys.stdin.read()  # the holder lets go meanwhile
print("added", f.add("after-interrupt"), flush=True)
"""


def test_a_wait_for_another_process_is_interruptible(tmp_path: Any, mutex_mode: None) -> None:
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    holder = BloomFilter.open(path)
    lock = holder.write_lock()
    lock.__enter__()
    try:
        p = subprocess.Popen(
            [sys.executable, "-c", INTERRUPTED.format(root=ROOT, path=path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env("auto"),
        )
        assert p.stdout is not None
        if not select.select([p.stdout], [], [], 10)[0]:
            p.kill()
            pytest.fail("the waiting add was not interrupted by SIGINT")
        line = p.stdout.readline().split()
        assert line[0] == "interrupted" and float(line[1]) < 2 and line[2] == "mutex", line
    finally:
        lock.__exit__(None, None, None)
    out, _ = p.communicate("", timeout=30)
    assert out.strip() == "added True"
    assert "waits" not in holder and "after-interrupt" in holder
    holder.close()


def test_names_of_one_file_find_one_side_file_or_exclude_each_other(tmp_path: Any, mutex_mode: None) -> None:
    """A symlink to the file finds the side file next to the real path (one mutex); a hard
    link (two names, two would-be side files) makes every writer use the file lock, which
    a mutex-mode writer's LOCK_SH excludes. Never two mutexes for one inode."""
    path = str(tmp_path / "f.blm")
    BloomFilter.create(path, CFG).close()
    os.symlink(path, tmp_path / "link.blm")
    p, mode = _holder(str(tmp_path / "link.blm"), "auto")
    assert mode == "mutex"
    assert os.path.exists(path + SIDE_SUFFIX) and not os.path.lexists(str(tmp_path / "link.blm") + SIDE_SUFFIX)
    assert _try(path, "auto") == "locked mutex"  # the same side file, through the real name
    os.link(path, tmp_path / "hard.blm")
    out = _try(str(tmp_path / "hard.blm"), "auto")
    assert out.startswith("timeout flock"), out  # excluded while the mutex-mode writer is there
    _finish(p)
    assert _try(str(tmp_path / "hard.blm"), "auto") == "locked flock"
    assert not os.path.lexists(str(tmp_path / "hard.blm") + SIDE_SUFFIX)


def test_close_inside_its_own_write_lock_unlocks_the_mutex(tmp_path: Any, mutex_mode: None) -> None:
    """close() inside the handle's own write_lock() block leaves no mutex locked behind
    (it was unmapped while held: every other writer waited forever)."""
    path = str(tmp_path / "f.blm")
    f = BloomFilter.create(path, CFG)
    with f.write_lock():
        f.add("a")
        assert _lock(f).mode == "mutex"
        f.close()
    assert _try(path, "auto") == "locked mutex"
    with BloomFilter.open(path) as g:
        assert within_seconds(10, lambda: g.add("b"))
        assert "a" in g
