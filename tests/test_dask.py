"""Shard builds on Dask: byte equality with a single-process build, on the default local
schedulers and on a real-process LocalCluster; errors before anything is computed."""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

import pytest

pytest.importorskip("dask")
pytest.importorskip("distributed")

import dask  # noqa: E402
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402

from mmapbloom import BloomConfig, BloomFilter, IncompatibleFiltersError, get_strategy  # noqa: E402
from mmapbloom.dask import build, build_shards  # noqa: E402

pytestmark = pytest.mark.slow

STRATEGY = get_strategy("M3KM")
N = 20_000
# Sized so that no item is a false positive at its add (checked below): then even the
# items-added counter of the merged filter equals the single-process one.
EXACT = BloomConfig.for_items(N, 1e-7, strategy=STRATEGY)


def _urls(n: int, tag: str = "u") -> list[str]:
    return [f"https://{tag}{i % 797}.example.org/page/{i}" for i in range(n)]


def _single(items: list[Any], cfg: BloomConfig) -> BloomFilter:
    f = BloomFilter(cfg)
    f.update(items)
    return f


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=False) as c:
        yield c


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def test_bag_on_the_default_local_scheduler_equals_a_single_process_build(tmp_path: Any) -> None:
    items = _urls(N)
    single = _single(items, EXACT)
    assert single.items_added == N  # no false positive at any add: the counters can agree
    bag = db.from_sequence(items, npartitions=4)
    out = build(bag, EXACT, tmp_path / "bag.blm")
    assert out == str(tmp_path / "bag.blm")
    assert _read(out) == single.to_bytes()
    assert os.listdir(tmp_path) == ["bag.blm"]  # the shard directory is gone


def test_bag_and_column_on_a_local_cluster_run_on_the_workers(
    tmp_path: Any, client: Client, cluster: LocalCluster
) -> None:
    items = _urls(N)
    expected = _single(items, EXACT).to_bytes()
    bag = db.from_sequence(items, npartitions=6)
    with get_task_stream(client) as stream:
        shards = build_shards(bag, EXACT, tmp_path / "shards", client=client)
    assert shards == [str(tmp_path / "shards" / f"shard-{i:05d}.blm") for i in range(bag.npartitions)]
    # One fused task per partition (made the items, wrote the shard), run by a worker,
    # which received no data from another worker (only the finalize step gathers paths).
    ran = [
        t
        for t in stream.data
        if "mmapbloom-shards" in str(t["key"][0] if isinstance(t["key"], tuple) else t["key"])
        and not str(t["key"][0]).startswith("mmapbloom-shards")
    ]
    assert len(ran) == bag.npartitions > 2
    assert {t["worker"] for t in ran} <= set(cluster.scheduler_info["workers"])
    assert not [ss for t in ran for ss in t["startstops"] if ss["action"] == "transfer"]
    per_shard = [BloomFilter.open(p, readonly=True) for p in shards]
    assert sum(f.items_added for f in per_shard) == N
    for f in per_shard:
        f.close()

    frame = dd.from_pandas(pd.DataFrame({"url": items, "n": range(N)}), npartitions=5)
    out = build(frame["url"], EXACT, tmp_path / "col.blm", client=client)
    assert _read(out) == expected
    # The same items as bytes give the same filter (str is hashed as UTF-8).
    out = build(db.from_sequence([s.encode() for s in items], npartitions=3), EXACT, tmp_path / "b.blm", client=client)
    assert _read(out) == expected


@pytest.mark.parametrize("name", ["M3M2", "M3B2"])
def test_new_strategies_build_the_single_process_bytes(tmp_path: Any, name: str) -> None:
    """The strategy travels to the workers by name; the merged file equals a local build."""
    cfg = BloomConfig.for_items(5000, 0.01, strategy=get_strategy(name))
    items = _urls(5000, "s") + [""]
    out = build(db.from_sequence(items, npartitions=3), cfg, tmp_path / f"{name}.blm")
    got, want = _read(out), _single(items, cfg).to_bytes()
    # The bits and the header's shape; items added is the shards' sum, larger by the items
    # that were false positives of the single filter when added (see the module docstring).
    assert got[24:] == want[24:] and got[:20] == want[:20]
    assert got[4:8] == name.encode()


