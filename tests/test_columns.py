"""Column batches: numpy arrays and Arrow columns (pyarrow, polars, pandas, DuckDB,
nanoarrow) give the answers and the bits of the same keys as a Python list (nulls dropped),
on both backends, create no Python object per key and release the GIL."""

from __future__ import annotations

import ctypes
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
#: numpy's masked-array constructor, untyped: its stubs want a bool mask and no object
#: dtype, and these tests pass 0 / 1 masks and object arrays on purpose.
masked_array: Any = np.ma.masked_array
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


@pytest.mark.parametrize("make", MAKERS)
def test_numpy_masked_array_elements_are_nulls(make: Callable[[], Any]) -> None:
    """Item 10 of issue 29: a masked element is a null (never added, never found; its
    hidden value is not a key); the unmasked ones are the keys of the same dtype."""
    check_same_as_list(masked_array([1, 2, 3], mask=[0, 1, 0]), [1, None, 3], make)
    check_same_as_list(masked_array([1, 2], mask=[0, 0]), [1, 2], make)
    check_same_as_list(masked_array([1, 2], mask=[1, 1], dtype=np.uint8), [None, None], make)
    check_same_as_list(masked_array(["a", "bb\x00"], mask=[1, 0]), [None, "bb"], make)
    check_same_as_list(masked_array([b"a", b"b"], mask=[0, 1]), [b"a", None], make)
    check_same_as_list(masked_array(["a", None, 3], mask=[0, 1, 0], dtype=object), ["a", None, 3], make)
    f = make()
    f.update(masked_array([7, 8], mask=[0, 1]))
    assert 7 in f and 8 not in f and f.items_added == 1
    for bad, text in (
        (masked_array([1.5, 2.5], mask=[1, 0]), "dtype float64"),
        (masked_array(["a", None], mask=[0, 0], dtype=object), "got NoneType"),
        (masked_array([None, 1.5], mask=[1, 0], dtype=object), "got float"),
        (
            masked_array([-1, 2**70], mask=[1, 0], dtype=object),
            "18446744073709551616|2\\*\\*64|1180591620717411303424",
        ),
    ):
        with pytest.raises((TypeError, OverflowError), match=text):
            f.update(bad)
        with pytest.raises((TypeError, OverflowError), match=text):
            f.contains_many(bad)
    assert f.items_added == 1


@pytest.mark.parametrize("make", MAKERS)
def test_pandas_object_series_missing_values_are_nulls(make: Callable[[], Any]) -> None:
    """Item 10 of issue 29: in a pandas Series (or Index) of dtype object, what pandas.isna
    calls missing (None, NaN, pd.NA, NaT) is a null; a plain list with None is refused."""
    check_same_as_list(pd.Series(["a", None], dtype=object), ["a", None], make)
    values = ["a", None, float("nan"), np.nan, pd.NA, pd.NaT, b"b", 3, "a"]
    batch = pd.Series(values, dtype=object)
    check_same_as_list(batch, ["a", None, None, None, None, None, b"b", 3, "a"], make)
    check_same_as_list(pd.Index(["x", None], dtype=object), ["x", None], make)
    check_same_as_list(batch.iloc[1:3], [None, None], make)
    f = make()
    with pytest.raises(TypeError, match="got NoneType"):
        f.update(["a", None])
    with pytest.raises(TypeError, match="got float"):
        f.update(pd.Series(["a", None, 1.5], dtype=object))
    with pytest.raises(TypeError, match="got NoneType"):
        f.contains_many(np.array(["a", None], dtype=object))  # numpy object arrays: items
    assert f.items_added == 0


