"""Speed of the cuckoo filter against its peers, all measured in the same run, with ratios.

Keys are URLs (``https://example.org/page/<i>``). Every mmapbloom filter is a file in one
temporary directory, sized for ``--keys`` keys at ``--fp-rate``: ``CuckooFilter`` (CKF1),
``BloomFilter`` (BLM1, M3M2) and ``CountingBloomFilter`` (BLC1, 4-bit). Measured, ns per
key (best of ``--rounds``; inserts on a fresh filter each round):

* ``update``: one bulk insert of the keys up to 90% of the cuckoo table's slots (the same
  keys into each filter);
* ``contains_many``: a bulk query of those keys (present) and of as many never-added ones
  (absent);
* ``add`` / ``in``: per-item calls on ``--per-item`` keys;

and ``pyprobables``' ``CuckooFilter`` (pure Python, in memory, 4-slot bins for 90% load,
``auto_expand=False``: it cannot grow then; see below) on ``--peer-keys`` keys, per item (it
has no batch API), if it is installed (``pip install pyprobables``). Also printed: file
bits per key at the design point and the measured false-positive rate on the absent keys.
Ratios are cuckoo / peer (below 1: the cuckoo filter is faster). pyprobables (0.7)
derives both bucket indexes from the fingerprint alone (``idx1 = fp mod capacity``), so
it holds at most 2^f distinct keys: sized by ``init_error_rate(0.01)`` (f = 10) it keeps
1,024 of 50,000 URL keys and then answers every absent key as present. The bench therefore
runs it with its default 32-bit fingerprints (``CuckooFilter(capacity, 4, finger_size=4)``)
and MurmurHash3 x64 (``mmh3.hash64``) as its ``hash_function`` (its default FNV-1a mixes
the numeric suffixes of these keys poorly), the configuration in which it keeps the keys.

The figures of issue 26's closing note, before the speed table (``--sections``, default
all):

* ``space``: bits per item at the design point of ``--keys`` keys for p = 1%, 0.1% and
  0.01%: the cuckoo file (48 + ceil(n b f / 8) bytes), BloomFilter's and
  CountingBloomFilter's (4-bit) at ``BloomConfig.for_items``; cuckoo / counting ratio;
* ``fp``: the measured false-positive rate of filters filled to their design capacity
  (``--fp-sizes``) at each p, on ``--absent`` never-added keys, beside p and
  ``expected_fp_rate()``;
* ``load``: the load (items / slots) at the first FilterFullError, b = 4, default kicks,
  ``--load-trials`` tables of ``--load-capacity`` keys (f = 12 and 16), keys added one by one;
* ``speed``: the table above;
* ``instructions`` (not in the default; needs valgrind): user-space instructions per key
  of the same operations for CuckooFilter and BloomFilter (callgrind, one child each,
  ``os.getppid()`` marking each operation as in ``tools/bench/instructions.py``): a
  machine-load-independent figure beside the timings (``update`` to 90% of the cuckoo
  slots, ``contains_many`` / ``in`` / ``add`` on ``--per-item`` keys).

Usage: python -m tools.bench_cuckoo [--keys N] [--fp-rate P] [--per-item N] [--peer-keys N]
[--rounds R] [--sections space,fp,load,speed] [--fp-sizes N,N] [--absent N]
[--load-capacity N] [--load-trials T] [--json]; add ``instructions`` to --sections for
the callgrind rows.

The closing note's figures: ``python -m tools.bench_cuckoo --fp-rate 0.01`` (1M keys).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

import mmh3

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter, FilterFullError
from mmapbloom.kernels import native_module

RATES = (0.01, 0.001, 0.0001)


def _best(rounds: int, make: Callable[[], Any], run: Callable[[Any], Any], n: int) -> float:
    """ns per key of ``run(make())``, the best of ``rounds`` (``make`` is not timed)."""
    best = float("inf")
    for _ in range(rounds):
        obj = make()
        t0 = time.perf_counter_ns()
        run(obj)
        best = min(best, (time.perf_counter_ns() - t0) / max(1, n))
    return best


def _loop_add(f: Any, keys: list[str]) -> None:
    add = f.add
    for k in keys:
        add(k)


def _loop_in(f: Any, keys: list[str]) -> None:
    for k in keys:
        _ = k in f


def _mmh3_64(key: Any, seed: int = 0) -> int:
    """pyprobables' hash_function: the first 64-bit half of MurmurHash3 x64-128."""
    return int(mmh3.hash64(key, seed=seed, signed=False)[0])


