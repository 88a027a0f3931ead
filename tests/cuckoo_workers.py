"""Worker functions for tests/test_cuckoo_processes.py (real child processes sharing one
CKF1 file). Run as ``python -m tests.cuckoo_workers PATH COUNT BATCH`` it is the writer
that the SIGKILL test kills: it prints the number of acknowledged keys after each batch."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from mmapbloom import CuckooFilter, FilterFullError


def add_each(path: str, keys: list[str], barrier: Any) -> list[str]:
    """Open ``path``, wait at the barrier, add ``keys`` one by one; return those added (True)."""
    with CuckooFilter.open(path) as f:
        barrier.wait()
        return [k for k in keys if f.add(k)]


def hammer(path: str, keys: list[str], stop: str, ready: Any) -> tuple[int, int, int]:
    """Query ``keys`` (all present, each stored once) with ``in`` and ``count`` until the
    file ``stop`` exists; return (misses, counts other than 1, rounds)."""
    misses = miscounts = rounds = 0
    with CuckooFilter.open(path, readonly=True) as f:
        ready.set()
        while True:
            done = os.path.exists(stop)
            misses += sum(1 for k in keys if k not in f)
            miscounts += sum(1 for k in keys if f.count(k) != 1)
            rounds += 1
            if done:
                return misses, miscounts, rounds


def fill(path: str, prefix: str, target: float, barrier: Any) -> int:
    """Add ``prefix-i`` keys one by one until the load reaches ``target`` or the filter is
    full; return how many this writer inserted."""
    inserted = 0
    with CuckooFilter.open(path) as f:
        barrier.wait()
        i = 0
        while f.load_factor < target:
            try:
                inserted += f.add(f"{prefix}-{i}")
            except FilterFullError:
                break
            i += 1
    return inserted


def main() -> None:
    path, count, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with CuckooFilter.open(path) as f:
        print("ready", flush=True)
        i = 0
        while i < count:
            end = min(count, i + batch)
            f.update([f"item-{j}" for j in range(i, end)])
            i = end
            print(i, flush=True)
    time.sleep(60)


if __name__ == "__main__":
    main()
