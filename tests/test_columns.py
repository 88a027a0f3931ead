"""Column batches: numpy arrays and Arrow columns (pyarrow, polars, pandas, DuckDB,
nanoarrow) give the answers and the bits of the same keys as a Python list (nulls dropped),
on both backends, create no Python object per key and release the GIL."""

from __future__ import annotations

import gc
import sys
import threading
import time
import tracemalloc
from typing import Any, Callable, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, ScalableBloomFilter, kernels
from mmapbloom.handle import CHUNK_KEYS

pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")
pd = pytest.importorskip("pandas")
duckdb = pytest.importorskip("duckdb")
nanoarrow = pytest.importorskip("nanoarrow")

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning", "ignore::mmapbloom.SaturationWarning")

native = kernels.native_module()
CFG = BloomConfig(num_bits=1 << 12, num_hashes=4)


def _pure(f: Any) -> Any:
    """The same filter on the pure-Python handle (same image, lock and counter)."""
    f._h.close()
    f._attach_handle(pure=True)
    return f


MAKERS: list[Callable[[], Any]] = [
    lambda: BloomFilter(CFG),
    lambda: _pure(BloomFilter(CFG)),
    lambda: CountingBloomFilter(CFG),
    lambda: _pure(CountingBloomFilter(CFG)),
]


def check_same_as_list(batch: Any, values: list[Any], make: Callable[[], Any]) -> None:
    """add_many / update / contains_many of ``batch`` give the answers and bits of
    ``values`` (its Python form, None for a null) as a list with the nulls dropped."""
    live = [i for i, v in enumerate(values) if v is not None]
    keys = [values[i] for i in live]
    a, b = make(), make()
    flags_a = a.add_many(batch)
    flags_b = b.add_many(keys)
    expected = np.zeros(len(values), dtype=np.bool_)
    expected[live] = flags_b
    assert flags_a.tolist() == expected.tolist()
    assert a.to_bytes() == b.to_bytes()
    assert a.items_added == b.items_added
    c, d = make(), make()
    assert c.update(batch) == d.update(keys)
    assert c.to_bytes() == d.to_bytes()
    probe = make()
    probe.update(keys[::2])  # some present, some absent
    got = probe.contains_many(batch)
    want = np.zeros(len(values), dtype=np.bool_)
    want[live] = probe.contains_many(keys)
    assert got.tolist() == want.tolist()


# ---- numpy ----------------------------------------------------------------------------------

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("make", MAKERS)
def test_numpy_int_arrays_equal_their_tolist(dtype: str, make: Callable[[], Any]) -> None:
    info = np.iinfo(dtype)
    arr = np.array([0, 1, 5, info.min, info.max, 5, 7], dtype=dtype)
    check_same_as_list(arr, arr.tolist(), make)
    check_same_as_list(arr[::-2], arr[::-2].tolist(), make)  # non-contiguous


def test_int_widths_are_one_key() -> None:
    f = BloomFilter(CFG)
    f.update(np.array([5, -1], dtype=np.int32))
    assert f.contains_many(np.array([5, -1], dtype=np.int64)).all()
    assert f.contains_many(np.array([5, 2**64 - 1], dtype=np.uint64)).all()
    assert f.contains_many([5, -1]).all()


@pytest.mark.parametrize("make", MAKERS)
def test_numpy_text_arrays_equal_their_tolist(make: Callable[[], Any]) -> None:
    words = ["a", "", "héllo", "trailing\x00", "x" * 40]
    for arr in (
        np.array(words),
        np.array([w.encode() for w in words]),
        np.array(words, dtype=object),
        np.array(words, dtype=np.dtypes.StringDType()),
        np.array(words)[::2],
    ):
        check_same_as_list(arr, arr.tolist(), make)


def test_numpy_masked_array_is_its_tolist() -> None:
    """A masked array is taken as its tolist(): unmasked values are keys, a masked one is
    None there, so it is refused like a None item (not hashed as the hidden value)."""
    f = BloomFilter(CFG)
    assert f.update(np.ma.array([1, 2], mask=[False, False])) == 2
    with pytest.raises(TypeError, match="NoneType"):
        f.update(np.ma.array([3, 4], mask=[False, True]))
    assert 4 not in f and 3 not in f


def test_numpy_refused_dtypes() -> None:
    f = BloomFilter(CFG)
    for arr, text in (
        (np.array([1.5]), "dtype float64"),
        (np.array([True]), "dtype bool"),
        (np.zeros((2, 2), dtype=np.int64), "1-dimensional"),
    ):
        with pytest.raises(TypeError, match=text):
            f.update(arr)
        with pytest.raises(TypeError, match=text):
            f.contains_many(arr)


