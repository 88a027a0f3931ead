"""The README is tested: every shell and Python block of README.md runs here, in a fresh
temporary directory, and what it prints is compared with what the README shows.

Block kinds (the fence's info string):

* ``console``: lines starting with ``$ `` are commands, run one by one with ``bash`` in the
  block's directory (state such as files and the working directory carries over to the next
  command and the next block); the lines up to the next ``$ `` are the expected output
  (stdout and stderr together, in the order they were written).
* ``pycon``: a Python session, run with :mod:`doctest` (``ELLIPSIS`` on), one namespace per
  README, in the same directory.
* ``sh``: the two commands at the top (make a virtualenv, run the crawler demo / the whole
  suite). They are run by CI itself (``.ci/run`` runs command 2; ``tests/test_crawl_example.py``
  runs the demo of command 1), so this test only checks that they are the ones CI runs.
* ``text``, ``python`` and others: shown, not run (output samples, settings files).

Documented allowances, applied to both the expected and the actual text before comparing:
the temporary directory's path is shown as ``/tmp/readme-run`` in the README; durations
(``0.49 s``), throughputs (``239.60 kitems/s``, ``0.30 GB/s``) and a line ``...`` (any
number of lines) match anything. The directory holds a ``.venv`` link to the virtualenv
running the tests, so ``. .venv/bin/activate`` works as pasted, and links to the
repository's ``examples`` and ``tools``.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SHOWN_DIR = "/tmp/readme-run"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(kind: str) -> list[str]:
    return [body for info, body in FENCE.findall(README.read_text()) if info == kind]


def normalize(text: str, directory: str) -> str:
    text = text.replace(directory, SHOWN_DIR)
    text = re.sub(r"\b\d+(\.\d+)? s\b", "<T> s", text)
    text = re.sub(r"\b\d+(\.\d+)? ([kMG] ?)?items/s", "<R>items/s", text)
    text = re.sub(r"\b\d+(\.\d+)? GB/s", "<R> GB/s", text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def matches(expected: str, actual: str) -> bool:
    """Line by line; a line ``...`` in ``expected`` matches any number of lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == "..." else re.escape(line) + r"\n" for line in expected.splitlines())
    return re.fullmatch(pattern, actual + "\n" if actual else "") is not None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(Path(sys.prefix))
    for name in ("examples", "tools"):
        (d / name).symlink_to(ROOT / name)
    return d


def test_top_commands_are_what_ci_runs() -> None:
    top = blocks("sh")[0]
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = [line for line in top.splitlines() if "pytest" in line][0].strip()
    assert test_command in ci, "README command 2 must be the command .ci/run runs"
    assert "examples/crawl.py" in top


def test_no_unfilled_placeholder() -> None:
    """A line that is only an upper-case token (``PERF_SECTION``) is a template left behind."""
    left = [
        line for line in README.read_text().splitlines() if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", line.strip())
    ]
    assert not left, left


def test_console_blocks(run_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "MMAPBLOOM_PURE"))}
    env["PYTHONPATH"] = str(ROOT)
    script_lines = []
    expected: list[tuple[str, str]] = []
    for body in blocks("console"):
        command: Optional[str] = None
        output: list[str] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    expected.append((command, "\n".join(output)))
                command, output = line[2:], []
            else:
                output.append(line)
        if command is not None:
            expected.append((command, "\n".join(output)))
    marker = "@@readme-command-done@@"
    for command, _ in expected:
        script_lines.append(f"{command}\necho {marker} >&2")
    # One bash process: state carries over between commands, as when pasted in a terminal.
    # stderr and stdout go to one pipe so the order is the terminal's.
    proc = subprocess.run(
        ["bash", "-c", "exec 2>&1\n" + "\n".join(script_lines)],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = proc.stdout.split(marker + "\n")
    assert len(outputs) == len(expected) + 1, proc.stdout[-3000:]
    for (command, want), got in zip(expected, outputs[:-1], strict=True):  # the last part follows the last marker
        want_n, got_n = normalize(want, str(run_dir)), normalize(got, str(run_dir))
        assert matches(want_n, got_n), f"$ {command}\n--- README shows:\n{want_n}\n--- it printed:\n{got_n}"


def test_python_sessions(run_dir: Path) -> None:
    text = "\n".join(blocks("pycon"))
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, "README.md", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    old = os.getcwd()
    os.chdir(run_dir)
    try:
        runner.run(test)
    finally:
        os.chdir(old)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0
