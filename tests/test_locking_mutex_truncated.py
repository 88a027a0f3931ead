"""A mutex side file truncated in place under a running writer (``: > f.mutex``) must never
SIGBUS the interpreter: every lock operation on its mapping is guarded, and a fault becomes
LengthMismatchError naming the side file. Run in a child process (a crash is its exit code,
not the test runner's), on both backends."""

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
