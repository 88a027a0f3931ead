#!/usr/bin/env python3
"""LSM-style key-value store that checks a Bloom filter before reading a segment from disk.

Writes go to an in-memory table (the memtable). When it holds ``memtable_keys`` keys it
is flushed as an immutable, sorted segment file ``seg-NNNNNN.dat`` with its own BLM1
filter file ``seg-NNNNNN.blm`` beside it. ``get(key)`` looks in the memtable, then in the
segments newest first; for each segment it first asks the segment's filter, and reads a
block of the segment from disk (one ``pread``) only when the filter says "might contain".
A filter never answers "no" for a key the segment holds, so no key is ever missed; it
answers "maybe" for a key the segment lacks with about the configured false-positive rate,
and only those lookups cost a wasted read.

The data is real and written by nobody here: every identifier (``NAME`` token) in the
installed Python standard library's source files, read with :mod:`tokenize`, is a key;
its value is where it was first seen (``path:line``). The store is loaded, every key is
looked up, then as many keys that are certainly not in the store (each stored key with a
``~`` appended, which no identifier contains). The run prints the segments, the filter
sizes, the disk reads made and avoided, and the measured false-positive rate against the
configured one; it exits 1 if any stored key is reported missing or with a wrong value, or
any absent key is found.

Run::

    python examples/lsm.py                       # the whole standard library
    python examples/lsm.py --max-files 50        # a slice
    python examples/lsm.py --memtable-keys 4096 --fp-rate 0.5% --dir /tmp/lsm --keep

Segment file layout (all integers little-endian)::

    records   key_len u32, value_len u32, key, value     sorted by key, grouped in blocks
    index     per block: first_key_len u32, first_key, offset u64, length u32
    footer    index_offset u64, block_count u32, key_count u32, magic b"LSG1"   (20 bytes)

The index is read once when a segment is opened and kept in memory; a lookup binary-
searches it and reads exactly one block (about ``BLOCK_BYTES``) from disk.
"""

from __future__ import annotations

import argparse
import bisect
import math
import dataclasses
import os
import re
import shutil
import struct
import sys
import sysconfig
import tempfile
import time
import tokenize
from typing import Iterator, Optional, Sequence, Union

try:
    from mmapbloom import BloomConfig, BloomFilter, cli
except ImportError:  # run from a source checkout without installing (cli.backend_note says so)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mmapbloom import BloomConfig, BloomFilter, cli
from tqdm import tqdm  # a dependency of mmapbloom; its format_sizeof formats byte counts

__all__ = ["LSMStore", "LookupStats", "Segment", "absent_key", "main", "run", "stdlib_identifiers"]

#: A block is closed once it holds at least this many bytes of records.
BLOCK_BYTES = 4096
FOOTER = struct.Struct("<QII4s")
FOOTER_MAGIC = b"LSG1"
RECORD = struct.Struct("<II")
INDEX_ENTRY_TAIL = struct.Struct("<QI")
_SEGMENT_NAME = re.compile(r"^seg-(\d{6})\.dat$")

Key = Union[bytes, str]


def human_bytes(n: float) -> str:
    """Bytes in decimal units through ``tqdm.format_sizeof``: ``1223`` -> ``'1.22kB'``."""
    return str(tqdm.format_sizeof(n, "B", 1000))


def fp_rate_arg(text: str) -> float:
    """argparse type for a false-positive rate: ``0.01`` or a percentage ``1%``.

    Raises:
        argparse.ArgumentTypeError: not a number, or not strictly between 0 and 1.
    """
    s = text.strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate: {text!r} (examples: 1%, 0.01)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1 (0% and 100%), got {text!r}")
    return value