def test_nulls_from_python_objects_on_the_scalable_filter(tmp_path: Any) -> None:
    f = ScalableBloomFilter.create(tmp_path / "s", capacity=100, fp_rate=0.01)
    assert f.update(pd.Series(["a", None, np.nan], dtype=object)) == 1
    assert f.update(masked_array([5, 6], mask=[1, 0])) == 1
    assert f.contains_many(pd.Series(["a", None, pd.NA], dtype=object)).tolist() == [True, False, False]
    assert f.contains_many(masked_array([5, 6], mask=[0, 1])).tolist() == [False, False]
    assert f.contains_many([6, 5]).tolist() == [True, False]
    assert f.items_added == 2


def test_key_column_export_is_released_once() -> None:
    """The export that carries such a batch to the compiled reader frees its buffers once
    its consumer releases it (both readers)."""
    from mmapbloom.arrowc import _EXPORTED, KeyColumn

    before = len(_EXPORTED)
    col = KeyColumn([b"a", None, b"", b"xyz"])
    assert arrowc.read_keys(col) == [b"a", None, b"", b"xyz"]
    if native is not None:
        c = native.arrow_column(col)
        assert len(c) == 4
        assert len(_EXPORTED) == before + 1
        del c
    gc.collect()
    assert len(_EXPORTED) == before
    assert arrowc.read_keys(KeyColumn([])) == []


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


def test_null_free_columns_read_in_place_equal_the_list() -> None:
    """Chunks without nulls whose keys are their stored values (int64 / uint64, fixed-size
    binary) are pointed at in place, not copied: sliced arrays (an Arrow offset), chunked
    arrays whose chunk edges fall on and off the handle's CHUNK_KEYS boundaries, and a
    chunk with nulls between two without give the list's bits and answers."""
    n = 2 * CHUNK_KEYS + 3
    ints = [i * 7919 - n for i in range(n)]
    cfg = BloomConfig.for_items(n, 0.01)
    i64 = pa.array(ints, pa.int64())
    cases: list[tuple[Any, list[Any]]] = [
        (i64, ints),
        (i64.slice(5), ints[5:]),
        (
            pa.array([v % 2**64 for v in ints], pa.uint64()).slice(3, CHUNK_KEYS + 1),
            [v % 2**64 for v in ints[3 : CHUNK_KEYS + 4]],
        ),
        (
            pa.chunked_array([i64.slice(0, CHUNK_KEYS - 1), i64.slice(CHUNK_KEYS - 1, 2), i64.slice(CHUNK_KEYS + 1)]),
            ints,
        ),
        (
            pa.chunked_array([i64.slice(0, 10), pa.array([None, 4, None], pa.int64()), i64.slice(10)]),
            ints[:10] + [None, 4, None] + ints[10:],
        ),
        (np.array(ints, dtype=np.int64)[7:], ints[7:]),
    ]
    fixed = [i.to_bytes(3, "little") for i in range(n)]
    fsb = pa.array(fixed, pa.binary(3))
    cases += [(fsb, fixed), (fsb.slice(CHUNK_KEYS - 2), fixed[CHUNK_KEYS - 2 :])]
    for kind in (BloomFilter, CountingBloomFilter):
        for batch, values in cases:
            check_same_as_list(batch, values, lambda: kind(cfg))


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


# ---- hand-made Arrow arrays: malformed input, release callbacks that run Python --------------

from mmapbloom import arrowc  # noqa: E402

_RELEASE_SCHEMA = ctypes.CFUNCTYPE(None, ctypes.POINTER(arrowc.ArrowSchema))
_RELEASE_ARRAY = ctypes.CFUNCTYPE(None, ctypes.POINTER(arrowc.ArrowArray))


class Spec:
    """One hand-made array and its schema: ``buffers`` are bytes / numpy arrays (None for a
    NULL pointer); ``tweak(schema, array)`` may then spoil any field of the top structs."""

    def __init__(
        self,
        fmt: Optional[str],
        length: int,
        buffers: list[Any],
        *,
        offset: int = 0,
        null_count: int = 0,
        n_buffers: Optional[int] = None,
        children: Optional[list["Spec"]] = None,
        dictionary: Optional["Spec"] = None,
        tweak: Optional[Callable[[Any, Any], None]] = None,
    ):
        self.fmt, self.length, self.buffers, self.offset = fmt, length, buffers, offset
        self.null_count, self.n_buffers = null_count, len(buffers) if n_buffers is None else n_buffers
        self.children, self.dictionary, self.tweak = children or [], dictionary, tweak


