"""The write lock's two cross-process modes, measured in one run: ``python -m tools.bench_locks``.

Rows (medians of ``--rounds`` rounds, ns; every ratio is mutex / flock from this same run):

* ``add locked``: per-item ``add`` with the lock taken per call (the crawler's call);
* ``add held``: the same inside ``write_lock()`` (no lock per call: the floor);
* ``lock pair``: ``add locked - add held``, the cost of one lock+unlock pair on the C path
  (thread lock included);
* ``bare pair``: the cross-process lock alone (CPU time), lock+unlock from Python minus the same loop
  of two bare C calls (``Mutex.try_acquire/release`` against ``flock_try/flock_unlock``);
* ``with write_lock()``: ``with f.write_lock(): pass`` per mode, minus an empty loop, and
  the same ratio against the ``bare pair`` row's flock (a bare ``LOCK_EX``/``LOCK_UN`` pair
  from Python); ``with threading.Lock()`` is the floor of any ``with`` statement on this
  interpreter, printed for scale;
* ``4 writers / 1``: wall time of 4 writer processes adding ``--keys`` distinct keys between
  them (a quarter each, lock per call) over one writer adding them all, per mode; the
  bits are checked against the single writer's file (0 lost bits) and the new-key counts
  must sum to ``--keys`` (exact-once ``add``).

The mode is chosen per handle at its first write (``MMAPBLOOM_LOCK=flock`` forces flock), so
both modes run in this one process and its children. Needs the compiled extension and a
local file system for the mutex rows (else they are flock too, and the ratios say 1.0).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from typing import Optional, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mmapbloom import BloomConfig, BloomFilter  # noqa: E402
from mmapbloom.locking import LOCK_ENV  # noqa: E402

MODES = ("mutex", "flock")


def _set_mode(mode: str) -> None:
    if mode == "flock":
        os.environ[LOCK_ENV] = "flock"
    else:
        os.environ.pop(LOCK_ENV, None)


def _keys(n: int, prefix: str = "k") -> list[str]:
    return [f"https://{prefix}{i}.example/p" for i in range(n)]


def _per_item(path: str, cfg: BloomConfig, keys: list[str], mode: str, held: bool) -> tuple[float, str]:
    _set_mode(mode)
    if os.path.exists(path):
        os.unlink(path)
    with BloomFilter.create(path, cfg) as f:
        f.add("warm")  # chooses the mode
        got = f._storage.lock.mode or "?"
        add = f.add
        t0 = time.perf_counter()
        if held:
            with f.write_lock():
                for k in keys:
                    add(k)
        else:
            for k in keys:
                add(k)
        return (time.perf_counter() - t0) / len(keys) * 1e9, got


def _writer(
    path: str, keys: list[str], mode: str, start: "multiprocessing.synchronize.Event", out: "multiprocessing.Queue[int]"
) -> None:
    _set_mode(mode)
    with BloomFilter.open(path) as f:
        f.add("warm")
        start.wait()
        new = sum(1 for k in keys if f.add(k))
    out.put(new)


def _wall(path: str, cfg: BloomConfig, keys: list[str], mode: str, writers: int) -> tuple[float, int, bytes]:
    if os.path.exists(path):
        os.unlink(path)
    with BloomFilter.create(path, cfg) as f:
        f.add("warm")
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    parts = [keys[i::writers] for i in range(writers)]
    procs = [ctx.Process(target=_writer, args=(path, part, mode, start, out)) for part in parts]
    for p in procs:
        p.start()
    time.sleep(0.3)  # every writer opened and warmed
    t0 = time.perf_counter()
    start.set()
    news = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    seconds = time.perf_counter() - t0
    with open(path, "rb") as fh:
        image = fh.read()
    return seconds, sum(news), image


def _with_lock(path: str, cfg: BloomConfig, mode: str, n: int) -> tuple[float, float]:
    """ns per ``with f.write_lock(): pass`` and per ``with lock: pass`` (the lock object
    fetched once), minus an empty loop; CPU time of this process (the machine is shared)."""
    _set_mode(mode)
    if os.path.exists(path):
        os.unlink(path)
    with BloomFilter.create(path, cfg) as f:
        f.add("warm")  # chooses the mode
        lock = f.write_lock()

        def base() -> float:
            t0 = time.process_time()
            for _ in range(n):
                pass
            return time.process_time() - t0

        def full() -> float:
            t0 = time.process_time()
            for _ in range(n):
                with f.write_lock():
                    pass
            return time.process_time() - t0

        def bare() -> float:
            t0 = time.process_time()
            for _ in range(n):
                with lock:
                    pass
            return time.process_time() - t0

        got: dict[str, list[float]] = {"base": [], "full": [], "bare": []}
        for _ in range(5):
            for name, fn in (("base", base), ("full", full), ("bare", bare)):
                got[name].append(fn() / n * 1e9)
    b = statistics.median(got["base"])
    return statistics.median(got["full"]) - b, statistics.median(got["bare"]) - b


def _with_thread_lock(n: int) -> float:
    import threading

    tl = threading.Lock()
    got = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n):
            pass
        t1 = time.process_time()
        for _ in range(n):
            with tl:
                pass
        t2 = time.process_time()
        got.append(((t2 - t1) - (t1 - t0)) / n * 1e9)
    return statistics.median(got)


def _bare_pairs(d: str, n: int) -> dict[str, float]:
    """ns per lock+unlock pair from Python, minus a loop of two bare C method calls: the
    side file's Mutex (try_acquire, release) against flock (flock_try, flock_unlock, the
    GIL-keeping calls the lock uses), on one file."""
    from mmapbloom import _kernels

    path = os.path.join(d, "bare.lock")
    open(path, "wb").close()
    fd = os.open(path, os.O_RDWR)
    sfd = os.open(path + ".mutex", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        st = os.fstat(fd)
        _kernels.Mutex.create(sfd, st.st_dev, st.st_ino)
        m = _kernels.Mutex(sfd, st.st_dev, st.st_ino)
        lock, unlock = m.try_acquire, m.release
        ftry, fun = _kernels.flock_try, _kernels.flock_unlock
        z = (0).bit_length

        def base() -> float:
            t0 = time.process_time()
            for _ in range(n):
                z()
                z()
            return time.process_time() - t0

        def mutex() -> float:
            t0 = time.process_time()
            for _ in range(n):
                lock()
                unlock()
            return time.process_time() - t0

        def flock() -> float:
            t0 = time.process_time()
            for _ in range(n):
                ftry(fd)
                fun(fd)
            return time.process_time() - t0

        got: dict[str, list[float]] = {"base": [], "mutex": [], "flock": []}
        for _ in range(5):
            for name, f in (("base", base), ("mutex", mutex), ("flock", flock)):
                got[name].append(f() / n * 1e9)
        b = statistics.median(got["base"])
        return {k: statistics.median(v) - b for k, v in got.items() if k != "base"}
    finally:
        os.close(sfd)
        os.close(fd)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000, help="keys per measurement (default 200,000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per row, medians (default 5)")
    args = ap.parse_args(argv)
    cfg = BloomConfig.for_items(args.keys + 10, 1e-9)  # no false positive: every key is new once
    keys = _keys(args.keys)
    with tempfile.TemporaryDirectory(prefix="bench-locks-") as d:
        bare = _bare_pairs(d, args.keys)
        path = os.path.join(d, "f.blm")
        withs = {mode: _with_lock(path, cfg, mode, args.keys) for mode in MODES}
        floor = _with_thread_lock(args.keys)
        used: dict[str, str] = {}
        ns: dict[tuple[str, str], float] = {}
        for row, held in (("add locked", False), ("add held", True)):
            samples: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(args.rounds):  # interleaved: both modes see the same machine load
                for mode in MODES:
                    t, used[mode] = _per_item(path, cfg, keys, mode, held)
                    samples[mode].append(t)
            for mode in MODES:
                ns[(row, mode)] = statistics.median(samples[mode])
        for mode in MODES:
            ns[("lock pair", mode)] = ns[("add locked", mode)] - ns[("add held", mode)]
        walls: dict[tuple[int, str], list[float]] = {}
        reference: Optional[bytes] = None
        lost = 0
        for _ in range(args.rounds):
            for mode in MODES:
                for writers in (1, 4):
                    seconds, new, image = _wall(path, cfg, keys, mode, writers)
                    if new != len(keys):
                        raise SystemExit(f"exact-once add broken: {new} new keys, expected {len(keys)} ({mode})")
                    if reference is None:
                        reference = image
                    ref, got = int.from_bytes(reference[24:], "little"), int.from_bytes(image[24:], "little")
                    lost += bin(ref & ~got).count("1")  # bits one writer set that these writers did not
                    if image[24:] != reference[24:]:
                        raise SystemExit(f"{mode}, {writers} writers: the bits differ from one writer's")
                    walls.setdefault((writers, mode), []).append(seconds)
    print(f"lock modes used: {used} (ns per key, medians of {args.rounds}; ratio = mutex / flock)")
    print(f"{'row':28} {'mutex':>10} {'flock':>10} {'ratio':>8}")
    ns[("bare pair", "mutex")], ns[("bare pair", "flock")] = bare["mutex"], bare["flock"]
    for row in ("add locked", "add held", "lock pair", "bare pair"):
        a, b = ns[(row, "mutex")], ns[(row, "flock")]
        print(f"{row:28} {a:10.1f} {b:10.1f} {a / b if b > 0 else float('nan'):8.3f}")
    print(f"{'with f.write_lock(): pass':28} {withs['mutex'][0]:10.1f} {withs['flock'][0]:10.1f}")
    print(f"{'with lock: pass':28} {withs['mutex'][1]:10.1f} {withs['flock'][1]:10.1f}")
    fl = bare["flock"]
    print(
        f"with f.write_lock(): pass / bare flock pair ({fl:.1f} ns, CPU time): "
        f"mutex {withs['mutex'][0] / fl:.3f}x, flock {withs['flock'][0] / fl:.3f}x; "
        f"with lock: pass {withs['mutex'][1] / fl:.3f}x; floor, with threading.Lock(): pass "
        f"{floor:.1f} ns = {floor / fl:.3f}x"
    )
    for mode in MODES:
        one, four = statistics.median(walls[(1, mode)]), statistics.median(walls[(4, mode)])
        print(f"{'4 writers / 1 (' + mode + ')':28} {four:10.3f} {one:10.3f} {four / one:8.3f}  (s, s, 4/1)")
    print(f"lost bits: {lost}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
