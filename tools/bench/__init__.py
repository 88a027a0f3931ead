"""Benchmark mmapbloom against its peers, all in one run on the same keys.

Run from the repository root::

    python -m tools.bench --help

The command for a full report (``BENCHMARKS.md`` and ``docs/benchmark.png``), after a
virtualenv with the ``bench`` extra, which lists the peers and matplotlib::

    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install -e '.[bench]' && \\
        /tmp/bench/bin/python -m tools.bench --keys 1000000 --big-keys 50000000 \\
        --profile --out BENCHMARKS.md --chart docs/benchmark.png

It takes about 15 to 25 minutes on 2 cores (less with ``--big-keys 0``) and needs about
15 GB of free memory for the 50 million keys (the big run is skipped, with a note, when
``MemAvailable`` is short). Run it on an otherwise idle machine: the report records the
load average at start and end. Tiny, as the smoke test (``tests/test_benchmark_smoke.py``)
runs it::

    python -m tools.bench --keys 2000 --big-keys 0 --union-mb 1 --open-mb 1 --rounds 1

This tool installs nothing. A peer that cannot be imported is reported as *missing*
(never as slow) and the run goes on; without matplotlib the chart is skipped with a
message. ``--skip`` leaves out parts
(``items,open,processes,union,locks,threads,counting,pure,big,profile,chart``),
``--libs`` picks libraries, ``--strategies M3KM,M3MX`` measures mmapbloom once per hash
strategy (names resolved by ``mmapbloom.get_strategy`` at run time; default: the library
default only), ``--backend-label`` names the build in the environment line,
``--profile`` adds a cProfile of each mmapbloom path, and ``--counting`` runs only the
comparison of ``BloomFilter`` with ``CountingBloomFilter`` (4-bit and 8-bit counters).

What is measured (ns per item, median of ``--rounds`` rounds, rounds interleaved
library by library so that a burst of load on the machine hits every library alike):

* bulk add (a fresh filter every round), bulk query of present keys, bulk query of
  absent keys: the library's batch API where it has one, else a list comprehension;
* per-item add (a fresh filter every round) and per-item query of present keys: a plain
  ``for`` loop calling the library's single-item method (``add``, ``in``);
* the false-positive rate on the absent keys, false negatives on the present keys
  (must be 0), the file or memory size;
* for filters that can be persisted: open (or load) an existing filter in a fresh
  process and answer one query, timed inside the child and as the child's wall time;
  likewise a ``--open-mb`` filter (1 GiB by default) for mmapbloom and the mmap peers
  against ``rbloom.Bloom.load`` of the same number of bits;
* 1, 2 and 4 processes adding disjoint slices of the keys to one file at once, with the
  batch API and with per-item adds: wall time, lost bits (bits of the sequentially built
  file that are missing; for mmapbloom through ``count_ones`` of the files and of their
  intersection) and false negatives;
* the write lock per item (``--lock-keys`` adds): ``f.add(key)`` on a file-backed filter
  (lock per call), the same inside ``with f.write_lock():``, and a bare
  ``fcntl.flock(fd, LOCK_EX)``/``LOCK_UN`` pair on a file, each alone and next to a Python
  thread spinning ``while not stop: x += 1`` in the same process; ns per op and ratios,
  with pybloomfiltermmap3's per-item add of the main table;
* two threads calling the batch query on one handle, each on its own half of the keys
  in calls of 100,000 keys, against one thread querying all (throughput ratio); for
  mmapbloom and the peers pybloomfiltermmap3 and abloom;
* ``CountingBloomFilter`` (4- and 8-bit counters) against ``BloomFilter``: per-item add,
  ``in`` and remove, batch ``update`` and ``contains_many`` on ``--counting-keys`` keys;
* mmapbloom's rows of the main run again in a child process with ``MMAPBLOOM_PURE=1``
  (same keys and rounds): native against pure Python, path by path;
* union (bitwise OR) of two ``--union-mb`` mmapbloom files, in GB/s of one filter's bits;
* ``--big-keys`` keys (50 million: the 57 MB blocklist of the design) with the bulk
  operations of the fastest libraries, when the memory allows.

The report gives times and ratios between results of the same run (against
pybloomfiltermmap3, against the fastest in-memory peer, and between strategies); it
applies no targets: the reader judges.

Keys are deterministic URL-like strings of 46 to 90 bytes (``--seed``); the absent keys
are disjoint from the present ones by construction (their id path segment differs).

The working tree's ``mmapbloom`` is benchmarked (the repository root is put first on
``sys.path``, and on ``PYTHONPATH`` for child processes), so the numbers follow the code
being changed even if the venv holds another install.

Modules: :mod:`.adapters` (one adapter per library), :mod:`.measure` (timing),
:mod:`.extras` (locks, threads, the pure-path child),
:mod:`.report` (tables and BENCHMARKS.md), :mod:`.chart` (the PNG), ``__main__`` (the
command line).

Exit status: 0; 1 when mmapbloom itself failed (an error, a false negative, a lost bit),
so that the smoke test catches a broken library as well as a broken tool; 2 for bad
arguments.
"""