class HandMade:
    """An ``__arrow_c_array__`` producer made in ctypes (no Arrow library): each call exports
    fresh structs, whose release callbacks run Python and count the releases of the top
    schema and array (a consumer must release each exactly once, error or not)."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.calls = 0
        self.released = {"schema": 0, "array": 0}
        self.keep: list[Any] = []

    def _build(self, spec: Spec, top: bool) -> tuple[Any, Any]:
        keep = self.keep
        schema, array = arrowc.ArrowSchema(), arrowc.ArrowArray()
        fmt = None if spec.fmt is None else spec.fmt.encode()
        keep.append(fmt)
        schema.format = fmt
        schema.flags = 2
        array.length, array.offset, array.null_count = spec.length, spec.offset, spec.null_count
        array.n_buffers = spec.n_buffers
        if spec.buffers:
            ptrs = (ctypes.c_void_p * len(spec.buffers))()
            for i, b in enumerate(spec.buffers):
                if b is not None:
                    raw = np.frombuffer(b, dtype=np.uint8) if isinstance(b, bytes) else np.ascontiguousarray(b)
                    keep.append(raw)
                    ptrs[i] = raw.ctypes.data
            keep.append(ptrs)
            array.buffers = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
        if spec.children:
            built = [self._build(c, False) for c in spec.children]
            sch = (ctypes.POINTER(arrowc.ArrowSchema) * len(built))(*[ctypes.pointer(s) for s, _ in built])
            arr = (ctypes.POINTER(arrowc.ArrowArray) * len(built))(*[ctypes.pointer(a) for _, a in built])
            keep.extend([sch, arr])
            schema.n_children = array.n_children = len(built)
            schema.children = ctypes.cast(sch, type(schema.children))
            array.children = ctypes.cast(arr, type(array.children))
        if spec.dictionary is not None:
            ds, da = self._build(spec.dictionary, False)
            schema.dictionary, array.dictionary = ctypes.pointer(ds), ctypes.pointer(da)

        def release_schema(p: Any) -> None:
            if top:
                self.released["schema"] += 1
            p.contents.release = _RELEASE_SCHEMA()

        def release_array(p: Any) -> None:
            if top:
                self.released["array"] += 1
            p.contents.release = _RELEASE_ARRAY()

        schema.release, array.release = _RELEASE_SCHEMA(release_schema), _RELEASE_ARRAY(release_array)
        keep.extend([schema, array, schema.release, array.release])
        return schema, array

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        self.calls += 1
        schema, array = self._build(self.spec, True)
        if self.spec.tweak is not None:
            self.spec.tweak(schema, array)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(schema), b"arrow_schema", None), new(ctypes.addressof(array), b"arrow_array", None)


def _offsets(values: list[int], wide: bool = False) -> Any:
    return np.array(values, dtype="<i8" if wide else "<i4")


def _view(length: int, prefix: bytes = b"", buf: int = 0, offset: int = 0) -> bytes:
    """One 16-byte utf8_view / binary_view view."""
    if 0 <= length <= 12:
        return length.to_bytes(4, "little", signed=True) + prefix.ljust(12, b"\0")
    return (
        length.to_bytes(4, "little", signed=True)
        + prefix[:4].ljust(4, b"\0")
        + buf.to_bytes(4, "little", signed=True)
        + offset.to_bytes(4, "little", signed=True)
    )


def _record(child: Spec, length: int, **kw: Any) -> Spec:
    return Spec("+s", length, [None], children=[child], **kw)


def _null_children(schema: Any, array: Any) -> None:
    schema.children = type(schema.children)()


def _null_child0(schema: Any, array: Any) -> None:
    schema.children[0] = type(schema.children[0])()


def _null_array_children(schema: Any, array: Any) -> None:
    array.children = type(array.children)()


def _no_buffers_pointer(schema: Any, array: Any) -> None:
    array.buffers = type(array.buffers)()


def _no_dictionary(schema: Any, array: Any) -> None:
    array.dictionary = type(array.dictionary)()


_DATA = b"helloworld" * 4
_SIZES = np.array([len(_DATA)], dtype="<i8")
_STR = Spec("u", 2, [None, _offsets([0, 5, 10]), _DATA])  # ["hello", "world"]
MALFORMED: dict[str, tuple[Spec, str]] = {
    # item 2: offsets, views, struct schemas
    "utf8 offsets decrease": (
        Spec("u", 2, [None, _offsets([0, 5, 1]), _DATA]),
        r"offsets decrease at element 1 \(5 then 1\)",
    ),
    "binary offsets decrease": (Spec("z", 2, [None, _offsets([0, 5, 1]), _DATA]), r"offsets decrease at element 1"),
    "large_utf8 offsets decrease": (
        Spec("U", 2, [None, _offsets([0, 9, 2], True), _DATA]),
        r"offsets decrease at element 1 \(9 then 2\)",
    ),
    "large_binary offsets decrease": (Spec("Z", 1, [None, _offsets([3, 2], True), _DATA]), r"element 0 \(3 then 2\)"),
    "utf8 offsets start negative": (Spec("u", 1, [None, _offsets([-3, 2]), _DATA]), r"offsets start negative \(-3\)"),
    "large_utf8 offsets start negative": (
        Spec("U", 1, [None, _offsets([-(2**40), 2], True), _DATA]),
        r"offsets start negative \(-1099511627776\)",
    ),
    "sliced offsets decrease": (
        Spec("u", 1, [None, _offsets([0, 5, 1]), _DATA], offset=1),
        r"offsets decrease at element 0 \(5 then 1\)",
    ),
    "view length -5": (Spec("vu", 1, [None, _view(-5), None]), r"view 0 has a negative length \(-5\)"),
    "view length -2**31": (
        Spec("vz", 2, [None, _view(1, b"a") + _view(-(2**31)), None]),
        r"view 1 has a negative length \(-2147483648\)",
    ),
    "view past its buffer": (
        Spec("vu", 1, [None, _view(16, b"hell", 0, 30), _DATA, _SIZES]),
        r"view 0 reads bytes \[30, 46\) of data buffer 0, which has 40 bytes",
    ),
    "view offset negative": (
        Spec("vu", 1, [None, _view(16, b"hell", 0, -1), _DATA, _SIZES]),
        r"view 0 reads bytes \[-1, 15\) of data buffer 0, which has 40 bytes",
    ),
    "view offset past 2**31": (
        Spec("vz", 1, [None, _view(2**30, b"hell", 0, 2**31 - 1), _DATA, _SIZES]),
        r"view 0 reads bytes \[2147483647, 3221225471\)",
    ),
    "view sizes buffer NULL": (
        Spec("vu", 1, [None, _view(16, b"hell"), _DATA, None]),
        "variadic buffer sizes buffer is NULL",
    ),
    "struct schema children NULL": (
        Spec("+s", 2, [None], children=[_STR], tweak=_null_children),
        "its children pointer is NULL",
    ),
    "struct schema child 0 NULL": (Spec("+s", 2, [None], children=[_STR], tweak=_null_child0), "child 0 is NULL"),
    # item 11: indices out of range
    "view buffer index past the buffers": (
        Spec("vu", 1, [None, _view(16, b"hell", 3, 0), _DATA, _SIZES]),
        r"view 0 names data buffer 3, but the array has 1 data buffers",
    ),
    "view buffer index negative": (
        Spec("vu", 1, [None, _view(16, b"hell", -1, 0), _DATA, _SIZES]),
        r"view 0 names data buffer -1, but the array has 1 data buffers",
    ),
    "dictionary index past the values": (
        Spec("c", 2, [None, np.array([0, 5], dtype="<i1")], dictionary=_STR),
        r"dictionary index 5 at element 1 is outside the dictionary's 2 values",
    ),
    "dictionary index negative": (
        Spec("i", 2, [None, np.array([-1, 0], dtype="<i4")], dictionary=_STR),
        r"dictionary index -1 at element 0 is outside the dictionary's 2 values",
    ),
    "dictionary uint64 index 2**64 - 1": (
        Spec("L", 1, [None, np.array([2**64 - 1], dtype="<u8")], dictionary=_STR),
        r"dictionary index 18446744073709551615 at element 0 is outside the dictionary's 2 values",
    ),
    # item 5: one rule, one message
    "fixed_size_binary w:abc": (
        Spec("w:abc", 1, [None, b"abc"]),
        r"width must be a decimal number in \[0, 2\*\*31\), got 'abc'",
    ),
    "fixed_size_binary w:3x": (Spec("w:3x", 1, [None, b"abc"]), r"got '3x'"),
    "fixed_size_binary w:": (Spec("w:", 1, [None, b"abc"]), r"got ''"),
    "fixed_size_binary w:-1": (Spec("w:-1", 1, [None, b"abc"]), r"got '-1'"),
    "fixed_size_binary w:2**31": (Spec("w:2147483648", 1, [None, b"abc"]), r"got '2147483648'"),
    "int64 data NULL": (Spec("l", 3, [None, None]), "the data buffer is NULL"),
    "utf8 offsets NULL": (Spec("u", 1, [None, None, _DATA]), "the offsets buffer is NULL"),
    "utf8 data NULL": (Spec("u", 1, [None, _offsets([0, 3]), None]), "the data buffer is NULL"),
    "views NULL": (Spec("vu", 1, [None, None, None]), "the views buffer is NULL"),
    "fixed data NULL": (Spec("w:3", 1, [None, None]), "the data buffer is NULL"),
    "negative offset": (
        Spec("l", 1, [None, np.arange(3, dtype="<i8")], offset=-1),
        r"negative length or offset \(length 1, offset -1\)",
    ),
    "negative length": (
        Spec("u", -2, [None, _offsets([0, 5, 10]), _DATA]),
        r"negative length or offset \(length -2, offset 0\)",
    ),
    "struct negative offset": (
        _record(_STR, 1, offset=-1),
        r"format '\+s': negative length or offset \(length 1, offset -1\)",
    ),
    "struct child shorter than the batch": (
        _record(_STR, 3),
        r"its column has 2 elements, expected at least 3 \(the batch's offset 0 \+ length 3\)",
    ),
    "struct child shorter than offset + length": (
        _record(_STR, 2, offset=1),
        r"expected at least 3 \(the batch's offset 1",
    ),
    "struct n_buffers 0": (_record(_STR, 2, n_buffers=0), r"format '\+s': expected 1 buffers, got 0"),
    "struct array children NULL": (_record(_STR, 2, tweak=_null_array_children), "record batch without its column"),
    "int64 n_buffers 1": (Spec("l", 1, [None], n_buffers=1), "expected 2 buffers, got 1"),
    "int64 n_buffers 3": (Spec("l", 1, [None, np.arange(1, dtype="<i8"), None]), "expected 2 buffers, got 3"),
    "utf8 n_buffers 2": (Spec("u", 1, [None, _offsets([0, 1])]), "expected 3 buffers, got 2"),
    "view n_buffers 2": (Spec("vu", 1, [None, _view(1, b"a")]), "expected at least 3 buffers, got 2"),
    "buffers pointer NULL": (
        Spec("l", 1, [None, np.arange(1, dtype="<i8")], tweak=_no_buffers_pointer),
        "the buffers pointer is NULL",
    ),
    "no format": (Spec(None, 1, [None, np.arange(1, dtype="<i8")]), r"format '\?': no format"),
    "dictionary indices not integers": (
        Spec("u", 2, [None, _offsets([0, 5, 10]), _DATA], dictionary=_STR),
        "dictionary indices must be an integer type, got format 'u'",
    ),
    "dictionary missing": (
        Spec("c", 1, [None, np.zeros(1, dtype="<i1")], dictionary=_STR, tweak=_no_dictionary),
        "dictionary array missing",
    ),
    "malformed dictionary values": (
        Spec("c", 1, [None, np.zeros(1, dtype="<i1")], dictionary=Spec("u", 2, [None, _offsets([0, 5, 1]), _DATA])),
        r"offsets decrease at element 1",
    ),
}


def _calling(make: Callable[[], Any], method: str) -> Callable[[Any], Any]:
    """``lambda b: make().<method>(b)``: a fresh filter's batch call."""
    return lambda b: getattr(make(), method)(b)


