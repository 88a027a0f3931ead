"""Stress: random operation sequences against an exact model.

A hypothesis ``RuleBasedStateMachine`` drives tiny filters (m in 1..200 cells, k in 1..8,
so collisions and saturation are common) through create / open / open read-only /
open_or_create / add / update / add_many / might_contain / contains_many / union /
intersection / ``|`` / ``&`` / copy / flush / close / reopen / pickle and byte round trips
/ fork-and-add in a child, on several handles of the same files at once. After every
step each open handle is checked against an exact model written from docs/FORMAT.md
alone (:class:`tests.torture_support.BloomModel`, or for the counting filter
:class:`tests.torture_support.CountingModel`, which keeps every counter and the multiset
of items added and not removed):

* the whole image (header and bits) equals the model's, byte for byte, through every
  handle and on disk, so no bit is lost or invented and the header is consistent;
* every item whose add returned is found (no false negative), by ``in`` and by
  ``contains_many``; ``items_added`` equals the model's count (saturating);
* ``f.check()`` and ``verify_file`` pass;
* writes on read-only or closed handles raise ReadOnlyFilterError / FilterClosedError and
  change nothing; a bad item in a batch changes nothing.

The counting filter (4- and 8-bit counters, mixed, so that a width mismatch is refused
too) also gets remove / discard (of items of the multiset, and of certainly absent items,
which raise KeyError and change nothing; a false positive is never removed, README),
count, to_bloom and fork-add-and-remove rules, union and ``|`` with itself or another
handle on the same file (a multiset sum: every counter doubles), and
after every step: every item with a positive multiplicity is found, ``count(x)`` equals
the model's counter minimum and is at least ``min(multiplicity, max_count)`` (a
saturated counter stays at its maximum, so this holds with saturation too), and
``saturated_counters()`` / ``nonzero_counters()`` equal the model's.

CI runs 60 sequences of up to 40 steps per kind (about 2,400 steps each, each followed by
the full check); ``--torture`` runs 1000 sequences of up to 60 steps per kind.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    initialize,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mmapbloom import (
    M3KM,
    BloomConfig,
    ConfigMismatchError,
    FilterClosedError,
    IncompatibleFiltersError,
    MmapBloomError,
    ReadOnlyFilterError,
    verify_file,
)
from tests.torture_support import KINDS, CountingModel, Forked, Kind, blank_image, join_all, key_bytes, torture_enabled

# Tiny filters are over capacity, and their counters saturate, on purpose.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning"),
    pytest.mark.filterwarnings("ignore::mmapbloom.SaturationWarning"),
]

MAX_HANDLES = 10
MAX_FILES = 4

# A small pool makes repeats, shared items between filters and collisions common.
POOL = ["a", "b", "c", "https://example.org/", "ü", "日本", "", b"a", b"\x00", b"\xff\xfe", "x" * 40]
items_st = st.one_of(
    st.sampled_from(POOL),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),  # type: ignore[arg-type]
    st.binary(max_size=6),
)
batches = st.lists(items_st, max_size=12)
# Mostly a few sizes, so that independent filters are often compatible (union, &).
sizes_m = st.one_of(st.sampled_from([1, 7, 8, 20, 64]), st.integers(1, 200))
sizes_k = st.one_of(st.sampled_from([1, 3]), st.integers(1, 8))
# Which of the kind's option sets (counting: 4- or 8-bit counters); ignored by BLM1.
option_index = st.integers(0, 1)
# None: the machine's own shape (drawn once per run), so most filters are compatible.
shapes = st.one_of(st.none(), st.none(), st.tuples(sizes_m, sizes_k, option_index))
Shape = tuple[int, int, dict[str, Any]]


class Handle:
    """One handle under test, the model of the image it sees and what it should refuse."""

    def __init__(self, f: Any, model: Any, readonly: bool, label: str):
        self.f = f
        self.model = model
        self.readonly = readonly
        self.closed = False
        self.label = label

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("ro" if self.readonly else "rw")
        where = os.path.basename(self.model.path) if self.model.path else "mem"
        opts = "".join(f" {k}={v}" for k, v in self.model.options.items())
        return f"<{self.label} {where} m={self.model.m} k={self.model.k}{opts} {state}>"


def write_errors(h: Handle) -> tuple[type, ...]:
    """The errors a write through ``h`` must raise (empty: it must succeed)."""
    if h.closed:
        return (FilterClosedError,)
    if h.readonly:
        return (ReadOnlyFilterError,)
    return ()


class FilterMachine(RuleBasedStateMachine):
    """The model test for one filter kind; ``KIND`` and ``BASE_DIR`` are set by
    :func:`machine_for`. Kind-specific rules (counting: remove) go in a subclass."""

    KIND: Kind
    BASE_DIR: str

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(dir=self.BASE_DIR)
        self.all: list[Handle] = []
        self.files = 0
        self.counter = 0

    def teardown(self) -> None:
        for h in self.all:
            h.f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------
    def _track(self, f: Any, model: Any, readonly: bool, how: str) -> Handle:
        self.counter += 1
        h = Handle(f, model, readonly, f"h{self.counter}:{how}")
        self.all.append(h)
        return h

    def _room(self) -> bool:
        return len(self.all) < MAX_HANDLES

    def _config(self, m: int, k: int) -> BloomConfig:
        return BloomConfig(num_bits=m, num_hashes=k, strategy=M3KM())

    def _options(self, index: int) -> dict[str, Any]:
        sets = self.KIND.option_sets
        return dict(sets[index % len(sets)])

    def _shape(self, shape: Optional[tuple[int, int, int]]) -> Shape:
        if shape is None:
            return self.shape
        m, k, index = shape
        return m, k, self._options(index)

    @initialize(m=sizes_m, k=sizes_k, index=option_index)
    def choose_shape(self, m: int, k: int, index: int) -> None:
        self.shape = (m, k, self._options(index))

    def _counting(self) -> bool:
        return self.KIND.model is CountingModel

    def _expect(self, errors: tuple[type, ...], call: Any) -> Any:
        """Call; it must raise one of ``errors`` if any are given, else succeed."""
        if errors:
            with pytest.raises(errors):
                call()
            return None
        return call()

    # -- constructors -----------------------------------------------------------------
    @precondition(lambda self: self._room())
    @rule(target=handles, shape=shapes)
    def new_memory(self, shape: Optional[tuple[int, int, int]]) -> Handle:
        m, k, opts = self._shape(shape)
        model = self.KIND.model(m, k, **opts)
        return self._track(self.KIND.cls(self._config(m, k), **opts), model, False, "memory")

    @precondition(lambda self: self._room() and self.files < MAX_FILES)
    @rule(target=handles, shape=shapes, how=st.sampled_from(["create", "create-sparse", "open_or_create"]))
    def create_file(self, shape: Optional[tuple[int, int, int]], how: str) -> Handle:
        m, k, opts = self._shape(shape)
        self.files += 1
        path = os.path.join(self.dir, f"f{self.files}.blm")
        cfg = self._config(m, k)
        cls = self.KIND.cls
        if how == "open_or_create":
            f = cls.open_or_create(path, cfg, **opts)
        else:
            f = cls.create(path, cfg, sparse=how == "create-sparse", **opts)
        assert f.path == path and not f.readonly
        return self._track(f, self.KIND.model(m, k, path=path, **opts), False, how)

    @precondition(lambda self: self._room())
    @rule(target=handles, shape=shapes, items=st.sampled_from([0, 7, 2**32 - 3, 2**32 - 1]))
    def from_crafted_bytes(self, shape: Optional[tuple[int, int, int]], items: int) -> Handle:
        """An image built by hand from the format doc, items added near saturation."""
        m, k, opts = self._shape(shape)
        image = blank_image(self.KIND.magic, m, k, items, **opts)
        f = self.KIND.cls.from_bytes(image)
        return self._track(f, self.KIND.model(m, k, items=items, **opts), False, "crafted")

    @precondition(lambda self: self._room())
    @rule(target=handles, h=handles, readonly=st.booleans())
    def open_file(self, h: Handle, readonly: bool) -> Any:
        if h.model.path is None:
            return multiple()
        f = self.KIND.cls.open(h.model.path, readonly=readonly)
        return self._track(f, h.model, readonly, "open-ro" if readonly else "open")

    @precondition(lambda self: self._room())
    @rule(target=handles, h=handles, same=st.booleans())
    def open_or_create_existing(self, h: Handle, same: bool) -> Any:
        if h.model.path is None:
            return multiple()
        m, k, opts = h.model.m, h.model.k, h.model.options
        if same:
            f = self.KIND.cls.open_or_create(h.model.path, self._config(m, k), **opts)
            return self._track(f, h.model, False, "open_or_create-existing")
        other = self._config(m + 1, k) if m < 200 else self._config(m, k % 8 + 1)
        with pytest.raises(ConfigMismatchError):
            self.KIND.cls.open_or_create(h.model.path, other, **opts)
        if "counter_bits" in opts:  # the same m and k with the other counter width
            with pytest.raises(ConfigMismatchError, match="counter_bits"):
                self.KIND.cls.open_or_create(h.model.path, self._config(m, k), counter_bits=12 - opts["counter_bits"])
        return multiple()

    @rule(h=handles)
    def create_over_existing(self, h: Handle) -> None:
        if h.model.path is None:
            return
        with pytest.raises(FileExistsError):
            self.KIND.cls.create(h.model.path, self._config(h.model.m, h.model.k), **h.model.options)

    # -- writes ---------------------------------------------------------------------
    @rule(h=handles, item=items_st)
    def add(self, h: Handle, item: Any) -> None:
        errors = write_errors(h)
        event(f"add: {'refused' if errors else 'file' if h.model.path else 'memory'}")
        got = self._expect(errors, lambda: h.f.add(item))
        if not errors:
            assert got is h.model.add(item)

    @rule(h=handles, items=batches)
    def update(self, h: Handle, items: list[Any]) -> None:
        errors = write_errors(h)
        got = self._expect(errors, lambda: h.f.update(items))
        if not errors:
            assert got == sum(h.model.add(x) for x in items)

    @precondition(lambda self: hasattr(self.KIND.cls, "add_many"))
    @rule(h=handles, items=batches)
    def add_many(self, h: Handle, items: list[Any]) -> None:
        errors = write_errors(h)
        got = self._expect(errors, lambda: h.f.add_many(items))
        if not errors:
            assert got.tolist() == [h.model.add(x) for x in items]  # equals sequential adds

    @rule(
        h=handles,
        items=batches,
        bad=st.sampled_from([True, 2**64, None, 1.5, object(), "\ud800"]),
        where=st.integers(0, 12),
        op=st.sampled_from(["update", "add_many", "add"]),
    )
    def bad_item(self, h: Handle, items: list[Any], bad: Any, where: int, op: str) -> None:
        """A bad item (not str, bytes-like or int in [-2**63, 2**64); or a lone surrogate) is
        refused and changes nothing."""
        batch = items[:where] + [bad] + items[where:]
        if op == "add_many" and not hasattr(h.f, "add_many"):
            op = "update"
        call = {
            "update": lambda: h.f.update(batch),
            "add_many": lambda: h.f.add_many(batch),
            "add": lambda: h.f.add(bad),
        }[op]
        # A closed or read-only handle may report that first (both are ValueError /
        # PermissionError subclasses of the documented errors).
        with pytest.raises((TypeError, ValueError, OverflowError) + write_errors(h)):
            call()

    @rule(h=handles)
    def write_lock_block(self, h: Handle) -> None:
        errors = write_errors(h)
        if errors:
            with pytest.raises(errors):
                h.f.write_lock()
            return
        with h.f.write_lock():
            with h.f.write_lock():  # re-entrant
                assert h.f.add("locked") is h.model.add("locked")

    # -- reads ----------------------------------------------------------------------
    @rule(h=handles, items=batches)
    def query(self, h: Handle, items: list[Any]) -> None:
        if h.closed:
            with pytest.raises(FilterClosedError):
                h.f.might_contain("a")
            with pytest.raises(FilterClosedError):
                h.f.contains_many(["a"])
            return
        expected = [h.model.might_contain(x) for x in items]  # exact, false positives included
        assert [h.f.might_contain(x) for x in items] == expected
        assert [x in h.f for x in items] == expected
        assert h.f.contains_many(items).tolist() == expected

    # -- set algebra ----------------------------------------------------------------
    def _combine_errors(self, a: Handle, b: Handle) -> set[type]:
        errors: set[type] = set()
        if a.closed or b.closed:
            errors.add(FilterClosedError)
        if a.readonly and not a.closed:
            errors.add(ReadOnlyFilterError)
        if not a.model.compatible(b.model):
            errors.add(IncompatibleFiltersError)
        return errors

    @rule(a=handles, b=handles)
    def union(self, a: Handle, b: Handle) -> None:
        errors = self._combine_errors(a, b)
        same = "same handle" if a.f is b.f else "same file" if a.model is b.model else "done"
        event(f"union: {'refused' if errors else same}")
        if errors:
            with pytest.raises(tuple(errors)):
                a.f.union(b.f)
            return
        assert a.f.union(b.f) is a.f
        # Counting, the same handle or another handle on the same file: a multiset sum with
        # a snapshot of itself, every counter doubles (CountingBloomFilter.union).
        a.model.union(b.model)

    @precondition(lambda self: hasattr(self.KIND.cls, "intersection"))
    @rule(a=handles, b=handles)
    def intersection(self, a: Handle, b: Handle) -> None:
        errors = self._combine_errors(a, b)
        event(f"intersection: {'refused' if errors else 'same image' if a.model is b.model else 'done'}")
        if errors:
            with pytest.raises(tuple(errors)):
                a.f.intersection(b.f)
            return
        assert a.f.intersection(b.f) is a.f
        a.model.intersection(b.model)

    @precondition(lambda self: self._room())
    @rule(target=handles, a=handles, b=handles, op=st.sampled_from(["|", "&"]))
    def operator(self, a: Handle, b: Handle, op: str) -> Any:
        if op == "&" and not hasattr(a.f, "intersection"):
            return multiple()
        errors = self._combine_errors(a, b) - {ReadOnlyFilterError}  # the result is a new filter
        call = (lambda: a.f | b.f) if op == "|" else (lambda: a.f & b.f)
        if errors:
            with pytest.raises(tuple(errors)):
                call()
            return multiple()
        f = call()
        assert f.path is None and f is not a.f
        model = a.model.copy()
        other = b.model if b.model is not a.model else b.model.copy()  # a copy is another image
        model.union(other) if op == "|" else model.intersection(other)
        return self._track(f, model, False, f"op{op}")

    # -- counting filter: removal, counts, conversion -------------------------------------
    @precondition(lambda self: self._counting())
    @rule(
        h=handles,
        item=items_st,
        pick=st.integers(0, 2**16),
        from_multiset=st.booleans(),
        how=st.sampled_from(["remove", "discard"]),
    )
    def remove(self, h: Handle, item: Any, pick: int, from_multiset: bool, how: str) -> None:
        """Remove an item of the multiset (it must succeed), or a certainly absent one
        (KeyError / False, nothing changes). A false positive is never removed: the
        README says that corrupts other items."""
        if from_multiset and h.model.promised():
            promised = h.model.promised()
            item = promised[pick % len(promised)]  # its bytes, even if it was added as str
        errors = write_errors(h)
        if errors:
            event("remove: refused")
            with pytest.raises(errors):
                getattr(h.f, how)(item)
            return
        if h.model.multiplicity(item) > 0:
            event("remove: of the multiset")
            result = getattr(h.f, how)(item)
            assert result is (True if how == "discard" else None)
            h.model.remove(item)
        elif h.model.count(item) == 0:
            event("remove: certainly absent")
            if how == "discard":
                assert h.f.discard(item) is False
            else:
                with pytest.raises(KeyError):
                    h.f.remove(item)
        else:
            event("remove: false positive, skipped")

    @precondition(lambda self: self._counting())
    @rule(h=handles, items=batches)
    def count(self, h: Handle, items: list[Any]) -> None:
        if h.closed:
            with pytest.raises(FilterClosedError):
                h.f.count("a")
            return
        assert [h.f.count(x) for x in items] == [h.model.count(x) for x in items]

    @precondition(lambda self: self._counting())
    @rule(h=handles)
    def to_bloom(self, h: Handle) -> None:
        """The plain filter made from the counters: the model's BLM1 image, in memory."""
        if h.closed:
            with pytest.raises(FilterClosedError):
                h.f.to_bloom()
            return
        b = h.f.to_bloom()
        try:
            expected = h.model.to_bloom()
            assert type(b).__name__ == "BloomFilter" and b.path is None
            b.check()
            assert b.to_bytes() == expected.image()
            promised = expected.promised()
            if promised:
                assert b.contains_many(promised).all(), "to_bloom lost an item"
        finally:
            b.close()

    @precondition(lambda self: self._counting())
    @rule(h=handles, items=batches)
    def fork_add_and_remove(self, h: Handle, items: list[Any]) -> None:
        """A child adds a batch through the inherited handle and removes every other item
        of it again (only what it added itself)."""
        removed = items[::2]

        def child() -> Any:
            try:
                new = [h.f.add(x) for x in items]
                for x in removed:
                    h.f.remove(x)
                return new
            except MmapBloomError as exc:
                return type(exc)

        forked = Forked(child)
        join_all([forked], timeout=30)
        got = forked.result()
        errors = write_errors(h)
        if errors:
            assert got in errors if items else got == []
            return
        model = h.model if h.model.path is not None else h.model.copy()
        assert got == [model.add(x) for x in items]
        for x in removed:
            model.remove(x)

    # -- lifecycle --------------------------------------------------------------------
    @rule(h=handles)
    def flush(self, h: Handle) -> None:
        self._expect((FilterClosedError,) if h.closed else (), h.f.flush)

    @rule(h=handles)
    def close(self, h: Handle) -> None:
        h.f.close()
        h.f.close()  # idempotent
        h.closed = True

    @rule(h=handles)
    def reopen(self, h: Handle) -> None:
        if h.model.path is None:
            return
        h.f.close()
        h.f = self.KIND.cls.open(h.model.path, readonly=h.readonly)
        h.closed = False

    @precondition(lambda self: self._room())
    @rule(target=handles, h=handles)
    def pickle_round_trip(self, h: Handle) -> Any:
        if h.closed:
            with pytest.raises(FilterClosedError):
                pickle.dumps(h.f)
            return multiple()
        f = pickle.loads(pickle.dumps(h.f))
        if h.model.path is not None:  # pickles as path and mode: the same file
            assert f.path == h.model.path and f.readonly == h.readonly
            return self._track(f, h.model, h.readonly, "unpickled")
        return self._track(f, h.model.copy(), False, "unpickled-copy")  # pickles as bytes

    @precondition(lambda self: self._room())
    @rule(target=handles, h=handles, how=st.sampled_from(["from_bytes", "copy", "bytearray", "memoryview"]))
    def memory_copy(self, h: Handle, how: str) -> Any:
        if h.closed:
            with pytest.raises(FilterClosedError):
                h.f.to_bytes()
            return multiple()
        cls = self.KIND.cls
        data = h.f.to_bytes()
        f = {
            "from_bytes": lambda: cls.from_bytes(data),
            "copy": h.f.copy,
            "bytearray": lambda: cls.from_bytes(bytearray(data)),
            "memoryview": lambda: cls.from_bytes(memoryview(data)),
        }[how]()
        assert f == h.f
        return self._track(f, h.model.copy(), False, how)

    @rule(h=handles, items=batches)
    def fork_and_add(self, h: Handle, items: list[Any]) -> None:
        """A child adds through the handle it inherited. File: the parent sees every bit;
        memory: the child worked on its own copy and the parent sees nothing."""

        def child() -> Any:
            try:
                return [h.f.add(x) for x in items]
            except MmapBloomError as exc:
                return type(exc)

        forked = Forked(child)
        join_all([forked], timeout=30)
        got = forked.result()
        errors = write_errors(h)
        event(f"fork_and_add: {'refused' if errors else 'file' if h.model.path else 'memory'}")
        if errors:
            assert got in errors if items else got == []
            return
        model = h.model if h.model.path is not None else h.model.copy()
        assert got == [model.add(x) for x in items]

    # -- the invariant, after every step --------------------------------------------------
    @invariant()
    def matches_model(self) -> None:
        checked_paths: set[str] = set()
        for h in self.all:
            assert h.f.closed == h.closed
            if h.closed:
                continue
            f, model = h.f, h.model
            assert f.readonly == h.readonly
            assert (f.num_bits, f.num_hashes) == (model.m, model.k)
            f.check()
            image = model.image()
            assert f.to_bytes() == image, f"{h}: image differs from the model"
            assert f.items_added == model.items
            added = model.promised()
            if added:
                assert f.contains_many(added).all(), f"{h}: false negative"
                assert all(f.might_contain(x) for x in added), f"{h}: false negative"
            if isinstance(model, CountingModel):
                for x in added:
                    got = f.count(x)
                    assert got == model.count(x), f"{h}: count({x!r})"
                    # A counter that saturated stays at max_count, so this holds with saturation.
                    assert got >= min(model.multiplicity(x), f.max_count), f"{h}: count({x!r}) too low"
                assert f.saturated_counters() == model.saturated()
                assert f.nonzero_counters() == sum(v != 0 for v in model.cells)
            event(f"open handles checked: {sum(not x.closed for x in self.all)}")
            if model.path is not None and model.path not in checked_paths:
                checked_paths.add(model.path)
                with open(model.path, "rb") as fh:
                    assert fh.read() == image, f"{model.path}: file differs from the model"
                with verify_file(model.path) as v:
                    assert v.items_added == model.items