def test_the_current_default_client_is_used(tmp_path: Any, cluster: LocalCluster) -> None:
    items = _urls(5000, "d")
    with Client(cluster) as default:  # set as the default scheduler of dask.compute
        with get_task_stream(default) as stream:
            out = build(db.from_sequence(items, npartitions=2), EXACT, tmp_path / "d.blm")
        assert any("mmapbloom-shards" in str(t["key"]) for t in stream.data)
    assert _read(out) == _single(items, EXACT).to_bytes()


def test_repeated_items_same_bits_and_the_counter_is_the_sum_of_the_shards(tmp_path: Any) -> None:
    cfg = BloomConfig.for_items(6000, 0.01, strategy=STRATEGY)
    parts = [_urls(2000), _urls(1500), _urls(2500, "v")]  # overlapping partitions
    items = [x for part in parts for x in part]
    single = _single(items, cfg)
    with dask.config.set(scheduler="threads"):
        out = build(db.from_sequence(items, npartitions=3), cfg, tmp_path / "r.blm")
    got = _read(out)
    want = single.to_bytes()
    assert got[24:] == want[24:]  # the bit arrays are identical
    assert got[:16] == want[:16]  # magic, scheme, m, k
    with BloomFilter.open(out, readonly=True) as merged:
        shard_counts = [_single(part, cfg).items_added for part in _partition(items, 3)]
        assert merged.items_added == sum(shard_counts) > single.items_added
        assert merged.approx_items() == single.approx_items()


def _partition(items: list[str], n: int) -> list[list[str]]:
    bag = db.from_sequence(items, npartitions=n)
    return [list(p) for p in dask.compute(*bag.to_delayed(), scheduler="sync")]  # type: ignore[attr-defined]


def test_into_an_existing_filter_and_errors_before_computing(tmp_path: Any) -> None:
    path = tmp_path / "live.blm"
    old, new = _urls(1000, "old"), _urls(1000, "new")
    with BloomFilter.create(path, EXACT) as live:
        live.update(old)

    def explode(x: str) -> str:
        raise AssertionError("the collection was computed")

    never = db.from_sequence(new, npartitions=2).map(explode)
    with pytest.raises(FileExistsError):
        build(never, EXACT, path)
    other = BloomConfig(num_bits=EXACT.num_bits + 8, num_hashes=EXACT.num_hashes, strategy=STRATEGY)
    with pytest.raises(IncompatibleFiltersError, match="num_bits"):
        build(never, other, path, into=True)
    with pytest.raises(FileNotFoundError):
        build(never, EXACT, tmp_path / "missing.blm", into=True)
    with pytest.raises(TypeError, match="column"):
        build(dd.from_pandas(pd.DataFrame({"a": ["x"], "b": ["y"]}), npartitions=1), EXACT, tmp_path / "x.blm")
    with pytest.raises(TypeError, match="BloomConfig"):
        build_shards(db.from_sequence(new), {"num_bits": 8}, tmp_path / "s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Bag"):
        build_shards(new, EXACT, tmp_path / "s")
    assert sorted(n for n in os.listdir(tmp_path) if not n.endswith(".mutex")) == ["live.blm"]  # lock side file aside

    with dask.config.set(scheduler="sync"):
        build(db.from_sequence(new, npartitions=2), EXACT, path, into=True)
        with BloomFilter.open(path, readonly=True) as live:
            assert live.contains_many(old + new).all()
            assert live.items_added == 2000
        # Missing values in a column are nulls (never added), as in every column batch.
        col = dd.from_pandas(pd.DataFrame({"u": ["a", None, "c"]}), npartitions=1)["u"]
        build(col, EXACT, tmp_path / "nulls.blm")
        with BloomFilter.open(tmp_path / "nulls.blm", readonly=True) as f:
            assert f.items_added == 2 and f.contains_many(["a", "c"]).all()
        os.unlink(tmp_path / "nulls.blm")
        # A column of another type is refused with a hint, and nothing is published.
        col = dd.from_pandas(pd.DataFrame({"u": [1.5, 2.5]}), npartitions=1)["u"]
        with pytest.raises(TypeError, match="astype"):
            build(col, EXACT, tmp_path / "na.blm")
        assert not (tmp_path / "na.blm").exists()
        with pytest.raises(TypeError, match="partition 0"):
            build_shards(col, EXACT, tmp_path / "na")
        assert os.listdir(tmp_path / "na") == []  # the failed task removed its partial shard
        # An existing shard file is never replaced unless asked.
        first = build_shards(db.from_sequence(new, npartitions=1), EXACT, tmp_path / "s")
        with pytest.raises(FileExistsError):
            build_shards(db.from_sequence(old, npartitions=1), EXACT, tmp_path / "s")
        build_shards(db.from_sequence(old, npartitions=1), EXACT, tmp_path / "s", overwrite=True)
        with BloomFilter.open(first[0], readonly=True) as shard:
            assert shard.contains_many(old).all() and not shard.contains_many(new).all()
    assert sorted(n for n in os.listdir(tmp_path) if not n.endswith(".mutex")) == ["live.blm", "na", "s"]