def space_table(keys: int, rates: tuple[float, ...] = RATES) -> dict[str, dict[str, float]]:
    """Bits per item at the design point (``keys`` keys at each rate), whole images
    (headers included): cuckoo, bloom, counting and the cuckoo / counting ratio."""
    out: dict[str, dict[str, float]] = {}
    for p in rates:
        config = BloomConfig.for_items(keys, p)
        sizes: dict[str, float] = {}
        with CuckooFilter(keys, p) as c:
            sizes["cuckoo"] = 8 * c.size_bytes / keys
            sizes["fingerprint_bits"] = c.fingerprint_bits
        with BloomFilter(config) as b:
            sizes["bloom"] = 8 * b.size_bytes / keys
        with CountingBloomFilter(config) as n:
            sizes["counting"] = 8 * n.size_bytes / keys
        sizes["cuckoo / counting"] = sizes["cuckoo"] / sizes["counting"]
        sizes["cuckoo / bloom"] = sizes["cuckoo"] / sizes["bloom"]
        out[str(p)] = sizes
    return out


def fp_grid(sizes: list[int], absent: int, rates: tuple[float, ...] = RATES) -> list[dict[str, float]]:
    """The measured false-positive rate of in-memory filters of each size and rate filled
    with their design capacity of distinct keys, on ``absent`` never-added keys."""
    probe = [f"https://example.org/absent/{i}" for i in range(absent)]
    rows = []
    for cap in sizes:
        for p in rates:
            with CuckooFilter(cap, p) as f:
                stored = f.update(f"https://example.org/page/{i}" for i in range(cap))
                measured = float(f.contains_many(probe).mean())
                rows.append(
                    {
                        "capacity": cap,
                        "fp_rate": p,
                        "fingerprint_bits": f.fingerprint_bits,
                        "load": f.load_factor,
                        "stored": stored,
                        "measured": measured,
                        "expected": f.expected_fp_rate(),
                    }
                )
    return rows


def first_failure(capacity: int, trials: int, widths: tuple[int, ...] = (12, 16)) -> list[dict[str, float]]:
    """The load (items_added / slots) when ``add`` first raises FilterFullError, b = 4 and
    the default max_kicks, for ``trials`` key sets per fingerprint width; also the load
    when the victim slot was first taken (the insert before that found no kick path)."""
    rows = []
    for f_bits in widths:
        for t in range(trials):
            with CuckooFilter(capacity, 0.01, fingerprint_bits=f_bits) as f:
                slots = f.num_slots
                victim_load = float("nan")
                i = 0
                while True:
                    try:
                        f.add(f"https://example.org/t{t}/{i}")
                    except FilterFullError:
                        break
                    i += 1
                    if victim_load != victim_load and f._h.cells.victim()[0]:
                        victim_load = f.items_added / slots
                rows.append(
                    {
                        "fingerprint_bits": f_bits,
                        "trial": t,
                        "slots": slots,
                        "load at victim": victim_load,
                        "load at first FilterFullError": f.items_added / slots,
                    }
                )
    return rows


INSTRUCTION_ROWS = ("update", "contains_many present", "contains_many absent", "in", "add")


