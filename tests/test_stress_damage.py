"""Stress: damaged files and byte strings, fed to every entry point.

For each kind of filter (BLM1 ``BloomFilter`` and BLC1 ``CountingBloomFilter``), more
than 10,000 generated inputs (every truncation of small filters' images, every header byte
set to several values, every single-bit flip, over-long images, huge m or k in tiny files,
other magics, bad counter widths and reserved bytes, random garbage, plausible headers over
random bodies) go to the kind's ``from_bytes`` (bytes, bytearray, memoryview), ``open``,
``open(readonly=True)`` and to ``verify_file``. Each must either be refused with a
documented error (an ``MmapBloomError`` subclass, or an ``OSError`` subclass for OS-level
problems) or open as a sound filter (``check()`` passes, ``might_contain`` and
``contains_many`` agree, statistics are possible, a read-write handle adds and finds its
items). Every entry point must give the same answer for the same input.

The wrong kind of filter: the real, sound images of the other kind (and every damaged
variant that keeps their magic) must be refused by this kind's class with a
``BadMagicError`` whose message names both kinds ("a counting Bloom filter, not a Bloom
filter"), while ``verify_file`` opens the real ones as the kind they are.

The bulk runs in two worker interpreters (``python -m tests.torture_support damage``) with
their address space limited to 512 MB above what they use at start (a large allocation
becomes a reported MemoryError), a 5-second alarm per input (a hang is reported) and a
parent watching the exit code (a SIGBUS or SIGSEGV is reported with the input that caused
it). Special paths (directory, empty file, symlink loop, dangling symlink, FIFO, devices,
a socket) go through the same worker.

CI runs 10,276 BLM1 inputs (3,276 systematic, 7,000 random) and 6,609 BLC1 inputs (5,609
systematic: its images are larger, so there are more; 1,000 random); ``--torture`` runs
100,000 random inputs per kind on top of the systematic ones (103,276 and 105,609).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import socket
import struct
import subprocess
import sys
from typing import Any

import pytest

from mmapbloom import BadMagicError, BloomConfig, MmapBloomError, verify_file
from tests.conftest import ROOT
from tests.torture_support import BLOOM, KINDS, Kind, blank_image, torture_enabled

pytestmark = pytest.mark.slow

HEADER = struct.Struct("<4s4sQII")
MEM_LIMIT = 512 * 2**20
WORKERS = 2


def header(m: int, k: int, items: int = 0, magic: bytes = b"BLM1", scheme: bytes = b"M3KM") -> bytes:
    return HEADER.pack(magic, scheme, m, k, items)


def generate_cases(kind: Kind, rng: random.Random, n_random: int) -> list[dict[str, Any]]:
    """Deterministic damaged inputs; each a dict with ``name`` and ``data`` (and, for the
    sound images of another kind, the outcomes they must have)."""
    cases: list[dict[str, Any]] = []

    def add(name: str, data: bytes | bytearray) -> None:
        cases.append({"name": name, "data": bytes(data)})

    def head(m: int, k: int, items: int = 0, **fields: Any) -> bytes:
        """This kind's header (fields overridable) with no body."""
        return blank_image(kind.magic, m, k, items, body=0, **fields)

    def body_bytes(m: int) -> int:
        return len(blank_image(kind.magic, m, 1)) - kind.header_size

    for base_name, image in kind.base_images():
        n = len(image)
        for length in range(n):  # every truncation
            add(f"{base_name}/truncated-{length}", image[:length])
        for extra in (b"\0", b"\0" * 7, b"\xff", b"\0" * 100, os.urandom(0) + bytes(range(256))):
            add(f"{base_name}/extended-{len(extra)}", image + extra)
        for off in range(kind.header_size):  # every header byte, to several values
            values = {
                image[off] ^ 0x01,
                image[off] ^ 0x80,
                image[off] ^ 0xFF,
                0x00,
                0xFF,
                0x7F,
                0x80,
                rng.randrange(256),
                rng.randrange(256),
            }
            for v in sorted(values - {image[off]}):
                data = bytearray(image)
                data[off] = v
                add(f"{base_name}/header[{off}]={v:#04x}", data)
        for bit in range(8 * n):  # every single-bit flip, header and body
            data = bytearray(image)
            data[bit >> 3] ^= 1 << (bit & 7)
            add(f"{base_name}/bitflip-{bit}", data)
        for off in range(kind.header_size, n):  # every body byte set to 0xff (padding!)
            data = bytearray(image)
            data[off] = 0xFF
            add(f"{base_name}/body[{off}]=0xff", data)

    # The wrong kind of filter: real, sound images of the other kinds. This kind's class
    # refuses them (BadMagicError naming both kinds, checked by the worker for every input
    # with their magic), verify_file opens them as what they are.
    for other in kind.others():
        for base_name, image in other.base_images():
            cases.append(
                {
                    "name": f"wrong-kind/{other.name}/{base_name}",
                    "data": image,
                    "expect": {**{e: "refused:BadMagicError" for e in ENTRY_POINTS}, "verify_file": "sound"},
                }
            )
            for length in (len(image) - 1, other.header_size, 8):
                add(f"wrong-kind/{other.name}/{base_name}/truncated-{length}", image[:length])
            flipped = bytearray(image)
            flipped[-1] ^= 0x80  # a padding bit, or a counter
            add(f"wrong-kind/{other.name}/{base_name}/last-byte-flipped", bytes(flipped))

    # Huge m or k in a tiny file (the length check must come before any allocation).
    for m in (2**64 - 1, 2**63, 2**63 + 1, 2**40, 2**32 + 1, 2**32, 2**31, 1000, 9, 8, 7, 1):
        for k in (1, 3, 255, 2**16, 2**31, 2**32 - 1):
            for body in (0, 1, 2, 8, 125):
                add(f"huge/m={m},k={k},body={body}", head(m, k) + b"\0" * body)
    for items in (0, 1, 2**31, 2**32 - 1):
        add(f"items={items}", head(20, 3, items) + b"\0" * body_bytes(20))

    # Other magics and schemes: another kind, a future version, case, zeros, unknown schemes.
    for magic in (b"BLC1", b"BLM1", b"BLM2", b"BLC2", b"blm1", b"BLM\0", b"\0\0\0\0", b"\x89PNG", b"PK\x03\x04"):
        for body in (3, 8, 0):
            add(f"magic={magic!r},body={body}", head(20, 3, magic=magic) + b"\0" * body)
    for scheme in (b"M3KN", b"m3km", b"TEST", b"\0\0\0\0", b"\xff\xff\xff\xff", b"M3K\0", b"    "):
        add(f"scheme={scheme!r}", head(20, 3, scheme=scheme) + b"\0" * body_bytes(20))
    if kind.header_size > 24:  # BLC1: counter widths and reserved bytes
        for width in (0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 32, 64, 128, 255):
            for m in (1, 9, 20):
                add(f"width={width},m={m}", head(m, 3, counter_bits=width) + b"\0" * ((m * width + 7) >> 3))
        for i in range(7):
            for v in (1, 0x80, 0xFF):
                reserved = bytearray(7)
                reserved[i] = v
                add(f"reserved[{i}]={v:#04x}", head(20, 3, reserved=bytes(reserved)) + b"\0" * body_bytes(20))
        for length in range(24, 32):  # the BLM1-sized prefix of a BLC1 header
            add(f"short-counting-header-{length}", (head(20, 3) + b"\0" * body_bytes(20))[:length])
    add("empty", b"")
    add("one byte", b"B")
    add("magic only", kind.magic)
    add("header only", head(20, 3))
    add("zeros-24", b"\0" * 24)
    add("zeros-32", b"\0" * 32)
    add("zeros-4096", b"\0" * 4096)
    add("ones-4096", b"\xff" * 4096)
    add("text", kind.magic + b" is not a text format\n" * 10)

    # Random garbage, and plausible headers over random bodies (often sound, or padding).
    for i in range(n_random):
        r = rng.random()
        if r < 0.3:
            raw = rng.randbytes(rng.randrange(0, 80))
        elif r < 0.5:
            raw = kind.magic + b"M3KM" + rng.randbytes(rng.randrange(0, 60))
        else:
            m = rng.choice([rng.randrange(1, 64), rng.randrange(1, 2000)])
            k = rng.choice([rng.randrange(1, 9), rng.randrange(1, 300)])
            width = rng.choice([4, 8, 4, 8, rng.randrange(256)])
            body = len(blank_image(kind.magic, m, k, counter_bits=width)) - kind.header_size
            if rng.random() < 0.1:
                body += rng.choice([-1, 1])
            raw = head(m, k, rng.getrandbits(32), counter_bits=width) + rng.randbytes(max(body, 0))
        add(f"random-{i}", raw)
    return cases


