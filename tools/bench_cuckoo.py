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

and ``pyprobables``' ``CuckooFilter`` (pure Python, in memory, ``init_error_rate`` at the
same rate and enough buckets: it cannot grow then) on ``--peer-keys`` keys, per item (it
has no batch API), if it is installed (``pip install pyprobables``). Also printed: file
bits per key at the design point and the measured false-positive rate on the absent keys.
Ratios are cuckoo / peer (below 1: the cuckoo filter is faster).

Usage: python -m tools.bench_cuckoo [--keys N] [--fp-rate P] [--per-item N] [--peer-keys N]
[--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter
from mmapbloom.kernels import native_module


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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="design capacity (default 1M)")
    ap.add_argument("--fp-rate", type=float, default=0.001)
    ap.add_argument("--per-item", type=int, default=200_000, help="keys of the per-item add / in loops")
    ap.add_argument("--peer-keys", type=int, default=50_000, help="keys for pyprobables (pure Python)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    backend = "native" if native_module() is not None else "python"
    print(f"backend: {backend}; {a.keys:,} keys at p = {a.fp_rate}; best of {a.rounds}", file=sys.stderr)

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
            return PyProbablesCuckoo.init_error_rate(a.fp_rate, capacity=bins, bucket_size=4, auto_expand=False)

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
            f"pyprobables kept {peer.elements_added:,} of {len(pk):,} keys (its add found the rest "
            "present) and answers the measured fp rate above for absent keys: its timings are of "
            "that behaviour"
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
    if a.json:
        print(json.dumps({"backend": backend, "keys": a.keys, "fp_rate": a.fp_rate, "results": results}, indent=2))
    return results


if __name__ == "__main__":
    main()