# ---- Arrow producers ------------------------------------------------------------------------


def _producers(values: list[Optional[str]]) -> dict[str, Any]:
    """Every producer of the same string column (None = null)."""
    raw = [v.encode() if v is not None else None for v in values]
    half = len(values) // 2
    padded = pa.array(["pad"] + values + ["pad"])
    out = {
        "utf8": pa.array(values, pa.string()),
        "large_utf8": pa.array(values, pa.large_string()),
        "utf8_view": pa.array(values, pa.string_view()),
        "binary": pa.array(raw, pa.binary()),
        "large_binary": pa.array(raw, pa.large_binary()),
        "binary_view": pa.array(raw, pa.binary_view()),
        "dictionary": pa.array(values, pa.string()).dictionary_encode(),
        "sliced": padded.slice(1, len(values)),
        "chunked": pa.chunked_array([values[:half], values[half:]], pa.string()),
        "record_batches": pa.RecordBatchReader.from_batches(
            pa.schema([("k", pa.string())]),
            [
                pa.record_batch([pa.array(values[:half], pa.string())], names=["k"]),
                pa.record_batch([pa.array(values[half:], pa.string())], names=["k"]),
            ],
        ),
        "polars": pl.Series(values, dtype=pl.String),
        "polars_categorical": pl.Series(values, dtype=pl.Categorical),
        "pandas_str": pd.Series(values, dtype="str"),
        "pandas_category": pd.Series(values, dtype="str").astype("category"),
        "nanoarrow": nanoarrow.c_array(values, nanoarrow.string()),
    }
    con = duckdb.connect()
    con.register("t", pa.table({"k": pa.array(values, pa.string())}))
    out["duckdb"] = con.sql("select k from t")
    # pandas < 3 (the newest on Python 3.10) makes a str Series of Python objects (dtype
    # object) with no Arrow interface: a plain list of items, where None is refused, not a
    # null. Such a Series is not a column producer; test it where pandas makes one.
    for name in ("pandas_str", "pandas_category"):
        if not hasattr(out[name], "__arrow_c_stream__") or out[name].dtype == object:
            del out[name]
    return out


texts = st.lists(st.one_of(st.none(), st.text(max_size=20)), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=texts)
def test_arrow_string_producers_equal_the_list(values: list[Optional[str]]) -> None:
    producers = _producers(values)  # each is read anew by every check (a stream: _Fresh)
    for name, make in zip(["native", "pure", "counting", "counting-pure"], MAKERS, strict=True):
        for producer, batch in producers.items():
            if producer == "record_batches":
                batch = _Fresh(values, producer)
            try:
                check_same_as_list(batch, values, make)
            except AssertionError as exc:
                raise AssertionError(f"{producer} on {name}") from exc


class _Fresh:
    """A one-shot stream producer (a RecordBatchReader) made anew each time it is read."""

    def __init__(self, values: list[Optional[str]], producer: str):
        self.values, self.producer = values, producer

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return _producers(self.values)[self.producer].__arrow_c_stream__()


ints = st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=30)


@settings(max_examples=25, deadline=None)
@given(values=ints, dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]))
def test_arrow_int_columns_equal_the_list(values: list[Optional[int]], dtype: str) -> None:
    info = np.iinfo(dtype)
    values = [
        None if v is None else int(info.min) + (v - int(info.min)) % (int(info.max) - int(info.min) + 1) for v in values
    ]
    batches = [
        pa.array(values, getattr(pa, dtype)()),
        pl.Series(values, dtype=getattr(pl, dtype.capitalize().replace("Uint", "UInt"))),
    ]
    for make in MAKERS:
        for batch in batches:
            check_same_as_list(batch, values, make)


def test_fixed_size_binary_and_dictionary_of_ints() -> None:
    vals = [b"ab", None, b"cd", b"ab"]
    for make in MAKERS:
        check_same_as_list(pa.array(vals, pa.binary(2)), vals, make)
        ints = [3, None, -4, 3]
        check_same_as_list(pa.array(ints, pa.int16()).dictionary_encode(), ints, make)


def test_pandas_object_series_is_a_list_of_items() -> None:
    """A pandas Series of dtype object holds Python objects (possibly mixed str, bytes and
    int, which no Arrow type holds): it is taken as the list of its items."""
    mixed = ["a", b"b", 3]
    for make in MAKERS:
        check_same_as_list(pd.Series(mixed, dtype=object), mixed, make)


