"""Torture (issue 6): random operation sequences against an exact model.

A hypothesis ``RuleBasedStateMachine`` drives tiny filters (m in 1..200 bits, k in 1..8,
so collisions and saturation are common) through create / open / open read-only /
open_or_create / add / update / add_many / might_contain / contains_many / union /
intersection / ``|`` / ``&`` / copy / flush / close / reopen / pickle and byte round trips
/ fork-and-add in a child, on several handles of the same files at once. After every
step each open handle is checked against :class:`tests.torture_support.BloomModel`, an
exact model written from docs/FORMAT.md alone:

* the whole image (header and bits) equals the model's, byte for byte, through every
  handle and on disk, so no bit is lost or invented and the header is consistent;
* every item whose add returned is found (no false negative), by ``in`` and by
  ``contains_many``; ``items_added`` equals the model's count (saturating);
* ``f.check()`` and ``verify_file`` pass;
* writes on read-only or closed handles raise ReadOnlyFilterError / FilterClosedError and
  change nothing; a bad item in a batch changes nothing.

CI runs 60 sequences of up to 40 steps (about 2,400 steps, each followed by the full check);
``--torture`` runs 1000 sequences of up to 60 steps.

TODO(counting): a kind for CountingBloomFilter with a multiset model and remove / discard /
count rules (see tests.torture_support.KINDS).
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
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
    BloomConfig,
    ConfigMismatchError,
    FilterClosedError,
    IncompatibleFiltersError,
    MmapBloomError,
    ReadOnlyFilterError,
    verify_file,
)
from tests.torture_support import KINDS, Forked, Kind, join_all, key_bytes, torture_enabled

# Tiny filters are over capacity on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")

MAX_HANDLES = 10
MAX_FILES = 4

# A small pool makes repeats, shared items between filters and collisions common.
POOL = ["a", "b", "c", "https://example.org/", "ü", "日本", "", b"a", b"\x00", b"\xff\xfe", "x" * 40]
items_st = st.one_of(
    st.sampled_from(POOL),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),
    st.binary(max_size=6),
)
batches = st.lists(items_st, max_size=12)
# Mostly a few sizes, so that independent filters are often compatible (union, &).
sizes_m = st.one_of(st.sampled_from([1, 7, 8, 20, 64]), st.integers(1, 200))
sizes_k = st.one_of(st.sampled_from([1, 3]), st.integers(1, 8))
# None: the machine's own shape (drawn once per run), so most filters are compatible.
shapes = st.one_of(st.none(), st.none(), st.tuples(sizes_m, sizes_k))


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
        return f"<{self.label} {where} m={self.model.m} k={self.model.k} {state}>"


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
        return BloomConfig(num_bits=m, num_hashes=k)

    def _shape(self, shape: Optional[tuple[int, int]]) -> tuple[int, int]:
        return self.shape if shape is None else shape

    @initialize(m=sizes_m, k=sizes_k)
    def choose_shape(self, m: int, k: int) -> None:
        self.shape = (m, k)

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
    def new_memory(self, shape: Optional[tuple[int, int]]) -> Handle:
        m, k = self._shape(shape)
        model = self.KIND.model(m, k)
        return self._track(self.KIND.cls(self._config(m, k)), model, False, "memory")

    @precondition(lambda self: self._room() and self.files < MAX_FILES)
    @rule(target=handles, shape=shapes, how=st.sampled_from(["create", "create-sparse", "open_or_create"]))
    def create_file(self, shape: Optional[tuple[int, int]], how: str) -> Handle:
        m, k = self._shape(shape)
        self.files += 1
        path = os.path.join(self.dir, f"f{self.files}.blm")
        cfg = self._config(m, k)
        cls = self.KIND.cls
        if how == "open_or_create":
            f = cls.open_or_create(path, cfg)
        else:
            f = cls.create(path, cfg, sparse=how == "create-sparse")
        assert f.path == path and not f.readonly
        return self._track(f, self.KIND.model(m, k, path=path), False, how)

    @precondition(lambda self: self._room())
    @rule(target=handles, shape=shapes, items=st.sampled_from([0, 7, 2**32 - 3, 2**32 - 1]))
    def from_crafted_bytes(self, shape: Optional[tuple[int, int]], items: int) -> Handle:
        """An image built by hand from the format doc, items added near saturation."""
        m, k = self._shape(shape)
        image = struct.pack("<4s4sQII", self.KIND.model.kind_magic, b"M3KM", m, k, items) + bytes((m + 7) >> 3)
        f = self.KIND.cls.from_bytes(image)
        return self._track(f, self.KIND.model(m, k, items=items), False, "crafted")

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
        m, k = h.model.m, h.model.k
        if same:
            f = self.KIND.cls.open_or_create(h.model.path, self._config(m, k))
            return self._track(f, h.model, False, "open_or_create-existing")
        other = self._config(m + 1, k) if m < 200 else self._config(m, k % 8 + 1)
        with pytest.raises(ConfigMismatchError):
            self.KIND.cls.open_or_create(h.model.path, other)
        return multiple()

    @rule(h=handles)
    def create_over_existing(self, h: Handle) -> None:
        if h.model.path is None:
            return
        with pytest.raises(FileExistsError):
            self.KIND.cls.create(h.model.path, self._config(h.model.m, h.model.k))

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

    @rule(h=handles, items=batches)
    def add_many(self, h: Handle, items: list[Any]) -> None:
        errors = write_errors(h)
        got = self._expect(errors, lambda: h.f.add_many(items))
        if not errors:
            assert got.tolist() == [h.model.add(x) for x in items]  # equals sequential adds

    @rule(h=handles, items=batches, bad=st.sampled_from([3, None, 1.5, object(), "\ud800"]),
          where=st.integers(0, 12), op=st.sampled_from(["update", "add_many", "add"]))
    def bad_item(self, h: Handle, items: list[Any], bad: Any, where: int, op: str) -> None:
        """A bad item (not str/bytes, or a lone surrogate) is refused and changes nothing."""
        batch = items[:where] + [bad] + items[where:]
        call = {"update": lambda: h.f.update(batch), "add_many": lambda: h.f.add_many(batch),
                "add": lambda: h.f.add(bad)}[op]
        # A closed or read-only handle may report that first (both are ValueError /
        # PermissionError subclasses of the documented errors).
        with pytest.raises((TypeError, ValueError) + write_errors(h)):
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
        event(f"union: {'refused' if errors else 'same image' if a.model is b.model else 'done'}")
        if errors:
            with pytest.raises(tuple(errors)):
                a.f.union(b.f)
            return
        assert a.f.union(b.f) is a.f
        a.model.union(b.model)

    @rule(a=handles, b=handles)
    def intersection(self, a: Handle, b: Handle) -> None:
        if not hasattr(a.f, "intersection"):
            return
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
        f = {"from_bytes": lambda: cls.from_bytes(data), "copy": h.f.copy,
             "bytearray": lambda: cls.from_bytes(bytearray(data)),
             "memoryview": lambda: cls.from_bytes(memoryview(data))}[how]()
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
            added = sorted(model.added)
            if added:
                assert f.contains_many(added).all(), f"{h}: false negative"
                assert all(f.might_contain(x) for x in added), f"{h}: false negative"
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
