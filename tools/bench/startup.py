"""Start-up and per-call cost, in one run: a fresh process that opens a filter of
``--keys`` keys and asks for one key (mmapbloom against pybloomfiltermmap3 and
``python -c pass``), ``python -m mmapbloom check FILE --key K``, and ``f.add(s)`` /
``s in f`` / ``f.update(keys)`` with and without the bound method cached first.

Run from the repository root (valgrind on ``PATH`` for the instruction columns;
pybloomfiltermmap3 installed for its row, the ``bench`` extra)::

    python -m tools.bench.startup                          # 1M keys, p = 1%, 9 runs
    python -m tools.bench.startup --before /path/to/old/checkout   # adds its rows

Wall: each row is a fresh interpreter (``subprocess.run``, wall time from the call to its
return), median of ``--runs``; the rows run interleaved round by round, so a change in the
machine's load hits all alike. Ratios are to ``python -c pass`` and to pybloomfiltermmap3's
row of the same run. Instructions: the same commands once each under ``valgrind
--tool=callgrind`` (user space, all of the process: interpreter start-up included;
repeatable to about 0.1%).

Per call: one child under callgrind with ``--dump-before=getppid``; the child calls
``os.getppid()`` around each loop of ``--calls`` calls (inside one ``write_lock()``, so
the flock pair is out of the figure), so each loop's instructions are their own part.
``--before DIR``: a checkout with its compiled kernels built in place (or a ``pip install
--target DIR`` of it), the working directory of its rows (same Python, same files). The
package's bytecode is compiled first (``compileall``), as ``pip install`` does: a process
started with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` compiles every module's
source again, which would dominate the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Optional

if __package__ in (None, ""):  # run as a file path: make ``tools.bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    __package__ = "tools.bench"

from tools.bench.measure import ROOT, callgrind_parts, child_env, wall_seconds  # noqa: E402

__all__ = ["main"]

OPEN_QUERY = "from mmapbloom import BloomFilter\nf = BloomFilter.open({path!r})\nb = 'key-7' in f\nf.close()\n"
PEER_QUERY = "import pybloomfilter\nf = pybloomfilter.BloomFilter.open({path!r})\nb = 'key-7' in f\nf.close()\n"
HEAVY = ("numpy", "portalocker", "tqdm")

PER_CALL = """
import os, sys, json
from mmapbloom import BloomFilter, BloomConfig


def loops(f, keys, keys2, pairs, pairs2):  # locals: what a function's loop costs
    add, might_contain, update = f.add, f.might_contain, f.update
    os.getppid()
    for s in keys:  # each add loop and each update loop adds keys of its own, all new
        f.add(s)
    os.getppid()
    for s in keys2:
        add(s)
    os.getppid()
    for s in keys:
        s in f
    os.getppid()
    for s in keys:
        f.might_contain(s)
    os.getppid()
    for s in keys:
        might_contain(s)
    os.getppid()
    for p in pairs:
        f.update(p)
    os.getppid()
    for p in pairs2:
        update(p)
    os.getppid()


n = int(sys.argv[1])
f = BloomFilter.create(sys.argv[2], BloomConfig.for_items(8 * n, 0.01))
keys, keys2, keys3, keys4 = ([f'k{j}-{i}' for i in range(n)] for j in range(4))
pairs = [keys3[i : i + 2] for i in range(0, n, 2)]
pairs2 = [keys4[i : i + 2] for i in range(0, n, 2)]
rows = ['f.add(s)', 'add(s), cached', 's in f', 'f.might_contain(s)', 'might_contain(s), cached',
        'f.update(2 keys) per key', 'update(2 keys) per key, cached']
with f.write_lock():
    for _ in range(3):  # warm: the interpreter specialises each call site (the last run is measured)
        if _ < 2:
            warm = [f'w{_}-{i}' for i in range(64)]
            loops(f, warm, warm, [warm[i : i + 2] for i in range(0, 64, 2)], [warm[:2]] * 32)
        else:
            loops(f, keys, keys2, pairs, pairs2)