def write_new_file(path: str, data: bytes) -> None:
    """Publish ``data`` at ``path`` only when complete: write and fsync a temporary file in
    the same directory, then ``os.link`` it to ``path`` (FileExistsError, and nothing
    changed, if ``path`` exists) and fsync the directory. A crash leaves no torn segment."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lsm-", suffix=".tmp")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.link(tmp, path)
    finally:
        os.close(fd)
        os.unlink(tmp)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _key_bytes(key: Key) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


@dataclasses.dataclass
class LookupStats:
    """Counters of the segment probes made by :meth:`LSMStore.get`.

    Attributes:
        lookups: ``get`` calls.
        memtable_hits: answered from the memtable.
        probes: segments considered (each asked its filter).
        reads_avoided: the filter said "certainly not here", so no disk read.
        disk_reads: blocks read from disk (the filter said "might be here").
        false_positive_reads: disk reads that did not find the key (the filter was wrong).
        bytes_read: bytes read from segment files by those reads.
    """

    lookups: int = 0
    memtable_hits: int = 0
    probes: int = 0
    reads_avoided: int = 0
    disk_reads: int = 0
    false_positive_reads: int = 0
    bytes_read: int = 0

    @property
    def measured_fp_rate(self) -> float:
        """False-positive reads over all probes of segments that lack the key. Every such
        probe is either avoided (the filter said no) or a false positive, since a filter
        never says no for a key its segment holds. NaN if there were none."""
        negatives = self.reads_avoided + self.false_positive_reads
        return self.false_positive_reads / negatives if negatives else float("nan")


class Segment:
    """An immutable sorted segment file and its Bloom filter, open for lookups.

    Holds two descriptors (the data file, and the filter's mapping) until :meth:`close`.
    Lookups are thread-safe (``pread`` and lock-free filter reads).
    """

    def __init__(self, data_path: str, filter_path: str):
        self.data_path = data_path
        self.filter_path = filter_path
        self.filter = BloomFilter.open(filter_path, readonly=True)
        try:
            self._fd = os.open(data_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except BaseException:
            self.filter.close()
            raise
        try:
            self.size_bytes, self.keys, self._first_keys, self._blocks = self._load_index()
        except BaseException:
            self.close()
            raise

    def _load_index(self) -> tuple[int, int, list[bytes], list[tuple[int, int]]]:
        size = os.fstat(self._fd).st_size
        if size < FOOTER.size:
            raise ValueError(f"{self.data_path}: segment too short ({size} bytes)")
        index_offset, count, keys, magic = FOOTER.unpack(os.pread(self._fd, FOOTER.size, size - FOOTER.size))
        if magic != FOOTER_MAGIC or index_offset > size - FOOTER.size:
            raise ValueError(f"{self.data_path}: not a segment file (bad footer)")
        raw = os.pread(self._fd, size - FOOTER.size - index_offset, index_offset)
        first_keys: list[bytes] = []
        blocks: list[tuple[int, int]] = []
        pos = 0
        for _ in range(count):
            (klen,) = struct.unpack_from("<I", raw, pos)
            pos += 4
            first_keys.append(raw[pos : pos + klen])
            pos += klen
            offset, length = INDEX_ENTRY_TAIL.unpack_from(raw, pos)
            pos += INDEX_ENTRY_TAIL.size
            blocks.append((offset, length))
        return size, keys, first_keys, blocks

    @staticmethod
    def write(data_path: str, filter_path: str, items: dict[bytes, bytes], fp_rate: float) -> None:
        """Write a segment of ``items`` (sorted here) and its filter sized for
        ``len(items)`` keys at ``fp_rate``. The filter is complete before the data file
        appears (both are published atomically), so a segment never lacks its filter."""
        keys = sorted(items)
        with BloomFilter.create(filter_path, BloomConfig.for_items(max(1, len(keys)), fp_rate)) as f:
            f.update(keys)
            f.flush()
        body = bytearray()
        index = bytearray()
        blocks = 0
        block_start = 0
        for i, key in enumerate(keys):
            if i == 0 or len(body) - block_start >= BLOCK_BYTES:
                if i:
                    index += INDEX_ENTRY_TAIL.pack(block_start, len(body) - block_start)
                block_start = len(body)
                blocks += 1
                index += struct.pack("<I", len(key)) + key
            value = items[key]
            body += RECORD.pack(len(key), len(value)) + key + value
        if keys:
            index += INDEX_ENTRY_TAIL.pack(block_start, len(body) - block_start)
        image = bytes(body) + bytes(index) + FOOTER.pack(len(body), blocks, len(keys), FOOTER_MAGIC)
        write_new_file(data_path, image)

    def might_contain(self, key: bytes) -> bool:
        """Ask the filter (no disk read): False means the key is certainly not here."""
        return key in self.filter

    def read(self, key: bytes, stats: Optional[LookupStats] = None) -> Optional[bytes]:
        """Read the one block that would hold ``key`` from disk and search it.

        Returns the value, or None if the segment does not hold the key.
        """
        i = bisect.bisect_right(self._first_keys, key) - 1
        if i < 0:
            offset, length = self._blocks[0]  # before the first key: read anyway, as a real store would
        else:
            offset, length = self._blocks[i]
        block = os.pread(self._fd, length, offset)
        if stats is not None:
            stats.disk_reads += 1
            stats.bytes_read += len(block)
        pos = 0
        while pos < len(block):
            klen, vlen = RECORD.unpack_from(block, pos)
            pos += RECORD.size
            k = block[pos : pos + klen]
            pos += klen
            if k == key:
                return block[pos : pos + vlen]
            if k > key:
                return None
            pos += vlen
        return None

    def close(self) -> None:
        """Close the data file and the filter (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.filter.close()


class LSMStore:
    """A small log-structured key-value store on real files, with a Bloom filter per segment.

    Args:
        directory: where segments live (created if missing); existing segments are opened.
        memtable_keys: flush the memtable to a new segment when it holds this many keys.
        fp_rate: false-positive rate each segment's filter is sized for.

    Not thread-safe for writers (one writer at a time); no write-ahead log, so keys still
    in the memtable are lost if the process dies before :meth:`flush` or :meth:`close`.
    """

    def __init__(self, directory: str, *, memtable_keys: int = 8192, fp_rate: float = 0.01):
        if memtable_keys < 1:
            raise ValueError(f"memtable_keys must be >= 1, got {memtable_keys}")
        self.directory = directory
        self.memtable_keys = memtable_keys
        self.fp_rate = fp_rate
        self.memtable: dict[bytes, bytes] = {}
        self.segments: list[Segment] = []
        self.stats = LookupStats()
        os.makedirs(directory, exist_ok=True)
        numbers = sorted(int(m.group(1)) for m in map(_SEGMENT_NAME.match, os.listdir(directory)) if m)
        for n in numbers:
            self.segments.append(Segment(self._path(n, "dat"), self._path(n, "blm")))
        self._next = (numbers[-1] + 1) if numbers else 1

    def _path(self, number: int, ext: str) -> str:
        return os.path.join(self.directory, f"seg-{number:06d}.{ext}")

    def put(self, key: Key, value: bytes) -> None:
        """Set ``key`` to ``value`` (the newest value wins); may flush a segment."""
        self.memtable[_key_bytes(key)] = bytes(value)
        if len(self.memtable) >= self.memtable_keys:
            self.flush()

    def flush(self) -> None:
        """Write the memtable as a new segment (no-op when it is empty)."""
        if not self.memtable:
            return
        n = self._next
        Segment.write(self._path(n, "dat"), self._path(n, "blm"), self.memtable, self.fp_rate)
        self.segments.append(Segment(self._path(n, "dat"), self._path(n, "blm")))
        self._next = n + 1
        self.memtable = {}

    def get(self, key: Key) -> Optional[bytes]:
        """The newest value of ``key``, or None. Reads a segment block from disk only for
        segments whose filter says the key might be there."""
        k = _key_bytes(key)
        st = self.stats
        st.lookups += 1
        value = self.memtable.get(k)
        if value is not None:
            st.memtable_hits += 1
            return value
        for seg in reversed(self.segments):
            st.probes += 1
            if not seg.might_contain(k):
                st.reads_avoided += 1
                continue
            value = seg.read(k, st)
            if value is not None:
                return value
            st.false_positive_reads += 1
        return None

    def close(self) -> None:
        """Flush the memtable and close every segment."""
        try:
            self.flush()
        finally:
            for seg in self.segments:
                seg.close()
            self.segments = []

    def __enter__(self) -> "LSMStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the data -----------------------------------------------------------------------------
@dataclasses.dataclass
class Corpus:
    """What :func:`stdlib_identifiers` read."""

    root: str
    files: int = 0
    bytes: int = 0
    skipped: int = 0


def stdlib_files(root: Optional[str] = None, max_files: Optional[int] = None) -> list[str]:
    """The ``.py`` files of the standard library (``site-packages`` excluded), sorted, at
    most ``max_files`` of them."""
    root = root or sysconfig.get_paths()["stdlib"]
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        found.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    found.sort()
    return found[:max_files] if max_files is not None else found


def stdlib_identifiers(corpus: Corpus, files: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Yield ``(identifier, "relpath:line")`` for the first occurrence of every NAME token
    in ``files``; counts files, bytes and files that do not tokenize in ``corpus``."""
    seen: set[str] = set()
    for path in files:
        rel = os.path.relpath(path, corpus.root)
        try:
            with open(path, "rb") as f:
                found = [
                    (tok.string, tok.start[0]) for tok in tokenize.tokenize(f.readline) if tok.type == tokenize.NAME
                ]
        except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, OSError):
            corpus.skipped += 1  # e.g. test data written in Python 2 or a bad encoding
            continue
        corpus.files += 1
        corpus.bytes += os.path.getsize(path)
        for name, line in found:
            if name not in seen:
                seen.add(name)
                yield name, f"{rel}:{line}"


def absent_key(key: bytes) -> bytes:
    """A key certainly not in the store: ``~`` never occurs in a Python identifier."""
    return key + b"~"


# -- the run ----------------------------------------------------------------------------------
def run(
    directory: str,
    *,
    max_files: Optional[int] = None,
    memtable_keys: int = 8192,
    fp_rate: float = 0.01,
    root: Optional[str] = None,
) -> dict[str, object]:
    """Load the identifiers into a store in ``directory``, look up every key and as many
    absent keys, and return the numbers (see :func:`report`). Raises nothing for lookup
    mistakes: they are counted in ``missing``, ``wrong_value`` and ``absent_found``."""
    corpus = Corpus(root or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(corpus.root, max_files)
    t0 = time.perf_counter()
    expected: dict[bytes, bytes] = {}
    with LSMStore(directory, memtable_keys=memtable_keys, fp_rate=fp_rate) as store:
        for name, where in stdlib_identifiers(corpus, files):
            key, value = name.encode("utf-8"), where.encode("utf-8")
            expected[key] = value
            store.put(key, value)
        store.flush()
        t_load = time.perf_counter() - t0

        t1 = time.perf_counter()
        store.stats = LookupStats()
        missing = wrong = 0
        for key, value in expected.items():
            got = store.get(key)
            if got is None:
                missing += 1
            elif got != value:
                wrong += 1
        present = store.stats
        store.stats = LookupStats()
        absent_found = 0
        for key in expected:
            if store.get(absent_key(key)) is not None:
                absent_found += 1
        absent = store.stats
        t_lookup = time.perf_counter() - t1

        segments = [
            {
                "file": os.path.basename(s.data_path),
                "keys": s.keys,
                "data_bytes": s.size_bytes,
                "filter_bytes": s.filter.size_bytes,
                "bits_per_key": s.filter.num_bits / max(1, s.keys),
                "num_hashes": s.filter.num_hashes,
                "expected_fp_rate": s.filter.expected_fp_rate(),
            }
            for s in store.segments
        ]
    return {
        "root": corpus.root,
        "files": corpus.files,
        "skipped_files": corpus.skipped,
        "source_bytes": corpus.bytes,
        "keys": len(expected),
        "memtable_keys": memtable_keys,
        "fp_rate": fp_rate,
        "segments": segments,
        "present": dataclasses.asdict(present),
        "absent": dataclasses.asdict(absent),
        "present_measured_fp_rate": present.measured_fp_rate,
        "absent_measured_fp_rate": absent.measured_fp_rate,
        "missing": missing,
        "wrong_value": wrong,
        "absent_found": absent_found,
        "load_seconds": t_load,
        "lookup_seconds": t_lookup,
    }


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.3%}"


def report(r: dict[str, object]) -> str:
    """The numbers of :func:`run` as text."""
    segs: list[dict[str, float]] = r["segments"]  # type: ignore[assignment]
    p: dict[str, int] = r["present"]  # type: ignore[assignment]
    a: dict[str, int] = r["absent"]  # type: ignore[assignment]
    keys = int(r["keys"])  # type: ignore[call-overload]
    out = [
        f"data: {r['files']:,} files of {r['root']} ({human_bytes(float(r['source_bytes']))}), "  # type: ignore[arg-type]
        f"{r['skipped_files']} skipped (do not tokenize); {keys:,} distinct identifiers as keys",
        f"store: {len(segs)} segment{'s' if len(segs) != 1 else ''} of up to {r['memtable_keys']:,} keys, each filter sized for its keys "
        f"at fp rate {r['fp_rate']:.4g}",
        "",
        f"{'segment':<16}{'keys':>8}{'data bytes':>12}{'filter bytes':>14}{'bits/key':>10}{'k':>4}{'expected fp':>13}",
    ]
    for s in segs:
        out.append(
            f"{s['file']:<16}{s['keys']:>8,}{s['data_bytes']:>12,}{s['filter_bytes']:>14,}"
            f"{s['bits_per_key']:>10.2f}{s['num_hashes']:>4}{s['expected_fp_rate']:>13.4g}"
        )
    total_filter = sum(int(s["filter_bytes"]) for s in segs)
    total_data = sum(int(s["data_bytes"]) for s in segs)
    out.append(f"{'total':<16}{keys:>8,}{total_data:>12,}{total_filter:>14,}{(8 * total_filter / max(1, keys)):>10.2f}")
    out.append("")
    for label, st, n in (("stored keys", p, keys), ("absent keys", a, keys)):
        without = st["probes"]
        out.append(
            f"lookups of {n:,} {label}: {st['probes']:,} segment probes; filters avoided {st['reads_avoided']:,} "
            f"disk reads, {st['disk_reads']:,} made ({st['disk_reads'] - st['false_positive_reads']:,} hits, "
            f"{st['false_positive_reads']:,} false positives; {human_bytes(st['bytes_read'])} read); "
            f"without filters: {without:,} reads"
        )
    fp_p = float(r["present_measured_fp_rate"])  # type: ignore[arg-type]
    fp_a = float(r["absent_measured_fp_rate"])  # type: ignore[arg-type]
    neg = p["reads_avoided"] + p["false_positive_reads"] + a["reads_avoided"] + a["false_positive_reads"]
    fps = p["false_positive_reads"] + a["false_positive_reads"]
    out.append(
        f"measured false-positive rate: {fps:,} / {neg:,} probes of segments lacking the key = "
        f"{_pct(fps / neg if neg else math.nan)} (stored-key lookups {_pct(fp_p)}, absent-key lookups {_pct(fp_a)}); "
        f"configured {_pct(float(r['fp_rate']))}"  # type: ignore[arg-type]
    )
    out.append(
        f"correctness: {r['missing']} stored keys reported missing, {r['wrong_value']} wrong values, "
        f"{r['absent_found']} absent keys found"
    )
    out.append(
        f"time: load and flush {float(r['load_seconds']):.2f} s, "  # type: ignore[arg-type]
        f"{2 * keys:,} lookups {float(r['lookup_seconds']):.2f} s"
    )  # type: ignore[arg-type]
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line; returns 0 if every stored key was found with its value and no absent
    key was found, 1 otherwise, 2 on bad usage."""
    parser = argparse.ArgumentParser(prog="lsm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-files", type=int, default=None, help="use only the first N files (sorted)")
    parser.add_argument("--memtable-keys", type=int, default=8192, help="keys per segment (default 8192)")
    parser.add_argument("--fp-rate", type=fp_rate_arg, default=0.01, help="each filter's rate (default 1%%)")
    parser.add_argument("--root", default=None, help="source tree to read (default: this Python's stdlib)")
    parser.add_argument("--dir", default=None, help="store directory (default: a temporary one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the store directory")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    print(cli.backend_note("lsm.py"), file=sys.stderr)  # which backend runs, and why
    directory = args.dir or tempfile.mkdtemp(prefix="mmapbloom-lsm-")
    try:
        r = run(
            directory, max_files=args.max_files, memtable_keys=args.memtable_keys, fp_rate=args.fp_rate, root=args.root
        )
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        import json

        print(json.dumps(r, indent=2))
    else:
        print(report(r))
    return 0 if r["missing"] == r["wrong_value"] == r["absent_found"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