#: The entry points of the kind's class that the worker runs on every byte input.
ENTRY_POINTS = ("from_bytes", "from_bytearray", "from_memoryview", "open", "open_readonly")


def special_paths(tmp: Any) -> list[dict[str, Any]]:
    """Things at a path that are not a filter file."""
    (tmp / "dir").mkdir()
    (tmp / "empty.blm").write_bytes(b"")
    os.symlink("loop.blm", tmp / "loop.blm")
    os.symlink("loop-b.blm", tmp / "loop-a.blm")
    os.symlink("loop-a.blm", tmp / "loop-b.blm")
    os.symlink("missing.blm", tmp / "dangling.blm")
    os.mkfifo(tmp / "fifo.blm")
    (tmp / "file.blm").write_bytes(header(20, 3) + b"\0" * 3)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp / "sock.blm"))
    sock.close()
    paths = {
        "directory": tmp / "dir",
        "empty file": tmp / "empty.blm",
        "symlink to itself": tmp / "loop.blm",
        "symlink loop of two": tmp / "loop-a.blm",
        "dangling symlink": tmp / "dangling.blm",
        "missing": tmp / "missing.blm",
        "FIFO": tmp / "fifo.blm",
        "unix socket": tmp / "sock.blm",
        "/dev/null": "/dev/null",
        "/dev/zero": "/dev/zero",
        "/dev/urandom": "/dev/urandom",
        "file as a directory": tmp / "file.blm" / "x",
        "name too long": tmp / ("n" * 300),
        "empty path": "",
        "/proc/self/mem": "/proc/self/mem",
    }
    return [{"name": f"path: {name}", "path": str(p)} for name, p in paths.items()]


