"""Shard builds on Dask: one BLM1 shard per partition, written by the worker that holds it,
then merged with :func:`mmapbloom.merge.merge_shards`. Needs the ``[dask]`` extra
(the ``dask`` extra, from the checkout or the wheel, never by name from an index: ``pip install -e '.[dask]'``; ``dask[bag,dataframe]`` and ``distributed``).

::

    import dask.bag as db
    from mmapbloom import BloomConfig
    from mmapbloom.dask import build

    urls = db.read_text("s3://crawl/urls-*.txt").map(str.rstrip)    # or df["url"]
    build(urls, BloomConfig.for_items(10**9, 0.01), "/shared/urls.blm")

How it runs:

* :func:`build_shards` adds to the collection's graph one task per partition that depends
  on that partition only. On a Bag it is a graph layer over the Bag's partitions, which
  Dask fuses with the tasks that produce each partition: one task per partition reads,
  transforms, adds and writes, so the partition is never an intermediate result that the
  scheduler could ship to another worker (a lazy Bag partition looks tiny to the
  scheduler and, once moved, is pickled whole). On a Series it is a ``map_partitions``
  task (with ``partition_info``); the pandas partition it reads has a size the scheduler
  knows, so the scheduler normally keeps it with its worker, as for any Dask DataFrame
  operation.
  The task creates ``DIRECTORY/shard-NNNNN.blm`` with
  :meth:`BloomFilter.create <mmapbloom.filter.BloomFilter.create>` (atomic: built under a
  temporary name and published complete), adds the partition with ``update`` in chunks,
  flushes it (``msync``) and returns only the path: the bits never travel through the scheduler
  or the client. The shard directory must therefore be visible to every worker and to
  the process that merges (a shared file system on a real cluster; any local directory
  on a ``LocalCluster`` or Dask's default local schedulers).
* Disk: one shard per partition, each the full filter size (``24 + m / 8`` bytes), so
  repartition to a few partitions per worker before building a large filter
  (``bag.repartition(npartitions=...)``): 16 partitions of a 12 GB filter need 192 GB of
  shard space next to the output (see docs/SCALING.md).
* :func:`build` builds the shards in a temporary directory next to the output, merges
  them with :func:`~mmapbloom.merge.merge_shards` (bitwise OR, streamed in bounded memory,
  atomic output) or, with ``into=True``, ORs them into an existing filter in place with
  :func:`~mmapbloom.merge.merge_into`, then removes the shards.
* Scheduler: the ``client`` argument (a ``distributed.Client``) if given, else whatever
  ``dask.compute`` uses: the current default ``distributed`` client if one exists (a
  ``Client(...)`` made in this process, e.g. ``Client("tcp://scheduler:8786")``), else the
  collection's default local scheduler (threads for DataFrames, processes for Bags).

What the result is:

* The bit array is exactly that of one filter built by one process from the same items,
  in any order and partitioning (a Bloom filter's bits are the OR of its items' bits),
  and so is the header except the items-added counter.
* Items added is the saturating sum of the shards' counters (each counts the adds that
  set at least one bit *in its shard*). It equals the single-process count when no item
  is "not new" across shards, that is, no item appears in two partitions and no item of
  one partition is a false positive of the others' bits at its add. Otherwise it is
  larger (an item repeated in 3 partitions counts 3 times; it never exceeds the number of
  items, and never undercounts distinct items apart from within-shard false positives).
  :meth:`~mmapbloom.filter.BloomFilter.approx_items` estimates distinct items from the
  bits whatever the partitioning. Deduplicate first (``bag.distinct()``,
  ``series.drop_duplicates()``) if the counter must be exact for repeated items.

Hash strategies are sent to workers by name and looked up with
:func:`~mmapbloom.hashing.get_strategy`, so a custom strategy must be registered in the
worker processes too (e.g. by importing the module that registers it in a worker plugin).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import importlib.util
import itertools
import os
import re
import shutil
import uuid
from typing import Any, Iterable, Optional

from .filter import BloomFilter
from .handle import CHUNK_KEYS
from .hashing import get_strategy
from .merge import DEFAULT_CHUNK_BYTES, merge_into, merge_shards
from .config import BloomConfig
from .errors import NoSpaceError
from .files import about_destination, absolute_path, publish_file, temporary_directory, temporary_path
from .keys import PathLike

__all__ = ["SHARD_CHUNK_ITEMS", "build", "build_shards"]

#: Items handed to ``BloomFilter.update`` at a time inside a shard task (bounds the
#: temporary memory of hashing to a few tens of MB whatever the partition size).
SHARD_CHUNK_ITEMS = CHUNK_KEYS


def _require_dask() -> Any:
    try:
        import dask
        import dask.bag
        import dask.dataframe
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "mmapbloom.dask needs dask[bag,dataframe] and distributed (the dask extra: pip install -e '.[dask]' "
            f"in the checkout, or the wheel's path with [dask]); {exc}"
        ) from exc
    return dask


def _shard_collection(collection: Any, shape: tuple[int, int, str], root: str, prefix: str, overwrite: bool) -> Any:
    """A collection with one shard-writing task per partition of ``collection``, each
    depending on that partition only, so that Dask fuses it with the tasks that produce
    the partition (one task: read, transform, add, write; the partition is never an
    intermediate result that the scheduler could move to another worker)."""
    _require_dask()
    import dask.bag as db
    import dask.dataframe as dd

    def path(i: int) -> str:
        return os.path.join(root, f"{prefix}-{i:05d}.blm")

    coll: Any = collection  # dask's annotations are partial
    if isinstance(collection, db.Bag):
        from dask.highlevelgraph import HighLevelGraph

        name = f"mmapbloom-shards-{uuid.uuid4().hex}"  # never a cached result: always run
        layer: dict[Any, Any] = {
            (name, i): (_bag_shard, (coll.name, i), shape, path(i), overwrite, i) for i in range(coll.npartitions)
        }
        graph = HighLevelGraph.from_collections(name, layer, dependencies=[coll])
        return db.Bag(graph, name, coll.npartitions)
    if isinstance(collection, dd.Series):
        pd: Any = importlib.import_module("pandas")
        # The uuid makes the task keys new on every call (no cached result is reused).
        return coll.map_partitions(
            _series_shard,
            shape,
            root,
            prefix,
            overwrite,
            uuid.uuid4().hex,
            meta=pd.Series([], dtype=object),
            enforce_metadata=False,
            align_dataframes=False,
        )
    if isinstance(collection, dd.DataFrame):
        raise TypeError(
            "build_shards takes a Dask Bag or ONE DataFrame column (a Dask Series, "
            f"e.g. df['url']), got a DataFrame with columns {list(collection.columns)}"
        )
    raise TypeError(f"build_shards takes a Dask Bag or a Dask Series, got {type(collection).__name__}")


def _bag_shard(partition: Any, shape: tuple[int, int, str], path: str, overwrite: bool, index: int) -> list[str]:
    return [_build_shard(partition, shape, path, overwrite, index)]


def _series_shard(
    partition: Any,
    shape: tuple[int, int, str],
    root: str,
    prefix: str,
    overwrite: bool,
    token: str,
    partition_info: Optional[dict[str, Any]] = None,
) -> Any:
    pd: Any = importlib.import_module("pandas")
    if partition_info is None:  # meta inference on an empty frame: write nothing
        return pd.Series([], dtype=object)
    index = int(partition_info["number"])
    path = os.path.join(root, f"{prefix}-{index:05d}.blm")
    return pd.Series([_build_shard(partition, shape, path, overwrite, index)], dtype=object)


def _columnar(partition: Any) -> bool:
    """True if a pandas partition can go to ``update`` as an Arrow column (pandas exports
    ``__arrow_c_stream__`` through pyarrow, so pyarrow must be importable)."""
    return hasattr(type(partition), "__arrow_c_stream__") and importlib.util.find_spec("pyarrow") is not None


def _chunks(partition: Any) -> Iterable[Any]:
    """A partition's items in batches of at most SHARD_CHUNK_ITEMS: slices of a pandas
    Series (read as Arrow columns by ``update``: no Python object per item; a missing
    value is a null, never added; without pyarrow, the slices as dtype object, where a
    missing value is still a null) or lists (other iterables)."""
    if hasattr(partition, "iloc") and hasattr(partition, "tolist"):  # pandas Series
        columnar = _columnar(partition)
        for start in range(0, len(partition), SHARD_CHUNK_ITEMS):
            part = partition.iloc[start : start + SHARD_CHUNK_ITEMS]
            # without pyarrow, a Series of Python objects: missing values stay nulls
            yield part if columnar else part.astype(object)
        return
    items = iter(partition)
    while True:
        chunk = list(itertools.islice(items, SHARD_CHUNK_ITEMS))
        if not chunk:
            return
        yield chunk


def _build_shard(partition: Any, shape: tuple[int, int, str], path: str, overwrite: bool, index: int) -> str:
    """Worker side: write one partition to a shard file and return its path.

    The shard is built under a temporary name ``.mmapbloom-<pid>-<random>.tmp`` in the
    shard directory and published at ``path`` (``link``, or an atomic ``rename`` with
    ``overwrite``) only after its last chunk is added and msynced, so a worker killed
    midway (OOM, SIGKILL, ``os._exit``) never leaves a partial file under a shard's name,
    and the retry that Dask schedules starts clean. The temporary carries the filter's
    ``flock`` while it is built (:func:`~mmapbloom.files.remove_stale_temporaries`
    leaves it alone, even from another host); a dead worker's leftover is removed by
    the next create or merge in that directory once its pid is gone, and by
    :func:`build` with its whole shard directory."""
    config = BloomConfig(num_bits=shape[0], num_hashes=shape[1], strategy=get_strategy(shape[2]))
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    if not overwrite and os.path.lexists(path):  # fail before the work, not after it
        raise FileExistsError(errno.EEXIST, "shard file exists (pass overwrite=True to replace it)", path)
    tmp = temporary_path(directory)
    try:
        with BloomFilter.create(tmp, config) as f, f.write_lock():
            for chunk in _chunks(partition):
                f.update(chunk)
            f.flush()  # msync: a merger on another host of a shared file system sees the bits
            publish_file(tmp, path, replace=overwrite)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # never leave a partial shard behind
        if isinstance(exc, TypeError):
            raise TypeError(
                f"partition {index}: {exc} (items must be str, bytes-like or int; a column "
                "of another type must be converted first, e.g. series.astype(str))"
            ) from exc
        if isinstance(exc, OSError) and tmp in str(exc):
            raise about_destination(exc, tmp, path) from None
        raise
    return path


def _shape(config: BloomConfig) -> tuple[int, int, str]:
    if not isinstance(config, BloomConfig):
        raise TypeError(f"config must be a BloomConfig, got {type(config).__name__}")
    return (config.num_bits, config.num_hashes, config.strategy.name)


def _compute(shards: Any, client: Any) -> list[str]:
    dask = _require_dask()
    if client is not None:
        result = client.compute(shards).result()
    else:
        (result,) = dask.compute(shards)
    return [str(p) for p in (result.tolist() if hasattr(result, "tolist") else result)]


def build_shards(
    collection: Any,
    config: BloomConfig,
    directory: PathLike,
    *,
    client: Any = None,
    prefix: str = "shard",
    overwrite: bool = False,
) -> list[str]:
    """Write each partition of ``collection`` to its own BLM1 shard file, on the worker
    that holds the partition; return the shard paths in partition order.

    Args:
        collection: a ``dask.bag.Bag`` of items (str, bytes-like or int), or a Dask
            DataFrame column (``dask.dataframe.Series``) of them. ``str`` is hashed as UTF-8,
            so a line read as text and the same line read as bytes give the same bits. A
            column's partitions are added as Arrow columns (no Python object per item;
            needs pyarrow on the workers, else they are converted to lists), so its
            missing values are nulls: never added.
        config: the shape of every shard (and of the merged filter).
        directory: where the shards go (created if missing, by the client and by each
            task); must be visible to every worker and to whoever merges them. Made
            absolute on the client, so workers with another working directory agree.
        client: a ``distributed.Client`` to run on; ``None`` uses ``dask.compute`` (the
            current default client if any, else the local scheduler).
        prefix: shard file names are ``{prefix}-{index:05d}.blm``.
        overwrite: replace existing shard files (atomically); if False an existing shard
            file makes its task fail with ``FileExistsError``.

    Returns:
        Absolute shard paths, one per partition (an empty partition gives an empty shard).

    Raises:
        TypeError: ``config`` is not a BloomConfig; ``collection`` is not a Bag or Series
            (a whole DataFrame is refused: pick a column); an item or a column type
            that is not a key type (e.g. float; the message names the partition).
        FileExistsError: a shard file exists and ``overwrite`` is False. Shards that other
            tasks completed stay in ``directory``; a task that fails removes its own
            partial shard.
        OSError: from creating the files (ENOSPC ...). ImportError: dask is not installed.
        Other exceptions from computing the collection itself, as Dask re-raises them.

    Process safety: every task writes only its own file; the call is as safe to run
    concurrently as two Dask computations are, provided the shard names differ.
    """
    shape = _shape(config)
    root = absolute_path(directory)
    shards = _shard_collection(collection, shape, root, prefix, overwrite)
    os.makedirs(root, exist_ok=True)
    return _compute(shards, client)


def build(
    collection: Any,
    config: BloomConfig,
    path: PathLike,
    *,
    client: Any = None,
    overwrite: bool = False,
    into: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    progress: Optional[bool] = False,
) -> str:
    """Build one filter file at ``path`` from a Dask collection: shards on the workers
    (:func:`build_shards`), then one streamed OR merge, then the shards are removed.

    The shards live in a temporary directory ``.mmapbloom-shards-*`` next to ``path`` (so
    the merge reads them from the output's file system; it must be visible to every
    worker). It is removed whatever happens, except if this process is killed.

    Args:
        collection: a Dask Bag or Series of str/bytes-like items (see :func:`build_shards`).
        config: the filter's shape; with ``into=True`` it must equal the existing file's.
        path: the output file.
        client: a ``distributed.Client``, or None (see :func:`build_shards`).
        overwrite: replace an existing file at ``path`` atomically (readers that have the
            old file open keep it); otherwise an existing ``path`` is refused up front.
        into: OR the shards into the EXISTING filter at ``path``, in place, while other
            processes may use it (:func:`~mmapbloom.merge.merge_into`); its items added
            is raised by the shards' sum.
        chunk_bytes, progress: for the merge (memory is about twice ``chunk_bytes``;
            ``progress=None`` shows a bar when stderr is a terminal).

    Returns:
        The absolute path of the output.

    Raises:
        FileExistsError: ``path`` exists and neither ``overwrite`` nor ``into`` is set
            (checked before anything is computed).
        FileNotFoundError: ``into=True`` and ``path`` does not exist.
        IncompatibleFiltersError (a ``ValueError``): ``into=True`` and the existing
            file's m, k or strategy differ from ``config`` (checked before anything is
            computed; the message names the field and both values).
        ValueError: ``overwrite`` and ``into`` both set.
        And whatever :func:`build_shards` and the merge raise; nothing is published at
        ``path`` then (with ``into=True`` the target is unchanged unless the merge itself
        fails midway, which leaves it with a subset of the new bits, never fewer than before).

    The result: see the module docstring (bits equal to a single-process build; items
    added is the sum of the shards' counts).
    """
    _shape(config)
    dest = absolute_path(path)
    if overwrite and into:
        raise ValueError("overwrite=True and into=True exclude each other")
    if into:
        with BloomFilter.open(dest, readonly=True) as existing:
            existing.config.check_compatible(config, where=dest)
    elif not overwrite and os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "file exists (pass overwrite=True to replace it)", dest)
    directory = os.path.dirname(dest) or "."
    shards_dir = ""
    try:
        with temporary_directory(directory) as (shards_dir, _):
            try:
                # overwrite=True: a retried task whose first attempt died after publishing
                # replaces that (identical) shard instead of failing.
                shards = build_shards(collection, config, shards_dir, client=client, overwrite=True)
                if not shards:  # a collection without partitions: an empty filter (or no change)
                    if not into:
                        BloomFilter.create(dest, config, overwrite=overwrite).close()
                elif into:
                    merge_into(dest, shards, chunk_bytes=chunk_bytes, progress=progress)
                else:
                    merge_shards(dest, shards, replace=overwrite, chunk_bytes=chunk_bytes, progress=progress)
            finally:
                shutil.rmtree(shards_dir, ignore_errors=True)
    except OSError as exc:
        # The shard directory is internal: name the output the user asked for.
        if os.path.join(directory, ".mmapbloom-") in str(exc) or (shards_dir and shards_dir in str(exc)):
            raise _about_output(exc, dest) from None
        raise
    return dest


def _about_output(exc: OSError, dest: str) -> OSError:
    """``exc``, met in the internal shard directory, reworded to name ``dest``."""
    internal = re.compile(
        re.escape(os.path.join(os.path.dirname(dest) or ".", "")) + r"\.mmapbloom-[0-9]+-[0-9a-f]+\.tmp/?"
    )
    if isinstance(exc, NoSpaceError):
        text = internal.sub("", str(exc))
        return NoSpaceError(
            f"{dest}: {text} (building the shards in a temporary directory next to it)",
            path=dest,
            needed=exc.needed,
            available=exc.available,
        )
    if exc.errno is None:
        return exc
    shard = internal.sub("", str(exc.filename)) if exc.filename else ""
    what = f"{shard}, " if shard else ""
    return type(exc)(
        exc.errno,
        f"{internal.sub('', str(exc.strerror))} ({what}building the shards in a temporary directory next to it)",
        dest,
    )
