"""A truncation inside the mapping's last page that lands while a write waits for the write
lock (another process holds it, truncates the file, then lets go): the write must see it.
The size check of a per-item write or a batch chunk runs before the lock is taken, so the
native handle checks the file's size again after a real wait (only then: the uncontended
path is unchanged). Without that, ``add`` answers True and its bits never reach the file.

BLM1 and BLC1 bodies span bytes 24..8152 and the file is cut to 4,200 bytes: the cut lies
inside the last page, so nothing faults (``tests/test_truncated_file.py`` has the rest).
Real processes: the victim is a child Python that starts the holder and waits on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="needs SIGBUS (POSIX)")

HOLDER = r"""
import os, sys, time
from mmapbloom import BloomFilter, CountingBloomFilter
path, size = sys.argv[1], int(sys.argv[2])
cls = CountingBloomFilter if path.endswith(".blc") else BloomFilter
with cls.open(path) as f, f.write_lock():
    print("held", flush=True)
    time.sleep(0.4)   # the victim's write is waiting now
    os.truncate(path, size)
"""

VICTIM = r"""
import os, subprocess, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, LengthMismatchError
tmp, holder = sys.argv[1], sys.argv[2]
SIZE = 4200
ops = {
    "add": lambda f, k: f.add(k),
    "update": lambda f, k: f.update([k, k + "-2"]),
    "add_many": lambda f, k: f.add_many([k]),
}
for cls, ext in ((BloomFilter, ".blm"), (CountingBloomFilter, ".blc")):
    cops = dict(ops)
    if cls is CountingBloomFilter:
        cops["remove"] = lambda f, k: f.remove("present")
    for name, op in cops.items():
        path = os.path.join(tmp, name + ext)
        bits = (8152 - 24) * 8 // (1 if cls is BloomFilter else 4)
        with cls.create(path, BloomConfig(num_bits=bits, num_hashes=3)) as f:
            f.add("present")
            assert SIZE < f.size_bytes <= 8192, f.size_bytes
            proc = subprocess.Popen([sys.executable, "-c", holder, path, str(SIZE)], stdout=subprocess.PIPE, text=True)
            assert proc.stdout.readline().strip() == "held"
            try:
                got = op(f, "new")   # waits for the holder, which truncates meanwhile
            except LengthMismatchError as exc:
                assert exc.actual == SIZE, (name, exc.actual)
            else:
                print("NO ERROR", cls.__name__, name, got, flush=True)
                sys.exit(3)
            assert proc.wait(timeout=30) == 0
print("ok", flush=True)
"""


# native: the mutex (the wait is inside the C lock path) and the file lock (the wait goes
# through WriteLock.acquire) each; pure: the mutex.
@pytest.mark.parametrize("backend,lock", [("native", "mutex"), ("native", "flock"), ("pure", "mutex")])
def test_write_waiting_for_the_lock_sees_a_truncation_inside_the_last_page(
    tmp_path: Any, backend: str, lock: str
) -> None:
    env = dict(os.environ)
    env.pop("MMAPBLOOM_PURE", None)
    env.pop("MMAPBLOOM_LOCK", None)
    if backend == "pure":
        env["MMAPBLOOM_PURE"] = "1"
    if lock == "flock":
        env["MMAPBLOOM_LOCK"] = "flock"
    run = subprocess.run(
        [sys.executable, "-c", VICTIM, str(tmp_path), HOLDER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), (run.returncode, run.stdout, run.stderr[-3000:])
