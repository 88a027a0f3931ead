"""Shared fixtures and helpers for the mmapbloom tests."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import pytest

# numpy's OpenBLAS starts a worker thread per core when numpy is imported; a test that
# forks then forks a multi-threaded process (unsafe, and a DeprecationWarning on Python
# 3.12+). The tests need no BLAS threads (child processes inherit this too).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started with signals ignored (nohup ignores SIGHUP; a background job of a
# non-interactive shell ignores SIGINT and SIGQUIT) would pass that on to every child
# process, and mmapbloom rightly leaves an ignored signal ignored (mmapbloom.termination):
# the tests of interrupts and clean-up on a signal would then test nothing. They run with
# the default dispositions (children inherit SIG_DFL), however the suite was started.
for _name in ("SIGINT", "SIGHUP", "SIGQUIT", "SIGTERM"):
    _sig = getattr(signal, _name, None)
    if _sig is not None and signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _name == "SIGINT" else signal.SIG_DFL)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _shadowed_install() -> str:
    """The path of an installed (not editable) mmapbloom that ``ROOT/mmapbloom`` would hide,
    or "": run from an unpacked sdist, the tests (and their subprocesses, which get ROOT on
    PYTHONPATH) would import the unpacked pure-Python sources instead of the package
    installed from the wheel or sdist, and fail or test the wrong thing."""
    import importlib.metadata

    here = os.path.join(ROOT, "mmapbloom", "__init__.py")
    if not os.path.exists(here) or not os.path.exists(os.path.join(ROOT, "PKG-INFO")):
        return ""  # not an unpacked sdist (a checkout's sources are what its tests test)
    # Every distribution found (an unpacked sdist holds its own mmapbloom.egg-info, an
    # editable install a finder whose RECORD has no mmapbloom/__init__.py).
    for dist in importlib.metadata.distributions(name="mmapbloom"):
        installed = str(dist.locate_file("mmapbloom/__init__.py"))
        if os.path.exists(installed) and not os.path.samefile(installed, here):
            return os.path.dirname(installed)
    return ""


_SHADOWED = _shadowed_install()
if _SHADOWED:
    raise pytest.UsageError(
        f"mmapbloom is installed in {_SHADOWED}, but {os.path.join(ROOT, 'mmapbloom')} (the unpacked "
        "sdist's copy) would be imported instead. Remove it first, as .ci/run does: "
        f"rm -r {os.path.join(ROOT, 'mmapbloom')} (the tests then run against the installed package)"
    )

from mmapbloom import BloomConfig, BloomFilter  # noqa: E402  (after the path fix above)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--torture",
        action="store_true",
        default=False,
        help="run the slow reliability trials many more times (also MMAPBLOOM_TORTURE=1)",
    )


@pytest.fixture
def torture(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--torture") or os.environ.get("MMAPBLOOM_TORTURE"))


def write_shards(directory: Any, cfg: BloomConfig, parts: list[list[str]], prefix: str = "shard") -> list[str]:
    """One shard file per part, named ``{prefix}-{i:05d}.blm`` in ``directory`` (written
    directly from an in-memory filter: fast); returns their paths."""
    paths = []
    for i, part in enumerate(parts):
        f = BloomFilter(cfg)
        f.update(part)
        path = os.path.join(str(directory), f"{prefix}-{i:05d}.blm")
        with open(path, "wb") as out:
            out.write(f.to_bytes())
        paths.append(path)
    return paths


def urls(n: int, prefix: str = "https://example.org/page/") -> list[str]:
    """n distinct, deterministic URL-like keys."""
    return [f"{prefix}{i}?q={i * 7919 % 10007}" for i in range(n)]


def run_on_terminal(argv: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` with its stderr on a pseudo-terminal (24x100); return the exit status
    and everything it wrote to the terminal."""
    import fcntl
    import pty
    import struct
    import subprocess
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a real terminal has a size
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return proc.wait(timeout), seen.decode(errors="replace")


# The slow tier (real processes, real servers, signals, crashes and the stress suite) is
# marked in each of its files with ``pytestmark = pytest.mark.slow``, so renaming a file
# never moves it between tiers. ``pytest -m 'not slow'`` runs the unit tier without them.


@pytest.fixture(autouse=True)
def no_tqdm_thread_left() -> Any:
    """No test leaves tqdm's monitor thread running: a later test that forks would do so
    in a multi-threaded process (a DeprecationWarning on Python 3.12+, and unsafe)."""
    yield
    import threading

    left = [t.name for t in threading.enumerate() if type(t).__module__.startswith("tqdm")]
    assert not left, f"tqdm threads left running: {left}"
