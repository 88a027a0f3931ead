"""Helpers for the expiring-filter tests: a fake clock shared by processes (a file holding
one little-endian double, read with ``pread``), and workers run in spawned children."""

from __future__ import annotations

import os
import random
import struct
from typing import Any

_DOUBLE = struct.Struct("<d")


class FileClock:
    """A clock reading seconds from a file (8 bytes, a little-endian double), so that the
    test and every child process see one time that the test moves."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size < 8:
            self.set(0.0)

    def set(self, t: float) -> None:
        os.pwrite(self.fd, _DOUBLE.pack(t), 0)

    def __call__(self) -> float:
        return float(_DOUBLE.unpack(os.pread(self.fd, 8, 0))[0])


def log_rotations(log_path: str) -> None:
    """Install the rotation hook: append ``<pid> <period>`` to ``log_path`` (O_APPEND,
    one write per line) at each committed rotation."""
    from mmapbloom import expiring

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def hook(stage: str, period: int) -> None:
        if stage == "committed":
            os.write(fd, f"{os.getpid()} {period}\n".encode())

    expiring._ROTATE_HOOK = hook


def crossing_worker(
    path: str, clock_path: str, log_path: str, keys: list[str], steps: int, seed: int, barrier: Any
) -> list[tuple[int, str]]:
    """Open ``path`` with the shared clock; at each of ``steps`` steps (the test moves the
    clock between two barriers) add every key in a shuffled order, half with ``add`` and
    half with one-key ``update`` batches; return the (step, key) pairs reported new."""
    from mmapbloom import ExpiringBloomFilter

    log_rotations(log_path)
    clock = FileClock(clock_path)
    rng = random.Random(seed)
    claimed: list[tuple[int, str]] = []
    with ExpiringBloomFilter.open(path, clock=clock) as f:
        for step in range(steps):
            barrier.wait()  # the clock was moved
            mine = list(keys)
            rng.shuffle(mine)
            for i, k in enumerate(mine):
                new = f.add(k) if (i + seed) % 2 == 0 else bool(f.update([k]))
                if new:
                    claimed.append((step, k))
            barrier.wait()  # every worker is done with this step
    return claimed


def env_clock() -> float:
    """A clock for child processes (a Scrapy crawl): the time in the file named by the
    environment variable ``MMAPBLOOM_TEST_CLOCK``."""
    with open(os.environ["MMAPBLOOM_TEST_CLOCK"], "rb") as fh:
        return float(_DOUBLE.unpack(fh.read(8))[0])