def run_workers(cases: list[dict[str, Any]], tmp: Any, kind: Kind = BLOOM) -> dict[str, Any]:
    """Run the cases in WORKERS interpreters; merge their summaries. Fails naming the
    input if an interpreter crashes or hangs."""
    chunks = [cases[i::WORKERS] for i in range(WORKERS)]
    procs = []
    for w, chunk in enumerate(chunks):
        wdir = tmp / f"w{w}"
        wdir.mkdir()
        (wdir / "cases.pickle").write_bytes(pickle.dumps(chunk))
        (wdir / "progress").write_bytes(struct.pack("<q", -1))
        cmd = [
            sys.executable,
            "-m",
            "tests.torture_support",
            "damage",
            str(wdir / "cases.pickle"),
            str(wdir / "results.json"),
            str(wdir / "progress"),
            str(wdir),
            str(MEM_LIMIT),
            kind.name,
        ]
        log = open(wdir / "log", "wb")  # a file, not a pipe nobody drains while waiting
        procs.append((subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), wdir, chunk))
        log.close()
    merged: dict[str, Any] = {"cases": 0, "counts": {}, "failures": [], "n_failures": 0}
    problems = []
    for proc, wdir, chunk in procs:
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out = (wdir / "log").read_bytes()
        index = struct.unpack("<q", (wdir / "progress").read_bytes())[0]
        if proc.returncode != 0:
            case = chunk[index] if 0 <= index < len(chunk) else None
            problems.append(
                f"worker exit code {proc.returncode} at input {index}: "
                f"{case and case['name']} {case and case.get('data', b'').hex()}\n"
                f"{out.decode(errors='replace')[-3000:]}"
            )
            continue
        result = json.loads((wdir / "results.json").read_text())
        merged["cases"] += result["cases"]
        merged["n_failures"] += result["n_failures"]
        merged["failures"] += result["failures"]
        merged.setdefault("slowest", []).extend(result["slowest"])
        for key, n in result["counts"].items():
            merged["counts"][key] = merged["counts"].get(key, 0) + n
    assert not problems, "\n".join(problems)
    return merged


def format_failures(result: dict[str, Any]) -> str:
    lines = [f"{result['n_failures']} failing inputs of {result['cases']}; first ones:"]
    for f in result["failures"][:15]:
        expected = f" expected {f['expected']}" if "expected" in f else ""
        lines.append(f"  {f['case']} data={f['data'][:120]} -> {f['outcomes']}{expected}")
    return "\n".join(lines)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_damaged_inputs(kind: Kind, tmp_path: Any, request: pytest.FixtureRequest, record_property: Any) -> None:
    rng = random.Random(6)
    n_random = 100_000 if torture_enabled(request.config) else RANDOM_INPUTS[kind.name]
    cases = generate_cases(kind, rng, n_random)
    assert len(cases) >= MIN_INPUTS[kind.name]
    result = run_workers(cases, tmp_path, kind)
    record_property("inputs", result["cases"])
    record_property("outcomes", result["counts"])
    record_property("slowest", sorted(result["slowest"], reverse=True)[:5])
    print(
        f"{result['cases']} inputs; outcomes {result['counts']}; slowest {sorted(result['slowest'], reverse=True)[:3]}"
    )
    assert result["cases"] == len(cases)
    assert result["n_failures"] == 0, format_failures(result)
    # The harness is not vacuous: both outcomes occur, and many kinds of refusal.
    counts = result["counts"]
    assert counts.get("sound", 0) > 1000
    refusals = {key for key in counts if key.startswith("refused:")}
    assert {
        "refused:BadMagicError",
        "refused:UnknownStrategyError",
        "refused:BadHeaderError",
        "refused:LengthMismatchError",
        "refused:PaddingError",
    } <= refusals, counts
    assert sum(c["name"].startswith("wrong-kind/") for c in cases) >= 20