def _readers() -> list[tuple[str, Callable[[Any], Any]]]:
    """Every reader of a column: the two readers themselves, then add_many / update /
    contains_many of every kind on both backends."""
    out: list[tuple[str, Callable[[Any], Any]]] = [("arrowc.read_keys", arrowc.read_keys)]
    if native is not None:
        out.append(("native.arrow_column", native.arrow_column))
    for name, make in zip(["native", "pure", "counting", "counting-pure"], MAKERS, strict=True):
        for method in ("add_many", "update", "contains_many"):
            out.append((f"{name}.{method}", _calling(make, method)))
    return out


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_arrow_arrays_are_refused_on_every_reader(case: str) -> None:
    """Items 2, 4, 5, 11 of issue 29: each malformed array is refused with the same
    ValueError (what is wrong, expected and actual) by both readers and every batch
    call; the producer's release callbacks (Python) run exactly once per export."""
    spec, text = MALFORMED[case]
    producer = HandMade(spec)
    for name, read in _readers():
        with pytest.raises(ValueError, match="^malformed Arrow array of (format '[^']*': .*)?" + text) as got:
            read(producer)
        assert type(got.value) is ValueError, name
        assert producer.released == {"schema": producer.calls, "array": producer.calls}, name
    assert producer.calls == len(_readers())