def test_object_partitions_skip_missing_values(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 10 of issue 29: a partition of dtype object (mixed items) skips what pandas.isna
    calls missing, as every column does, with pyarrow and without it."""
    import mmapbloom.dask as mdask

    values = ["a", None, float("nan"), pd.NA, b"b", 3]
    with dask.config.set({"dataframe.convert-string": False}):  # keep dtype object (Dask makes str)
        col = dd.from_pandas(pd.DataFrame({"u": pd.Series(values, dtype=object)}), npartitions=2)["u"]
    ref = BloomFilter(EXACT)
    ref.update(["a", b"b", 3])
    for columnar in (True, False):
        monkeypatch.setattr(mdask, "_columnar", lambda partition, columnar=columnar: columnar)
        path = tmp_path / f"obj-{columnar}.blm"
        with dask.config.set({"scheduler": "sync", "dataframe.convert-string": False}):
            build(col, EXACT, path)
        with BloomFilter.open(path, readonly=True) as f:
            assert f.items_added == 3 and f.to_bytes()[24:] == ref.to_bytes()[24:]


def test_series_partitions_go_to_update_as_arrow_columns(tmp_path: Any) -> None:
    """A column's partitions reach BloomFilter.update as pandas slices (read through the
    Arrow interface, no Python object per item), and build the same bits as a list."""
    from mmapbloom.dask import _chunks

    part = pd.Series([f"u{i}" for i in range(10)], dtype="str")
    chunks = list(_chunks(part))
    assert len(chunks) == 1 and isinstance(chunks[0], pd.Series)
    col = dd.from_pandas(pd.DataFrame({"u": part, "n": range(10)}), npartitions=3)
    with dask.config.set(scheduler="sync"):
        build(col["u"], EXACT, tmp_path / "col.blm")
        build(col["n"], EXACT, tmp_path / "ints.blm")
    ref = BloomFilter(EXACT)
    ref.update(part.tolist())
    ints = BloomFilter(EXACT)
    ints.update(range(10))
    with (
        BloomFilter.open(tmp_path / "col.blm", readonly=True) as f,
        BloomFilter.open(tmp_path / "ints.blm", readonly=True) as g,
    ):
        assert f.to_bytes()[24:] == ref.to_bytes()[24:] and g.to_bytes()[24:] == ints.to_bytes()[24:]


# -- a worker killed mid-partition --------------------------------------------------------------
@pytest.fixture(scope="module")
def fragile_cluster() -> Iterator[LocalCluster]:
    """Real worker processes under nannies (a dead worker is restarted); a task whose
    worker dies is retried (up to 3 times: on a loaded machine a restarting worker can be
    lost once more), then fails with KilledWorker."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 3}):
        with LocalCluster(
            n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=50
        ) as c:
            yield c


