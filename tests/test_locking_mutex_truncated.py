"""A mutex side file truncated in place under a running writer (``: > f.mutex``) must never
SIGBUS the interpreter: every lock operation on its mapping is guarded, and a fault becomes
LengthMismatchError naming the side file. Nor must the filter file truncated under a writer
whose add takes the mutex, writes and unlocks in one guarded section (issue 28): the add
raises and leaves the mutex and the thread lock free. Run in a child process (a crash is its
exit code, not the test runner's), on both backends."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from mmapbloom import BloomConfig, BloomFilter
from mmapbloom.locking import LOCK_ENV
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the robust mutex is Linux-only")

SCRIPT = r"""
import os, sys
sys.path.insert(0, {root!r})
from mmapbloom import BloomConfig, BloomFilter, LengthMismatchError
path = {path!r}
side = path + ".mutex"
f = BloomFilter.create(path, BloomConfig.for_items(1000, 1e-6))
f.add("before")
assert f._storage.lock.mode == "mutex", f._storage.lock.mode
if {held!r}:
    try:
        with f.write_lock():
            f.add("inside")
            open(side, "r+b").truncate(0)  # under the holder: the unlock faults
    except LengthMismatchError as exc:
        assert side in str(exc), exc
        print("fault at unlock", flush=True)
    assert "inside" in f
else:
    open(side, "r+b").truncate(0)
for attempt in range(2):  # the first faults; the lock stays refused, never a SIGBUS
    try:
        f.add("after")
    except LengthMismatchError as exc:
        assert side in str(exc) and "truncated" in str(exc), exc
        print("refused", flush=True)
    else:
        raise SystemExit("add after the truncation succeeded without a lock")
try:
    with f.write_lock():
        pass
except LengthMismatchError:
    print("refused", flush=True)
assert "before" in f and "after" not in f  # reads take no lock: no false negative
assert not f._storage.lock.owned()
f.close()
print("alive", flush=True)
"""


def _mutex_here(tmp_path: Any) -> bool:
    env_mode = os.environ.get(LOCK_ENV)
    with BloomFilter.create(str(tmp_path / "probe.blm"), BloomConfig.for_items(10, 0.01)) as f:
        f.add("x")
        return f._storage.lock.mode == "mutex" and env_mode in (None, "", "auto")


@pytest.mark.parametrize("pure", ["", "1"])
@pytest.mark.parametrize("held", [False, True])
def test_truncated_side_file_raises_never_sigbus(tmp_path: Any, monkeypatch: Any, pure: str, held: bool) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    if not _mutex_here(tmp_path):
        pytest.skip("no robust process-shared mutex here")
    env = dict(os.environ, MMAPBLOOM_PURE=pure)
    env.pop(LOCK_ENV, None)
    script = SCRIPT.format(root=ROOT, path=str(tmp_path / "f.blm"), held=held)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.split()
    assert lines[-1] == "alive" and lines.count("refused") == 3
    assert ("fault" in lines) == held


# The one-section path (the lock taken and released around the write in one guarded section,
# _lock.h mb_lock_run): a fault of the filter's mapping in it leaves nothing held.
FILE_SCRIPT = r"""
import os, sys
sys.path.insert(0, {root!r})
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter, LengthMismatchError
from mmapbloom import ScalableBloomFilter
d = {tmp!r}
def make(name, op):
    path = os.path.join(d, name + "-" + op)
    if name == "cuckoo":
        return path, CuckooFilter.create(path, 100_000, 0.01)
    if name == "scalable":  # its add writes the newest layer through that layer's handle
        return os.path.join(path, "layer-0000.blm"), ScalableBloomFilter.create(path, capacity=100_000, fp_rate=0.01)
    cls = BloomFilter if name == "plain" else CountingBloomFilter
    return path, cls.create(path, BloomConfig.for_items(100_000, 0.01))
cases = [("plain", "add"), ("counting", "add"), ("counting", "remove"), ("cuckoo", "add"), ("cuckoo", "remove"),
         ("scalable", "add")]
for name, op in cases:
    path, f = make(name, op)
    f.add("a")
    f.add("b")  # the lock's mode is chosen (the first acquire took the slow path)
    lock = (f._layers[0] if name == "scalable" else f)._storage.lock
    assert lock.mode == "mutex", lock.mode
    os.truncate(path, 100)
    for held in (False, True):
        try:
            if held:
                with f.write_lock():
                    getattr(f, op)("b")
            else:
                getattr(f, op)("b")
        except LengthMismatchError:
            pass
        else:
            raise SystemExit(f"{{name}} {{op}} (held={{held}}) on a truncated file did not raise")
        assert not lock.owned(), (name, op, held)
        assert lock._mutex.try_acquire(), (name, op, held)  # free: no other hold of it either
        lock._mutex.release()
    f.close()
print("alive", flush=True)
"""


@pytest.mark.parametrize("pure", ["", "1"])
def test_truncated_filter_file_leaves_the_lock_free(tmp_path: Any, monkeypatch: Any, pure: str) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    if not _mutex_here(tmp_path):
        pytest.skip("no robust process-shared mutex here")
    env = dict(os.environ, MMAPBLOOM_PURE=pure)
    env.pop(LOCK_ENV, None)
    script = FILE_SCRIPT.format(root=ROOT, tmp=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stdout[-1000:], out.stderr[-2000:])
    assert out.stdout.split()[-1] == "alive"
