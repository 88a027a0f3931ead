#!/usr/bin/env python3
"""The false-positive rate of blocked filters at their design point, measured against the
strategy's ``expected_fp_rate()`` and the requested p (issue 29, item 12).

For each design point (n, p) and each sizing (``BloomConfig.for_items``'s m, and an
``--old`` m given as ``n:p:m:k`` for comparison), builds ``--filters`` in-memory filters
of n distinct integer keys each (fresh keys per filter), queries ``--queries`` absent
integer keys per filter with ``contains_many`` and pools the hits. Reports, per row:

* measured: pooled hits / queries;
* expected: ``strategy.expected_fp_rate(n, m, k)``, the strategy's formula at the n
  distinct keys added (what the sizing promises); ``f.expected_fp_rate()`` (the same
  formula at the filter's ``items_added``, which skips the adds that were false positives)
  is shown too;
* observed: the mean of ``f.observed_fp_rate()`` over the filters (the rate implied by
  the bits actually set, the per-block rate for blocked strategies);
* z against expected and against p, with the standard error
  ``sqrt(q (1 - q) / Q + var_filters / R)``: the binomial error of Q pooled queries plus
  the spread of the filters' own rates (estimated from their observed rates), over R
  filters; and z against observed (binomial error only: given the bits the query hits are
  independent draws).

Usage::

    python tools/bench_blocked_fp.py [--n 1000000] [--p 0.01 0.001] [--filters 8]
        [--queries 8000000] [--strategies M3B2,M3M2] [--old 1000000:0.01:9895936:6 ...]

Runs on the native backend (the script refuses the pure one unless ``--allow-pure``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Optional

import numpy as np

from mmapbloom import BACKEND, BloomConfig, BloomFilter, get_strategy

CHUNK = 1 << 20
KEY_SPACE = 1 << 40  # filter r adds [r * KEY_SPACE, r * KEY_SPACE + n)
ABSENT_BASE = 1 << 62  # and queries [ABSENT_BASE + r * KEY_SPACE, ...)


def measure(config: BloomConfig, n: int, filters: int, queries: int) -> dict[str, Any]:
    """Pooled hits of ``queries`` absent keys over each of ``filters`` filters of n keys."""
    hits = 0
    observed: list[float] = []
    from_items = 0.0
    expected = config.strategy.expected_fp_rate(n, config.num_bits, config.num_hashes)
    for r in range(filters):
        f = BloomFilter(config)
        base = r * KEY_SPACE
        for start in range(0, n, CHUNK):
            f.update(np.arange(base + start, base + min(n, start + CHUNK), dtype=np.uint64))
        absent = ABSENT_BASE + base
        for start in range(0, queries, CHUNK):
            stop = min(queries, start + CHUNK)
            hits += int(f.contains_many(np.arange(absent + start, absent + stop, dtype=np.uint64)).sum())
        observed.append(f.observed_fp_rate())
        from_items = f.expected_fp_rate()
        f.close()
    total = filters * queries
    q = hits / total
    obs = sum(observed) / len(observed)
    spread = sum((x - obs) ** 2 for x in observed) / max(1, len(observed) - 1)
    se = math.sqrt(max(q, 1e-300) * (1 - q) / total + spread / filters)
    se_obs = math.sqrt(obs * (1 - obs) / total)
    return {
        "hits": hits,
        "queries": total,
        "measured": q,
        "expected": expected,
        "from_items": from_items,
        "observed": obs,
        "se": se,
        "se_obs": se_obs,
    }


def row(label: str, n: int, p: float, config: BloomConfig, res: dict[str, Any]) -> str:
    z_exp = (res["measured"] - res["expected"]) / res["se"]
    z_p = (res["measured"] - p) / res["se"]
    z_obs = (res["measured"] - res["observed"]) / res["se_obs"]
    return (
        f"{label:<10} {n:>10,} {p:>7g} {config.num_bits:>12,} {config.num_hashes:>3} "
        f"{res['queries']:>12,} {res['hits']:>10,} {res['measured']:>10.6f} {res['expected']:>10.6f} {res['from_items']:>10.6f} "
        f"{res['observed']:>10.6f} {z_exp:>+7.2f} {z_p:>+7.2f} {z_obs:>+7.2f}"
    )


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--p", type=float, nargs="+", default=[0.01, 0.001])
    ap.add_argument("--filters", type=int, default=8)
    ap.add_argument("--queries", type=int, default=8_000_000, help="absent keys queried per filter")
    ap.add_argument("--strategies", default="M3B2,M3M2")
    ap.add_argument("--old", nargs="*", default=[], help="n:p:m:k, an older sizing to measure too (blocked rows)")
    ap.add_argument("--allow-pure", action="store_true")
    args = ap.parse_args(argv)
    if BACKEND != "native" and not args.allow_pure:
        print(f"backend is {BACKEND}: build the extension (pip install -e .) or pass --allow-pure", file=sys.stderr)
        return 2
    old = {}
    for spec in args.old:
        n_s, p_s, m_s, k_s = spec.split(":")
        old[(int(n_s), float(p_s))] = (int(m_s), int(k_s))
    print(f"backend {BACKEND}; {args.filters} filters x {args.queries:,} absent queries per row")
    print(
        f"{'sizing':<10} {'n':>10} {'p':>7} {'m':>12} {'k':>3} {'queries':>12} {'hits':>10} "
        f"{'measured':>10} {'expected':>10} {'f.expected':>10} {'observed':>10} {'z(exp)':>7} {'z(p)':>7} {'z(obs)':>7}"
    )
    started = time.perf_counter()
    for name in args.strategies.split(","):
        strategy = get_strategy(name)
        for p in args.p:
            configs = [(f"{name}", BloomConfig.for_items(args.n, p, strategy=strategy))]
            if strategy.block_bits and (args.n, p) in old:
                m, k = old[(args.n, p)]
                configs.append((f"{name} old", BloomConfig(num_bits=m, num_hashes=k, strategy=strategy)))
            for label, config in configs:
                res = measure(config, args.n, args.filters, args.queries)
                print(row(label, args.n, p, config, res), flush=True)
    print(f"took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
