"""BloomFilter behaviour in one process: the promise, rates, batches, algebra, lifecycle."""

from __future__ import annotations

import math
import os
import pickle
import warnings

import numpy as np
import pytest

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    ConfigMismatchError,
    FilterClosedError,
    IncompatibleFiltersError,
    OverCapacityWarning,
    ReadOnlyFilterError,
    get_strategy,
)
from tests.conftest import urls


@pytest.fixture(params=["memory", "file"])
def make(request, tmp_path):  # type: ignore[no-untyped-def]
    made: list[BloomFilter] = []

    def factory(config: BloomConfig, name: str = "f.blm") -> BloomFilter:
        f = BloomFilter(config) if request.param == "memory" else BloomFilter.create(tmp_path / name, config)
        made.append(f)
        return f

    yield factory
    for f in made:
        f.close()


def test_no_false_negatives_100k(make) -> None:  # type: ignore[no-untyped-def]
    items = urls(100_000)
    f = make(BloomConfig.for_items(100_000, 0.01))
    half = len(items) // 2
    for item in items[:2000]:
        f.add(item)
    f.update(items[2000:half])
    f.add_many(items[half:])
    assert all(f.might_contain(x) for x in items)
    assert f.contains_many(items).all()


#: Exact false positives among ``probes`` absent keys after adding ``urls(n)`` to a filter of
#: ``for_items(n, p, strategy)``, and its set bits X, as Guava pins them: keys, hashes and
#: positions are deterministic (and identical on the native and pure backends), so any
#: change to a strategy's arithmetic, the key encoding or the sizing moves these numbers.
#: strategy, n, p, probes -> (false positives, set bits X)
EXACT_FALSE_POSITIVES = {
    ("M3M2", 1000, 0.01, 20_000): (217, 5011),
    ("M3M2", 100, 0.1, 1000): (90, 226),
    ("M3B2", 1000, 0.01, 20_000): (172, 5057),
    ("M3B2", 100, 0.1, 1000): (91, 222),  # k = 3 since the exact blocked sizing (was 4)
    ("M3MX", 1000, 0.01, 20_000): (210, 4929),
    ("M3MX", 100, 0.1, 1000): (80, 229),
    ("M3KM", 1000, 0.01, 20_000): (225, 5012),
    ("M3KM", 100, 0.1, 1000): (104, 222),
    ("M3BL", 1000, 0.01, 20_000): (190, 5095),
    ("M3BL", 100, 0.1, 1000): (62, 219),
}


@pytest.mark.parametrize("strategy, n, p, probes", sorted(EXACT_FALSE_POSITIVES))
def test_false_positive_count_is_exact(make, strategy: str, n: int, p: float, probes: int) -> None:  # type: ignore[no-untyped-def]
    fps, ones = EXACT_FALSE_POSITIVES[(strategy, n, p, probes)]
    f = make(BloomConfig.for_items(n, p, get_strategy(strategy)))
    f.update(urls(n))
    absent = urls(probes, prefix="https://absent.example/")
    answers = f.contains_many(absent)
    assert int(np.count_nonzero(answers)) == fps
    assert sum(f.might_contain(x) for x in absent) == fps  # the per-item path agrees
    assert f.count_ones() == ones
    # And the pinned counts are what the theory predicts (a loose band around p).
    assert 0.5 * p <= fps / probes <= 1.6 * p
    assert 0.5 * p <= f.expected_fp_rate() <= 1.1 * p  # M3BL sizes in whole blocks: at most p
    assert f.observed_fp_rate() == pytest.approx(p, rel=0.5)


def test_empty_filter_answers_false(make) -> None:  # type: ignore[no-untyped-def]
    f = make(BloomConfig.for_items(1000, 0.01))
    assert not any(f.might_contain(x) for x in urls(1000))
    assert not f.contains_many(urls(1000)).any()
    assert f.items_added == 0 and f.count_ones() == 0 and f.approx_items() == 0


def test_duplicate_adds_leave_bytes_unchanged(make) -> None:  # type: ignore[no-untyped-def]
    f = make(BloomConfig.for_items(1000, 0.01))
    items = urls(500)
    assert f.update(items) == 500
    before = f.to_bytes()
    assert not any(f.add(x) for x in items)
    assert f.update(items) == 0
    assert not f.add_many(items).any()
    assert f.to_bytes() == before and f.items_added == 500


def test_add_reports_new(make) -> None:  # type: ignore[no-untyped-def]
    f = make(BloomConfig.for_items(1000, 0.01))
    assert f.add("a") is True
    assert f.add("a") is False
    assert f.add(b"a") is False  # same bytes
    assert f.items_added == 1


