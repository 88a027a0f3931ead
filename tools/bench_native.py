"""Nanoseconds per key of the native kernels (not a test; numbers for the report).

    python tools/bench_native.py [--keys 1000000] [--rounds 3] [--big] [--only M3KM,M3BL]

Measures ``mmapbloom._kernels.Handle`` (the code every filter runs) directly on an anonymous
mapping (as a file-backed filter image would be), with an in-memory LockState (no flock):
add_many / contains_many (present and absent keys) for whole lists, add / contains called
once per key from a Python loop (loop overhead included, and reported separately), the
counting handles, and two threads calling contains_many.
The best of --rounds is reported (each add round starts from an empty body), in CPU time of
the calling thread, except the two-thread comparison (wall time).
"""

from __future__ import annotations

import argparse
import fcntl
import mmap
import os
import tempfile
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

import mmapbloom._kernels as K

M3KM, M3MX, M3BL, M3M2, M3B2 = 1, 2, 3, 4, 5
HEADER = 8  # the image's header: the items word, then 4 spare bytes


def native_handle(sid: int, m: int, k: int, width: int = 1) -> Any:
    """A Handle over a fresh anonymous mapping: an 8-byte header, then m cells of width bits."""

    def refuse() -> None:
        raise RuntimeError("the handle refused the call")

    hooks = SimpleNamespace(closed=refuse, readonly=refuse, faulted=refuse, over=lambda count: None, saturated=None)
    image = mmap.mmap(-1, HEADER + (m * width + 7) // 8)
    return K.Handle(image, (sid, m, k, width, HEADER, 0), K.LockState(), hooks, True, float("inf"))


def best(
    rounds: int, setup: Callable[[], Any], run: Callable[[Any], Any], clock: Callable[[], float] = time.thread_time
) -> float:
    """Best of ``rounds`` runs; CPU time of this thread by default (the machine is shared,
    so wall time would count other processes' time slices)."""
    times = []
    for _ in range(rounds):
        state = setup()
        t0 = clock()
        run(state)
        times.append(clock() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated strategy names to run")
    ap.add_argument(
        "--big",
        action="store_true",
        help="also a body sized for 50 million keys at p = 1%% (60 MB: far beyond the caches)",
    )
    args = ap.parse_args()
    n = args.keys
    keys = [f"https://example.com/path/{i}/page.html" for i in range(n)]
    absent = [f"https://example.org/other/{i}/x" for i in range(n)]
    configs = [
        ("M3KM", M3KM, 9_585_059, 7),
        ("M3MX", M3MX, 9_585_059, 7),
        ("M3BL", M3BL, 18_722 * 512, 7),
        ("M3M2", M3M2, 9_585_059, 7),
        ("M3B2", M3B2, 18_722 * 512, 7),
    ]
    if args.big:
        configs += [
            ("M3KM", M3KM, 479_252_953, 7),
            ("M3MX", M3MX, 479_252_953, 7),
            ("M3BL", M3BL, 936_041 * 512, 7),
            ("M3M2", M3M2, 479_252_953, 7),
            ("M3B2", M3B2, 936_041 * 512, 7),
        ]
    if args.only:
        configs = [c for c in configs if c[0] in args.only.split(",")]
    print(f"{n} keys (str, {sum(map(len, keys)) / n:.0f} bytes avg), best of {args.rounds}; ns per key")
    t_loop = best(args.rounds, lambda: None, lambda _: [None for key in keys])
    print(f"bare Python loop over the keys (list comprehension): {t_loop / n * 1e9:.1f}")
    hdr = (
        f"{'strategy':8} {'m':>10} {'k':>2} | {'add_many':>9} {'cm present':>10} {'cm absent':>9} | "
        f"{'add':>6} {'contains':>8} {'absent':>7} | {'c8 add_many':>11} {'c8 cm':>6} {'c4 add':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name, sid, m, k in configs:
        out = np.zeros(n, dtype=np.bool_)
        add_many = best(args.rounds, lambda: native_handle(sid, m, k), lambda h: h.add_many(keys, out))
        h = native_handle(sid, m, k)
        h.add_many(keys, out)
        cm_present = best(args.rounds, lambda: h, lambda h: h.contains_many(keys, out))
        cm_wall = best(args.rounds, lambda: h, lambda h: h.contains_many(keys, out), time.perf_counter)
        assert out.all()
        cm_absent = best(args.rounds, lambda: h, lambda h: h.contains_many(absent, out))
        fp = out.mean()

        def per_item_add(h: Any) -> None:
            add = h.add
            for key in keys:
                add(key)

        def per_item_contains(probe: list[str]) -> Callable[[Any], None]:
            def run(h: Any) -> None:
                contains = h.contains
                for key in probe:
                    contains(key)

            return run

        add1 = best(args.rounds, lambda: native_handle(sid, m, k), per_item_add)
        has1 = best(args.rounds, lambda: h, per_item_contains(keys))
        has0 = best(args.rounds, lambda: h, per_item_contains(absent))
        if m > 100_000_000:  # counting bodies of m bytes: too big for a shared machine
            c8 = c8q = c4add1 = float("nan")
        else:
            c8 = best(args.rounds, lambda: native_handle(sid, m, k, 8), lambda c: c.add_many(keys, out))
            c = native_handle(sid, m, k, 8)
            c.add_many(keys, out)
            c8q = best(args.rounds, lambda: c, lambda c: c.contains_many(keys, out))
            c4add1 = best(args.rounds, lambda: native_handle(sid, m, k, 4), per_item_add)
        row = [add_many, cm_present, cm_absent, add1, has1, has0, c8, c8q, c4add1]
        print(
            f"{name:8} {m:>10} {k:>2} | {row[0] / n * 1e9:9.1f} {row[1] / n * 1e9:10.1f} {row[2] / n * 1e9:9.1f} | "
            f"{row[3] / n * 1e9:6.1f} {row[4] / n * 1e9:8.1f} {row[5] / n * 1e9:7.1f} | "
            f"{row[6] / n * 1e9:11.1f} {row[7] / n * 1e9:6.1f} {row[8] / n * 1e9:7.1f}   (fp {fp:.4f})"
        )

        # two threads, each querying all keys once
        def two_threads(h: Any) -> None:
            outs = [np.zeros(n, dtype=np.bool_) for _ in range(2)]
            ts = [threading.Thread(target=h.contains_many, args=(keys, o)) for o in outs]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        t2 = best(args.rounds, lambda: h, two_threads, time.perf_counter)  # wall time
        print(
            f"{'':8} two threads x contains_many: {2 * n / t2 / 1e6:.1f} M keys/s vs one thread "
            f"{n / cm_wall / 1e6:.1f} M keys/s, wall (x{(2 * n / t2) / (n / cm_wall):.2f})"
        )
    tup = best(args.rounds, lambda: None, lambda _: tuple(keys))
    print(f"list -> tuple snapshot (done by every batch call on a list): {tup / n * 1e9:.1f}")
    flock_pairs()


def flock_pairs(count: int = 20_000) -> None:
    """us per lock + unlock pair: K.flock_try / K.flock_unlock (GIL kept) against
    fcntl.flock (GIL released on every call), alone and next to a CPU-busy thread."""
    fd, path = tempfile.mkstemp()
    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    def native() -> None:
        for _ in range(count):
            K.flock_try(fd)
            K.flock_unlock(fd)

    def python() -> None:
        for _ in range(count):
            fcntl.flock(fd, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_UN)

    def wall(fn: Callable[[], None]) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) / count * 1e6

    try:
        alone = (wall(native), wall(python))
        thread = threading.Thread(target=busy)
        thread.start()
        try:
            busy_native = wall(native)
            busy_python = (
                wall(
                    lambda: [
                        fcntl.flock(fd, op)
                        for _ in range(200)  # fewer: ~ms each
                        for op in (fcntl.LOCK_EX, fcntl.LOCK_UN)
                    ]
                )
                * count
                / 200
            )
        finally:
            stop.set()
            thread.join()
        print(
            f"flock pair, us (wall): flock_try+flock_unlock {alone[0]:.2f} alone, {busy_native:.2f} next to a "
            f"busy thread; fcntl.flock {alone[1]:.2f} alone, {busy_python:.1f} next to a busy thread"
        )
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
