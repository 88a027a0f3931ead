"""Which backend runs, and why (issue 29, item 15): ``python -m mmapbloom --version`` and the
examples say it, with what to do when the compiled kernels were not built."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from mmapbloom import cli
from tests.test_cli import ENV


def test_version_names_the_backend_and_why_pure() -> None:
    env = {**ENV, "MMAPBLOOM_PURE": "1"}
    proc = subprocess.run([sys.executable, "-m", "mmapbloom", "--version"], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0
    out = proc.stdout.decode()
    assert out.count("\n") == 1 and "python backend" in out and "because MMAPBLOOM_PURE=1 is set" in out, out


def test_unbuilt_extension_is_named_with_the_build_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "BACKEND", "python")
    monkeypatch.delenv("MMAPBLOOM_PURE", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mmapbloom._kernels" else real(name, *a)
    )
    backend, why = cli.backend_status()
    assert backend == "python"
    assert "not built in " + os.path.dirname(cli.__file__) in why and "pip install -e ." in why
    note = cli.backend_note("demo.py")
    assert note.startswith("demo.py: mmapbloom ") and "python backend" in note


def test_native_backend_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "BACKEND", "native")
    assert cli.backend_status() == ("native", "compiled kernels")
