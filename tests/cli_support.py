"""Helpers shared by the tests that run the ``mmapbloom`` command line as a real subprocess
and check what it prints (moved with their tests from test_edge_cases.py and test_errors.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT)


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m mmapbloom ARGS`` with bytes in and out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args], input=stdin, capture_output=True, env=env, timeout=120
    )


def run_cli(*args: str, cwd: Any = None, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """Run ``python -m mmapbloom ARGS`` in ``cwd`` with text out."""
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
    """The one-line error (exit 2, no traceback) that names each needle and never the
    internal ``.mmapbloom-*`` temporary."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert ".mmapbloom-" not in err, f"names the internal temporary: {err}"
    return err
