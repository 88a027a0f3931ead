"""Issue 29 item 7: with a Python-level SIGBUS handler installed (``signal.signal``), a
per-item op on a file truncated under the handle raises LengthMismatchError on the native
backend instead of spinning at 100% CPU (the handle installs its guard over the Python
handler and chains to it). Each victim runs in a child Python with a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="needs SIGBUS (POSIX)")

# The guard tells Python's C trampoline from other SIGBUS handlers (faulthandler's) by the
# trampoline learned from SIGINT. A process started with SIGINT ignored (nohup, a background
# job of a script, a daemon) has none there: it is then told by the fatal signals
# faulthandler also handles. Every child below runs both ways (CI run in the background
# found faulthandler and the guard chained to each other).
SIGINT_STATES = ["python", "ignored"]


def run_child(script: str, args: list[str], sigint: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a child Python with SIGINT as ``sigint`` says ("python": the
    default KeyboardInterrupt handler; "ignored": SIG_IGN before mmapbloom is imported)."""
    if sigint == "ignored":
        script = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + script
    return subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


CHILD = r"""
import os, signal, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import BloomConfig, BloomFilter, LengthMismatchError
path, when = sys.argv[1], sys.argv[2]
seen = []
if when == "before":
    signal.signal(signal.SIGBUS, lambda *a: seen.append(a))
f = BloomFilter.create(path, BloomConfig.for_items(200_000, 0.01))
if when == "reopen":
    signal.signal(signal.SIGBUS, lambda *a: seen.append(a))
    f.close()
    f = BloomFilter.open(path)
os.truncate(path, 64)
for i in range(50):
    try:
        f"k{i}" in f
    except LengthMismatchError:
        continue
    print("NO ERROR", i); sys.exit(3)
print("ok")
"""


@pytest.mark.parametrize("when", ["before", "reopen"])
@pytest.mark.parametrize("sigint", SIGINT_STATES)
def test_python_sigbus_handler_does_not_make_ops_spin(tmp_path: Any, when: str, sigint: str) -> None:
    path = os.path.join(tmp_path, "f.blm")
    try:
        run = run_child(CHILD, [path, when], sigint, 30)
    except subprocess.TimeoutExpired:
        pytest.fail("a per-item op spun (no answer within 30 s)")
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])


# A handler installed AFTER the filter is open replaces the guard's C handler; every op then
# re-arms the guard over it (a check of signal.getsignal, no system call) and raises. Also
# after a second, different handler; and the chained handler still sees a SIGBUS sent to the
# process outside a guarded section.
AFTER = r"""
import os, signal, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, LengthMismatchError
path, kind = sys.argv[1], sys.argv[2]
cls = CountingBloomFilter if kind == "counting" else BloomFilter
f = cls.create(path, BloomConfig.for_items(200_000, 0.01))
f.add("present")
seen = []
os.truncate(path, 64)
ops = {
    "in": lambda: "present" in f,
    "add": lambda: f.add("new"),
    "update": lambda: f.update(["x", "y"]),
    "add_many": lambda: f.add_many(["x", "y"]),
    "contains_many": lambda: f.contains_many(["present", "y"]),
}
if kind == "counting":
    ops["count"] = lambda: f.count("present")
    ops["remove"] = lambda: f.remove("present")
for round, handler in enumerate([lambda *a: seen.append(1), lambda *a: seen.append(2)]):
    signal.signal(signal.SIGBUS, handler)
    for name, op in ops.items():
        try:
            op()
        except LengthMismatchError:
            continue
        print("NO ERROR", round, name); sys.exit(3)
# The very handler the guard chains to, set again: a batch of 4096 keys or more asks
# sigaction itself and re-arms (a smaller op does not see it: README "Limits").
signal.signal(signal.SIGBUS, handler)
for name, op in {"update": f.update, "contains_many": f.contains_many}.items():
    try:
        op([f"b{i}" for i in range(5000)])
    except LengthMismatchError:
        continue
    print("NO ERROR again", name); sys.exit(3)
os.kill(os.getpid(), signal.SIGBUS)   # outside a guarded section: reaches the Python handler
signal.signal(signal.SIGBUS, signal.SIG_DFL)
print("ok", seen)
"""


@pytest.mark.parametrize("kind", ["plain", "counting"])
@pytest.mark.parametrize("sigint", SIGINT_STATES)
def test_python_sigbus_handler_set_after_open_does_not_make_ops_spin(tmp_path: Any, kind: str, sigint: str) -> None:
    path = os.path.join(tmp_path, "f.blm")
    try:
        run = run_child(AFTER, [path, kind], sigint, 30)
    except subprocess.TimeoutExpired:
        pytest.fail("an op spun (no answer within 30 s)")
    assert run.returncode == 0 and "ok [2]" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])


