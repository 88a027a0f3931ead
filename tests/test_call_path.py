"""``f.add(s)`` and ``f.might_contain(s)`` take CPython's specialised call of a C method on
every kind that sits on the compiled FilterBase (plain, counting, and a user's subclass):
FilterBase.__init_subclass__ gives each subclass its own descriptor of the same C function,
since the specialised call (3.11 to 3.13) requires type(self) to be exactly the descriptor's
type. Without it ``f.add(s)`` cost 206 instructions more than a cached ``add = f.add``.
The instruction counts are measured by tools/bench/startup.py, not asserted here."""

from __future__ import annotations

import dis
import sys
import types
from typing import Any

import pytest

import mmapbloom
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter
from mmapbloom.kernels import native_module

native = pytest.mark.skipif(native_module() is None, reason="the compiled kernels are not built")
KINDS = [BloomFilter, CountingBloomFilter]


def _calls(f: Any, s: str) -> None:
    f.add(s)
    f.might_contain(s)


@native
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_owns_descriptors_of_the_c_methods(kind: type) -> None:
    base = native_module().FilterBase
    for name in ("add", "might_contain", "write_lock"):
        descr = kind.__dict__[name]
        assert type(descr) is type(base.__dict__[name]), name  # a C method descriptor, no Python layer
        assert descr.__objclass__ is kind and descr.__doc__ == base.__dict__[name].__doc__, name


@native
@pytest.mark.skipif(sys.version_info < (3, 11), reason="no specialising interpreter before 3.11")
@pytest.mark.filterwarnings("ignore::mmapbloom.SaturationWarning")
@pytest.mark.parametrize("kind", KINDS)
def test_the_interpreter_specialises_the_method_call(kind: type) -> None:
    f = kind(BloomConfig.for_items(100, 0.01))
    code = _calls.__code__.replace()  # a fresh code object: its own inline caches
    run = types.FunctionType(code, globals())
    for _ in range(100):
        run(f, "a")
    names = [i.opname for i in dis.get_instructions(run, adaptive=True)]  # type: ignore[call-arg]
    assert sum("METHOD_DESCRIPTOR_O" in n for n in names) == 2, names


@native
def test_a_user_subclass_gets_them_and_an_override_is_kept() -> None:
    class Logged(BloomFilter):
        __slots__ = ()

    class Overriding(BloomFilter):
        __slots__ = ("seen",)

        def add(self, item: Any) -> bool:
            self.seen = item
            return super().add(item)

    assert Logged.__dict__["add"].__objclass__ is Logged
    f = Overriding(BloomConfig.for_items(100, 0.01))
    assert f.add("x") is True and f.seen == "x" and "x" in f and f.add("x") is False
    assert Overriding.__dict__["might_contain"].__objclass__ is Overriding


@pytest.mark.parametrize("kind", KINDS)
def test_behaviour_is_unchanged(kind: type) -> None:
    f = kind(BloomConfig.for_items(100, 0.01))
    assert f.add("a") is True and f.add("a") is False and f.might_contain("a") and "b" not in f
    with pytest.raises(TypeError):
        f.add(1.5)
    f.close()
    with pytest.raises(mmapbloom.FilterClosedError):
        f.add("a")


@native
@pytest.mark.parametrize("kind", KINDS)
def test_write_lock_is_one_c_call_returning_the_lock(kind: Any, tmp_path: Any) -> None:
    """Issue 28: ``f.write_lock()`` without a timeout is FilterBase's C method, which returns
    the handle's lock itself; everything else goes through MappedFilter._write_lock_slow."""
    from mmapbloom.locking import TimedWriteLock

    path = str(tmp_path / "f.blm")
    with kind.create(path, BloomConfig.for_items(100, 0.01)) as f:
        assert f.write_lock() is f._storage.lock and f.write_lock(None) is f._storage.lock
        assert isinstance(f.write_lock(timeout=1.0), TimedWriteLock)
        with pytest.raises(ValueError):
            f.write_lock(timeout=-1.0)
        with pytest.raises(TypeError):
            f.write_lock(1.0, 2.0)
    with pytest.raises(mmapbloom.FilterClosedError):
        f.write_lock()
    with kind.open(path, readonly=True) as r, pytest.raises(mmapbloom.ReadOnlyFilterError):
        r.write_lock()


@native
@pytest.mark.skipif(sys.version_info < (3, 11), reason="no specialising interpreter before 3.11")
def test_the_interpreter_specialises_the_write_lock_call() -> None:
    f = BloomFilter(BloomConfig.for_items(100, 0.01))

    def pair(f: Any) -> None:
        with f.write_lock():
            pass

    run = types.FunctionType(pair.__code__.replace(), globals())
    for _ in range(100):
        run(f)
    names = [i.opname for i in dis.get_instructions(run, adaptive=True)]  # type: ignore[call-arg]
    assert sum("METHOD_DESCRIPTOR_FAST_WITH_KEYWORDS" in n for n in names) == 1, names