def machine_for(kind: Kind, base_dir: str) -> type[FilterMachine]:
    return type(f"{kind.name.title()}Machine", (FilterMachine,), {"KIND": kind, "BASE_DIR": base_dir})


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork-and-add needs fork()")
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_model(kind: Kind, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    big = torture_enabled(request.config)
    run_state_machine_as_test(
        machine_for(kind, str(tmp_path)),
        settings=settings(
            max_examples=1000 if big else 60,
            stateful_step_count=60 if big else 40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
        ),
    )


def test_reference_model_matches_golden_bytes() -> None:
    """The model itself reproduces the golden example of docs/FORMAT.md."""
    from tests.torture_support import BloomModel

    model = BloomModel(20, 3)
    assert model.add("x") is True
    assert model.image().hex() == "424c4d314d334b4d1400000000000000030000000100000000a800"
    assert key_bytes("x") == b"x"


def test_counting_model_matches_golden_bytes() -> None:
    """The counting model reproduces the BLC1 golden example of docs/FORMAT.md ("x" added
    20 times to m = 9, k = 3, 4-bit: cells 2, 3 and 7 saturated at 15)."""
    model = CountingModel(9, 3, counter_bits=4)
    assert [model.add("x") for _ in range(20)][:2] == [True, False]
    assert model.cells_of("x") == [2, 3, 7]
    assert model.image().hex() == ("424c43314d334b4d09000000000000000300000001000000040000000000000000ff00f000")