# The same for the cuckoo filter's handle and the expiring filter's multi-period calls
# (Handle.contains_any / add_unless / add_many_unless / contains_many_any), which re-arm the
# guard at their own entry points (found by review: both spun).
AFTER_KINDS = r"""
import glob, os, signal, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import CuckooFilter, ExpiringBloomFilter, LengthMismatchError
path, kind = sys.argv[1], sys.argv[2]
if kind == "cuckoo":
    f = CuckooFilter.create(path, 2_000_000, 0.01)
    victim = path
else:
    f = ExpiringBloomFilter.create(path, window=3600, capacity=200_000, fp_rate=0.01)
    [victim] = glob.glob(os.path.join(path, "period-*.blm"))
f.add("present")
seen = []
signal.signal(signal.SIGBUS, lambda *a: seen.append(1))
os.truncate(victim, 64)
ops = {
    "in": lambda: "k1" in f,
    "add": lambda: f.add("new"),
    "update": lambda: f.update(["x", "y"]),
    "contains_many": lambda: f.contains_many(["present", "y"]),
    "update_big": lambda: f.update([f"b{i}" for i in range(5000)]),
}
if kind == "cuckoo":
    ops["count"] = lambda: f.count("present")
    ops["discard"] = lambda: f.discard("present")
for name, op in ops.items():
    try:
        op()
    except LengthMismatchError:
        continue
    print("NO ERROR", name); sys.exit(3)
print("ok")
"""


@pytest.mark.parametrize("kind", ["cuckoo", "expiring"])
@pytest.mark.parametrize("sigint", SIGINT_STATES)
def test_python_sigbus_handler_set_after_open_cuckoo_and_expiring(tmp_path: Any, kind: str, sigint: str) -> None:
    path = os.path.join(tmp_path, "f.ckf" if kind == "cuckoo" else "exp")
    try:
        run = run_child(AFTER_KINDS, [path, kind], sigint, 30)
    except subprocess.TimeoutExpired:
        pytest.fail("an op spun (no answer within 30 s)")
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])


# Issue 29 item 7, found by the audit: two ways the OS handler becomes Python's C trampoline
# again while signal.getsignal(SIGBUS) still returns the object the guard remembered. Both
# spun (the child was killed after 10 s) until mb_guard_check asked sigaction on every op
# while a Python handler is remembered (_guard.h, mb_bus_python).
SPIN = r"""
import faulthandler, os, signal, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import BloomConfig, BloomFilter, LengthMismatchError
path, case = sys.argv[1], sys.argv[2]
f = BloomFilter.create(path, BloomConfig.for_items(200_000, 0.01))
handler = lambda *a: None
if case == "same_handler_again":
    signal.signal(signal.SIGBUS, handler)
    "x" in f                               # the guard re-arms over handler, remembers it
    signal.signal(signal.SIGBUS, handler)  # the same object again: the trampoline is back
elif case == "faulthandler_before":      # the trampoline over faulthandler: install over it
    faulthandler.enable()
    signal.signal(signal.SIGBUS, handler)
else:  # "faulthandler_disabled"
    signal.signal(signal.SIGBUS, handler)
    faulthandler.enable()
    "x" in f                               # the guard re-arms over faulthandler
    faulthandler.disable()                 # puts back the trampoline of handler, unchanged
os.truncate(path, 64)
try:
    "present" in f
except LengthMismatchError:
    print("ok")
"""


@pytest.mark.parametrize("case", ["same_handler_again", "faulthandler_before", "faulthandler_disabled"])
@pytest.mark.parametrize("sigint", SIGINT_STATES)
def test_handler_put_back_under_the_same_object_does_not_spin(tmp_path: Any, case: str, sigint: str) -> None:
    if os.environ.get("MMAPBLOOM_PURE") == "1":
        pytest.skip("the pure backend checks the size before each touch: no fault to spin on")
    path = os.path.join(tmp_path, "f.blm")
    try:
        run = run_child(SPIN, [path, case], sigint, 10)
    except subprocess.TimeoutExpired:
        pytest.fail("the op spun (no answer within 10 s)")
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])


# Review finding: with a Python handler remembered, every op re-arms; faulthandler enabled
# after the guard must then be left in place (it chains to the guard already). Installing
# over it made the two chain to each other: a fault outside any guard printed faulthandler's
# report about 150,000 times in 20 s. Now once, then CPython's own behaviour with a Python
# SIGBUS handler (the fault repeats: the child is killed).
FAULTHANDLER_AFTER = r"""
import faulthandler, mmap, os, signal, sys, warnings
warnings.simplefilter("ignore")
from mmapbloom import BloomConfig, BloomFilter
path = sys.argv[1]
f = BloomFilter.create(path, BloomConfig.for_items(1000, 0.01))
signal.signal(signal.SIGBUS, lambda *a: None)
"a" in f
faulthandler.enable()
"a" in f                                   # re-arms: must not install over faulthandler
other = path + ".other"
with open(other, "wb") as out:
    out.write(b"x" * 8192)
fd = os.open(other, os.O_RDWR)
mm = mmap.mmap(fd, 8192)
os.ftruncate(fd, 0)
print("touching", flush=True)
mm[100]                                    # outside every guard
"""


@pytest.mark.parametrize("sigint", SIGINT_STATES)
def test_faulthandler_enabled_after_the_guard_is_not_chained_in_a_loop(tmp_path: Any, sigint: str) -> None:
    if os.environ.get("MMAPBLOOM_PURE") == "1":
        pytest.skip("the guard is the native backend's")
    path = os.path.join(tmp_path, "f.blm")
    try:
        run = run_child(FAULTHANDLER_AFTER, [path], sigint, 5)
        err = run.stderr
    except subprocess.TimeoutExpired as exc:  # the fault repeats under the Python handler
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    assert err.count("Fatal Python error") <= 1, err[:2000]