def test_malformed_struct_children_on_the_scalable_filter(tmp_path: Any) -> None:
    f = ScalableBloomFilter.create(tmp_path / "s", capacity=100, fp_rate=0.01)
    for case in ("struct schema children NULL", "dictionary index past the values", "view length -5"):
        spec, text = MALFORMED[case]
        for call in (f.update, f.contains_many):
            with pytest.raises(ValueError, match=text):
                call(HandMade(spec))  # type: ignore[arg-type]  # an Arrow producer, not an Iterable
    assert f.items_added == 0


def test_hand_made_arrays_read_and_released_once() -> None:
    """Well-formed hand-made arrays (the helper itself): read alike by both readers, each
    export released exactly once; a null slot's garbage dictionary index or view is
    never read (it is a null)."""
    cases: list[tuple[Spec, list[Optional[bytes]]]] = [
        (_STR, [b"hello", b"world"]),
        (Spec("u", 1, [None, _offsets([0, 5, 10]), _DATA], offset=1), [b"world"]),
        (Spec("vu", 2, [None, _view(3, b"abc") + _view(16, b"hell", 0, 0), _DATA, _SIZES]), [b"abc", _DATA[:16]]),
        (
            Spec(
                "c",
                2,
                [np.array([0b01], dtype=np.uint8), np.array([1, 99], dtype="<i1")],
                null_count=1,
                dictionary=_STR,
            ),
            [b"world", None],
        ),
        (
            Spec("vz", 2, [np.array([0b10], dtype=np.uint8), _view(-7) + _view(1, b"z")], null_count=1, n_buffers=3),
            [None, b"z"],
        ),
        (Spec("w:0", 2, [None, None]), [b"", b""]),
        (Spec("w:2", 2, [None, b"abcd"]), [b"ab", b"cd"]),
        (_record(_STR, 1, offset=1), [b"world"]),
        (Spec("n", 3, []), [None, None, None]),
        (Spec("n", 2, [None]), [None, None]),  # as polars exports it
        (Spec("l", 0, [None, None]), []),
    ]
    for spec, keys in cases:
        spec.buffers += [None] * (spec.n_buffers - len(spec.buffers))
        producer = HandMade(spec)
        assert arrowc.read_keys(producer) == keys
        if native is not None:
            assert len(native.arrow_column(producer)) == len(keys)
        for make in MAKERS:
            check_same_as_list(producer, keys, make)
        assert producer.released == {"schema": producer.calls, "array": producer.calls}


