"""Worker functions for the scalable-filter tests, run in real (spawned) child processes."""

from __future__ import annotations

import random
import threading
from typing import Any

from mmapbloom import ScalableBloomFilter


def threads_add(path: str, keys: list[str], threads: int, seed: int, barrier: Any) -> list[str]:
    """Open ``path``; ``threads`` threads each add a shuffled copy of ``keys`` one at a
    time (even threads with ``add``, odd ones with ``update`` of one-item batches, so both
    write paths race); return every key reported new."""
    claimed: list[str] = []
    guard = threading.Lock()
    errors: list[BaseException] = []
    with ScalableBloomFilter.open(path) as f:
        barrier.wait()

        def work(t: int) -> None:
            try:
                mine = list(keys)
                random.Random(seed * 100 + t).shuffle(mine)
                got = []
                if t % 2 == 0:
                    got = [k for k in mine if f.add(k)]
                else:
                    # update() reports a count only: a batch of one says whether its item was new.
                    for k in mine:
                        if f.update([k]):
                            got.append(k)
                with guard:
                    claimed.extend(got)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if errors:
        raise errors[0]
    return claimed


def add_pickled(f: ScalableBloomFilter, keys: list[str]) -> int:
    """Use a handle that travelled by pickle (as its path)."""
    try:
        return sum(f.add(k) for k in keys)
    finally:
        f.close()


def open_or_create_add(path: str, keys: list[str], barrier: Any) -> list[str]:
    barrier.wait()
    with ScalableBloomFilter.open_or_create(path, 100, 1e-9) as f:
        return [k for k in keys if f.add(k)]