def _instructions_child(kind: str, capacity: int, p: float, per_item: int, work: str) -> None:
    """The callgrind child: the operations of INSTRUCTION_ROWS, each between two
    ``os.getppid()`` calls (a callgrind dump before each)."""
    probe = CuckooFilter(capacity, p)
    fill = int(0.9 * probe.num_slots)
    probe.close()
    keys = [f"https://example.org/page/{i}" for i in range(fill)]
    absent = [f"https://example.org/absent/{i}" for i in range(per_item)]
    per = keys[:per_item]

    def make(name: str) -> Any:
        where = os.path.join(work, name)
        if kind == "cuckoo":
            return CuckooFilter.create(where, capacity, p)
        return BloomFilter.create(where, BloomConfig.for_items(capacity, p))

    f, g = make("filled"), make("fresh")
    # warm-up outside the marks: the lazy numpy import, first calls (never the measured keys)
    f.update([])
    f.contains_many(["warm-up"])
    _loop_in(f, ["warm-up"])
    g.add("warm-up")
    ops: dict[str, tuple[Callable[[], Any], int]] = {
        "update": (lambda: f.update(keys), len(keys)),
        "contains_many present": (lambda: f.contains_many(per), len(per)),
        "contains_many absent": (lambda: f.contains_many(absent), len(absent)),
        "in": (lambda: _loop_in(f, per), len(per)),
        "add": (lambda: _loop_add(g, per), len(per)),
    }
    counts = []
    for op in INSTRUCTION_ROWS:
        run, n = ops[op]
        os.getppid()
        run()
        os.getppid()
        counts.append(n)
    f.close()
    g.close()
    print(json.dumps(counts))


def instructions(capacity: int, p: float, per_item: int) -> dict[str, dict[str, float]]:
    """{kind: {row: instructions per key}} for "cuckoo" and "bloom" (valgrind's callgrind
    on PATH); part 1 is the start-up, then row i is part 2 + 2 i."""
    import shutil
    import subprocess

    from tools.bench.measure import ROOT, callgrind_parts, child_env

    out: dict[str, dict[str, float]] = {}
    for kind in ("cuckoo", "bloom"):
        work = tempfile.mkdtemp(prefix="bench-cuckoo-cg.")
        try:
            cg = os.path.join(work, "cg.out")
            cmd = ["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={cg}"]
            cmd += ["--dump-instr=no", sys.executable, "-m", "tools.bench_cuckoo", "--instructions-child"]
            cmd += [kind, str(capacity), str(p), str(per_item), work]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env())
            if proc.returncode != 0:
                raise RuntimeError(f"{kind}: callgrind child failed ({proc.returncode}): {proc.stderr[-2000:]}")
            counts = json.loads(proc.stdout.strip().splitlines()[-1])
            parts = callgrind_parts(cg)
            out[kind] = {row: parts[2 + 2 * i] / counts[i] for i, row in enumerate(INSTRUCTION_ROWS)}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def _environment() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="design capacity (default 1M)")
    ap.add_argument("--fp-rate", type=float, default=0.001)
    ap.add_argument("--per-item", type=int, default=200_000, help="keys of the per-item add / in loops")
    ap.add_argument("--peer-keys", type=int, default=50_000, help="keys for pyprobables (pure Python)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sections", default="space,fp,load,speed", help="comma-separated: space, fp, load, speed")
    ap.add_argument("--fp-sizes", default="10000,100000,1000000", help="capacities of the fp grid")
    ap.add_argument("--absent", type=int, default=200_000, help="never-added keys of the fp grid")
    ap.add_argument("--load-capacity", type=int, default=100_000, help="capacity of the first-failure tables")
    ap.add_argument("--load-trials", type=int, default=3, help="key sets per fingerprint width")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    sections = set(a.sections.split(","))
    backend = "native" if native_module() is not None else "python"
    print(f"backend: {backend}; {_environment()}", file=sys.stderr)
    results: dict[str, Any] = {}
    if "space" in sections:
        space = results["space"] = space_table(a.keys)
        print(f"bits per item at the design point ({a.keys:,} keys; whole files)")
        print(f"{'p':<10}{'f':>4}{'cuckoo':>9}{'bloom':>9}{'counting':>10}{'/ counting':>12}{'/ bloom':>9}")
        for p, r in space.items():
            print(
                f"{p:<10}{r['fingerprint_bits']:>4.0f}{r['cuckoo']:>9.2f}{r['bloom']:>9.2f}{r['counting']:>10.2f}"
                f"{r['cuckoo / counting']:>12.3f}{r['cuckoo / bloom']:>9.3f}"
            )
    if "fp" in sections:
        grid = results["fp grid"] = fp_grid([int(x) for x in a.fp_sizes.split(",")], a.absent)
        print(f"measured false-positive rate at the design point ({a.absent:,} absent keys)")
        print(f"{'capacity':>10}{'p':>9}{'f':>4}{'load':>7}{'measured':>11}{'expected':>11}{'/ p':>7}")
        for r in grid:
            print(
                f"{r['capacity']:>10,}{r['fp_rate']:>9}{r['fingerprint_bits']:>4}{r['load']:>7.3f}"
                f"{r['measured']:>11.3g}{r['expected']:>11.3g}{r['measured'] / r['fp_rate']:>7.3f}"
            )
    if "load" in sections:
        rows = results["first failure"] = first_failure(a.load_capacity, a.load_trials)
        print(f"load at the first FilterFullError (b = 4, max_kicks 500, {a.load_capacity:,}-key tables)")
        print(f"{'f':>4}{'trial':>7}{'slots':>10}{'at victim':>11}{'at error':>10}")
        for r in rows:
            print(
                f"{r['fingerprint_bits']:>4}{r['trial']:>7}{r['slots']:>10,}"
                f"{r['load at victim']:>11.4f}{r['load at first FilterFullError']:>10.4f}"
            )
    if "speed" in sections:
        results.update(_speed(a, backend))
    if "instructions" in sections:
        ins = results["instructions"] = instructions(a.keys, a.fp_rate, a.per_item)
        print(f"instructions per key (callgrind; {a.keys:,} keys at p = {a.fp_rate})")
        print(f"{'op':<24}{'cuckoo':>10}{'bloom':>10}{'ratio':>8}")
        for op in INSTRUCTION_ROWS:
            c, b = ins["cuckoo"].get(op, float("nan")), ins["bloom"].get(op, float("nan"))
            print(f"{op:<24}{c:>10.0f}{b:>10.0f}{c / b:>8.3f}")
    if a.json:
        print(json.dumps({"backend": backend, "keys": a.keys, "fp_rate": a.fp_rate, "results": results}, indent=2))
    return results


