"""The public key types (issue 29, item 22): ``mypy --strict`` refuses ``f.add(None)`` and
other non-keys on every kind, and accepts str, bytes, int, numpy integers and arrays, lists
and Arrow columns. One mypy run over a snippet whose lines marked ``# E`` must be errors,
and no other line."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import mmapbloom

mypy_api = pytest.importorskip("mypy.api")

SNIPPET = """
from __future__ import annotations
import numpy as np
from mmapbloom import BloomConfig, BloomFilter, CountingBloomFilter, CuckooFilter, ExpiringBloomFilter, Key, Keys, ScalableBloomFilter

def use(f: BloomFilter, c: CountingBloomFilter, s: ScalableBloomFilter, k4: CuckooFilter, e: ExpiringBloomFilter) -> None:
    f.add("a"); f.add(b"a"); f.add(bytearray(b"a")); f.add(memoryview(b"a")); f.add(1); f.add(np.int64(1))
    "a" in f; 1 in f; f.might_contain(b"x")
    f.update(["a", b"b", 3]); f.add_many(np.arange(3)); f.contains_many(np.array(["a"])); f.update(("a",))
    c.add("a"); c.remove("a"); c.discard(2); c.count(np.uint64(3)); c.update([b"x"])
    s.add("a"); s.might_contain(1); s.update(["a", 1]); s.contains_many(np.arange(2))
    k4.add("a"); k4.remove(b"a"); k4.discard(1); k4.count(np.int64(2)); "a" in k4; k4.update(["a", 1]); k4.contains_many(np.arange(2)); k4.remove_many([b"x"])
    e.add("a"); e.might_contain(1); "a" in e; e.update(["a", b"b"]); e.contains_many(np.arange(2))
    k: Key = "x"; ks: Keys = [k, 1]; f.update(ks)
    f.add(None)  # E
    f.add(1.5)  # E
    f.add(["a"])  # E
    None in f  # E
    f.might_contain(object())  # E
    f.update([None])  # E
    f.contains_many([1.5])  # E
    c.add(None)  # E
    c.remove(None)  # E
    c.count(2.0)  # E
    s.add(None)  # E
    s.update([None])  # E
    s.might_contain(1.5)  # E
    k4.add(None)  # E
    k4.update([None])  # E
    k4.remove(1.5)  # E
    None in k4  # E
    k4.contains_many([1.5])  # E
    e.add(None)  # E
    e.update([None])  # E
    e.contains_many([1.5])  # E
    None in e  # E
"""


def test_mypy_strict_accepts_keys_and_refuses_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET)
    package_root = str(Path(mmapbloom.__file__).resolve().parent.parent)
    # The checkout's cache (the lint run's) when there is one: numpy's stubs take minutes
    # to analyse cold on a loaded machine, seconds warm.
    shared = Path(package_root) / ".mypy_cache"
    cache = shared if shared.is_dir() and os.access(shared, os.W_OK) else tmp_path / "cache"
    env_path = os.environ.get("MYPYPATH")
    # A checkout (or an editable install) is put on MYPYPATH; an installed package is found
    # in site-packages by mypy itself, which refuses site-packages on MYPYPATH.
    if Path(package_root).name not in ("site-packages", "dist-packages"):
        os.environ["MYPYPATH"] = package_root
    try:
        out, err, _ = mypy_api.run(
            [
                "--strict",
                "--no-error-summary",
                "--cache-dir",
                str(cache),
                "--python-version",
                f"{sys.version_info[0]}.{sys.version_info[1]}",
                "--disable-error-code",
                "comparison-overlap",
                str(source),
            ]
        )
    finally:
        if env_path is None:
            os.environ.pop("MYPYPATH", None)
        else:
            os.environ["MYPYPATH"] = env_path
    lines = SNIPPET.split("\n")
    expected = {i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# E")}
    found = {int(m.group(1)) for m in re.finditer(r"snippet\.py:(\d+): error", out)}
    assert found == expected, out + err


def test_key_types_are_exported_once() -> None:
    import mmapbloom.keys

    assert mmapbloom.Key is mmapbloom.keys.Key and mmapbloom.Keys is mmapbloom.keys.Keys
    assert {"Key", "Keys"} <= set(mmapbloom.__all__) <= set(dir(mmapbloom))
    for module in ("base", "counting", "dask", "merge", "opening", "scalable"):
        text = (Path(mmapbloom.__file__).parent / f"{module}.py").read_text()
        assert "PathLike = " not in text and "Item = " not in text, module