print(json.dumps(rows))
"""


def _build(path: str, peer_path: Optional[str], keys: int, fp_rate: float) -> None:
    """The filter files: mmapbloom's at ``path`` and pybloomfiltermmap3's at ``peer_path``,
    each sized for and holding ``keys`` keys."""
    code = (
        "import sys\nfrom mmapbloom import BloomFilter, BloomConfig\n"
        "n, p = int(sys.argv[1]), float(sys.argv[2])\n"
        "keys = ['key-%d' % i for i in range(n)]\n"
        "with BloomFilter.create(sys.argv[3], BloomConfig.for_items(n, p)) as f:\n    f.update(keys)\n"
        "if len(sys.argv) > 4:\n"
        "    import pybloomfilter\n"
        "    g = pybloomfilter.BloomFilter(n, p, sys.argv[4])\n    g.update(keys)\n    g.close()\n"
    )
    args = [sys.executable, "-c", code, str(keys), str(fp_rate), path] + ([peer_path] if peer_path else [])
    subprocess.run(args, check=True, cwd=ROOT, env=child_env(ROOT))


def _rows(path: str, peer_path: Optional[str], before: Optional[str]) -> list[tuple[str, list[str], str]]:
    """(label, argv, PYTHONPATH root) of each start-up row."""
    py = sys.executable
    rows = [
        ("python -c pass", [py, "-c", "pass"], ROOT),
        ("mmapbloom: open + one query", [py, "-c", OPEN_QUERY.format(path=path)], ROOT),
        ("python -m mmapbloom check F --key k", [py, "-m", "mmapbloom", "check", path, "--key", "key-7"], ROOT),
        ("python -m mmapbloom --version", [py, "-m", "mmapbloom", "--version"], ROOT),
    ]
    if peer_path:
        rows.append(("pybloomfiltermmap3: open + one query", [py, "-c", PEER_QUERY.format(path=peer_path)], ROOT))
    if before:
        rows.append(("before: mmapbloom open + one query", [py, "-c", OPEN_QUERY.format(path=path)], before))
        rows.append(
            ("before: python -m mmapbloom check", [py, "-m", "mmapbloom", "check", path, "--key", "key-7"], before)
        )
    return rows


def _callgrind_total(argv: list[str], root: str) -> Optional[int]:
    """User-space instructions of the whole process (callgrind's ``Collected``)."""
    with tempfile.TemporaryDirectory(prefix="mmapbloom-cg.") as work:
        out = os.path.join(work, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no", *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=child_env(root))
        if proc.returncode != 0:
            print(f"callgrind failed ({proc.returncode}): {proc.stderr[-1000:]}", file=sys.stderr)
            return None
        for line in proc.stderr.splitlines():
            if "Collected :" in line:
                return int(line.split("Collected :")[1].strip().replace(",", ""))
    return None


def _per_call(calls: int, root: str) -> dict[str, float]:
    """{row: instructions per call} from one callgrind child (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="mmapbloom-cg.") as work:
        out = os.path.join(work, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--dump-before=getppid", f"--callgrind-out-file={out}"]
        cmd += ["--dump-instr=no", sys.executable, "-c", PER_CALL, str(calls), os.path.join(work, "f.blm")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=child_env(root))
        if proc.returncode != 0:
            print(f"per-call child failed ({proc.returncode}): {proc.stderr[-1000:]}", file=sys.stderr)
            return {}
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        parts = callgrind_parts(out)
        # 8 getppid calls per loops() run, 3 runs: the measured run's loop i ends part 18 + i
        return {row: parts[18 + i] / calls for i, row in enumerate(rows)}


def _loaded(argv: list[str], root: str) -> str:
    """Which of HEAVY a row's command leaves in ``sys.modules`` (for the ``-c`` rows)."""
    if argv[1] != "-c":
        return ""
    probe = argv[2] + f"\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')\n"
    proc = subprocess.run([argv[0], "-c", probe], capture_output=True, text=True, cwd=root, env=child_env(root))
    return proc.stdout.strip() if proc.returncode == 0 else "?"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the filters (default 1,000,000)")
    parser.add_argument("--fp-rate", type=float, default=0.01, help="design fp rate (default 0.01)")
    parser.add_argument("--runs", type=int, default=9, help="wall runs per row; the median is shown (default 9)")
    parser.add_argument("--calls", type=int, default=20_000, help="calls per per-call loop (default 20,000)")
    parser.add_argument("--before", help="an older checkout (kernels built in place) for comparison rows")
    parser.add_argument("--skip-instructions", action="store_true", help="no valgrind columns")
    a = parser.parse_args(argv)
    try:
        import pybloomfilter  # noqa: F401, PLC0415
    except ImportError:
        have_peer = False
    else:
        have_peer = True
    grind = not a.skip_instructions and shutil.which("valgrind") is not None
    for root in [ROOT] + ([a.before] if a.before else []):
        # the bytecode an installed package has (pip compiles it): without it every fresh
        # process compiles the package's source again (PYTHONDONTWRITEBYTECODE=1, say)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(root, "mmapbloom")], check=False)
    work = tempfile.mkdtemp(prefix="mmapbloom-startup.")
    try:
        path = os.path.join(work, "f.blm")
        peer_path = os.path.join(work, "peer.bf") if have_peer else None
        _build(path, peer_path, a.keys, a.fp_rate)
        rows = _rows(path, peer_path, a.before)
        times: dict[str, list[float]] = {label: [] for label, _, _ in rows}
        for _ in range(a.runs):
            for label, cmd, root in rows:
                times[label].append(wall_seconds(cmd, child_env(root), root, check=True))
        instr = {label: _callgrind_total(cmd, root) for label, cmd, root in rows} if grind else {}
        loaded = {label: _loaded(cmd, root) for label, cmd, root in rows}
        per_call = _per_call(a.calls, ROOT) if grind else {}
        per_call_before = _per_call(a.calls, a.before) if grind and a.before else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = {label: statistics.median(t) for label, t in times.items()}
    base, peer = med["python -c pass"], med.get("pybloomfiltermmap3: open + one query")
    ibase, ipeer = instr.get("python -c pass"), instr.get("pybloomfiltermmap3: open + one query")
    load = os.getloadavg()
    print(
        f"Python {sys.version.split()[0]}; {a.keys:,} keys, p = {a.fp_rate}; wall: median of {a.runs} "
        f"interleaved runs; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print()
    print("| command | wall ms | x pass | x pybloomfiltermmap3 | M instructions | extra M over pass | loads |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, _, _ in rows:
        m, n = med[label], instr.get(label)
        cells = [f"{m * 1e3:.1f}", f"{m / base:.2f}", f"{m / peer:.2f}" if peer else "-"]
        cells += [f"{n / 1e6:.1f}", f"{(n - ibase) / 1e6:.1f}"] if n is not None and ibase is not None else ["-", "-"]
        print(f"| {label} | " + " | ".join(cells) + f" | {loaded[label] or '-'} |")
    if ipeer is not None and ibase is not None:
        mine = instr.get("mmapbloom: open + one query")
        if mine is not None:
            print(
                f"\nopen + one query over python -c pass: mmapbloom {(mine - ibase) / 1e6:.1f} M instructions, "
                f"pybloomfiltermmap3 {(ipeer - ibase) / 1e6:.1f} M"
            )
    if per_call:
        print()
        print(f"per call, instructions (callgrind, {a.calls:,} calls per loop, inside write_lock())")
        print()
        print("| call | instructions | before |" if per_call_before else "| call | instructions |")
        print("|---|---:|---:|" if per_call_before else "|---|---:|")
        for row, v in per_call.items():
            b = per_call_before.get(row)
            print(f"| {row} | {v:.0f} | {b:.0f} |" if per_call_before and b is not None else f"| {row} | {v:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