def _speed(a: argparse.Namespace, backend: str) -> dict[str, Any]:
    """The speed table (ns per key, best of ``a.rounds``), printed; its results by kind."""
    print(f"speed: {backend}; {a.keys:,} keys at p = {a.fp_rate}; best of {a.rounds}", file=sys.stderr)

    base = tempfile.mkdtemp(prefix="bench-cuckoo-")
    counter = [0]

    def path(name: str) -> str:
        counter[0] += 1
        return os.path.join(base, f"{name}{counter[0]}")

    config = BloomConfig.for_items(a.keys, a.fp_rate)
    made: list[Any] = []

    def make(kind: str) -> Callable[[], Any]:
        def build() -> Any:
            if kind == "cuckoo":
                f: Any = CuckooFilter.create(path("c.ckf"), a.keys, a.fp_rate)
            elif kind == "bloom":
                f = BloomFilter.create(path("b.blm"), config)
            else:
                f = CountingBloomFilter.create(path("n.blc"), config)
            made.append(f)
            return f

        return build

    probe = CuckooFilter(a.keys, a.fp_rate)
    fill = int(0.9 * probe.num_buckets * probe.bucket_size)
    probe.close()
    keys = [f"https://example.org/page/{i}" for i in range(fill)]
    absent = [f"https://example.org/absent/{i}" for i in range(fill)]
    per = keys[: a.per_item]

    results: dict[str, dict[str, float]] = {}
    filled: dict[str, Any] = {}
    for kind in ("cuckoo", "bloom", "counting"):
        r: dict[str, float] = {}
        r["update"] = _best(a.rounds, make(kind), lambda f: f.update(keys), len(keys))
        f = made[-1]  # the last filled one answers the queries
        filled[kind] = f
        r["contains_many present"] = _best(a.rounds, lambda f=f: f, lambda f: f.contains_many(keys), len(keys))
        r["contains_many absent"] = _best(a.rounds, lambda f=f: f, lambda f: f.contains_many(absent), len(absent))
        r["add"] = _best(a.rounds, make(kind), lambda f: _loop_add(f, per), len(per))
        r["in"] = _best(a.rounds, lambda f=f: f, lambda f: _loop_in(f, per), len(per))
        r["bits per key"] = 8 * os.path.getsize(f.path) / a.keys
        r["measured fp rate"] = float(f.contains_many(absent).mean())
        assert f.contains_many(keys).all(), f"{kind}: a false negative"
        results[kind] = r

    peer_note = ""
    try:
        from probables import CuckooFilter as PyProbablesCuckoo
    except ImportError:
        peer_note = "pyprobables is not installed (pip install pyprobables): no pyprobables column"
    else:
        pk = keys[: a.peer_keys]
        pa = absent[: a.peer_keys]
        bins = int(len(pk) / (4 * 0.9)) + 1  # 90% load of 4-slot bins, as the cuckoo filter

        def make_peer() -> Any:
            return PyProbablesCuckoo(
                capacity=bins, bucket_size=4, auto_expand=False, finger_size=4, hash_function=_mmh3_64
            )

        r = {}
        r["add"] = _best(a.rounds, make_peer, lambda f: _loop_add(f, pk), len(pk))
        peer = make_peer()
        _loop_add(peer, pk)
        r["in"] = _best(a.rounds, lambda: peer, lambda f: _loop_in(f, pk), len(pk))
        r["update"] = r["add"]  # no batch API: a loop of add
        r["contains_many present"] = r["in"]
        r["contains_many absent"] = _best(a.rounds, lambda: peer, lambda f: _loop_in(f, pa), len(pa))
        r["measured fp rate"] = sum(k in peer for k in pa) / len(pa)
        peer_note = (
            f"pyprobables (hash_function = mmh3.hash64, {peer.fingerprint_size_bits}-bit fingerprints) "
            f"kept {peer.elements_added:,} of {len(pk):,} keys"
        )
        results["pyprobables"] = r
        # the cuckoo filter on the same (fewer) keys, for a like-for-like per-item ratio
        small = CuckooFilter(int(len(pk) * 0.95 / 0.9) + 1, a.fp_rate)  # filled to 90%, as above
        results["cuckoo (peer keys)"] = {
            "add": _best(1, lambda: small, lambda f: _loop_add(f, pk), len(pk)),
            "in": _best(a.rounds, lambda: small, lambda f: _loop_in(f, pk), len(pk)),
        }
        small.close()

    for f in made:
        f.close()
    for name in os.listdir(base):
        os.unlink(os.path.join(base, name))
    os.rmdir(base)

    ops = ["update", "contains_many present", "contains_many absent", "add", "in", "bits per key", "measured fp rate"]
    peers = [p for p in ("bloom", "counting", "pyprobables") if p in results]
    header = f"{'ns per key':<24}{'cuckoo':>10}" + "".join(f"{p:>13}{'ratio':>7}" for p in peers)
    print(header)
    for op in ops:
        mine = results["cuckoo"][op]
        line = f"{op:<24}{mine:>10.4g}"
        for p in peers:
            theirs = results[p].get(op)
            if p == "pyprobables" and op in ("add", "in"):
                mine_like = results["cuckoo (peer keys)"][op]
                ratio = mine_like / theirs if theirs else float("nan")
            else:
                ratio = mine / theirs if theirs else float("nan")
            line += f"{theirs:>13.4g}{ratio:>7.3f}" if theirs is not None else f"{'-':>13}{'-':>7}"
        print(line)
    if "pyprobables" in results:
        print(
            f"(pyprobables on {a.peer_keys:,} keys, in memory, per item; its add / in ratios use the cuckoo "
            f"filter on the same keys: add {results['cuckoo (peer keys)']['add']:.4g} ns, "
            f"in {results['cuckoo (peer keys)']['in']:.4g} ns)"
        )
    if peer_note:
        print(peer_note)
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--instructions-child"]:
        kind, cap, p, per, work = sys.argv[2:7]
        _instructions_child(kind, int(cap), float(p), int(per), work)
    else:
        main()