def test_batch_duplicates_count_once(make) -> None:  # type: ignore[no-untyped-def]
    f = make(BloomConfig.for_items(1000, 0.01))
    assert f.add_many(["x", "y", "x", "z", "y"]).tolist() == [True, True, False, True, False]
    assert f.items_added == 3
    assert f.update(["x", "w", "w"]) == 1


def test_bad_key_in_batch_changes_nothing(make) -> None:  # type: ignore[no-untyped-def]
    f = make(BloomConfig.for_items(1000, 0.01))
    before = f.to_bytes()
    with pytest.raises(TypeError):
        f.update(["a", "b", 3.0, "c"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        f.add_many(["a", None])  # type: ignore[list-item]
    assert f.to_bytes() == before


def test_items_added_saturates() -> None:
    f = BloomFilter(BloomConfig(num_bits=1000, num_hashes=2))
    img = bytearray(f.to_bytes())
    img[20:24] = (2**32 - 2).to_bytes(4, "little")
    g = BloomFilter.from_bytes(img)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverCapacityWarning)
        g.add("a")
        g.add("b")
        g.update(["c", "d"])
        assert g.items_added == 2**32 - 1
        assert (g | g).items_added == 2**32 - 1


def test_union_and_intersection(make) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(2000, 0.01)
    a, b = make(cfg, "a.blm"), make(cfg, "b.blm")
    xs, ys = urls(600), urls(600, prefix="https://other.example/")
    common = urls(100, prefix="https://common.example/")
    a.update(xs + common)
    b.update(ys + common)
    u = a | b
    assert isinstance(u, BloomFilter) and u.path is None
    assert u.contains_many(xs + ys + common).all()
    assert u.items_added == 1400
    i = a & b
    assert i.contains_many(common).all()
    assert i.items_added == 700
    a_bytes = a.to_bytes()
    a |= b
    assert a.contains_many(xs + ys + common).all()
    assert a.to_bytes()[24:] == u.to_bytes()[24:]
    c = BloomFilter.from_bytes(a_bytes)
    c &= b
    assert c.to_bytes() == i.to_bytes()


def test_union_with_itself_changes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.blm"
    with BloomFilter.create(path, BloomConfig.for_items(1000, 0.01)) as f:
        f.update(urls(100))
        before = f.to_bytes()
        f |= f
        f &= f
        with BloomFilter.open(path) as g:
            f.union(g)
            g.intersection(f)
            g |= f
        assert f.to_bytes() == before and f.items_added == 100


@pytest.mark.parametrize(
    "other, field",
    [
        (BloomConfig(num_bits=1001, num_hashes=3), "num_bits"),
        (BloomConfig(num_bits=1000, num_hashes=4), "num_hashes"),
    ],
)
def test_incompatible_refused(other: BloomConfig, field: str) -> None:
    a = BloomFilter(BloomConfig(num_bits=1000, num_hashes=3))
    b = BloomFilter(other)
    for op in (lambda: a.union(b), lambda: a.intersection(b), lambda: a | b, lambda: a & b):
        with pytest.raises(IncompatibleFiltersError, match=field) as info:
            op()
        assert info.value.field == field
    with pytest.raises(TypeError):
        a.union("not a filter")  # type: ignore[arg-type]


def test_incompatible_scheme_refused() -> None:
    from tests.test_hashing import XorShift
    from mmapbloom import register_strategy

    register_strategy(XorShift())
    a = BloomFilter(BloomConfig(num_bits=1000, num_hashes=3))
    b = BloomFilter(BloomConfig(num_bits=1000, num_hashes=3, strategy=XorShift()))
    with pytest.raises(IncompatibleFiltersError, match=r"strategy differs \('M3M2' != 'TEST'\)"):
        a |= b


def test_statistics() -> None:
    f = BloomFilter(BloomConfig.for_items(10_000, 0.01))
    f.update(urls(10_000))
    assert f.approx_items() == pytest.approx(10_000, rel=0.03)
    assert f.fill_ratio() == pytest.approx(0.5, abs=0.03)
    assert f.count_ones() == sum(bin(b).count("1") for b in f.to_bytes()[24:])
    full = BloomFilter.from_bytes(
        b"BLM1M3KM" + (8).to_bytes(8, "little") + (1).to_bytes(4, "little") + bytes(4) + b"\xff"
    )
    assert full.approx_items() == math.inf and full.observed_fp_rate() == 1.0


def test_over_capacity_warns_once_per_handle() -> None:
    f = BloomFilter(BloomConfig.for_items(100, 0.01))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f.update(urls(100))
        assert not caught  # a correctly sized filter never warns at capacity
        assert not f.is_over_capacity()
        for x in urls(400, prefix="https://more.example/"):
            f.add(x)
    assert [w.category for w in caught] == [OverCapacityWarning]
    assert "design point" in str(caught[0].message)
    assert f.is_over_capacity()


def test_lifecycle_and_closed_use(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c.blm"
    f = BloomFilter.create(path, BloomConfig.for_items(100, 0.01))
    f.add("a")
    f.flush()
    mapping = f._storage.buf
    lock = f._storage.lock
    f.close()
    f.close()  # idempotent
    assert f.closed
    assert mapping.closed  # type: ignore[union-attr]  # a file's buffer is an mmap; unmapped now: close released the handle's own views first
    with pytest.raises(FilterClosedError):
        lock.acquire()  # a writer that was waiting for the lock never writes unlocked
    for op in (
        lambda: f.add("a"),
        lambda: f.might_contain("a"),
        lambda: "a" in f,
        lambda: f.update(["a"]),
        lambda: f.contains_many(["a"]),
        lambda: f.flush(),
        lambda: f.to_bytes(),
        lambda: f.items_added,
        lambda: f.count_ones(),
        lambda: f.write_lock(),
        lambda: pickle.dumps(f),
    ):
        with pytest.raises(FilterClosedError):
            op()
    with pytest.raises(FilterClosedError):
        f.add("b")
    with BloomFilter.open(path) as g:
        assert "a" in g
    assert g.closed
    m = BloomFilter(BloomConfig.for_items(100, 0.01))
    m.close()
    with pytest.raises(FilterClosedError):
        m.might_contain("a")


def test_create_refuses_existing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "e.blm"
    with BloomFilter.create(path, BloomConfig.for_items(100, 0.01)) as f:
        f.add("keep")
        with pytest.raises(FileExistsError):
            BloomFilter.create(path, BloomConfig.for_items(100, 0.01))
        assert "keep" in f
    assert os.path.getsize(path) == 24 + (959 + 7) // 8
    # no temporary left behind (the write lock's side file is none)
    assert [p.name for p in tmp_path.iterdir() if p.name != "e.blm.mutex"] == ["e.blm"]


def test_open_or_create(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "o.blm"
    cfg = BloomConfig.for_items(100, 0.01)
    with BloomFilter.open_or_create(path, cfg) as f:
        f.add("a")
    with BloomFilter.open_or_create(path, cfg) as f:
        assert "a" in f and f.config.capacity == 100
    for other, field in [
        (BloomConfig(num_bits=cfg.num_bits + 1, num_hashes=cfg.num_hashes), "num_bits"),
        (BloomConfig(num_bits=cfg.num_bits, num_hashes=cfg.num_hashes + 1), "num_hashes"),
    ]:
        with pytest.raises(ConfigMismatchError, match=field) as info:
            BloomFilter.open_or_create(path, other)
        assert isinstance(info.value, ValueError) and info.value.field == field


def test_readonly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "r.blm"
    with BloomFilter.create(path, BloomConfig.for_items(100, 0.01)) as f:
        f.add("a")
    os.chmod(path, 0o444)
    with BloomFilter.open(path, readonly=True) as r:
        assert "a" in r and r.readonly
        assert r.contains_many(["a", "b"]).tolist() == [True, False]
        before = r.to_bytes()
        for op in (
            lambda: r.add("b"),
            lambda: r.update(["b"]),
            lambda: r.add_many(["b"]),
            lambda: r.union(r),
            lambda: r.write_lock(),
        ):
            with pytest.raises(ReadOnlyFilterError) as info:
                op()
            assert isinstance(info.value, PermissionError)
        assert r.to_bytes() == before
    if os.geteuid() != 0:  # root may open anything for writing
        with pytest.raises(PermissionError):
            BloomFilter.open(path)


def test_pickle(tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = BloomFilter(BloomConfig.for_items(100, 0.01))
    m.add("a")
    m2 = pickle.loads(pickle.dumps(m))
    assert m2 == m and m2.path is None
    path = tmp_path / "p.blm"
    with BloomFilter.create(path, BloomConfig.for_items(100, 0.01)) as f:
        f.add("a")
        g = pickle.loads(pickle.dumps(f))
        assert g.path == str(path) and not g.readonly
        g.add("b")
        assert "b" in f  # the same shared file
        g.close()
    with BloomFilter.open(path, readonly=True) as r:
        r2 = pickle.loads(pickle.dumps(r))
        assert r2.readonly
        r2.close()


def test_relative_path_pickles_absolute(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    with BloomFilter.create("rel.blm", BloomConfig.for_items(100, 0.01)) as f:
        assert f.path == str(tmp_path / "rel.blm")


def test_write_lock_context(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BloomFilter.create(tmp_path / "w.blm", BloomConfig.for_items(1000, 0.01)) as f:
        with f.write_lock():
            news = [f.add(x) for x in urls(100)]
            with f.write_lock():  # re-entrant
                f.add("nested")
        assert all(news) and f.items_added == 101


def test_sparse_and_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = os.umask(0o022)
    try:
        with BloomFilter.create(tmp_path / "s.blm", BloomConfig(num_bits=8 * 2**20, num_hashes=3), sparse=True) as f:
            f.add("a")
        with BloomFilter.create(tmp_path / "m.blm", BloomConfig(num_bits=80, num_hashes=3), mode=0o640):
            pass
    finally:
        os.umask(old)
    st = os.stat(tmp_path / "s.blm")
    assert st.st_size == 24 + 2**20 and st.st_blocks * 512 < 2**20  # sparse
    assert st.st_mode & 0o777 == 0o644  # 0o666 & ~umask
    assert os.stat(tmp_path / "m.blm").st_mode & 0o777 == 0o640


def test_reserved_space_not_sparse(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BloomFilter.create(tmp_path / "r.blm", BloomConfig(num_bits=8 * 2**20, num_hashes=3)):
        pass
    assert os.stat(tmp_path / "r.blm").st_blocks * 512 >= 2**20


def test_repr_and_eq() -> None:
    a = BloomFilter(BloomConfig(num_bits=100, num_hashes=3))
    b = BloomFilter(BloomConfig(num_bits=100, num_hashes=3))
    assert a == b and "m=100 k=3" in repr(a)
    b.add("x")
    assert a != b
    with pytest.raises(TypeError):
        hash(a)


def test_unencodable_str_refused_everywhere() -> None:
    f = BloomFilter(BloomConfig.for_items(100, 0.01))
    before = f.to_bytes()
    for op in (
        lambda: f.add("\ud800"),
        lambda: f.might_contain("\ud800"),
        lambda: f.update(["a", "\ud800"]),
        lambda: f.contains_many(["a", "\ud800"]),
        lambda: f.add_many(["\ud800"]),
    ):
        with pytest.raises(UnicodeEncodeError):
            op()
    assert f.to_bytes() == before


def test_contains_many_accepts_iterables_and_mixed_kinds() -> None:
    f = BloomFilter(BloomConfig.for_items(100, 0.01))
    f.update(["a", b"b"])
    assert f.contains_many(iter(["a", "b", "c"])).tolist() == [True, True, False]
    assert f.contains_many(("a", b"a", bytearray(b"b"), memoryview(b"c"))).tolist() == [True, True, True, False]
    assert f.contains_many([]).shape == (0,)


def test_warning_as_error_never_interrupts_a_write() -> None:
    """With warnings turned into errors, the OverCapacityWarning is raised only after the
    write is complete (and the lock released): no item is half-added."""
    f = BloomFilter(BloomConfig.for_items(50, 0.01))
    items = urls(400)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverCapacityWarning)
        with pytest.raises(OverCapacityWarning):
            f.update(items)
    assert f.contains_many(items).all()  # the whole batch went in
    g = BloomFilter(BloomConfig.for_items(50, 0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverCapacityWarning)
        for x in items:
            try:
                g.add(x)
            except OverCapacityWarning:
                assert x in g  # raised after the add completed
                break
        else:
            raise AssertionError("never warned")
    with g.write_lock():  # the lock was released despite the exception
        pass


def test_unknown_options_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(100, 0.01)
    with pytest.raises(TypeError, match="spares"):
        BloomFilter.create(tmp_path / "o.blm", cfg, spares=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        BloomFilter(cfg, counter_bits=8)  # type: ignore[call-arg]
    assert not os.path.exists(tmp_path / "o.blm")


@pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")
def test_huge_k_batch_falls_back_to_single_adds(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mmapbloom.kernels as kernels_module

    monkeypatch.setattr(kernels_module, "PURE_CHUNK_PAIRS", 16)  # one key per numpy chunk
    cfg = BloomConfig(num_bits=64, num_hashes=1000)
    a, b = BloomFilter(cfg), BloomFilter(cfg)
    items = ["a", "b", "a", "c"]
    assert b.add_many(items).tolist() == [a.add(x) for x in items]
    assert a.to_bytes() == b.to_bytes() and b.contains_many(items).all()


def test_m3km_subclass_uses_its_own_positions() -> None:
    from mmapbloom import M3KM, register_strategy

    class Reversed(M3KM):
        name = "REVS"

        def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
            return super().positions(key[::-1], num_hashes, num_bits)

    register_strategy(Reversed())
    f = BloomFilter(BloomConfig(num_bits=1000, num_hashes=4, strategy=Reversed()))
    f.add("hello")
    f.update(["world"])
    assert f.contains_many(["hello", "world"]).tolist() == [True, True]
    assert f.might_contain("world")
    g = BloomFilter(BloomConfig(num_bits=1000, num_hashes=4, strategy=Reversed()))
    assert g.add_many(["hello", "world"]).tolist() == [True, True] and g.to_bytes() == f.to_bytes()
