"""Worker functions run in real child processes by the multi-process tests."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from mmapbloom import BloomConfig, BloomFilter
from mmapbloom.verify import open_any


def run_and_report(queue: Any, index: int, func: Any, *args: Any) -> None:
    """Process target: run ``func(*args)`` and put ``(index, result)`` on ``queue``."""
    queue.put((index, func(*args)))


def add_items(path: str, items: list[str], barrier: Any, mode: str = "add") -> list[str]:
    """Open ``path``, wait at the barrier, add ``items``; return those reported new."""
    with BloomFilter.open(path) as f:
        barrier.wait()
        if mode == "add":
            return [x for x in items if f.add(x)]
        if mode == "add_many":
            flags = f.add_many(items)
            return [x for x, new in zip(items, flags, strict=True) if new]
        if mode == "locked":
            with f.write_lock():
                return [x for x in items if f.add(x)]
        raise ValueError(mode)


def add_with_handle(f: BloomFilter, items: list[str], barrier: Any) -> list[str]:
    """Use a pickled handle (the filter travels as its path)."""
    barrier.wait()
    try:
        return [x for x in items if f.add(x)]
    finally:
        f.close()


def open_or_create_and_add(path: str, config: BloomConfig, items: list[str], barrier: Any) -> list[str]:
    barrier.wait()
    with BloomFilter.open_or_create(path, config) as f:
        return [x for x in items if f.add(x)]


def counting_add_remove(path: str, adds: list[str], removes: list[str], barrier: Any) -> int:
    """Counting filter: add ``adds`` one by one, then remove ``removes`` (a subset)."""
    from mmapbloom import CountingBloomFilter

    with CountingBloomFilter.open(path) as f:
        barrier.wait()
        for x in adds:
            f.add(x)
        for x in removes:
            f.remove(x)
    return len(adds)


def acked_writer(path: str, count: int, batch: int) -> None:
    """Add ``item-0`` .. ``item-{count-1}``; after each add (or batch) returns, print the
    index of the last acknowledged item to stdout (unbuffered). Killed by the test."""
    out = sys.stdout
    with BloomFilter.open(path) as f:
        print("ready", file=out, flush=True)
        i = 0
        while i < count:
            if batch == 1:
                f.add(f"item-{i}")
                i += 1
            else:
                f.update([f"item-{j}" for j in range(i, min(count, i + batch))])
                i = min(count, i + batch)
            print(i, file=out, flush=True)
    time.sleep(60)


def add_distinct(path: str, n: int, barrier: Any, batch: int = 1) -> int:
    """Add ``n`` distinct items to the filter file of either kind (each is new in a large
    filter): one by one with ``add``, or ``batch`` at a time with ``update``."""
    with open_any(path) as f:
        barrier.wait()
        for start in range(0, n, batch):
            if batch == 1:
                f.add(f"distinct-{start}")  # type: ignore[attr-defined]
            else:
                f.update([f"distinct-{i}" for i in range(start, min(n, start + batch))])  # type: ignore[attr-defined]
    return n


def watch_items(path: str, until: int, barrier: Any, timeout: float = 60.0) -> tuple[int, list[tuple[int, int]]]:
    """Poll ``items_added`` (no lock, as readers do) until it reaches ``until``; return the
    number of reads and the first few decreases seen, as ``(previous, value)`` pairs."""
    drops: list[tuple[int, int]] = []
    reads = 0
    with open_any(path, readonly=True) as f:
        barrier.wait()
        deadline = time.monotonic() + timeout
        last = 0
        while last < until and time.monotonic() < deadline:
            for _ in range(1000):
                value = f.items_added
                if value < last and len(drops) < 10:
                    drops.append((last, value))
                last = value
            reads += 1000
    return reads, drops


if __name__ == "__main__":
    acked_writer(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    os._exit(0)
