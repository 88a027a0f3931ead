"""Merging: combine many BLM1 shard files into one filter, offline, in bounded memory.

A pipeline that builds one shard filter per worker (same m, k and strategy) merges them
here into one output by bitwise OR (union: the output contains every item of every shard)
or AND (intersection: the output contains at least every item added to all shards).

How it runs, and what it promises:

* **Validate first.** Every shard's header, length and padding are checked, and its m, k
  and strategy compared with the first shard's, before anything is written; each shard is
  opened, checked and closed again, one at a time. An incompatible shard is refused with
  :class:`~mmapbloom.errors.IncompatibleFiltersError`, naming the file, the field and
  both values.
* **Bounded memory, few open files.** The bit arrays are combined in chunks of
  ``chunk_bytes`` (default 16 MiB) with numpy: for each chunk, each shard in turn is
  opened, its chunk read with ``pread`` into one scratch buffer, combined into an
  accumulator, and closed. Memory is two chunks whatever the number and size of the
  shards, and at most one shard is open at a time (plus the output), so thousands of
  shards merge under a low open-file limit. A reopened shard must be the same file with
  the same size and header as when it was validated, or the merge stops with
  :class:`~mmapbloom.errors.MergeError`.
* **Atomic output.** :func:`merge_shards` builds the output under a temporary name in the
  output's directory (:func:`mmapbloom.files.atomic_file`), fsyncs it and publishes it
  with ``link`` (or ``rename`` over an existing file with ``replace=True``), then fsyncs
  the directory. A merge killed at any moment leaves either no output (or the old one) or
  the complete new one, never a torn file; a SIGKILLed merge can leave a
  ``.mmapbloom-<pid>-<random>.tmp`` file behind in that directory, which the next merge or
  create there removes once that pid is gone
  (:func:`mmapbloom.files.remove_stale_temporaries`). The command-line programs turn
  SIGTERM and SIGHUP into the same clean exit as Ctrl-C (:mod:`mmapbloom.termination`).
* **In place.** :func:`merge_into` ORs the shards into an existing filter file through its
  shared mapping, each chunk under the filter's write lock, so processes using that filter
  keep working: readers never see a bit cleared, writers wait at most one chunk.
* **Items added** of the output is the saturating sum of the shards' (union), or their
  minimum (intersection; the true count is unknown, and the minimum is an upper bound of
  the items added to every shard). It is written by the same rule as every filter's
  counter (:func:`mmapbloom.base.items_update`), so a merge whose count passes the
  output's design point (expected fill ratio above ``OVERFILL_RATIO``) warns with
  :class:`~mmapbloom.errors.OverCapacityWarning`, as ``add`` and ``union`` do: ten full
  shards of ``for_items(10_000, 0.01)`` merged into one filter of that size (real rate
  about 0.99) are reported, not silently published. ``mmapbloom info`` shows the approximate distinct count
  from the bits, so the overlap of the shards can be read off.

Cost: every shard's bit array is read once and the output written once; the combining
runs at memory bandwidth, so a merge is bound by reading the shards (page cache or disk)
and by the final fsync.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import os
import stat
import time
from typing import TYPE_CHECKING, Iterable, Optional, Sequence


from . import format as fmt
from . import scans
from .units import progress_bar
from .base import add_items, filter_storage, items_update
from ._warn import warn_user
from .errors import MergeError, OverCapacityWarning
from .filter import BloomFilter
from .hashing import get_strategy
from .config import BloomConfig
from .scalable import is_scalable
from .files import DEFAULT_FILE_MODE, absolute_path, atomic_file, reserve_space
from .keys import PathLike

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:
    from ._lazy import np, npt

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MergeResult",
    "ShardInfo",
    "expand_shard_args",
    "inspect_shards",
    "merge_into",
    "merge_shards",
]

#: Bytes of each shard combined per step; memory use is twice this.
DEFAULT_CHUNK_BYTES = 16 * 2**20

_GLOB_CHARS = frozenset("*?[")


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """A validated shard: its path, shape, items added and file identity.

    Attributes:
        path: absolute path.
        num_bits, num_hashes: m and k.
        strategy: the 4-character hash-strategy name.
        items_added: the header's items-added field when it was validated.
        size_bytes: file length, ``24 + ceil(m / 8)``.
        dev, ino: ``st_dev`` and ``st_ino``, to notice a file replaced during the merge.
    """

    path: str
    num_bits: int
    num_hashes: int
    strategy: str
    items_added: int
    size_bytes: int
    dev: int
    ino: int

    @property
    def config(self) -> BloomConfig:
        """The shard's shape (m, k, strategy) as a :class:`~mmapbloom.BloomConfig`, for the
        one compatibility check, :meth:`BloomConfig.check_compatible`."""
        return BloomConfig(num_bits=self.num_bits, num_hashes=self.num_hashes, strategy=get_strategy(self.strategy))


@dataclasses.dataclass(frozen=True)
class MergeResult:
    """What a merge did.

    Attributes:
        output: absolute path of the output (or of the target, in place).
        shards: number of shards merged.
        bytes_read: bytes of bit arrays read from the shards.
        seconds: wall-clock time of the whole merge, validation and fsync included.
        num_bits, num_hashes, strategy: the shape of the output.
        items_added: the output's items-added field afterwards.
        intersection: True for AND, False for OR.
        in_place: True for :func:`merge_into`.
    """

    output: str
    shards: int
    bytes_read: int
    seconds: float
    num_bits: int
    num_hashes: int
    strategy: str
    items_added: int
    intersection: bool
    in_place: bool

    @property
    def gb_per_s(self) -> float:
        """Throughput: ``bytes_read / seconds / 1e9`` (decimal gigabytes per second)."""
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        """One line: operation, shards, bytes, seconds, GB/s and the output."""
        op = "AND" if self.intersection else "OR"
        where = "into" if self.in_place else "->"
        noun = "shard" if self.shards == 1 else "shards"
        return (
            f"merged {self.shards} {noun} ({op}): {self.bytes_read:,} bytes in {self.seconds:.3f} s, "
            f"{self.gb_per_s:.2f} GB/s {where} {self.output} (items added {self.items_added:,})"
        )


# -- shard lists ----------------------------------------------------------------------
def expand_shard_args(args: Iterable[str]) -> list[str]:
    """Turn command-line shard arguments into a list of paths, in order.

    * ``@FILE``: read paths from FILE, one per line (a trailing ``\\n`` or ``\\r\\n`` is
      removed; empty lines and lines starting with ``#`` are skipped). Each line is then
      treated like a plain argument (so it may be a glob). Relative paths are relative to
      the current directory, not to FILE. Lists do not nest.
    * An argument that names an existing path is taken literally (even if it contains
      ``*``, ``?`` or ``[``).
    * Otherwise, an argument containing ``*``, ``?`` or ``[`` is a glob pattern
      (``**`` recurses), expanded in sorted order; it must match at least one path.
    * Anything else is taken as a path (a missing one is reported when it is opened).

    Args:
        args: the arguments (strings).

    Returns:
        The paths, in argument order (globs sorted within themselves). Duplicates are kept
        here; :func:`inspect_shards` refuses them.

    Raises:
        FileNotFoundError: a list file is missing, or a glob matches nothing.
        OSError: a list file cannot be read.
    """
    out: list[str] = []
    for arg in args:
        if arg.startswith("@"):
            with open(arg[1:], "rb") as listing:
                for raw in listing:
                    line = os.fsdecode(_strip_newline(raw))
                    if line and not line.startswith("#"):
                        out.extend(_expand_one(line))
        else:
            out.extend(_expand_one(arg))
    return out


def _strip_newline(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _expand_one(arg: str) -> list[str]:
    if os.path.lexists(arg) or not _GLOB_CHARS.intersection(arg):
        return [arg]
    matches = sorted(glob.glob(arg, recursive=True))
    if not matches:
        raise FileNotFoundError(errno.ENOENT, "no file matches the pattern", arg)
    return matches


# -- validation -----------------------------------------------------------------------
def _read_shard_header(fd: int, path: str) -> tuple[fmt.Header, os.stat_result]:
    """Validate an open shard without trusting it: regular file, header, length, padding."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            _refuse_scalable(path)
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a filter file", path)
        raise OSError(errno.EINVAL, "not a regular file", path)
    # The one image validator of every reader (format.validate_image): two small preads.
    header = fmt.validate_image(lambda offset, count: os.pread(fd, count, offset), st.st_size, source=path)
    return header, st


def _refuse_scalable(path: str) -> None:
    """MergeError for a scalable filter's directory (as shard or ``merge_into`` target)."""
    if is_scalable(path):
        raise MergeError(
            f"{path}: a scalable filter (a directory of layers); merging scalable filters is not "
            "supported: merge plain BLM1 files, or add the items to one scalable filter",
            path=path,
        )


def _open_shard(path: str) -> int:
    # O_NONBLOCK: a FIFO named as a shard must not hang the open (no effect on files).
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def _inspect_one(path: PathLike) -> ShardInfo:
    apath = absolute_path(path)
    fd = _open_shard(apath)
    try:
        header, st = _read_shard_header(fd, apath)
    finally:
        os.close(fd)
    return ShardInfo(
        apath,
        header.num_bits,
        header.num_hashes,
        header.strategy.name,
        header.items_added,
        st.st_size,
        st.st_dev,
        st.st_ino,
    )


def inspect_shards(paths: Sequence[PathLike]) -> list[ShardInfo]:
    """Validate every shard and check that all are compatible, opening one file at a time.

    Each file is opened, checked like ``mmapbloom verify`` (regular file, magic, strategy,
    m >= 1, k >= 1, length exactly ``24 + ceil(m / 8)``, zero padding bits) and closed.
    Cost: O(1) per shard (two small ``pread`` calls), whatever its size.

    Args:
        paths: the shard files, at least one.

    Returns:
        One :class:`ShardInfo` per path, in order.

    Raises:
        MergeError: no paths, one file named twice (same device and inode, so hard
            links and different spellings of a path count as the same file), or a
            scalable filter's directory (not mergeable).
        IncompatibleFiltersError: a shard's num_bits, num_hashes or strategy differs from the
            first shard's; the message names the file, the field and both values.
        FormatError subclasses: a damaged shard (the message names the file).
        OSError: a shard cannot be opened or read, or is not a regular file.
    """
    if not paths:
        raise MergeError("no shards to merge")
    infos: list[ShardInfo] = []
    seen: dict[tuple[int, int], str] = {}
    first: Optional[BloomConfig] = None
    for path in paths:
        info = _inspect_one(path)
        twin = seen.get((info.dev, info.ino))
        if twin is not None:
            raise MergeError(
                f"{info.path}: the same file is named twice among the shards (also as {twin})", path=info.path
            )
        seen[(info.dev, info.ino)] = info.path
        if first is None:
            first = info.config
        else:
            # "OTHER vs FIRST: incompatible filters: num_bits differs (OTHER's != FIRST's)".
            info.config.check_compatible(first, where=f"{info.path} vs {infos[0].path}")
        infos.append(info)
    return infos


# -- the combining loop ----------------------------------------------------------------
def _read_chunk(shard: ShardInfo, offset: int, out: npt.NDArray[np.uint8]) -> None:
    """Reopen ``shard``, check it is still the validated file, read ``out.size`` bytes of its
    bit array from ``offset`` into ``out``, close it."""
    fd = _open_shard(shard.path)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_size) != (shard.dev, shard.ino, shard.size_bytes):
            raise MergeError(f"{shard.path}: shard was replaced or resized during the merge", path=shard.path)
        header = fmt.parse_header(os.pread(fd, fmt.HEADER_SIZE, 0), source=shard.path)
        if (header.num_bits, header.num_hashes, header.strategy.name) != (
            shard.num_bits,
            shard.num_hashes,
            shard.strategy,
        ):
            raise MergeError(f"{shard.path}: shard header changed during the merge", path=shard.path)
        view = memoryview(out)  # type: ignore[arg-type]
        pos = fmt.HEADER_SIZE + offset
        done = 0
        while done < out.size:
            try:
                got = os.preadv(fd, [view[done:]], pos + done)
            except OSError as exc:  # e.g. EIO: name the shard, not the output being built
                raise type(exc)(exc.errno, exc.strerror, shard.path) from None
            if got == 0:
                raise MergeError(f"{shard.path}: shard was truncated during the merge", path=shard.path)
            done += got
    finally:
        os.close(fd)


def _combine(dst: npt.NDArray[np.uint8], src: npt.NDArray[np.uint8], intersection: bool) -> None:
    """``dst |= src`` (or ``&=``), on 64-bit words where the length allows."""
    whole = dst.size & ~7
    op = np.bitwise_and if intersection else np.bitwise_or
    if whole:
        d64, s64 = dst[:whole].view(np.uint64), src[:whole].view(np.uint64)
        op(d64, s64, out=d64)
    if whole != dst.size:
        op(dst[whole:], src[whole:], out=dst[whole:])


class _Progress:
    """A tqdm bar over bytes, or nothing."""

    def __init__(self, total: int, enabled: Optional[bool], desc: str):
        self._bar = progress_bar(total, desc, enabled)

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _chunks(body: int, chunk_bytes: int) -> Iterable[tuple[int, int]]:
    for start in range(0, body, chunk_bytes):
        yield start, min(chunk_bytes, body - start)


def _accumulate(
    shards: Sequence[ShardInfo],
    start: int,
    acc: npt.NDArray[np.uint8],
    scratch: npt.NDArray[np.uint8],
    intersection: bool,
    progress: _Progress,
) -> None:
    """Fill ``acc`` with the OR (or AND) of every shard's bytes ``[start, start + acc.size)``."""
    _read_chunk(shards[0], start, acc)
    progress.update(acc.size)
    for shard in shards[1:]:
        _read_chunk(shard, start, scratch)
        _combine(acc, scratch, intersection)
        progress.update(scratch.size)


def _check_chunk_bytes(chunk_bytes: int) -> int:
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise MergeError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    return (chunk_bytes + 7) & ~7  # whole 64-bit words


def _pwrite_all(fd: int, data: npt.NDArray[np.uint8], offset: int) -> None:
    view = memoryview(data)  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _sum_items(values: Iterable[int], intersection: bool) -> int:
    values = list(values)
    return min(values) if intersection else sum(values)


# -- public entry points ----------------------------------------------------------------
def merge_shards(
    output: PathLike,
    shards: Sequence[PathLike],
    *,
    intersection: bool = False,
    replace: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Optional[bool] = None,
    mode: int = DEFAULT_FILE_MODE,
) -> MergeResult:
    """Merge shard files into a new filter file ``output``, atomically.

    Args:
        output: the file to write. Its directory must exist and be writable; the output is
            built there under a temporary name and published when complete.
        shards: the shard files (at least one; see :func:`expand_shard_args` for ``@list``
            and globs). ``output`` may be among them when ``replace`` is True (it is read
            before it is replaced).
        intersection: AND instead of OR. The output then contains at least every item
            added to all shards; items added is the minimum of the shards'.
        replace: replace an existing ``output`` atomically (readers that have the old file
            open keep the old file); if False an existing ``output`` is refused.
        chunk_bytes: bytes combined per step (rounded up to a multiple of 8); memory use is
            about twice this.
        progress: a tqdm bar over bytes on stderr; ``None`` (default) shows it only when
            stderr is a terminal.
        mode: permission bits of the new file, masked by the umask.

    Returns:
        A :class:`MergeResult`.

    Warns:
        OverCapacityWarning: the output's items added is past its design point (emitted
        once the output is published).

    Raises:
        FileExistsError: ``output`` exists and ``replace`` is False (checked before any
            shard is read; nothing is written).
        MergeError, IncompatibleFiltersError, FormatError, OSError: as
            :func:`inspect_shards`, before anything is written; and ``MergeError`` if a shard
            changes while it is read. Nothing appears at ``output`` in any of these cases,
            nor if the process is killed (a ``.mmapbloom-<pid>-*.tmp`` file may be left after
            SIGKILL; the next merge or create in that directory removes it).
        OSError: writing failed, e.g. ``ENOSPC`` (nothing is published).

    Thread and process safety: shards may be read by other processes meanwhile, and even
    written (bits only get set, so OR stays correct; an add racing the merge may or may
    not be in the output). The output is invisible until it is complete.
    """
    t0 = time.perf_counter()
    chunk = _check_chunk_bytes(chunk_bytes)
    dest = absolute_path(output)
    if os.path.isdir(dest) and not os.path.islink(dest):
        raise IsADirectoryError(errno.EISDIR, "is a directory; the output must name a file", dest)
    if not replace and os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "file exists (pass replace=True to replace it)", dest)
    infos = inspect_shards(shards)
    first = infos[0]
    body = fmt.body_size(first.num_bits)
    # The one rule for the counter (saturating; the OverCapacityWarning, emitted once the
    # output is published): base.items_update, as every filter handle's writes.
    items, over = items_update(
        _sum_items((s.items_added for s in infos), intersection),
        first.num_bits,
        first.num_hashes,
        source=dest,
        strategy=first.config.strategy,
    )
    acc = np.empty(min(chunk, body), dtype=np.uint8)
    scratch = np.empty_like(acc)
    bar = _Progress(body * len(infos), progress, "merge")
    try:
        with atomic_file(dest, replace=replace, mode=mode) as fd:
            reserve_space(fd, fmt.HEADER_SIZE + body, sparse=False)  # ENOSPC now, not midway
            for start, size in _chunks(body, chunk):
                _accumulate(infos, start, acc[:size], scratch[:size], intersection, bar)
                _pwrite_all(fd, acc[:size], fmt.HEADER_SIZE + start)
            os.pwrite(fd, fmt.pack_header(first.strategy, first.num_bits, first.num_hashes, items), 0)
    finally:
        bar.close()
    if over is not None:
        warn_user(over, OverCapacityWarning)
    return MergeResult(
        dest,
        len(infos),
        body * len(infos),
        time.perf_counter() - t0,
        first.num_bits,
        first.num_hashes,
        first.strategy,
        items,
        intersection,
        in_place=False,
    )


def merge_into(
    target: PathLike,
    shards: Sequence[PathLike],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Optional[bool] = None,
    flush: bool = True,
) -> MergeResult:
    """OR shard files into an existing filter file in place, while others may use it.

    All shards are validated and compared with the target before any bit is changed. Then,
    for each chunk, the shards' bytes are ORed into a buffer (no lock held while reading)
    and the buffer is ORed into the target's shared mapping under the target's write lock
    (:meth:`BloomFilter.write_lock`: its thread lock and exclusive ``flock``). Finally, under
    the lock, the target's items added is raised by the shards' sum (saturating; an
    ``OverCapacityWarning`` past the design point, as for ``add``), and the mapping is
    flushed (``msync``) if ``flush``.

    Processes using the target meanwhile keep working: readers take no lock and never see
    a bit cleared (an item of a shard may be visible before the merge returns); writers wait
    at most one chunk. The merge is not atomic: if it is killed midway the target holds the
    bits of the chunks merged so far (still a sound filter, all its own items still present)
    and its items added is unchanged; running the same merge again completes it, since OR
    is idempotent.

    Intersection in place is refused: it would clear bits under the target's users, which
    then lose items they added. Write a new output with :func:`merge_shards` instead.

    Args:
        target: an existing, writable filter file with the shards' m, k and strategy.
        shards: the shard files (at least one, the target not among them).
        chunk_bytes, progress: as :func:`merge_shards`.
        flush: ``msync`` the target at the end so the merge survives power loss.

    Returns:
        A :class:`MergeResult` (``in_place`` True).

    Warns:
        OverCapacityWarning: the target's items added passes its design point (once per
        call, after the lock is released).

    Raises:
        MergeError: the target is among the shards (it would count its items twice), the
            target or a shard is a scalable filter's directory, or a shard changed during
            the merge.
        IncompatibleFiltersError: a shard differs from the target (num_bits, num_hashes or
            strategy); nothing is changed.
        FormatError, OSError: a damaged or unreadable target or shard; nothing is changed.
    """
    t0 = time.perf_counter()
    chunk = _check_chunk_bytes(chunk_bytes)
    if not shards:
        raise MergeError("no shards to merge")
    _refuse_scalable(os.fspath(target))
    with BloomFilter.open(target) as f:
        tpath = f.path or absolute_path(target)
        storage = filter_storage(f)  # the storage object's interface (storage.py), never its fields
        tfd = storage.fd
        assert tfd is not None  # opened from a file
        tst = os.fstat(tfd)
        mine = ShardInfo(tpath, f.num_bits, f.num_hashes, f.strategy.name, 0, f.size_bytes, tst.st_dev, tst.st_ino)
        infos = inspect_shards(shards)
        for info in infos:
            if (info.dev, info.ino) == (mine.dev, mine.ino):
                raise MergeError(f"{info.path}: the target is also named as a shard", path=info.path)
            info.config.check_compatible(f.config, where=f"{info.path} vs {tpath}")
        body = fmt.body_size(mine.num_bits)
        hs = storage.body_range()[0]  # the cells' offset in the image
        acc = np.empty(min(chunk, body), dtype=np.uint8)
        scratch = np.empty_like(acc)
        bar = _Progress(body * len(infos), progress, "merge")
        try:
            for start, size in _chunks(body, chunk):
                part = acc[:size]
                _accumulate(infos, start, part, scratch[:size], False, bar)
                with f.write_lock():
                    # Guarded (mmapbloom.scans): truncated before or during the OR raises
                    # LengthMismatchError, never SIGBUS.
                    scans.combine(storage, hs + start, part, 0, size, scans.OP_OR)
            # The one writer of the counter: saturating, OverCapacityWarning past the design point.
            items = add_items(f, sum(s.items_added for s in infos))
        finally:
            bar.close()
        if flush:
            f.flush()
    return MergeResult(
        tpath,
        len(infos),
        body * len(infos),
        time.perf_counter() - t0,
        mine.num_bits,
        mine.num_hashes,
        mine.strategy,
        items,
        intersection=False,
        in_place=True,
    )
