"""mmapbloom.errors: one hierarchy, each error also the built-in a caller would catch,
messages that show the values compared, and every error surviving pickling (a worker
process reports it to its parent) with its attributes."""

from __future__ import annotations

import errno
import pickle
from typing import Any

import pytest

from mmapbloom import errors as e


CASES: list[tuple[BaseException, type, dict[str, Any], str]] = [
    (e.ConfigError("capacity must be >= 1"), ValueError, {}, "capacity must be >= 1"),
    (
        e.FormatError("bad", source="f.blm", expected=1, actual=2),
        ValueError,
        {"source": "f.blm", "expected": 1, "actual": 2},
        "f.blm: bad",
    ),
    (
        e.BadHeaderError("k too large", source="x", expected=4096, actual=10**6),
        ValueError,
        {"actual": 10**6},
        "x: k too large",
    ),
    (
        e.ManifestError("no field", source="m.json", expected="format", actual=[]),
        ValueError,
        {"expected": "format"},
        "m.json: no field",
    ),
    (
        e.IncompatibleFiltersError("num_bits", 10, 20, where="a.blm"),
        ValueError,
        {"field": "num_bits", "left": 10, "right": 20},
        "a.blm: incompatible filters: num_bits differs (10 != 20)",
    ),
    (
        e.IncompatibleFiltersError("strategy", "M3M2", "M3B2"),
        ValueError,
        {},
        "incompatible filters: strategy differs ('M3M2' != 'M3B2')",
    ),
    (e.MergeError("no shards", path="out.blm"), ValueError, {"path": "out.blm"}, "no shards"),
    (
        e.ConfigMismatchError("f.blm", "num_hashes", 7, 5),
        ValueError,
        {"path": "f.blm", "field": "num_hashes", "expected": 7, "actual": 5},
        "f.blm: existing filter has num_hashes 5, expected 7",
    ),
    (e.FilterClosedError("f: filter is closed"), ValueError, {}, "f: filter is closed"),
    (e.ReadOnlyFilterError("f: read-only"), PermissionError, {}, "f: read-only"),
    (
        e.NoSpaceError("f.blm: needs 10 bytes, 5 free", path="f.blm", needed=10, available=5),
        OSError,
        {"path": "f.blm", "needed": 10, "available": 5, "filename": "f.blm", "errno": errno.ENOSPC},
        "f.blm: needs 10 bytes, 5 free",
    ),
    (e.FilterFullError("full", path="c.ckf", items=42), RuntimeError, {"path": "c.ckf", "items": 42}, "full"),
    (
        e.LockTimeout("lock not taken", path="f", timeout=0.5),
        TimeoutError,
        {"path": "f", "timeout": 0.5},
        "lock not taken",
    ),
    (e.SelfDeadlockError("held elsewhere", path="f"), RuntimeError, {"path": "f"}, "held elsewhere"),
]


@pytest.mark.parametrize(
    "exc, builtin, attrs, text", CASES, ids=[type(c[0]).__name__ + str(i) for i, c in enumerate(CASES)]
)
def test_error_is_a_builtin_with_its_message_and_survives_pickling(
    exc: BaseException, builtin: type, attrs: dict[str, Any], text: str
) -> None:
    assert isinstance(exc, e.MmapBloomError) and isinstance(exc, builtin)
    assert str(exc) == text
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == text and back.args == exc.args
    for name, value in attrs.items():
        assert getattr(exc, name) == value and getattr(back, name) == value, name


def test_no_space_error_strerror_is_the_message() -> None:
    exc = e.NoSpaceError("full disk")
    assert exc.strerror == "full disk" and exc.filename is None and exc.errno == errno.ENOSPC
    assert e.NoSpaceError.__new__(e.NoSpaceError).strerror == ""


def test_key_encoding_error_names_the_surrogate_and_pickles() -> None:
    exc = e.KeyEncodingError("ab\udc80c", 2, 3)
    assert isinstance(exc, UnicodeEncodeError) and isinstance(exc, ValueError) and isinstance(exc, e.MmapBloomError)
    assert exc.encoding == "utf-8" and exc.reason == "surrogates not allowed"
    assert "lone surrogate U+DC80 at index 2" in str(exc) and "pass bytes instead" in str(exc)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is e.KeyEncodingError and (back.object, back.start, back.end) == ("ab\udc80c", 2, 3)
    assert str(back) == str(exc)


def test_warnings_are_user_warnings() -> None:
    for w in (e.OverCapacityWarning, e.SparseFileWarning, e.SaturationWarning):
        assert issubclass(w, UserWarning)


def test_every_public_error_is_in_the_hierarchy() -> None:
    for name in e.__all__:
        obj = getattr(e, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, (e.MmapBloomError, UserWarning)), name
