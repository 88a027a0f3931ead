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
def test_python_sigbus_handler_does_not_make_ops_spin(tmp_path: Any, when: str) -> None:
    path = os.path.join(tmp_path, "f.blm")
    try:
        run = subprocess.run(
            [sys.executable, "-c", CHILD, path, when], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a per-item op spun (no answer within 30 s)")
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])