def test_refused_type_from_a_python_release_keeps_its_error() -> None:
    """Item 4: a TypeError (not SystemError) from a producer whose release runs Python."""
    producer = HandMade(Spec("g", 1, [None, np.zeros(1)]))
    for name, read in _readers():
        with pytest.raises(TypeError, match=r"got float64 \(double\) \(format 'g'\)"):
            read(producer)
        assert producer.released == {"schema": producer.calls, "array": producer.calls}, name


def _null_columns() -> dict[str, Any]:
    """Arrow null-typed columns (format 'n') from every producer: all-NULL columns."""
    return {
        "pyarrow": pa.array([None, None]),
        "pyarrow_chunked": pa.chunked_array([[None], [None, None]], pa.null()),
        "pyarrow_dictionary": pa.array([None, None]).dictionary_encode(),
        "record_batch": pa.record_batch([pa.array([None, None])], names=["k"]),
        "duckdb": duckdb.sql("SELECT NULL AS k"),
        "duckdb_rows": duckdb.sql("SELECT NULL AS k FROM range(3)"),
        "polars": pl.Series([None, None]),
        "nanoarrow": nanoarrow.c_array(pa.array([None, None, None])),
        "pandas": pd.Series(pa.array([None, None]), dtype=pd.ArrowDtype(pa.null())),
    }


