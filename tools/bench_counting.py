"""Counting filter speed relative to BloomFilter, measured in the same run.

Command (from the repository root, after ``pip install -e .``)::

    python tools/bench_counting.py --keys 200000 --rounds 3

For each of BloomFilter, CountingBloomFilter with 4-bit and with 8-bit counters (all
file-backed, in a temporary directory, sized for ``--keys`` at p = 1%), on the same seeded
URL-like keys: per-item add, per-item check (``in``) of present keys, per-item remove
(counting only), batch add (``update``) and batch check (``contains_many``). Prints ns per
item (median of ``--rounds``) and the ratio to BloomFilter's time for the same operation.
Machines here are noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter  # noqa: E402


def keys(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"https://site{rng.randrange(10**6)}.example.com/p/{i}/{rng.getrandbits(64):x}" for i in range(n)]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    items = keys(args.keys, 1)
    cfg = BloomConfig.for_items(args.keys, 0.01)
    kinds: list[tuple[str, Callable[[str], Any]]] = [
        ("BloomFilter", lambda p: BloomFilter.create(p, cfg)),
        ("Counting 4-bit", lambda p: CountingBloomFilter.create(p, cfg, counter_bits=4)),
        ("Counting 8-bit", lambda p: CountingBloomFilter.create(p, cfg, counter_bits=8)),
    ]
    ops = ["add", "in", "remove", "update", "contains_many"]
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):  # rounds interleaved across kinds: background load hits all alike
            for name, make in kinds:
                f = make(os.path.join(d, f"{name}-{r}.f".replace(" ", "_")))
                times.setdefault((name, "add"), []).append(timed(lambda: [f.add(x) for x in items]))
                times.setdefault((name, "in"), []).append(timed(lambda: [x in f for x in items]))
                if isinstance(f, CountingBloomFilter):
                    times.setdefault((name, "remove"), []).append(timed(lambda: [f.remove(x) for x in items]))
                f.close()
                g = make(os.path.join(d, f"{name}-{r}.g".replace(" ", "_")))
                times.setdefault((name, "update"), []).append(timed(lambda: g.update(items)))
                times.setdefault((name, "contains_many"), []).append(timed(lambda: g.contains_many(items)))
                g.close()
    ns = {key: statistics.median(v) / args.keys * 1e9 for key, v in times.items()}
    print(f"{args.keys:,} keys, p = 0.01, median of {args.rounds} rounds; ns per item "
          "(ratio to BloomFilter's time for the same operation)\n")
    print("| filter | " + " | ".join(ops) + " |")
    print("|---|" + "---:|" * len(ops))
    for name, _ in kinds:
        cells = []
        for op in ops:
            if (name, op) not in ns:
                cells.append("-")
                continue
            base = ns.get(("BloomFilter", op))
            ratio = f" ({ns[(name, op)] / base:.2f}x)" if base else ""
            cells.append(f"{ns[(name, op)]:,.0f}{ratio}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    from mmapbloom.termination import run_main  # SIGTERM/SIGHUP clean up like Ctrl-C (exit 128 + signal)

    sys.exit(run_main(main, "bench_counting.py"))
