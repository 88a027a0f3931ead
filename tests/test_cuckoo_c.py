"""The plain-C cell unit (mmapbloom/_cuckoo.c) against the pure reference
(mmapbloom/cuckoo_kernels.py): the same results and byte-identical images, through a small
C driver (tests/c/cuckoo_image.c) built with the system compiler (skipped without one)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from mmapbloom import CuckooFilter, FilterFullError

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = [
    pytest.mark.skipif(CC is None, reason="no C compiler"),
    # an unpacked sdist whose package copy was removed to test the installed wheel (.ci/run)
    pytest.mark.skipif(not (ROOT / "mmapbloom" / "_cuckoo.c").exists(), reason="no C sources in this tree"),
]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("ck") / "cuckoo_image")
    subprocess.run(
        [
            str(CC),
            "-O1",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            out,
            str(ROOT / "tests/c/cuckoo_image.c"),
            str(ROOT / "mmapbloom/_cuckoo.c"),
            str(ROOT / "mmapbloom/_murmur3.c"),
        ],
        check=True,
    )
    return out


@pytest.mark.parametrize(
    "capacity, bits, bucket, kicks",
    [(300, 12, 4, 500), (257, 8, 4, 20), (100, 16, 2, 50), (90, 32, 1, 30), (200, 10, 8, 100), (61, 5, 4, 3)],
)
def test_c_unit_matches_pure(driver: str, capacity: int, bits: int, bucket: int, kicks: int) -> None:
    rnd = random.Random(capacity * bits)
    f = CuckooFilter(capacity, 0.01, fingerprint_bits=bits, bucket_size=bucket, max_kicks=kicks)
    start = f.to_bytes()
    ops: list[tuple[str, bytes]] = []
    results: list[int] = []
    added: list[bytes] = []
    for step in range(capacity * 3):
        if added and rnd.random() < 0.1:
            key = added.pop(rnd.randrange(len(added)))
            ops.append(("r", key))
            results.append(int(f.discard(key)))
            continue
        key = os.urandom(rnd.randint(0, 12)) if step % 7 else str(step).encode()
        ops.append(("a", key))
        try:
            got = f.add(key)
        except FilterFullError:
            results.append(-1)
        else:
            results.append(int(got))
            if got:
                added.append(key)
    text = f"{f.num_buckets} {bucket} {bits} {kicks} {len(start)}\n".encode() + start
    text += b"".join(f"{op} {key.hex()}\n".encode() for op, key in ops)
    run = subprocess.run([driver], input=text, capture_output=True, check=True)
    assert [int(x) for x in run.stderr.split()] == results
    assert run.stdout == f.to_bytes()
    assert -1 in results  # every table fills up: the victim and full paths run too