@pytest.mark.parametrize("producer", sorted(_null_columns()))
def test_null_typed_column_is_all_null(producer: str, tmp_path: Any) -> None:
    """Item 6 of issue 29: an Arrow null column adds nothing and finds nothing, on both
    backends and every kind."""
    column = _null_columns()[producer]
    if not (hasattr(column, "__arrow_c_stream__") or hasattr(column, "__arrow_c_array__")):
        # pandas < 3 (the newest on Python 3.10) exports no Arrow interface from a Series
        column = pa.array(column)
    n = len(arrowc.read_keys(column))
    assert n >= 1
    for make in MAKERS:
        f = make()
        empty = f.to_bytes()
        assert f.add_many(_null_columns()[producer]).tolist() == [False] * n
        assert f.update(_null_columns()[producer]) == 0
        assert f.contains_many(_null_columns()[producer]).tolist() == [False] * n
        assert f.items_added == 0 and f.to_bytes() == empty
    s = ScalableBloomFilter.create(tmp_path / "s", capacity=100, fp_rate=0.01)
    assert s.update(_null_columns()[producer]) == 0
    assert s.contains_many(_null_columns()[producer]).tolist() == [False] * n
    assert s.items_added == 0


_GET_SCHEMA = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(arrowc.ArrowArrayStream), ctypes.POINTER(arrowc.ArrowSchema)
)
_GET_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(arrowc.ArrowArrayStream), ctypes.POINTER(arrowc.ArrowArray))
# returns a pointer to a buffer kept alive here (a c_char_p result from Python would leak)
_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(arrowc.ArrowArrayStream))
_ERROR_TEXT = ctypes.create_string_buffer(b"the producer failed")
_RELEASE_STREAM = ctypes.CFUNCTYPE(None, ctypes.POINTER(arrowc.ArrowArrayStream))


