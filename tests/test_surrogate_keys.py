"""Issue 29 item 13: a str key with a lone surrogate ("\\udcff", as ``os.fsdecode`` makes)
is refused with :class:`mmapbloom.KeyEncodingError` (a ``UnicodeEncodeError``, so a
``ValueError``, naming the rule) on every path, every kind and both backends, and a batch
that holds one changes nothing (its ``committed_items``: tests/test_batch_errors.py)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest

from mmapbloom import (
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    CuckooFilter,
    ExpiringBloomFilter,
    KeyEncodingError,
    MmapBloomError,
    ScalableBloomFilter,
)
from mmapbloom.hashing import encode_key, encode_keys, kernel_keys

pytestmark = pytest.mark.filterwarnings("ignore::mmapbloom.OverCapacityWarning")

CFG = BloomConfig(num_bits=1 << 14, num_hashes=5)
BAD = os.fsdecode(b"caf\xff")  # 'caf\udcff'


def _pure(f: Any) -> Any:
    f._h.close()
    f._attach_handle(pure=True)
    return f


KINDS: dict[str, Callable[[str], Any]] = {
    "bloom": lambda d: BloomFilter(CFG),
    "bloom-pure": lambda d: _pure(BloomFilter(CFG)),
    "bloom-file": lambda d: BloomFilter.create(os.path.join(d, "b.blm"), CFG),
    "counting": lambda d: CountingBloomFilter(CFG),
    "counting-pure": lambda d: _pure(CountingBloomFilter(CFG)),
    "scalable": lambda d: ScalableBloomFilter.create(os.path.join(d, "s"), capacity=1000, fp_rate=0.01),
    "cuckoo": lambda d: CuckooFilter.create(os.path.join(d, "c.ckf"), capacity=1000, fp_rate=0.01),
    "expiring": lambda d: ExpiringBloomFilter.create(os.path.join(d, "e"), 3600.0, 1000, 0.01),
}


@pytest.fixture(params=sorted(KINDS))
def filt(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    f = KINDS[request.param](str(tmp_path))
    yield f
    f.close()


def test_the_error_names_the_rule_and_is_a_value_error() -> None:
    with pytest.raises(KeyEncodingError) as info:
        encode_key(BAD)
    exc = info.value
    assert isinstance(exc, MmapBloomError) and isinstance(exc, UnicodeEncodeError) and isinstance(exc, ValueError)
    assert "lone surrogate U+DCFF at index 3" in str(exc) and "strict UTF-8" in str(exc)
    assert (exc.object, exc.start, exc.end, exc.encoding) == (BAD, 3, 4, "utf-8")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is KeyEncodingError and str(again) == str(exc)
    for batch in ([BAD], ["a", BAD], [b"a", BAD]):
        with pytest.raises(KeyEncodingError):
            encode_keys(batch)
        with pytest.raises(KeyEncodingError):
            kernel_keys(batch)


def _calls(f: Any) -> list[tuple[str, Callable[[], Any]]]:
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("add", lambda: f.add(BAD)),
        ("in", lambda: BAD in f),
        ("update", lambda: f.update(["ok", BAD])),
    ]
    for name in ("add_many", "contains_many", "discard", "remove", "count", "remove_many"):
        if hasattr(f, name):
            fn = getattr(f, name)
            if name.endswith("_many"):
                calls.append((name, lambda fn=fn: fn(["ok", BAD])))  # type: ignore[misc]  # fn bound now
            else:
                calls.append((name, lambda fn=fn: fn(BAD)))  # type: ignore[misc]  # fn bound now
    return calls


def test_every_call_raises_key_encoding_error_and_changes_nothing(filt: Any) -> None:
    filt.add("seed")
    before = filt.items_added
    for name, call in _calls(filt):
        with pytest.raises(KeyEncodingError, match="lone surrogate U\\+DCFF"):
            call()
        assert filt.items_added == before, name
    assert "seed" in filt and "ok" not in filt


def test_numpy_str_array_with_a_lone_surrogate(filt: Any) -> None:
    arr = np.array(["ok", BAD])
    with pytest.raises(KeyEncodingError):
        filt.update(arr)
    assert "ok" not in filt


def test_fsencoded_bytes_are_the_way_in(filt: Any) -> None:
    key = os.fsencode(BAD)
    filt.add(key)
    assert key in filt and b"caf\xff" in filt


def test_cli_keys_with_undecodable_bytes_are_their_bytes(tmp_path: Any) -> None:
    path = os.path.join(tmp_path, "f.blm")
    BloomFilter.create(path, CFG).close()
    env = dict(os.environ, LC_ALL="C.UTF-8")
    key = b"caf\xff"
    run = subprocess.run(
        [sys.executable, "-m", "mmapbloom", "add", path, "--key", os.fsdecode(key)],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    with BloomFilter.open(path) as f:
        assert key in f


def test_strategies_and_the_cuckoo_hash_refuse_instead_of_crashing() -> None:
    """mmh3 crashes the process on a str with a lone surrogate: no pure path hands it one."""
    from mmapbloom.cuckoo_kernels import key_hash
    from mmapbloom.hashing import get_strategy

    for name in ("M3KM", "M3MX", "M3M2", "M3BL", "M3B2"):
        with pytest.raises(KeyEncodingError):
            get_strategy(name).positions(BAD, 3, 1 << 12)  # type: ignore[arg-type]
    with pytest.raises(KeyEncodingError):
        key_hash(BAD)
    assert key_hash("é") == key_hash("é".encode())