#: Random inputs per kind in CI (--torture: 100,000 each). BLM1 gets 10,000+ inputs in
#: all; BLC1 runs every systematic input (its images are larger, so there are
#: more) and fewer random ones, to stay in the CI budget.
RANDOM_INPUTS = {"bloom": 7_000, "counting": 1_000}
MIN_INPUTS = {"bloom": 10_000, "counting": 6_000}


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
@pytest.mark.parametrize("readonly", [False, True], ids=["rw", "ro"])
def test_wrong_kind_names_both_kinds(kind: Kind, tmp_path: Any, readonly: bool) -> None:
    """In process, with the exact error: every sound image of another kind, as a file and as
    bytes, is refused with BadMagicError naming both kinds and carrying both magics;
    verify_file opens it as the kind it is."""
    for other in kind.others():
        for name, image in other.base_images():
            path = tmp_path / f"{other.name}-{name}"
            path.write_bytes(image)
            for call in (lambda: kind.cls.open(path, readonly=readonly), lambda: kind.cls.from_bytes(image)):
                with pytest.raises(BadMagicError, match=f"a {other.human}, not a {kind.human}") as info:
                    call()
                assert (info.value.expected, info.value.actual) == (kind.magic, other.magic)
            with verify_file(path) as f:
                assert isinstance(f, other.cls) and f.to_bytes() == image


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_special_paths(tmp_path: Any, kind: Kind) -> None:
    cases = special_paths(tmp_path)
    result = run_workers(cases, tmp_path, kind)
    assert result["n_failures"] == 0, format_failures(result)
    assert result["counts"].get("sound", 0) == 0, result["counts"]  # nothing here is a filter


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_truncation_of_a_real_file_is_refused(tmp_path: Any, kind: Kind) -> None:
    """In process, with the exact error: a file cut at any length is LengthMismatchError
    (or BadHeaderError inside the header), never mapped past its end."""
    from mmapbloom import BadHeaderError, LengthMismatchError

    path = tmp_path / "t.blm"
    with kind.cls.create(path, BloomConfig(num_bits=1000, num_hashes=3)) as f:
        f.update(["a", "b", "c"])
        image = f.to_bytes()
    for length in range(len(image)):
        path.write_bytes(image[:length])
        for call in (
            lambda: kind.cls.open(path),
            lambda: kind.cls.open(path, readonly=True),
            lambda: verify_file(path),
            lambda: kind.cls.from_bytes(image[:length]),
        ):
            with pytest.raises(BadHeaderError if length < kind.header_size else LengthMismatchError):
                call()


HUGE_K = [2**32 - 1, 2**31]


# Regression (found by this suite): a query allocated O(k) (contains_many: MemoryError for
# 32 GiB) or ran for minutes; queries now probe min(k, m) positions (see base._probes).
@pytest.mark.parametrize("k", HUGE_K)
def test_huge_k_in_tiny_file(tmp_path: Any, k: int) -> None:
    """A 25-byte file that says k = 2**32 - 1 must be refused (BadHeaderError) or be
    usable: each query answers within seconds and without a large allocation. Runs in a
    worker with an address-space limit and a per-input alarm."""
    assert run_queried(header(8, k) + b"\0") == "ok"


def run_queried(data: bytes) -> str:
    """One input, queried whatever its k, in a limited worker interpreter."""
    script = (
        "import resource, signal, sys\n"
        "from mmapbloom import BloomFilter, MmapBloomError\n"
        "vm = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (vm + {MEM_LIMIT}, vm + {MEM_LIMIT}))\n"
        "signal.alarm(10)\n"
        "data = bytes.fromhex(sys.argv[1])\n"
        "try:\n"
        "    f = BloomFilter.from_bytes(data)\n"
        "except (MmapBloomError, OSError):\n"
        "    print('ok'); sys.exit(0)\n"
        "try:\n"
        "    f.contains_many(['x']); f.might_contain('x'); f.add('x')\n"
        "except MemoryError as e:\n"
        "    print('MemoryError', e); sys.exit(0)\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, data.hex()], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if proc.returncode == -14:  # SIGALRM: the query did not finish in 10 s
        return "hang: a query ran for more than 10 s"
    return (
        (proc.stdout.strip() or proc.stderr[-500:])
        if proc.returncode == 0
        else f"exit {proc.returncode}: {proc.stderr[-500:]}"
    )


def test_documented_errors_only() -> None:
    """The accepted refusals are exactly the documented hierarchy (errors.py)."""
    import mmapbloom

    for name in mmapbloom.__all__:
        obj = getattr(mmapbloom, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, Warning):
            assert issubclass(obj, MmapBloomError)