class HandMadeStream(HandMade):
    """An ``__arrow_c_stream__`` producer in ctypes: one array of ``spec`` (``chunks``
    times), every callback in Python; ``fail`` = "schema" or "next" makes that call fail.
    Counts what it hands out and what its consumer releases."""

    def __init__(self, spec: Spec, chunks: int = 1, fail: Optional[str] = None):
        super().__init__(spec)
        self.chunks, self.fail = chunks, fail
        self.handed = {"schema": 0, "array": 0, "stream": 0}
        self.released["stream"] = 0

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        self.calls += 1
        left = [self.chunks]

        def get_schema(stream: Any, out: Any) -> int:
            if self.fail == "schema":
                return 5
            schema, array = self._build(self.spec, True)
            if self.spec.tweak is not None:
                self.spec.tweak(schema, array)
            ctypes.memmove(ctypes.addressof(out.contents), ctypes.addressof(schema), ctypes.sizeof(schema))
            self.handed["schema"] += 1
            return 0

        def get_next(stream: Any, out: Any) -> int:
            if self.fail == "next":
                return 5
            if left[0] == 0:
                out.contents.release = _RELEASE_ARRAY()
                return 0
            left[0] -= 1
            schema, array = self._build(self.spec, True)
            self.released["schema"] -= 1  # this copy of the schema is never handed out
            schema.release(ctypes.pointer(schema))
            if self.spec.tweak is not None:
                self.spec.tweak(schema, array)
            ctypes.memmove(ctypes.addressof(out.contents), ctypes.addressof(array), ctypes.sizeof(array))
            self.handed["array"] += 1
            return 0

        def last_error(stream: Any) -> int:
            return ctypes.addressof(_ERROR_TEXT)

        def release(stream: Any) -> None:
            self.released["stream"] += 1
            stream.contents.release = _RELEASE_STREAM()

        st = arrowc.ArrowArrayStream()
        st.get_schema, st.get_next = _GET_SCHEMA(get_schema), _GET_NEXT(get_next)
        error_fn = _LAST_ERROR(last_error)
        st.get_last_error = ctypes.cast(error_fn, type(st.get_last_error))
        st.release = _RELEASE_STREAM(release)
        self.keep.extend([st, st.get_schema, st.get_next, error_fn, st.release])
        self.handed["stream"] += 1
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(st), b"arrow_array_stream", None)


def _stream_readers() -> list[tuple[str, Callable[[Any], Any]]]:
    return [r for r in _readers() if "update" in r[0] or "read_keys" in r[0] or "arrow_column" in r[0]]


@pytest.mark.parametrize(
    "case",
    ["view length -5", "dictionary index past the values", "struct child shorter than the batch", "int64 data NULL"],
)
def test_malformed_arrays_in_a_python_stream_are_refused_and_released(case: str) -> None:
    """Items 2 and 4 through the stream interface: the same refusal; the stream, its
    schema and every array it handed out released exactly once."""
    spec, text = MALFORMED[case]
    producer = HandMadeStream(spec, chunks=2)
    for name, read in _stream_readers():
        with pytest.raises(ValueError, match=text):
            read(producer)
        assert producer.released == producer.handed, name


@pytest.mark.parametrize("fail", ["schema", "next"])
def test_failing_python_stream_keeps_its_error(fail: str) -> None:
    producer = HandMadeStream(_STR, fail=fail)
    for name, read in _stream_readers():
        with pytest.raises(ValueError, match=f"Arrow stream get_{fail} failed: the producer failed$"):
            read(producer)
        assert producer.released == producer.handed, name


def test_python_stream_is_read_and_released() -> None:
    producer = HandMadeStream(_STR, chunks=3)
    assert arrowc.read_keys(producer) == [b"hello", b"world"] * 3
    for make in MAKERS:
        check_same_as_list(producer, ["hello", "world"] * 3, make)
    assert producer.released == producer.handed