def test_scalable_filter_takes_columns(tmp_path: Any) -> None:
    f = ScalableBloomFilter.create(tmp_path / "s", capacity=100, fp_rate=0.01)
    col = pa.array([f"k{i}" if i % 7 else None for i in range(1000)])
    assert f.update(col) == f.items_added  # nulls are not counted
    hits = f.contains_many(col)
    assert hits.tolist() == [i % 7 != 0 for i in range(1000)]
    f.update(np.arange(5, dtype=np.int8))
    assert f.contains_many([0, 1, 2, 3, 4]).all() and f.contains_many(np.arange(5, dtype=np.uint64)).all()


def test_nulls_never_added_never_found() -> None:
    for make in MAKERS:
        f = make()
        assert f.add_many(pa.array([None, "a", None])).tolist() == [False, True, False]
        assert f.update(pa.array([None, None], pa.string())) == 0
        assert f.items_added == 1
        assert f.contains_many(pa.array([None, "a"])).tolist() == [False, True]


@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_columns_across_batch_chunks_equal_the_list(kind: Any) -> None:
    # The handle reads a column chunk by chunk (CHUNK_KEYS keys per lock): nulls on both
    # sides of the chunk boundaries, int and str columns, answers and bits as the list's.
    n = 2 * CHUNK_KEYS + 3
    edges = {CHUNK_KEYS - 1, CHUNK_KEYS, 2 * CHUNK_KEYS - 1, 2 * CHUNK_KEYS}
    strs = [None if i % 7 == 0 or i in edges else f"k{i}" for i in range(n)]
    ints = [None if i % 5 == 0 or i in edges else i * 3 for i in range(n)]
    cfg = BloomConfig.for_items(n, 0.01)
    check_same_as_list(pa.array(strs), strs, lambda: kind(cfg))
    check_same_as_list(pa.array(ints, pa.int64()), ints, lambda: kind(cfg))


def test_refused_arrow_types_and_shapes() -> None:
    for make in MAKERS[:2]:
        f = make()
        for col, text in (
            (pa.array([1.5]), "float64"),
            (pa.array([True]), "bool"),
            (pa.array([[1]]), "list"),
            (pa.array([1.5]).dictionary_encode(), "dictionary of float64"),
            (pa.table({"a": [1], "b": ["x"]}), "one column, got 2 columns"),
            (pl.DataFrame({"a": [1], "b": ["x"]}), "one column, got 2 columns"),
        ):
            with pytest.raises(TypeError, match=text):
                f.contains_many(col)
            with pytest.raises(TypeError, match=text):
                f.update(col)
        assert f.items_added == 0


# ---- no Python object per key; the GIL --------------------------------------------------------


@pytest.mark.skipif(native is None, reason="the compiled reader is the columnar path")
def test_columnar_path_creates_no_python_object_per_key() -> None:
    n = 1_000_000
    col = pa.array([f"https://example.org/{i}" for i in range(n)])
    f = BloomFilter(BloomConfig.for_items(n, 0.01))
    gc.collect()
    tracemalloc.start()
    try:
        f.update(col)
        hits = f.contains_many(col)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert hits.all()
    # the answers (n bytes), the add_many flags (n bytes) and the handle's per-chunk staging,
    # independent of n (at most 2**20 positions of 8 bytes, plus 24 bytes a key for 65,536
    # keys): no per-key objects (a list of 1M str would be about 70 MB).
    assert peak < 2 * n + (8 << 20) + 24 * 65536 + (1 << 20), peak


@pytest.mark.skipif(native is None, reason="the compiled reader is the columnar path")
def test_column_batches_release_the_gil() -> None:
    col = pa.array([f"key{i}" for i in range(300_000)])
    f = BloomFilter(BloomConfig.for_items(300_000, 0.01))
    ticks = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)

    old = sys.getswitchinterval()
    thread = threading.Thread(target=spin)
    sys.setswitchinterval(30.0)
    try:
        thread.start()
        while ticks[0] == 0:
            time.sleep(0.001)
        for call in (f.contains_many, f.update):
            before = ticks[0]
            for _ in range(20):  # the other thread may get no CPU in one call on a busy machine
                call(col)
                if ticks[0] > before:
                    break
            assert ticks[0] > before, call
    finally:
        stop.set()
        sys.setswitchinterval(old)
        thread.join()
