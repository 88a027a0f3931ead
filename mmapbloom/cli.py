"""The ``mmapbloom`` command line (console script and ``python -m mmapbloom``).

Subcommands: ``plan`` (sizing table), ``create``, ``add``, ``remove`` (counting and cuckoo filters),
``check``, ``info``, ``verify``, and ``merge`` (also ``tools/merge_shards.py``). Every
subcommand has ``--help``; options go anywhere among the arguments
(``parse_intermixed_args``); every subcommand that reports figures has ``--json`` (one
JSON document on stdout instead of its text report).

Kinds: ``add``, ``remove``, ``check``, ``info`` and ``verify`` work on whatever
:func:`mmapbloom.verify.open_filter` opens, through one Filter-like interface
(``update``, ``contains_many``, ``describe``, ``verify``, and ``discard`` for ``remove``):
a new kind plugs in there, not here.

Exit status: 0 on success; 1 when ``check`` answers "certainly absent" for an item whose
presence was asked for (or, with ``--absent``, "might be present" for an item whose
absence was asked for), or ``remove`` finds an item certainly absent; 2 on bad usage, a
damaged or unreadable file, a closed or failing standard stream (``<&-``, ``>&-``,
``> /dev/full``: the line names ``stdin`` or ``stdout``, never the filter), or any other
expected error, reported as one line on stderr without a traceback. With stderr closed or
failing (``2>&-``, ``2>/dev/full``) a write command's report that cannot be written is exit
2 as well (``-q`` asks for none), an error line that cannot be written is dropped, and
nothing meant for stderr is ever printed on stdout. 128 + the signal
number when interrupted: 130 after Ctrl-C (SIGINT), 143 after SIGTERM, 129 after SIGHUP,
all three with the same cleanup (temporary files removed; see :mod:`mmapbloom.termination`).

Key framing, identical for ``add`` and ``check``: input is read as bytes, one item per
line; the line's terminating ``\\n`` or ``\\r\\n`` is removed and nothing else (no other
whitespace is stripped, an empty line is the empty item, a last line without a newline is
an item, a line that is not valid UTF-8 is kept as its bytes). With ``-0``/``--null`` items
are separated by NUL bytes instead and nothing at all is removed, for binary-safe input
(``find -print0``). ``check`` prints items back as the same bytes, each followed by ``\\n``
(or NUL with ``-0``). ``--key KEY`` (repeatable) gives one item on the command line, as
its bytes (``os.fsencode``), before the inputs; with ``--key`` and no INPUT, stdin is not
read. Every input is checked (exists, not a directory, readable) before the first item is
added; an ``add`` that fails or is interrupted part-way says how many items it committed.

Output conventions: query results (``plan``, ``check``, ``info``, ``verify``) go to stdout;
reports of the write commands (``create``, ``add``, ``merge``), progress bars (only when
stderr is a terminal), warnings and errors go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import itertools
import os
import stat
import sys
import time
import warnings
from typing import Any, BinaryIO, Callable, Iterator, NoReturn, Optional, Sequence, TextIO

from . import format as fmt
from .base import MappedFilter
from .handle import CHUNK_KEYS
from .counting import CountingBloomFilter
from ._lazy import numpy_loaded
from .errors import MmapBloomError
from .filter import BloomFilter
from .units import (
    format_bytes,
    format_count,
    format_rate,
    parse_count,
    parse_duration,
    parse_fp_rate,
    parse_mode,
    progress_bar,
)
from .termination import TerminationSignal, exit_status, run_main
from .verify import open_filter
from .kernels import BACKEND
from .hashing import DEFAULT_STRATEGY, get_strategy, registered_strategies
from .config import BloomConfig

__all__ = ["backend_status", "build_parser", "main", "merge_main"]

#: Bytes read from an input per step.
READ_BYTES = 1 << 22

#: ``create`` prints the size of a file this large before allocating it.
LARGE_FILE_BYTES = 10**9

#: The one wording of the refusal to replace an existing file (create, merge).
FORCE_HINT = "file exists (use --force to replace it)"

#: ``create --scalable`` on an existing path: a directory is never replaced, so no --force.
SCALABLE_EXISTS = "exists (a scalable filter's directory is never replaced: remove it first, or add to it)"

FRAMING_HELP = (
    "key framing: one item per line; the terminating \\n or \\r\\n is removed and nothing "
    "else (no other whitespace is stripped; an empty line is the empty item; bytes that are "
    "not valid UTF-8 are kept). With -0/--null, items are separated by NUL bytes and nothing "
    "is removed. Inputs are files, or - for stdin (the default unless --key is given). Every "
    "input is checked to exist and be readable before anything is read. A --key KEY is one "
    "item, KEY's bytes exactly (no framing; an empty KEY is the empty item)."
)


# -- backend ---------------------------------------------------------------------------------
#: How to build the compiled kernels in a checkout (an editable install builds them in place).
BUILD_HINT = "build it with: pip install -e . (a C compiler and the Python headers are needed)"


def backend_status() -> tuple[str, str]:
    """Which backend serves the built-in strategies in this process, and why: ``("native",
    "compiled kernels")`` or ``("python", REASON)``, the reason naming what to do (the
    extension was not built next to the sources imported: a checkout used without
    ``pip install -e .``; or ``MMAPBLOOM_PURE`` is set; or it failed to import).
    ``python -m mmapbloom --version`` and the examples print it."""
    if BACKEND == "native":
        return "native", "compiled kernels"
    pure = os.environ.get("MMAPBLOOM_PURE", "")
    if pure not in ("", "0"):
        return "python", f"pure Python and numpy, because MMAPBLOOM_PURE={pure} is set"
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    if importlib.util.find_spec("mmapbloom._kernels") is None:
        return "python", (
            f"pure Python and numpy, because the C extension mmapbloom._kernels is not built in {here} "
            f"(several times slower; {BUILD_HINT})"
        )
    try:
        import importlib

        importlib.import_module("mmapbloom._kernels")
    except ImportError as exc:
        return "python", f"pure Python and numpy, because mmapbloom._kernels failed to import ({exc}; {BUILD_HINT})"
    return "python", "pure Python and numpy"


def backend_note(program: str) -> str:
    """The one line the examples print on stderr at start: the version, the backend and why,
    and where the package was imported from (a checkout's sources or an installed copy)."""
    from . import __version__

    backend, why = backend_status()
    where = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return f"{program}: mmapbloom {__version__} from {where}, {backend} backend: {why}"


# -- parsing helpers ------------------------------------------------------------------------
def _arg_type(func: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return func(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = func.__name__
    return convert


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``prog: error: message (see 'prog --help')``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def exit(self, status: int = 0, message: Optional[str] = None) -> NoReturn:
        """Usage errors on stderr (dropped if it is closed or fails: never on stdout)."""
        if message:
            _eprint(message.rstrip("\n"))
        sys.exit(status)

    def _print_message(self, message: str, file: Optional[Any] = None) -> None:
        """``--help`` and ``--version`` on stdout: a closed or failing stdout is one line on
        stderr and exit 2 (argparse would ignore the failure and exit 0)."""
        if not message:
            return
        if file is not None and file is not sys.stdout:  # errors and usage: stderr, as argparse
            super()._print_message(message, file)
            return
        try:
            _write_stdout(message.encode("utf-8", "surrogateescape"))
            _flush_stdout()
        except StreamError as exc:
            _detach_stdout()
            _eprint(f"{self.prog}: error: {exc}")
            sys.exit(2)


# -- standard streams ------------------------------------------------------------------------
class StreamError(Exception):
    """A standard stream is closed or failed (``<&-``, ``>&-``, ``> /dev/full``): reported as
    one line naming the stream (``stdin`` or ``stdout``), never the filter file; exit 2."""

    def __init__(self, stream: str, reason: str) -> None:
        super().__init__(f"{stream}: {reason}")
        self.stream = stream


_NOT_OPEN = "not open (the command was started with it closed)"


def _stdin_buffer() -> BinaryIO:
    """``sys.stdin.buffer``, or StreamError when the process was started with stdin closed."""
    stream = sys.stdin
    if stream is None or getattr(stream, "buffer", None) is None:
        raise StreamError("stdin", _NOT_OPEN)
    return stream.buffer


def _write_stdout(data: bytes) -> None:
    """Write ``data`` to stdout's bytes; a closed stdout or a failed write (``/dev/full``)
    is a StreamError naming stdout (BrokenPipeError is kept: the reader went away)."""
    stream = sys.stdout
    if stream is None or getattr(stream, "buffer", None) is None:
        raise StreamError("stdout", _NOT_OPEN)
    try:
        stream.buffer.write(data)
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        raise StreamError("stdout", getattr(exc, "strerror", None) or str(exc)) from None


def _echo(text: str = "") -> None:
    """One line of query output on stdout (through :func:`_write_stdout`)."""
    _write_stdout((text + "\n").encode("utf-8", "surrogateescape"))


def _flush_stdout() -> None:
    """Flush stdout, reporting a failure as a StreamError naming stdout (so a full disk
    behind ``> file`` is an error, never a silent exit 0)."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        raise StreamError("stdout", getattr(exc, "strerror", None) or str(exc)) from None


def _emit_json(value: Any) -> None:
    """``--json``: the subcommand's figures as one JSON document on stdout."""
    import json  # here, not at import: only --json needs it (issue 28 item 2)

    _echo(json.dumps(value, indent=2, allow_nan=False))


def _write_stderr(text: str) -> None:
    """Write one line to stderr, or raise StreamError naming stderr when it is closed
    (``2>&-``) or fails (``2>/dev/full``; what is buffered is dropped, so the interpreter's
    flush at exit does not fail again). Never falls back to stdout, as ``print(file=None)``
    would."""
    stream = sys.stderr
    if stream is None:
        raise StreamError("stderr", _NOT_OPEN)
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError) as exc:
        _detach(stream)
        raise StreamError("stderr", getattr(exc, "strerror", None) or str(exc)) from None


def _report(text: str) -> None:
    """The report of a write command (``created ...``, ``added ...``) on stderr: one that
    cannot be written is a stream error (exit 2, as for stdout; ``-q`` asks for none)."""
    _write_stderr(text)


def _eprint(text: str) -> None:
    """An error, warning or note on stderr, best effort: with stderr closed or failing it is
    dropped (the exit status still tells), never printed on stdout."""
    try:
        _write_stderr(text)
    except StreamError:
        pass


# -- input framing ---------------------------------------------------------------------------
def _split_items(stream: BinaryIO, null: bool) -> Iterator[tuple[list[bytes], int]]:
    """Yield ``(items, bytes_consumed)`` blocks from ``stream`` with the documented framing.

    Linear in the input: an item that spans blocks is kept as a list of its pieces and
    joined once, when its terminator arrives (re-joining the pending part with each new
    block made a 512 MiB line cost O(length^2 / READ_BYTES) copying)."""
    sep = b"\0" if null else b"\n"
    pending: list[bytes] = []  # the pieces of an item whose terminator has not been read yet
    read = getattr(stream, "read1", stream.read)
    while True:
        block = read(READ_BYTES)
        if not block:
            break
        if sep not in block:
            pending.append(block)
            yield [], len(block)
            continue
        parts = block.split(sep)
        tail = parts.pop()
        if pending:
            pending.append(parts[0])
            parts[0] = b"".join(pending)
        pending = [tail] if tail else []
        if not null:  # remove one \r before each \n (a first item's \r may be in an earlier block)
            if parts[0][-1:] == b"\r":
                parts[0] = parts[0][:-1]
            if b"\r" in block:
                parts[1:] = [p[:-1] if p[-1:] == b"\r" else p for p in parts[1:]]
        yield parts, len(block)
    if pending:
        yield [b"".join(pending)], 0  # a last item without a terminator: nothing is removed


def _input_names(args: argparse.Namespace) -> list[str]:
    """The INPUT arguments; none means stdin ('-'), unless keys were given with --key."""
    if args.inputs:
        return list(args.inputs)
    return [] if args.keys else ["-"]


def _check_inputs(names: Sequence[str]) -> None:
    """Check, before anything is added, that every named input can be read: it exists, is
    not a directory, and is readable (so ``add f a.txt dir`` or ``add f - /missing`` fails
    before a single item is committed). Descriptors are not held (a shell glob may name
    thousands of files); an input that fails later anyway (removed meanwhile, an I/O error)
    is reported with the number of items committed (``_add``).

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError naming the input.
    """
    for name in names:
        if name == "-":
            _stdin_buffer()  # started with stdin closed: StreamError before anything is added
            continue
        st = os.stat(name)  # FileNotFoundError / PermissionError, naming it
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory, not an input file", name)
        if not os.access(name, os.R_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)


def _open_inputs(names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
    """Open the inputs one at a time ('-' is stdin); yield each with its name."""
    for name in names:
        if name == "-":
            stream = _stdin_buffer()
            _prompt_if_terminal()
            yield "<stdin>", stream
        else:
            with open(name, "rb") as f:
                yield name, f


def _prompt_if_terminal() -> None:
    """Say what a command waiting on a terminal's stdin waits for (nothing when stdin is a
    pipe or a file)."""
    try:
        interactive = sys.stdin.isatty()
    except (AttributeError, ValueError):
        return
    if interactive:
        _eprint("mmapbloom: reading items from stdin, one per line, until end of input (Ctrl-D)")


def _input_size(names: Sequence[str]) -> Optional[int]:
    """Total bytes of the inputs if all are regular files, else None (for the progress bar)."""
    total = 0
    for name in names:
        try:
            st = os.stat(name) if name != "-" else os.fstat(sys.stdin.fileno())
        except (OSError, ValueError, AttributeError):  # AttributeError: stdin closed (None)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        total += st.st_size
    return total


def _item_chunks(args: argparse.Namespace, progress: Any) -> Iterator[list[bytes]]:
    """The ``--key`` keys, then the items of every input, in chunks of exactly
    :data:`~mmapbloom.handle.CHUNK_KEYS` (the last may be shorter). A key is its argument's bytes
    (``os.fsencode``: undecodable bytes of the command line come back as they were), with
    no framing and nothing removed."""
    pending: list[bytes] = [os.fsencode(key) for key in args.keys]
    null = args.null
    for name, stream in _open_inputs(_input_names(args)):
        blocks = _split_items(stream, null)
        while True:
            try:
                items, nbytes = next(blocks, (None, 0))
            except OSError as exc:  # a read error names the input, not the filter
                if name == "<stdin>":
                    raise StreamError("stdin", exc.strerror or str(exc)) from None
                if exc.filename is None:
                    exc.filename = name
                raise
            if items is None:
                break
            if progress is not None:
                progress.update(nbytes)
            pending.extend(items)
            while len(pending) >= CHUNK_KEYS:
                yield pending[:CHUNK_KEYS]
                del pending[:CHUNK_KEYS]
    if pending:
        yield pending


def _progress_bar(args: argparse.Namespace, desc: str) -> Any:
    names = _input_names(args)
    return progress_bar(_input_size(names), desc) if names else None


# -- subcommands -----------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    if args.cuckoo:
        return _plan_cuckoo(args)
    if args.fingerprint_bits is not None or args.bucket_size is not None:
        args.parser.error("--fingerprint-bits and --bucket-size size a --cuckoo filter: add --cuckoo")
    rows = []
    for n, p in itertools.product(args.n, args.p):
        cfg = BloomConfig.for_items(n, p, strategy=_strategy(args.strategy))
        m, k = cfg.num_bits, cfg.num_hashes
        size = fmt.HEADER_SIZE + fmt.body_size(m)
        rows.append(
            {
                "n": n,
                "p": p,
                "num_bits": m,
                "num_hashes": k,
                "size_bytes": size,
                "size_human": format_bytes(size),
                "bits_per_item": m / n,
                "expected_fp_rate": cfg.strategy.expected_fp_rate(n, m, k),
            }
        )
    if args.json:
        _emit_json(rows)
        return 0
    header = ("n", "p", "m (bits)", "k", "file bytes", "about", "bits/item", "fp rate at n")
    table = [header] + [
        (
            f"{r['n']:,}",
            f"{r['p']:.6g}",
            f"{r['num_bits']:,}",
            str(r["num_hashes"]),
            f"{r['size_bytes']:,}",
            r["size_human"],
            f"{r['bits_per_item']:.2f}",
            f"{r['expected_fp_rate']:.4g}",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        _echo("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _plan_cuckoo(args: argparse.Namespace) -> int:
    """``plan --cuckoo``: the CKF1 table of :func:`mmapbloom.cuckoo.plan` for every n and p:
    buckets, bucket size, fingerprint width, file bytes, bits per item (``8 file bytes / n``,
    as ``bits_per_item`` of ``info`` for a filter of capacity n) and the expected false-positive rate with n items stored
    (:func:`mmapbloom.cuckoo.expected_fp_rate`)."""
    from .cuckoo import expected_fp_rate, plan

    if args.strategy != DEFAULT_STRATEGY.name:
        args.parser.error("--strategy names a Bloom strategy; a --cuckoo filter always hashes with M3C1")
    rows = []
    for n, p in itertools.product(args.n, args.p):
        bucket_size = 4 if args.bucket_size is None else args.bucket_size
        g = plan(n, p, fingerprint_bits=args.fingerprint_bits, bucket_size=bucket_size)
        size = fmt.CuckooHeader(g.num_buckets, g.fingerprint_bits, g.bucket_size, g.max_kicks).total_size
        rows.append(
            {
                "kind": "CuckooFilter",
                "n": n,
                "p": p,
                "num_buckets": g.num_buckets,
                "bucket_size": g.bucket_size,
                "fingerprint_bits": g.fingerprint_bits,
                "size_bytes": size,
                "size_human": format_bytes(size),
                "bits_per_item": 8 * size / n,
                "load_at_n": n / (g.num_buckets * g.bucket_size),
                "expected_fp_rate": expected_fp_rate(g, n),
            }
        )
    if args.json:
        _emit_json(rows)
        return 0
    header = ("n", "p", "buckets", "b", "f", "file bytes", "about", "bits/item", "load at n", "fp rate at n")
    table = [header] + [
        (
            f"{r['n']:,}",
            f"{r['p']:.6g}",
            f"{r['num_buckets']:,}",
            str(r["bucket_size"]),
            str(r["fingerprint_bits"]),
            f"{r['size_bytes']:,}",
            r["size_human"],
            f"{r['bits_per_item']:.2f}",
            f"{r['load_at_n']:.3f}",
            f"{r['expected_fp_rate']:.4g}",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        _echo("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> BloomConfig:
    sized = args.n is not None or args.p is not None
    explicit = args.bits is not None or args.hashes is not None
    if sized and explicit:
        parser.error("give either -n and -p, or --bits and --hashes, not both")
    strategy = _strategy(args.strategy)
    if sized:
        if args.n is None or args.p is None:
            parser.error("-n and -p go together")
        return BloomConfig.for_items(args.n, args.p, strategy=strategy)
    if args.bits is None or args.hashes is None:
        parser.error("give -n N -p P, or --bits M --hashes K")
    return BloomConfig(num_bits=args.bits, num_hashes=args.hashes, strategy=strategy)


def _strategy(name: str) -> Any:
    """The registered strategy named by ``--strategy`` (case-insensitive for the built-in
    upper-case names); UnknownStrategyError naming the option and the registered names."""
    registered = registered_strategies()
    if name not in registered and name.upper() in registered:
        name = name.upper()
    return get_strategy(name, source="--strategy")


def _create_scalable(args: argparse.Namespace) -> int:
    if args.n is None or args.p is None or args.bits is not None or args.hashes is not None:
        args.parser.error(
            "--scalable needs -n (capacity of the first layer) and -p (compound rate), not --bits/--hashes"
        )
    options: dict[str, Any] = {}
    if args.growth is not None:
        options["growth"] = args.growth
    if args.tightening is not None:
        options["tightening"] = args.tightening
    from .scalable import ScalableBloomFilter  # imported by the commands that use it (start-up)

    try:
        f = ScalableBloomFilter.create(
            args.file, args.n, args.p, strategy=_strategy(args.strategy), mode=args.mode, **options
        )
    except FileExistsError as exc:
        raise FileExistsError(exc.errno, SCALABLE_EXISTS, args.file) from None
    with f:
        layer = f.layers[0]
        if args.json:
            _emit_json(f.describe(scan=False))
        elif not args.quiet:
            _report(
                f"created {args.file}: scalable filter, first layer {layer.num_bits:,} bits, "
                f"k={layer.num_hashes}, capacity {f.capacity:,}, growth {f.growth:g}, "
                f"tightening {f.tightening:g}, strategy {f.strategy.name}"
            )
    return 0


def _create_expiring(args: argparse.Namespace) -> int:
    """``create --window``: an expiring filter directory."""
    from .expiring import DEFAULT_PERIODS, ExpiringBloomFilter

    if args.n is None or args.p is None or args.bits is not None or args.hashes is not None:
        args.parser.error("--window needs -n (distinct items per window) and -p, not --bits/--hashes")
    periods = DEFAULT_PERIODS if args.periods is None else args.periods
    f = ExpiringBloomFilter.create(
        args.file, args.window, args.n, args.p, periods=periods, strategy=_strategy(args.strategy), mode=args.mode
    )
    with f:
        if not args.quiet:
            _report(
                f"created {args.file}: expiring filter, window {f.window:g} s in {f.periods} periods of "
                f"{f.config.num_bits:,} bits, k={f.config.num_hashes}, {f.capacity:,} items per window, "
                f"strategy {f.strategy.name}"
            )
    return 0


def _create_cuckoo(args: argparse.Namespace) -> int:
    """``create --cuckoo``: a CuckooFilter sized from -n and -p (mmapbloom.cuckoo.plan)."""
    from .cuckoo import CuckooFilter

    if args.n is None or args.p is None or args.bits is not None or args.hashes is not None:
        args.parser.error("--cuckoo needs -n (capacity) and -p (false-positive rate), not --bits/--hashes")
    try:
        f = CuckooFilter.create(
            args.file,
            args.n,
            args.p,
            fingerprint_bits=args.fingerprint_bits,
            mode=args.mode,
            sparse=args.sparse,
            overwrite=args.force,
        )
    except FileExistsError as exc:
        raise _use_force(exc, args.file) from None
    with f:
        if args.mode is not None:
            os.chmod(f.path or args.file, args.mode)
        if not args.quiet:
            _report(
                f"created {args.file}: cuckoo filter, {f.num_buckets:,} buckets of {f.bucket_size}, "
                f"{f.fingerprint_bits}-bit fingerprints, capacity {f.capacity:,}, "
                f"{f.size_bytes:,} bytes ({format_bytes(f.size_bytes)})"
            )
    return 0


def _create_mapped(args: argparse.Namespace) -> int:
    """``create`` of a one-file kind (a Bloom filter, or with --counting a counting filter)."""
    cfg = _config_from_args(args, args.parser)
    options = {"counter_bits": args.counter_bits or 4} if args.counting else {}
    kind: type[MappedFilter] = CountingBloomFilter if args.counting else BloomFilter
    if args.counting:
        size = fmt.COUNTING_HEADER_SIZE + fmt.body_size(cfg.num_bits, options["counter_bits"])
    else:
        size = fmt.HEADER_SIZE + fmt.body_size(cfg.num_bits)
    if not args.quiet and size >= LARGE_FILE_BYTES:  # say what is coming before a long allocation
        _report(f"creating {args.file}: m={cfg.num_bits:,}, k={cfg.num_hashes}, {size:,} bytes ({format_bytes(size)})")
    if args.mode is not None:
        options["mode"] = args.mode  # masked by the umask here: never more open than asked
    try:
        f = kind.create(args.file, cfg, sparse=args.sparse, overwrite=args.force, **options)
    except FileExistsError as exc:
        raise _use_force(exc, args.file) from None
    with f:
        if args.mode is not None:  # the exact bits, whatever the umask (as mkdir -m)
            os.chmod(f.path or args.file, args.mode)
        record = f.describe(scan=False) if args.json else None
    if record is not None:
        _emit_json(record)
    elif not args.quiet:
        what = f"counting filter, {options['counter_bits']}-bit counters, " if args.counting else ""
        _report(
            f"created {args.file}: {what}m={cfg.num_bits:,} {'cells' if args.counting else 'bits'}, "
            f"k={cfg.num_hashes}, strategy {cfg.strategy.name}, {size:,} bytes ({format_bytes(size)})"
        )
    return 0


@dataclasses.dataclass(frozen=True)
class CreateKind:
    """A kind of filter that ``create`` makes, and everything the command line knows of it
    (a new kind is one more entry of :data:`CREATE_KINDS`, nothing else here branches on it).

    Attributes:
        flag: the option that selects it (``--counting``); None for the default kind.
        help: ``flag``'s help.
        options: ``{dest: option}`` of the options only this kind takes (added by
            ``arguments``); given with another kind they are refused, naming both.
        refuses: ``{dest: option}`` of general options this kind cannot take.
        why: why this kind cannot be combined with another kind or a refused option.
        make: creates the file from the parsed arguments; returns the exit status.
        arguments: adds ``options`` to the ``create`` parser (not the flag).
        flag_kwargs: ``add_argument`` keywords of a flag that takes a value (``--window 30d``);
            None for an on/off flag.
    """

    flag: Optional[str]
    help: str
    options: dict[str, str]
    refuses: dict[str, str]
    why: str
    make: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None
    flag_kwargs: Optional[dict[str, Any]] = None  # add_argument's keywords for a flag with a value

    @property
    def dest(self) -> Optional[str]:
        return None if self.flag is None else self.flag.lstrip("-").replace("-", "_")


def _given(args: argparse.Namespace, dest: str) -> bool:
    return getattr(args, dest, None) not in (None, False)


def _scalable_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--growth",
        type=float,
        default=None,
        metavar="S",
        help="--scalable: capacity factor of each new layer (default 2)",
    )
    p.add_argument(
        "--tightening",
        type=float,
        default=None,
        metavar="R",
        help="--scalable: error-target factor of each new layer, 0 < R < 1 (default 0.5)",
    )


def _counting_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--counter-bits",
        type=int,
        choices=(4, 8),
        default=None,
        help="counter width of a --counting filter (default 4)",
    )


#: The kinds ``create`` makes: the first whose flag is given, else the default (flag None).
def _cuckoo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fingerprint-bits",
        type=int,
        default=None,
        help="fingerprint width of a --cuckoo filter, 4..32 (default: the smallest meeting -p)",
    )


def _expiring_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--periods",
        type=_arg_type(parse_count),
        default=None,
        metavar="N",
        help="--window: periods per window (default 8); items are forgotten at most window/N after their window",
    )


CREATE_KINDS: list[CreateKind] = [
    CreateKind(
        flag="--scalable",
        help="create a scalable filter (a directory of layers that grows past -n, keeping the "
        "compound false-positive rate below -p; Almeida et al. 2007)",
        options={"growth": "--growth", "tightening": "--tightening"},
        refuses={"sparse": "--sparse", "force": "--force"},
        why="a scalable filter's layers are plain Bloom filters, allocated in full as they are added, "
        "and its directory is never replaced: remove it first, or add to it",
        make=_create_scalable,
        arguments=_scalable_arguments,
    ),
    CreateKind(
        flag="--counting",
        help="create a counting filter (BLC1: supports removal; 4 or 8 times the size)",
        options={"counter_bits": "--counter-bits"},
        refuses={},
        why="",
        make=_create_mapped,
        arguments=_counting_arguments,
    ),
    CreateKind(
        flag="--cuckoo",
        help="create a cuckoo filter (CKF1: supports removal at about Bloom size; needs -n and -p)",
        options={"fingerprint_bits": "--fingerprint-bits"},
        refuses={},
        why="a cuckoo filter stores fingerprints in buckets, not bits or counters",
        make=_create_cuckoo,
        arguments=_cuckoo_arguments,
    ),
    CreateKind(
        flag="--window",
        help="create an expiring filter (a directory of period files) remembering items for "
        "this long: 30d, 12h, 90m, 45s; -n is the items expected per window",
        options={"periods": "--periods"},
        refuses={"sparse": "--sparse", "force": "--force"},
        why="an expiring filter is a directory of period files, created as they are needed",
        make=_create_expiring,
        arguments=_expiring_arguments,
        flag_kwargs={"type": _arg_type(parse_duration), "default": None, "metavar": "DURATION"},
    ),
    CreateKind(flag=None, help="", options={}, refuses={}, why="", make=_create_mapped),
]


def _create(args: argparse.Namespace) -> int:
    error = args.parser.error
    chosen = [k for k in CREATE_KINDS if k.dest is not None and _given(args, k.dest)]
    kind = chosen[0] if chosen else next(k for k in CREATE_KINDS if k.flag is None)
    for other in chosen[1:]:
        error(f"{kind.flag} and {other.flag} cannot be combined ({kind.why or other.why})")
    for other in CREATE_KINDS:
        for dest, option in other.options.items():
            if other is not kind and _given(args, dest):
                if kind.flag is None:
                    error(f"{option} needs {other.flag}")
                error(f"{kind.flag} and {option} cannot be combined ({kind.why or 'an option of ' + str(other.flag)})")
    for dest, option in kind.refuses.items():
        if _given(args, dest):
            error(f"{kind.flag} and {option} cannot be combined ({kind.why})")
    return kind.make(args)


def _use_force(exc: FileExistsError, path: str) -> FileExistsError:
    """The one wording, for every subcommand that refuses to replace a file."""
    return FileExistsError(exc.errno, FORCE_HINT, path)


def _committed(total: int, path: str) -> str:
    """What an ``add`` that stopped early committed (chunks commit whole, so it is exact)."""
    if not total:
        return f"nothing was added to {path}"
    return f"the first {format_count(total, 'item')} were committed to {path}; the rest were not added"


def _add(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    names = _input_names(args)
    _check_inputs(names)  # a missing or unreadable input: refused before anything is added
    total = new = 0
    with open_filter(args.file, readonly=False) as f:
        bar = _progress_bar(args, "add")
        try:
            for chunk in _item_chunks(args, bar):
                new += int(f.update(chunk))  # one lock acquisition per chunk; signals wait for its end
                total += len(chunk)
        except BaseException as exc:
            # Chunks commit whole (cells and items counter together), so this is exact; an
            # error while reading an input leaves committed_items unset (0 of that chunk).
            total += getattr(exc, "committed_items", 0)
            if isinstance(exc, KeyboardInterrupt):
                _eprint(f"mmapbloom add: interrupted: {_committed(total, args.file)}")
            else:
                args.committed = _committed(total, args.file)  # appended to the error line by _call
            raise
        finally:
            if bar is not None:
                bar.close()
    seconds = time.perf_counter() - t0
    if args.json:
        _emit_json({"file": args.file, "items": total, "new": new, "already_present": total - new, "seconds": seconds})
    elif not args.quiet:
        sources = [format_count(len(args.keys), "key")] if args.keys else []
        if names:
            sources.append(format_count(len(names), "input"))
        _report(
            f"added {format_count(total, 'item')} from {' and '.join(sources)} to {args.file} "
            f"in {seconds:.2f} s ({format_rate(total, seconds)}items/s): {new:,} new, "
            f"{total - new:,} already present (duplicates or false positives)"
        )
    return 0


#: Up to this many items, ``check`` asks one at a time (``in``) unless numpy is loaded: a
#: ``check --key K`` then never imports numpy (about 300 M instructions) for its answer.
_FEW_ITEMS = 64


def _answers(f: Any, chunk: list[bytes]) -> list[bool]:
    """``f``'s answer for each item of ``chunk`` (the same as ``contains_many``, which
    gives exactly the per-item answers); a few items without numpy."""
    if len(chunk) <= _FEW_ITEMS and not numpy_loaded():
        return [item in f for item in chunk]
    return f.contains_many(chunk).tolist()  # type: ignore[no-any-return]


def _check(args: argparse.Namespace) -> int:
    present = absent = 0
    sep = b"\0" if args.null else b"\n"
    show = not (args.count or args.quiet or args.json)
    _check_inputs(_input_names(args))  # a missing input: refused before any answer is printed
    with open_filter(args.file, readonly=True) as f:
        bar = _progress_bar(args, "check")
        try:
            for chunk in _item_chunks(args, bar):
                hits = _answers(f, chunk)
                n_hits = sum(hits)
                present += n_hits
                absent += len(chunk) - n_hits
                if show:
                    selected = [item for item, hit in zip(chunk, hits, strict=True) if hit != args.absent]
                    if selected:
                        _write_stdout(sep.join(selected) + sep)
        finally:
            if bar is not None:
                bar.close()
    if args.json:
        _emit_json(
            {"file": args.file, "checked": present + absent, "might_be_present": present, "certainly_absent": absent}
        )
    elif args.count and not args.quiet:
        _echo(f"{present + absent} checked, {present} might be present, {absent} certainly absent")
    _flush_stdout()
    failed = present if args.absent else absent
    return 1 if failed else 0


def _removable(f: Any, path: str) -> Callable[[Any], bool]:
    """The filter's ``discard`` (remove if it might be present; whether it was removed):
    the one capability ``remove`` needs, so any kind that has it (counting and cuckoo filters)
    works here without a branch per kind. A kind without it is refused, naming it."""
    discard = getattr(f, "discard", None)
    if not callable(discard):
        raise MmapBloomError(
            f"{path}: a {type(f).__name__} does not support removal (create a counting or cuckoo filter: "
            "mmapbloom create FILE --counting ...)"
        )
    return discard  # type: ignore[no-any-return]


def _remove(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    names = _input_names(args)
    _check_inputs(names)
    total = removed = 0
    with open_filter(args.file, readonly=False) as f:
        discard = _removable(f, args.file)
        bar = _progress_bar(args, "remove")
        try:
            for chunk in _item_chunks(args, bar):
                for item in chunk:
                    removed += bool(discard(item))  # each removal commits on its own
                    total += 1
        except BaseException as exc:
            done = f"{removed:,} of the first {format_count(total, 'item')} were removed from {args.file}"
            if isinstance(exc, KeyboardInterrupt):
                _eprint(f"mmapbloom remove: interrupted: {done}")
            else:
                args.committed = done
            raise
        finally:
            if bar is not None:
                bar.close()
    seconds = time.perf_counter() - t0
    absent = total - removed
    if args.json:
        _emit_json(
            {"file": args.file, "items": total, "removed": removed, "certainly_absent": absent, "seconds": seconds}
        )
    elif not args.quiet:
        _report(
            f"removed {removed:,} of {format_count(total, 'item')} from {args.file} in {seconds:.2f} s: "
            f"{absent:,} certainly absent (not removed)"
        )
    return 1 if absent else 0


def _kind_text(record: dict[str, Any]) -> str:
    text = "scalable filter" if record["kind"] == "scalable" else record["kind"]
    if record["kind"] == "expiring":
        text = f"expiring filter (window {record['window']:g} s, {record['periods']} periods)"
    if record.get("counter_bits"):
        saturated = record.get("saturated_counters")
        text += f" ({record['counter_bits']}-bit counters" + (
            f", {saturated:,} saturated)" if saturated is not None else ")"
        )
    if "num_layers" in record:
        text += f", {format_count(record['num_layers'], 'layer')}"
    return text


def _info_lines(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The text of ``mmapbloom info``: one row per field the record has (every kind's
    ``describe()``; a scalable filter's has ``capacity``, ``growth`` and ``layers``, a
    file's ``num_bits`` and the scan's ``fill_ratio``)."""
    layered = "layers" in record
    rows = [("path", str(record["path"])), ("kind", _kind_text(record)), ("strategy", record["strategy"])]
    if "num_buckets" in record:  # a cuckoo filter
        rows += [
            ("buckets", f"{record['num_buckets']:,} of {record['bucket_size']} slots"),
            ("fingerprint bits", str(record["fingerprint_bits"])),
            ("file size", f"{record['size_bytes']:,} bytes ({format_bytes(record['size_bytes'])})"),
            ("items added", f"{record['items_added']:,}"),
            ("load factor", f"{record['load_factor']:.4f}"),
            ("expected fp rate", f"{record['expected_fp_rate']:.4g} (from the load)"),
            ("victim slot", "taken (the filter is full)" if record["victim"] else "free"),
        ]
        return rows
    if record["kind"] == "expiring":
        rows.append(
            (
                "sized for",
                f"{record['capacity']:,} items per window, fp rate {record['fp_rate']:g} "
                f"(each period file: m and k below)",
            )
        )
    elif "capacity" in record:
        rows.append(
            ("sized for", f"{record['capacity']:,} items in the first layer, compound fp rate {record['fp_rate']:g}")
        )
    if "growth" in record:
        rows.append(("growth / tightening", f"{record['growth']:g} / {record['tightening']:g}"))
    if "num_bits" in record:
        rows += [("num_bits (m)", f"{record['num_bits']:,}"), ("num_hashes (k)", str(record["num_hashes"]))]
    rows.append(
        ("size" if layered else "file size", f"{record['size_bytes']:,} bytes ({format_bytes(record['size_bytes'])})")
    )
    rows.append(
        (
            "items added",
            f"{record['items_added']:,}"
            + (
                " (saturated at 2^32 - 1: no longer counted; see approx items)" if record.get("items_saturated") else ""
            ),
        )
    )
    if "approx_items" in record:
        approx = record["approx_items"]
        rows.append(
            ("approx items", "all bits set (unknown)" if approx is None else f"{approx:,.0f} (distinct, from the bits)")
        )
    if "fill_ratio" in record:
        rows.append(
            (
                "fill ratio",
                f"{record['fill_ratio']:.4f} (expected {record['expected_fill_ratio']:.4f} from items added)",
            )
        )
    rows.append(
        ("expected fp rate", f"{record['expected_fp_rate']:.4g} ({'compound, ' if layered else ''}from items added)")
    )
    if "observed_fp_rate" in record:
        rows.append(("observed fp rate", f"{record['observed_fp_rate']:.4g} (from the bits set)"))
    if "over_capacity" in record:
        rows.append(("over design point", "yes: expected fill ratio above 0.6" if record["over_capacity"] else "no"))
    return rows


def _info(args: argparse.Namespace) -> int:
    with open_filter(args.file, readonly=True) as f:
        record = f.describe(scan=True, progress=True)  # a bar on a terminal when the scan is long
    if args.json:
        _emit_json(record)
        return 0
    rows = _info_lines(record)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        _echo(f"{name:<{width}}  {value}")
    if "layers" in record:
        _echo("layers:")
        _echo("  #  capacity      items        m (bits)   k  target p    fill")
        for i, layer in enumerate(record["layers"]):
            fill = f"{layer['fill_ratio']:.4f}" if "fill_ratio" in layer else ""
            _echo(
                f"  {i}  {layer['capacity']:>9,}  {layer['items_added']:>9,}  {layer['num_bits']:>14,}  "
                f"{layer['num_hashes']:>2}  {layer['fp_rate']:<10.3g}  {fill}".rstrip()
            )
    return 0


def _shape(record: dict[str, Any]) -> str:
    """The one-line shape of ``mmapbloom verify``'s OK line, from ``describe(scan=False)``."""
    if "num_bits" in record:
        lead = f"m={record['num_bits']:,}, k={record['num_hashes']}"
    elif "num_buckets" in record:
        lead = f"cuckoo, {record['num_buckets']:,} buckets of {record['bucket_size']}, f={record['fingerprint_bits']}"
    else:
        lead = f"{record['kind']}, {format_count(record['num_layers'], 'layer')}"
    return f"{lead}, strategy {record['strategy']}, {record['size_bytes']:,} bytes"


def _verify(args: argparse.Namespace) -> int:
    bad = 0
    results: list[dict[str, Any]] = []
    for path in args.files:
        try:
            with open_filter(path, readonly=True) as f:
                f.verify()
                record = f.describe(scan=False)
        except (MmapBloomError, OSError) as exc:
            bad += 1
            results.append({"path": path, "ok": False, "error": _describe_error(exc, path)})
            if not args.json:
                _eprint(f"mmapbloom verify: FAILED: {_describe_error(exc, path)}")
            continue
        results.append({"path": path, "ok": True, **record})
        if not args.json:
            _echo(f"{path}: OK ({_shape(record)})")
    if args.json:
        _emit_json({"files": len(args.files), "failed": bad, "results": results})
    elif len(args.files) > 1 and not bad:
        _echo(f"all {len(args.files)} files OK")
    return 2 if bad else 0


def _merge(args: argparse.Namespace) -> int:
    from .errors import MergeError
    from .merge import expand_shard_args, merge_into, merge_shards

    chunk = args.chunk_mib * 2**20
    progress = args.progress  # None: only when stderr is a terminal
    if args.into is not None:
        if args.intersection:
            raise MergeError(
                "--intersection cannot be combined with --into: clearing bits in place would "
                "lose items of the filter's users; write a new output instead"
            )
        if args.force:  # it would otherwise be silently ignored
            args.parser.error("--force cannot be combined with --into: the target is changed in place, never replaced")
        shards = expand_shard_args(args.paths)
        result = merge_into(args.into, shards, chunk_bytes=chunk, progress=progress)
    else:
        if len(args.paths) < 2:
            args.parser.error("give OUT and at least one SHARD (or --into EXISTING SHARD...)")
        out, *rest = args.paths
        shards = expand_shard_args(rest)
        try:
            result = merge_shards(
                out, shards, intersection=args.intersection, replace=args.force, chunk_bytes=chunk, progress=progress
            )
        except FileExistsError as exc:
            if exc.filename is None or os.path.abspath(exc.filename) != os.path.abspath(out):
                raise
            raise _use_force(exc, out) from None
    if args.json:
        _emit_json(dataclasses.asdict(result))
    elif not args.quiet:
        _report(result.summary())
    return 0


# -- parser ------------------------------------------------------------------------------------
_MERGE_DESCRIPTION = (
    "Merge BLM1 shard files (same m, k and strategy) into one filter by bitwise OR (union) or, "
    "with --intersection, AND. Every shard is validated before anything is written; an "
    "incompatible one is refused naming the file, the field and both values. Memory is "
    "bounded (two chunks) and one shard is open at a time, so thousands of shards merge. "
    "OUT is written atomically (a temporary file in OUT's directory, fsync, rename): a merge "
    "killed at any moment leaves no OUT or a complete one. With --into EXISTING, the shards "
    "are ORed into an existing filter in place, chunk by chunk under its write lock, so "
    "processes using it keep working. Items added of the result is the saturating sum of the "
    "shards' (for --intersection: their minimum); 'mmapbloom info' shows the approximate "
    "distinct count."
)

_MERGE_EPILOG = (
    "SHARD may be a path, a glob pattern (quoted, e.g. 'shards/*.blm'; ** recurses) or @FILE "
    "(one path or pattern per line; # comments and empty lines skipped; relative paths are "
    "relative to the current directory). A summary line (shards, bytes, seconds, GB/s) is "
    "printed on stderr; a progress bar when stderr is a terminal."
)


def _add_merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths", nargs="+", metavar="OUT SHARD", help="the output file, then the shards (with --into: only the shards)"
    )
    p.add_argument("--into", metavar="EXISTING", help="OR the shards into this existing filter file in place")
    p.add_argument("--intersection", action="store_true", help="AND instead of OR (not with --into)")
    p.add_argument("--force", action="store_true", help="replace an existing OUT (atomically; not with --into)")
    p.add_argument(
        "--chunk-mib",
        type=_arg_type(parse_count),
        default=16,
        metavar="MIB",
        help="MiB of each shard combined per step (default 16; memory is about twice this)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always show the progress bar (default: only when stderr is a terminal)",
    )
    g.add_argument("--no-progress", dest="progress", action="store_false", help="never show the progress bar")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    _json_argument(p, "the merge's figures (output, shards, bytes read, seconds, shape, items added)")
    p.set_defaults(func=_merge, parser=p)


_MERGE_USAGE = "%(prog)s [options] OUT SHARD... | %(prog)s [options] --into EXISTING SHARD..."


def _item_input_arguments(p: argparse.ArgumentParser) -> None:
    """The filter file, the input files and the framing option, shared by add and check
    (so both frame items identically, FRAMING_HELP)."""
    p.add_argument("file")
    p.add_argument(
        "inputs",
        nargs="*",
        default=[],
        metavar="INPUT",  # default: not "required" for argparse
        help="input files; - for stdin (the default when no --key is given)",
    )
    p.add_argument("-0", "--null", action="store_true", help="items are NUL-separated; nothing is removed")
    p.add_argument(
        "--key",
        dest="keys",
        action="append",
        default=[],
        metavar="KEY",
        help="an item given on the command line, as its bytes (no framing; repeatable); "
        "taken before the inputs, and stdin is not read unless - is given",
    )


def _json_argument(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout instead of the text report")


def _strategy_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategy",
        default=DEFAULT_STRATEGY.name,
        metavar="NAME",
        help=f"hash strategy: one of {', '.join(sorted(registered_strategies()))} "
        f"(default {DEFAULT_STRATEGY.name}; M3B2 is cache-line blocked, for big filters)",
    )


class _VersionAction(argparse.Action):
    """``--version``: one line, not re-wrapped by argparse's formatter (the reason for a
    pure-Python backend is long)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        from . import __version__

        parser._print_message("mmapbloom {} ({} backend: {})\n".format(__version__, *backend_status()), sys.stdout)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``mmapbloom`` command (all subcommands)."""
    parser = _Parser(
        prog="mmapbloom",
        description="Bloom filters in memory-mapped files.",
        epilog="Exit status: 0 ok; 1 a check found an item absent (see check --help); 2 bad usage, "
        "a damaged or unreadable file, or another error. Run 'mmapbloom COMMAND --help'.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        nargs=0,
        default=argparse.SUPPRESS,
        help="print the version and the backend in use (and why), then exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "plan",
        help="size a filter: m, k and file size for n items at rate p",
        description="Print m (bits), k, the file size, bits per item and the expected "
        "false-positive rate at n, for every combination of the given n and p.",
    )
    p.add_argument(
        "-n",
        "--items",
        dest="n",
        type=_arg_type(parse_count),
        nargs="+",
        action="extend",
        required=True,
        metavar="N",
        help="expected distinct items: 1000, 1_000, 10k, 50M, 1e6 (repeatable)",
    )
    p.add_argument(
        "-p",
        "--fp-rate",
        dest="p",
        type=_arg_type(parse_fp_rate),
        nargs="+",
        action="extend",
        required=True,
        metavar="P",
        help="target false-positive rate: 0.01, 1%%, 1e-3 (repeatable)",
    )
    _strategy_argument(p)
    p.add_argument(
        "--cuckoo",
        action="store_true",
        help="size a cuckoo filter (CKF1) instead: buckets, bucket size, fingerprint bits, file size, "
        "bits per item, load and expected false-positive rate at n",
    )
    p.add_argument(
        "--fingerprint-bits",
        type=int,
        default=None,
        help="--cuckoo: fingerprint width, 4..32 (default: the smallest meeting -p)",
    )
    p.add_argument("--bucket-size", type=int, default=None, help="--cuckoo: slots per bucket, 1, 2, 4 or 8 (default 4)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_plan, parser=p)

    p = sub.add_parser(
        "create",
        help="create an empty filter file",
        description="Create an empty filter file sized for -n items at rate -p, or with "
        "exactly --bits and --hashes. An existing file is refused unless --force, "
        "which replaces it atomically (processes that have the old file open "
        "keep using the old file).",
    )
    p.add_argument("file")
    p.add_argument(
        "-n",
        "--items",
        dest="n",
        type=_arg_type(parse_count),
        metavar="N",
        help="expected distinct items (10k, 50M, 1e6 ...)",
    )
    p.add_argument(
        "-p",
        "--fp-rate",
        dest="p",
        type=_arg_type(parse_fp_rate),
        metavar="P",
        help="target false-positive rate (1%%, 0.001 ...)",
    )
    p.add_argument("--bits", type=_arg_type(parse_count), metavar="M", help="number of bits m")
    p.add_argument("--hashes", type=_arg_type(parse_count), metavar="K", help="number of hashes k")
    _strategy_argument(p)
    for kind in CREATE_KINDS:  # each kind's flag and its own options
        if kind.flag is not None:
            p.add_argument(kind.flag, help=kind.help, **(kind.flag_kwargs or {"action": "store_true"}))
        kind.arguments(p)
    p.add_argument(
        "--mode",
        type=_arg_type(parse_mode),
        default=None,
        metavar="OCTAL",
        help="exact permission bits of the new file, not masked by the umask (e.g. 0664 or 0640); "
        "with --scalable, of every file of the directory, including the layers and manifest that "
        "later growths write, whoever grows it (the directory gets x where r is set). "
        "Default: 0666 masked by the umask",
    )
    p.add_argument("--force", action="store_true", help="replace an existing file atomically (not with --scalable)")
    p.add_argument(
        "--sparse",
        action="store_true",
        help="do not reserve disk space now (a full disk later kills writers with SIGBUS; not with --scalable)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    _json_argument(p, "the new filter's record (as info --json, without the scan)")
    p.set_defaults(func=_create, parser=p)

    p = sub.add_parser(
        "add",
        help="add items (one per line) from files or stdin",
        description="Add items to an existing filter file. Uses the batch API: items are "
        "added in chunks of 65,536 lines, each under one acquisition of the file's "
        "write lock, so other processes may add concurrently. Prints the "
        "throughput and the new and already-present counts on stderr.",
        epilog=FRAMING_HELP,
    )
    _item_input_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    _json_argument(p, "the counts (items, new, already_present) and seconds")
    p.set_defaults(func=_add)

    p = sub.add_parser(
        "remove",
        help="remove items (one per line) from a counting or cuckoo filter",
        description="Remove items from a filter that supports removal (a counting or cuckoo filter): "
        "each item's counters are decremented (a cuckoo filter: one matching fingerprint is removed) "
        "if it might be present. Only remove items that "
        "were added (removing a false positive corrupts other items). Exit status 0 if every "
        "item was removed, 1 if at least one was certainly absent (and so not removed), 2 on "
        "error (a filter kind without removal, a damaged file, a failed input). Prints the "
        "counts on stderr.",
        epilog=FRAMING_HELP,
    )
    _item_input_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    _json_argument(p, "the counts (items, removed, certainly_absent) and seconds")
    p.set_defaults(func=_remove)

    p = sub.add_parser(
        "check",
        help="print the items that might be present (or --absent)",
        description="Check items against a filter (opened read-only). Prints the items that "
        "might be present, each followed by \\n (NUL with -0), as the same bytes "
        "that were read. Exit status 0 if every item got the asked-for answer "
        "(might be present; with --absent: certainly absent), 1 if at least one "
        "did not, 2 on error. Empty input: exit 0.",
        epilog=FRAMING_HELP,
    )
    _item_input_arguments(p)
    p.add_argument("--absent", action="store_true", help="print the items that are certainly absent instead")
    p.add_argument("-c", "--count", action="store_true", help="print only the counts")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing; only set the exit status")
    _json_argument(p, "only the counts (checked, might_be_present, certainly_absent)")
    p.set_defaults(func=_check)

    p = sub.add_parser(
        "info",
        help="show a filter file's shape and fill",
        description="Show strategy, m, k, file size, items added, approximate distinct items "
        "(from the bits), fill ratio, expected and observed false-positive rate "
        "and whether the filter is past its design point.",
    )
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_info)

    p = sub.add_parser(
        "verify",
        help="check files' header, length and padding",
        description="Check that each file is a sound filter without trusting it (like zip -T): "
        "magic, registered strategy, m >= 1, 1 <= k <= 4096, a length of exactly "
        "24 + ceil(m / 8) bytes for a Bloom filter (BLM1) or 32 + ceil(m * width / 8) "
        "for a counting filter (BLC1), and zero padding bits; for a scalable filter's "
        "directory, the manifest and every layer. Exit 0 only if all are sound.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    _json_argument(p, "one record per file (ok, error or the shape)")
    p.set_defaults(func=_verify)

    p = sub.add_parser(
        "merge",
        help="merge shard files (OR, or AND with --intersection)",
        description=_MERGE_DESCRIPTION,
        epilog=_MERGE_EPILOG,
        usage=_MERGE_USAGE,
    )
    _add_merge_arguments(p)
    return parser


def _describe_error(exc: BaseException, path: Optional[str] = None) -> str:
    """One line for an expected error; an OS error that names no file is prefixed with
    ``path``, the file the command was working on."""
    if isinstance(exc, OSError) and not isinstance(exc, MmapBloomError) and exc.strerror:
        where = exc.filename if exc.filename is not None else path
        return f"{where}: {exc.strerror}" if where else exc.strerror
    text = str(exc)
    if path and isinstance(exc, OSError) and not isinstance(exc, MmapBloomError) and path not in text:
        return f"{path}: {text}"
    return text


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Optional[TextIO] = None,
    line: Optional[str] = None,
) -> None:
    _eprint(f"mmapbloom: warning: {message}")


def _subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse with options anywhere, for every subcommand (``merge OUT --intersection A B``,
    ``check f.blm --key x -``): the subcommand's own parser parses its arguments with
    ``parse_intermixed_args`` (argparse cannot intermix through a subparsers action, so
    the subcommand is found first: the first argument that is not an option)."""
    subparsers = _subcommand_parsers(parser)
    if not subparsers:  # a standalone parser (tools/merge_shards.py)
        return parser.parse_intermixed_args(argv)
    for i, arg in enumerate(argv):
        if arg == "--" or arg.startswith("-"):
            if arg == "--":
                break
            continue
        sub = subparsers.get(arg)
        if sub is None:
            break  # an unknown command: the top-level parser says so
        args = sub.parse_intermixed_args(argv[i + 1 :])
        args.command = arg
        if any(a.startswith("-") and a not in ("-",) for a in argv[:i]):
            parser.parse_args(argv[:i])  # --help / --version act; anything else is refused
        return args
    return parser.parse_args(argv)


def _run(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]], prog: str) -> int:
    args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    return _call(args, prog)


def _call(args: argparse.Namespace, prog: str) -> int:
    """Run ``args.func(args)``; expected errors become one line on stderr and status 2."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            if getattr(args, "json", False) and sys.stdout is None:  # refused before anything is written
                raise StreamError("stdout", _NOT_OPEN)
            status = int(args.func(args))
            _flush_stdout()  # a failed flush (> /dev/full) is an error, not a silent exit 0
            return status
    except StreamError as exc:
        committed = getattr(args, "committed", None)
        if exc.stream == "stdout":
            _detach_stdout()
        _eprint(f"{prog}: error: {exc}" + (f"; {committed}" if committed else ""))
        return 2
    except (MmapBloomError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _broken_pipe()
        committed = getattr(args, "committed", None)  # an add that stopped part-way says how far it got
        _eprint(
            f"{prog}: error: {_describe_error(exc, getattr(args, 'file', None))}"
            + (f"; {committed}" if committed else "")
        )
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (mmapbloom.termination)
        by = f" by {exc}" if isinstance(exc, TerminationSignal) else ""
        _eprint(f"{prog}: interrupted{by}")
        return exit_status(exc)


def _detach_stdout() -> None:
    """After a stdout failure: :func:`_detach` of stdout."""
    _detach(sys.stdout)


def _detach(stream: Optional[TextIO]) -> None:
    """After a failure of ``stream`` (stdout or stderr), point its fd at /dev/null and drop
    what is buffered, so the interpreter's flush at exit does not fail a second time (an
    'Exception ignored' message and status 120)."""
    if stream is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()
    except (OSError, ValueError):
        pass


def _broken_pipe() -> int:
    # The reader of stdout went away (``| head``): stop quietly, and keep Python from
    # failing again when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a process killed by SIGPIPE


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``mmapbloom`` command line.

    Args:
        argv: the arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status: 0 ok, 1 a check answered absent where presence was asked for,
        2 bad usage or a damaged or unreadable file (one line on stderr), 128 + the signal
        number interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; cleanup is the same).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    return run_main(lambda: _run(build_parser(), args, "mmapbloom"), "mmapbloom")


def merge_main(argv: Optional[Sequence[str]] = None, prog: str = "merge_shards.py") -> int:
    """The shard merger as a standalone command (``tools/merge_shards.py``): the same
    arguments and exit status as ``mmapbloom merge``."""
    parser = _Parser(prog=prog, description=_MERGE_DESCRIPTION, epilog=_MERGE_EPILOG, usage=_MERGE_USAGE)
    _add_merge_arguments(parser)
    return run_main(lambda: _run(parser, argv, prog), prog)