def _dies_at(n: int, marker: str, every_time: bool) -> Any:
    """A Bag ``map`` function that kills its worker process (``os._exit``, as an OOM kill
    would) on reaching item ``n``: on its first run only, unless ``every_time``. Defined
    here so that cloudpickle ships it by value."""

    def item(x: str) -> str:
        if x.endswith(f"/page/{n}") and (every_time or not os.path.exists(marker)):
            with open(marker, "a") as fh:
                fh.write(f"{os.getpid()}\n")
            os._exit(1)
        return x

    return item


def test_a_worker_killed_mid_partition_leaves_no_shard_and_the_retry_starts_clean(
    tmp_path: Any, fragile_cluster: LocalCluster
) -> None:
    from mmapbloom.files import remove_stale_temporaries

    items = [f"https://k.example.org/page/{i}" for i in range(100_000)]
    cfg = BloomConfig.for_items(100_000, 0.01, strategy=STRATEGY)
    want = _single(items, cfg).to_bytes()
    with Client(fragile_cluster, set_as_default=False) as client:
        # The first attempt dies after 65,536 items were added (its first chunk); Dask
        # retries on the restarted worker. Before, the partial shard-00000.blm (it passed
        # check()) made the retry fail with FileExistsError.
        marker = str(tmp_path / "deaths")
        bag = db.from_sequence(items, npartitions=1).map(_dies_at(70_000, marker, every_time=False))
        shards = build_shards(bag, cfg, tmp_path / "shards", client=client)
        dead = [int(x) for x in open(marker).read().split()]
        assert len(dead) == 1
        assert _read(shards[0]) == want  # the shard is the retry's, complete
        # The dead attempt left only its pid-named temporary, never a file under a shard's
        # name; the stale-temporary cleanup removes it.
        left = sorted(os.listdir(tmp_path / "shards"))
        assert left[-1] == "shard-00000.blm" and all(n.startswith(f".mmapbloom-{dead[0]}-") for n in left[:-1]), left
        removed: list[str] = []
        deadline = time.monotonic() + 60  # until the nanny has seen its worker die
        while len(removed) < len(left) - 1 and time.monotonic() < deadline:
            removed += remove_stale_temporaries(str(tmp_path / "shards"))
            time.sleep(0.1)
        assert len(removed) == len(left) - 1
        assert os.listdir(tmp_path / "shards") == ["shard-00000.blm"]

        # The same through build(): the output equals a one-process build, nothing is left.
        marker = str(tmp_path / "once")
        bag = db.from_sequence(items, npartitions=1).map(_dies_at(70_000, marker, every_time=False))
        out = build(bag, cfg, tmp_path / "out.blm", client=client)
        assert len(open(marker).read().split()) == 1
        assert _read(out) == want
        assert sorted(os.listdir(tmp_path)) == ["deaths", "once", "out.blm", "shards"]


def test_build_errors_name_the_output_not_the_shard_directory(tmp_path: Any) -> None:
    from mmapbloom import NoSpaceError
    from tests.test_stress_disk import mount_tmpfs

    cfg = BloomConfig(num_bits=8 * 600_000, num_hashes=3, strategy=STRATEGY)  # 600 kB a shard
    for where in mount_tmpfs("size=1m,mode=0755"):
        out = os.path.join(where, "f.blm")
        with dask.config.set(scheduler="sync"), pytest.raises(NoSpaceError) as err:
            build(db.from_sequence(_urls(1000), npartitions=2), cfg, out)
        text = str(err.value)
        assert err.value.filename == out and text.startswith(out + ":"), text
        assert ".mmapbloom-" not in text and "shard-00000.blm" in text, text
        assert os.listdir(where) == []
