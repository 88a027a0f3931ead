"""Support for the stress suite: filter kinds, exact reference models of the
BLM1 and BLC1 images, forked children with deadlines, trial counts, and the damaged-input
worker.

The suite is parametrised over *filter kinds* (:data:`KINDS`): the plain
:class:`~mmapbloom.BloomFilter` (BLM1, exact model :class:`BloomModel`) and the
:class:`~mmapbloom.CountingBloomFilter` (BLC1, exact multiset model :class:`CountingModel`).
Both models are written from docs/FORMAT.md alone, not from the library's code.

Run as a script, this module is the damaged-input worker (see :func:`damage_worker_main`):
``python -m tests.torture_support damage CASES RESULTS PROGRESS WORKDIR MEM_LIMIT [KIND]``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pickle
import random
import selectors
import signal
import struct
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Iterable, Optional, Sequence

import mmh3

import mmapbloom
from mmapbloom import M3KM, BadMagicError, BloomConfig, BloomFilter, CountingBloomFilter, MmapBloomError

# -- trial counts ------------------------------------------------------------------------


def torture_enabled(config: Any = None) -> bool:
    """True under ``--torture`` or ``MMAPBLOOM_TORTURE=1`` (see tests/conftest.py)."""
    if os.environ.get("MMAPBLOOM_TORTURE"):
        return True
    return bool(config is not None and config.getoption("--torture"))


def trials(config: Any, default: int, torture: int) -> int:
    """How many trials a slow test runs: ``default`` in CI, ``torture`` under --torture."""
    return torture if torture_enabled(config) else default


# -- the exact reference model -----------------------------------------------------------

MAGIC = b"BLM1"
HEADER = struct.Struct("<4s4sQII")
MAX_ITEMS = 2**32 - 1
_MASK64 = (1 << 64) - 1


def ref_positions(key: bytes, k: int, m: int) -> list[int]:
    """The M3KM positions, written from docs/FORMAT.md alone (not the library's code)."""
    h = mmh3.hash128(key, seed=0, x64arch=True, signed=False)
    h1, h2 = h & _MASK64, h >> 64
    p0 = h1 % m
    step = 1 + h2 % (m - 1) if m > 1 else 0
    return [(p0 + i * step) % m for i in range(k)]


def key_bytes(item: Any) -> bytes:
    """How an item is hashed (docs/FORMAT.md): str as UTF-8, bytes-likes as raw bytes."""
    return item.encode("utf-8") if isinstance(item, str) else bytes(item)


class BloomModel:
    """An exact model of one BLM1 image: the set bits, the items-added field, and the exact
    set of items whose presence is promised (every add that returned, minus what an
    intersection dropped). ``path`` is set for a file shared by several handles."""

    kind_magic = MAGIC

    def __init__(self, m: int, k: int, *, items: int = 0, path: Optional[str] = None):
        self.m, self.k = m, k
        self.bits: set[int] = set()
        self.items = items
        self.added: set[bytes] = set()
        self.path = path

    @property
    def options(self) -> dict[str, Any]:
        """Keyword options the constructors take for this image (none for BLM1)."""
        return {}

    def compatible(self, other: Any) -> bool:
        return isinstance(other, BloomModel) and (self.m, self.k) == (other.m, other.k)

    def promised(self) -> list[bytes]:
        """The items that must be found (no false negative), sorted."""
        return sorted(self.added)

    def add(self, item: Any) -> bool:
        key = key_bytes(item)
        pos = ref_positions(key, self.k, self.m)
        new = any(p not in self.bits for p in pos)
        self.bits.update(pos)
        if new:
            self.items = min(self.items + 1, MAX_ITEMS)
        self.added.add(key)
        return new

    def might_contain(self, item: Any) -> bool:
        return all(p in self.bits for p in ref_positions(key_bytes(item), self.k, self.m))

    def union(self, other: "BloomModel") -> None:
        if other is self:
            return  # x | x == x: the library changes nothing (README)
        self.bits |= other.bits
        self.items = min(self.items + other.items, MAX_ITEMS)
        self.added |= other.added

    def intersection(self, other: "BloomModel") -> None:
        if other is self:
            return
        self.bits &= other.bits
        self.items = min(self.items, other.items)
        self.added &= other.added

    def copy(self) -> "BloomModel":
        twin = BloomModel(self.m, self.k, items=self.items)
        twin.bits = set(self.bits)
        twin.added = set(self.added)
        return twin

    def image(self) -> bytes:
        body = bytearray((self.m + 7) >> 3)
        for p in self.bits:
            body[p >> 3] |= 1 << (p & 7)
        return HEADER.pack(MAGIC, b"M3KM", self.m, self.k, self.items) + bytes(body)


def bloom_base_images() -> list[tuple[str, bytes]]:
    """Small sound BLM1 images that the damage test truncates, flips and extends."""
    out = []
    shapes = [
        (20, 3, ["a", "b"]),
        (8, 1, []),
        (1, 1, ["x"]),
        (61, 4, ["p", "q", "r"]),
        (64, 2, [f"f{i}" for i in range(200)]),
        (200, 8, ["u", "v", "w", "z"]),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # m=64 with 200 items is over capacity on purpose
        for m, k, items in shapes:
            f = BloomFilter(BloomConfig(num_bits=m, num_hashes=k, strategy=M3KM()))
            f.update(items)
            out.append((f"m{m}k{k}", f.to_bytes()))
    return out


COUNTING_MAGIC = b"BLC1"
#: BLC1 bytes 24..31: counter width (u8) and 7 reserved zero bytes.
COUNTING_EXT = struct.Struct("<B7s")


class CountingModel:
    """An exact model of one BLC1 image: every counter, the items field, and the exact
    multiset of items added and not yet removed (their multiplicities).

    ``add`` increments the item's *distinct* cells, saturating at ``2**width - 1``; it is
    new when some counter was 0, and then items goes up by one (saturating). ``remove``
    raises KeyError when some counter is 0 (nothing changes); otherwise it decrements every
    unsaturated counter, and items goes down by one (not below 0, and never once saturated)
    when some counter returned to 0. Only items of the multiset are ever removed here
    (removing a false positive voids the no-false-negative promise, README)."""

    kind_magic = COUNTING_MAGIC

    def __init__(self, m: int, k: int, *, counter_bits: int = 4, items: int = 0, path: Optional[str] = None):
        self.m, self.k, self.width = m, k, counter_bits
        self.top = (1 << counter_bits) - 1
        self.cells = [0] * m
        self.items = items
        self.added: collections.Counter[bytes] = collections.Counter()
        self.path = path

    @property
    def options(self) -> dict[str, Any]:
        return {"counter_bits": self.width}

    def compatible(self, other: Any) -> bool:
        return isinstance(other, CountingModel) and (self.m, self.k, self.width) == (other.m, other.k, other.width)

    def cells_of(self, item: Any) -> list[int]:
        return sorted(set(ref_positions(key_bytes(item), self.k, self.m)))

    def add(self, item: Any) -> bool:
        cells = self.cells_of(item)
        new = any(self.cells[c] == 0 for c in cells)
        for c in cells:
            if self.cells[c] < self.top:
                self.cells[c] += 1
        if new:
            self.items = min(self.items + 1, MAX_ITEMS)
        self.added[key_bytes(item)] += 1
        return new

    def remove(self, item: Any) -> None:
        key = key_bytes(item)
        assert self.added[key] > 0 or self.count(item) == 0, "the model never removes a false positive"
        cells = self.cells_of(item)
        if any(self.cells[c] == 0 for c in cells):
            raise KeyError(item)
        emptied = False
        for c in cells:
            v = self.cells[c]
            if v < self.top:
                self.cells[c] = v - 1
                emptied |= v == 1
        if emptied and self.items < MAX_ITEMS:
            self.items = max(self.items - 1, 0)
        self.added[key] -= 1
        if not self.added[key]:
            del self.added[key]

    def multiplicity(self, item: Any) -> int:
        return self.added.get(key_bytes(item), 0)

    def count(self, item: Any) -> int:
        return min(self.cells[c] for c in self.cells_of(item))

    def might_contain(self, item: Any) -> bool:
        return self.count(item) > 0

    def promised(self) -> list[bytes]:
        return sorted(key for key, n in self.added.items() if n > 0)

    def saturated(self) -> int:
        return sum(v == self.top for v in self.cells)

    def union(self, other: "CountingModel") -> None:
        """Counter-wise saturating sum; with itself every counter doubles (a multiset sum)."""
        theirs, their_added, their_items = list(other.cells), collections.Counter(other.added), other.items
        self.cells = [min(a + b, self.top) for a, b in zip(self.cells, theirs, strict=True)]
        self.items = min(self.items + their_items, MAX_ITEMS)
        self.added.update(their_added)

    def copy(self) -> "CountingModel":
        twin = CountingModel(self.m, self.k, counter_bits=self.width, items=self.items)
        twin.cells = list(self.cells)
        twin.added = collections.Counter(self.added)
        return twin

    def to_bloom(self) -> BloomModel:
        """The BLM1 image with bit i set where counter i is non-zero, the same items field."""
        out = BloomModel(self.m, self.k, items=self.items)
        out.bits = {i for i, v in enumerate(self.cells) if v}
        out.added = set(self.promised())
        return out

    def image(self) -> bytes:
        head = HEADER.pack(COUNTING_MAGIC, b"M3KM", self.m, self.k, self.items) + COUNTING_EXT.pack(
            self.width, bytes(7)
        )
        if self.width == 8:
            return head + bytes(self.cells)
        body = bytearray((self.m * 4 + 7) >> 3)
        for i, v in enumerate(self.cells):
            body[i >> 1] |= v << ((i & 1) << 2)
        return head + bytes(body)


def counting_base_images() -> list[tuple[str, bytes]]:
    """Small sound BLC1 images (both widths, odd m, saturated counters, removals) that the
    damage test truncates, flips and extends."""
    out = []
    # (m, k, width, adds, removes)
    shapes = [
        (9, 3, 4, ["x"] * 20, []),
        (8, 1, 4, [], []),
        (1, 1, 8, ["x", "x"], ["x"]),
        (61, 4, 4, ["p", "q", "r", "p"], ["q"]),
        (40, 2, 8, [f"f{i}" for i in range(200)], [f"f{i}" for i in range(50)]),
        (33, 8, 4, ["u", "v", "w", "z"] * 5, ["u"]),
        (100, 3, 4, [f"g{i}" for i in range(60)], [f"g{i}" for i in range(20)]),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # over capacity and saturated on purpose
        for m, k, width, adds, removes in shapes:
            f = CountingBloomFilter(BloomConfig(num_bits=m, num_hashes=k, strategy=M3KM()), counter_bits=width)
            f.update(adds)
            for x in removes:
                f.remove(x)
            out.append((f"m{m}k{k}w{width}", f.to_bytes()))
    return out


def blank_image(
    kind_magic: bytes,
    m: int,
    k: int,
    items: int = 0,
    *,
    magic: Optional[bytes] = None,
    scheme: bytes = b"M3KM",
    counter_bits: int = 4,
    reserved: bytes = bytes(7),
    body: Optional[int] = None,
) -> bytes:
    """A header of the kind with ``kind_magic`` (its fields overridable, so they can be
    wrong) followed by ``body`` zero bytes (default: the right body size)."""
    head = HEADER.pack(magic or kind_magic, scheme, m, k, items)
    if kind_magic == COUNTING_MAGIC:
        head += COUNTING_EXT.pack(counter_bits, reserved)
        size = (m * counter_bits + 7) >> 3
    else:
        size = (m + 7) >> 3
    return head + b"\0" * (size if body is None else body)


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of filter under torture: its class, its exact reference model, the sound
    images the damage test starts from, its magic and header size, the option sets its
    constructors take (``counter_bits``) and its human name (docs/FORMAT.md)."""

    name: str
    cls: type[Any]
    model: type[Any]
    base_images: Callable[[], list[tuple[str, bytes]]]
    header_size: int = 24
    magic: bytes = MAGIC
    option_sets: tuple[dict[str, Any], ...] = ({},)
    human: str = "Bloom filter"

    def __repr__(self) -> str:
        return self.name

    def others(self) -> list["Kind"]:
        """The other kinds: their images are "the wrong kind of filter" for this one."""
        return [k for k in KINDS if k is not self]


BLOOM = Kind("bloom", BloomFilter, BloomModel, bloom_base_images)
COUNTING = Kind(
    "counting",
    CountingBloomFilter,
    CountingModel,
    counting_base_images,
    header_size=32,
    magic=COUNTING_MAGIC,
    option_sets=({"counter_bits": 4}, {"counter_bits": 8}),
    human="counting Bloom filter",
)

#: The kinds the suite covers.
KINDS: list[Kind] = [BLOOM, COUNTING]
KINDS_BY_NAME = {k.name: k for k in KINDS}

#: What any public call may raise on purpose (errors.py): the package's errors, or OSError.
DOCUMENTED = (MmapBloomError, OSError)


# -- forked children with deadlines ----------------------------------------------------------


class ChildFailed(AssertionError):
    pass


class Forked:
    """A child made with ``os.fork()`` running ``fn(*args)``; its return value travels back
    pickled through a pipe. The child never returns into pytest: it always ``os._exit``s."""

    def __init__(
        self, fn: Callable[..., Any], *args: Any, gate: Optional[int] = None, close_in_child: Sequence[int] = ()
    ):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                os.close(r)
                for fd in close_in_child:
                    os.close(fd)
                if gate is not None:
                    os.read(gate, 1)  # returns b"" when the parent closes the write end
                payload = ("ok", fn(*args))
            except BaseException as exc:
                payload = ("error", f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}\n{traceback.format_exc()}")
                code = 1
            try:
                data = pickle.dumps(payload)
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view) :]
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self.fd = r
        self.data = bytearray()
        self.status: Optional[int] = None

    @property
    def exitcode(self) -> Optional[int]:
        return None if self.status is None else os.waitstatus_to_exitcode(self.status)

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover
                pass

    def result(self) -> Any:
        """The child's return value; raises ChildFailed if it raised or died."""
        assert self.status is not None, "join first"
        if not self.data:
            raise ChildFailed(f"child {self.pid} died with exit code {self.exitcode} and sent nothing")
        state, value = pickle.loads(bytes(self.data))
        if state != "ok" or self.exitcode != 0:
            raise ChildFailed(f"child {self.pid} (exit code {self.exitcode}) failed: {value}")
        return value


def join_all(children: Iterable[Forked], timeout: float) -> None:
    """Drain every child's pipe and reap it; past ``timeout`` seconds kill them all and fail
    (a deadlock or a hang)."""
    children = list(children)
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    for c in children:
        sel.register(c.fd, selectors.EVENT_READ, c)
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                for c in children:
                    c.kill()
                for c in children:
                    _, c.status = os.waitpid(c.pid, 0)
                raise ChildFailed(f"children still running after {timeout} s: deadlock or hang")
            for key, _ in sel.select(left):
                child = key.data
                chunk = os.read(child.fd, 65536)
                if chunk:
                    child.data += chunk
                else:
                    sel.unregister(child.fd)
                    os.close(child.fd)
    finally:
        sel.close()
    for c in children:
        while c.status is None:
            left = deadline - time.monotonic()
            pid, status = os.waitpid(c.pid, os.WNOHANG)
            if pid:
                c.status = status
            elif left <= 0:
                c.kill()
            else:
                time.sleep(0.005)


def run_forked(fn: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
    """Run ``fn(*args)`` in one forked child and return its result."""
    child = Forked(fn, *args)
    join_all([child], timeout)
    return child.result()


class Gate:
    """A start gate for forked children: they block in ``os.read`` until :meth:`open`
    closes the write end, so all of them start at once (a cheap process barrier)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def fork(self, fn: Callable[..., Any], *args: Any) -> Forked:
        return Forked(fn, *args, gate=self.r, close_in_child=(self.w,))

    def open(self) -> None:
        os.close(self.w)
        os.close(self.r)


# -- the damaged-input worker ----------------------------------------------------------------

#: Opened filters whose k exceeds this would not be queried by the bulk damage run. Every
#: k is queried: since the fix for test_stress_damage.test_huge_k_in_tiny_file a query
#: probes min(k, m) positions, so a tiny file with a huge k is cheap.
QUERY_K_LIMIT = 2**32


#: Seconds one input may take (all entry points) before it counts as a hang. Generous, so
#: that a loaded CI machine does not make it flaky; an input normally takes about 1 ms.
CASE_TIMEOUT = 30.0


class _Hang(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _outcome(call: Callable[[], Any], k_limit: int, kind: Optional[Kind] = None) -> str:
    """Run one entry point on one input; return ``refused:<Error>``, ``sound``,
    ``sound-unqueried`` or ``FAIL:<what>``. With ``kind`` (the class asked for), an image
    of another kind must be refused with a BadMagicError naming both kinds."""
    try:
        f = call()
    except _Hang:
        raise
    except DOCUMENTED as exc:
        if kind is not None and isinstance(exc, BadMagicError):
            theirs = next((o for o in kind.others() if exc.actual == o.magic), None)
            if theirs is not None and f"a {theirs.human}, not a {kind.human}" not in str(exc):
                return f"FAIL:BadMagicError does not name both kinds: {exc}"[:300]
        return f"refused:{type(exc).__name__}"
    except BaseException as exc:
        return f"FAIL:{type(exc).__name__}: {exc}"[:300]
    try:
        try:
            f.check()
            if f.num_hashes > k_limit:
                return "sound-unqueried"
            probes = ["probe", b"\x00", "a", "b", "x"]
            single = [f.might_contain(x) for x in probes]
            batch = f.contains_many(probes).tolist()
            if single != batch or not all(isinstance(x, bool) for x in single):
                return f"FAIL:might_contain {single} != contains_many {batch}"
            n = f.items_added
            if not 0 <= n <= MAX_ITEMS or not 0 <= f.count_ones() <= f.num_bits:
                return "FAIL:impossible statistics"
            if not f.readonly:
                f.add("added-by-torture")
                f.update(["u1", "u2"])
                if not f.contains_many(["added-by-torture", "u1", "u2"]).all():
                    return "FAIL:false negative after add"
                f.check()
            return "sound"
        finally:
            f.close()
    except _Hang:
        raise
    except BaseException as exc:
        return f"FAIL:opened but unsound: {type(exc).__name__}: {exc}"[:300]


def _write_new(path: str, data: bytes) -> None:
    # A new file each time: rewriting one with O_TRUNC makes ext4 flush it at close
    # (auto_da_alloc), about 40 times slower.
    with open(path, "xb") as fh:
        fh.write(data)


def run_case(case: dict[str, Any], workdir: str, k_limit: int = QUERY_K_LIMIT, kind: Kind = BLOOM) -> dict[str, str]:
    """Feed one damaged input to every entry point of ``kind``'s class (and to
    ``verify_file``, which takes either kind). ``case`` has ``name`` and either ``data``
    (bytes, also written to files) or ``path`` (a prepared special path)."""
    cls = kind.cls
    out: dict[str, str] = {}
    if "data" not in case:
        path = rw_path = case["path"]
    else:
        data: bytes = case["data"]
        out["from_bytes"] = _outcome(lambda: cls.from_bytes(data), k_limit, kind)
        out["from_bytearray"] = _outcome(lambda: cls.from_bytes(bytearray(data)), k_limit, kind)
        out["from_memoryview"] = _outcome(lambda: cls.from_bytes(memoryview(data)), k_limit, kind)
        path = os.path.join(workdir, "case.blm")
        rw_path = os.path.join(workdir, "case-rw.blm")  # the read-write open adds items
        _write_new(path, data)
        _write_new(rw_path, data)
    try:
        out["open"] = _outcome(lambda: cls.open(rw_path), k_limit, kind)
        out["open_readonly"] = _outcome(lambda: cls.open(path, readonly=True), k_limit, kind)
        out["verify_file"] = _outcome(lambda: mmapbloom.verify_file(path), k_limit)
    finally:
        if "data" in case:
            os.unlink(path)
            os.unlink(rw_path)
    return out


def damage_worker_main(argv: list[str]) -> int:
    """Process the pickled cases; write a JSON summary. The current case index is kept in
    PROGRESS (8 bytes) so that the parent can name the input that crashed the interpreter."""
    import resource

    cases_file, results_file, progress_file, workdir, mem_limit = argv[:5]
    kind = KINDS_BY_NAME[argv[5] if len(argv) > 5 else "bloom"]
    other_magics = {o.magic for o in kind.others()}
    with open(cases_file, "rb") as fh:
        cases = pickle.load(fh)
    # Bound the address space: an allocation proportional to a damaged header's m or k
    # then fails with MemoryError (reported) instead of swapping the machine.
    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    limit = vm + int(mem_limit)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    warnings.simplefilter("ignore")  # damaged images are often "over capacity"
    progress = os.open(progress_file, os.O_WRONLY)
    counts: dict[str, int] = {}
    failures: list[dict[str, Any]] = []
    slowest: list[tuple[float, str]] = []
    for i, case in enumerate(cases):
        os.pwrite(progress, struct.pack("<q", i), 0)
        signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT)
        started = time.perf_counter()
        try:
            outcomes = run_case(case, workdir, kind=kind)
        except _Hang:
            outcomes = {"any": f"FAIL:hang (more than {CASE_TIMEOUT} s)"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = sorted(slowest + [(time.perf_counter() - started, case["name"])], reverse=True)[:5]
        for outcome in outcomes.values():
            bucket = outcome if not outcome.startswith("FAIL") else "FAIL"
            counts[bucket] = counts.get(bucket, 0) + 1
        if any(o.startswith("FAIL") for o in outcomes.values()):
            failures.append({"case": case["name"], "data": case.get("data", b"").hex(), "outcomes": outcomes})
        # A case may pin the outcome of some entry points (a sound image of the wrong kind:
        # BadMagicError from this kind's class, "sound" from verify_file).
        wrong = {e: o for e, o in case.get("expect", {}).items() if outcomes.get(e) != o}
        if wrong:
            failures.append(
                {
                    "case": case["name"],
                    "data": case.get("data", b"").hex(),
                    "outcomes": outcomes,
                    "expected": case["expect"],
                }
            )
        # Every entry point applies the same checks, so they must agree (a file adds only
        # the "not a regular file" refusals, which byte inputs cannot have).
        # verify_file also opens the other kinds (a BLC1 image as a counting filter, a BLM1
        # image as a Bloom filter), so it is left out of the comparison for their magics.
        compared = {
            e: o for e, o in outcomes.items() if not (e == "verify_file" and case.get("data", b"")[:4] in other_magics)
        }
        seen = {o.split(":")[1] if o.startswith("refused") else o for o in compared.values()}
        if len(seen) > 1 and not any(o.startswith("FAIL") for o in outcomes.values()):
            failures.append(
                {"case": case["name"], "data": case.get("data", b"").hex(), "outcomes": outcomes, "disagree": True}
            )
    os.pwrite(progress, struct.pack("<q", len(cases)), 0)
    with open(results_file, "w") as fh:
        json.dump(
            {
                "cases": len(cases),
                "counts": counts,
                "failures": failures[:200],
                "n_failures": len(failures),
                "slowest": slowest,
            },
            fh,
        )
    return 0


def random_items(rng: random.Random, n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{rng.getrandbits(64):016x}" for _ in range(n)]


if __name__ == "__main__":
    if sys.argv[1] == "damage":
        sys.exit(damage_worker_main(sys.argv[2:]))
    raise SystemExit(f"unknown mode {sys.argv[1]!r}")
