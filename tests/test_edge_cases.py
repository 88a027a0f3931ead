"""Edge cases, each example kept as a test: work proportional to a header field,
interrupted writes, numbers read wrong, the strategy protocol and the CLI on counting and
scalable filters."""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from mmapbloom import (
    BadHeaderError,
    BloomConfig,
    BloomFilter,
    CountingBloomFilter,
    OverCapacityWarning,
    register_strategy,
)

ROOT = Path(__file__).parent.parent


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mmapbloom", *args], input=stdin, capture_output=True, env=env, timeout=120
    )


# -- work or memory proportional to a header field ------------------------------------
@pytest.mark.parametrize("kind", ["bloom", "counting"])
def test_forged_huge_k_is_refused_at_open(tmp_path: Path, kind: str) -> None:
    """A forged file with k = 2**32 - 1 made each add take 45 s under the write lock."""
    m = 2**20
    path = tmp_path / "k.blm"
    if kind == "bloom":
        path.write_bytes(struct.pack("<4s4sQII", b"BLM1", b"M3KM", m, 2**32 - 1, 0))
        os.truncate(path, 24 + m // 8)
        opener = BloomFilter.open
    else:
        path.write_bytes(struct.pack("<4s4sQIIB7s", b"BLC1", b"M3KM", m, 2**32 - 1, 0, 4, bytes(7)))
        os.truncate(path, 32 + m // 2)
        opener = CountingBloomFilter.open
    t0 = time.perf_counter()
    with pytest.raises(BadHeaderError, match="num_hashes is 4294967295: expected at most 4096"):
        opener(path)
    assert time.perf_counter() - t0 < 1
    result = cli("info", str(path))
    assert result.returncode == 2 and b"at most 4096" in result.stderr


def test_counting_queries_probe_lazily_at_the_maximum_k() -> None:
    """k = 4096 on a large m: an absent item is refused at its first zero counter."""
    f = CountingBloomFilter(BloomConfig(num_bits=2**22, num_hashes=4096))
    t0 = time.perf_counter()
    for i in range(200):
        assert f"absent-{i}" not in f and f.count(f"absent-{i}") == 0 and not f.discard(f"absent-{i}")
    # lazily: ~1 probe each; eager: 200 x 3 x 4096 probes. Not timed under a tracer (the
    # coverage run of the pure-Python path, a debugger): tracing multiplies the hashing cost.
    # The bound is loose (eager probing is minutes on the pure path): a loaded 2-core CI
    # machine took 6-9 s for the lazy path, so 5 s failed there for no fault.
    assert time.perf_counter() - t0 < 30 or sys.gettrace() is not None
    assert f.add("x") and "x" in f and f.count("x") == 1


# -- an interrupted write whose bits and count disagree ---------------------------------
@pytest.mark.parametrize("kind", [BloomFilter, CountingBloomFilter])
def test_interrupt_during_update_leaves_bits_and_count_agreeing(kind: type) -> None:
    keys = [f"key-{i}" for i in range(150_000)]
    t0 = time.perf_counter()
    kind(BloomConfig.for_items(2_000_000, 1e-9)).update(keys)
    full = time.perf_counter() - t0
    for fraction in (0.05, 0.2, 0.4, 0.6, 0.8):
        f = kind(BloomConfig.for_items(2_000_000, 1e-9))
        timer = threading.Timer(full * fraction, os.kill, (os.getpid(), signal.SIGINT))
        returned = False
        timer.start()
        try:
            f.update(keys)
            returned = True
            timer.join()  # late signal (a noisy machine): it lands here, after the update
        except KeyboardInterrupt as exc:
            committed = len(keys) if returned else exc.committed_items  # type: ignore[attr-defined]
        else:
            committed = len(keys)
        present = f.contains_many(keys)
        assert present[:committed].all()
        assert int(present.sum()) == committed == f.items_added, (fraction, committed)


def test_cli_add_interrupted_reports_what_was_committed(tmp_path: Path) -> None:
    path = str(tmp_path / "i.blm")
    assert cli("create", path, "-n", "5M", "-p", "1e-6").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmapbloom", "add", path], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None
    for i in range(4):
        proc.stdin.write(b"".join(b"line-%d\n" % j for j in range(i * 100_000, (i + 1) * 100_000)))
        proc.stdin.flush()
    deadline = time.time() + 60
    with BloomFilter.open(path, readonly=True) as f:
        while f.items_added == 0 and time.time() < deadline:
            time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    text = err.decode()
    committed = int(text.split("the first ")[1].split(" item")[0].replace(",", ""))
    with BloomFilter.open(path, readonly=True) as f:
        present = f.contains_many([f"line-{j}" for j in range(400_000)])
        assert f.items_added == committed == int(present.sum()) and present[:committed].all()


# -- numbers a user reads wrong ------------------------------------------------------------
def test_empty_filter_numbers_are_not_negative_zero(tmp_path: Path) -> None:
    f = BloomFilter(BloomConfig.for_items(1000, 0.01))
    for value in (f.approx_items(), f.expected_fp_rate(), f.observed_fp_rate(), f.fill_ratio()):
        assert value == 0 and math.copysign(1, value) == 1
    path = str(tmp_path / "e.blm")
    assert cli("create", path, "-n", "1000", "-p", "1%").returncode == 0
    text, js = cli("info", path).stdout.decode(), cli("info", path, "--json").stdout.decode()
    # the path itself may hold "-0" (pytest's basetemp is often .../pytest-0/...)
    assert "-0" not in text.replace(path, "FILE") and "-0" not in js.replace(path, "FILE")
    report = json.loads(js)
    assert report["approx_items"] == 0 and report["expected_fp_rate"] == 0


def test_saturated_items_counter_is_labelled(tmp_path: Path) -> None:
    path = tmp_path / "s.blm"
    with BloomFilter.create(path, BloomConfig(num_bits=1000, num_hashes=3)) as f:
        f.add("x")
    data = bytearray(path.read_bytes())
    data[20:24] = struct.pack("<I", 2**32 - 1)
    path.write_bytes(bytes(data))
    text = cli("info", str(path)).stdout.decode()
    assert "4,294,967,295 (saturated" in text
    assert json.loads(cli("info", str(path), "--json").stdout)["items_saturated"] is True


def test_plural_in_add_report(tmp_path: Path) -> None:
    path = str(tmp_path / "p.blm")
    assert cli("create", path, "-n", "1000", "-p", "1%").returncode == 0
    err = cli("add", path, stdin=b"one\n").stderr.decode()
    assert "added 1 item from 1 input to" in err


def test_plain_union_past_its_design_point_warns() -> None:
    """10 full shards of for_items(10_000, 0.01) OR-ed together: the plain union warns too."""
    config = BloomConfig.for_items(10_000, 0.01)
    total = BloomFilter(config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shard in range(10):
            part = BloomFilter(config)
            part.update([f"s{shard}-{i}" for i in range(10_000)])
            total |= part
    assert any(issubclass(w.category, OverCapacityWarning) for w in caught)
    assert total.is_over_capacity()


# -- strategies are a protocol; the CLI works on both kinds -----------------------------------
class PlainStrategy:
    """A custom strategy that does not subclass HashStrategy (only name and positions)."""

    name = "PLN1"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        h = int.from_bytes(key[:8].ljust(8, b"\0"), "little") * 0x9E3779B97F4A7C15
        return [(h + i * 7919) % num_bits for i in range(num_hashes)]


def test_protocol_strategy_registers_and_round_trips(tmp_path: Path) -> None:
    strategy = register_strategy(PlainStrategy())
    config = BloomConfig(num_bits=5000, num_hashes=4, strategy=strategy)
    for kind in (BloomFilter, CountingBloomFilter):
        path = tmp_path / f"plain-{kind.__name__}"
        with kind.create(path, config) as f:
            assert f.add("a") and f.update(["b", "c", "a"]) == 2
            assert f.contains_many(["a", "b", "c"]).all()
            assert f.expected_fp_rate() > 0 and f.approx_items() == pytest.approx(3, abs=1)
        assert path.read_bytes()[4:8] == b"PLN1"
        with kind.open(path, readonly=True) as g:
            assert g.strategy is strategy and all(x in g for x in "abc")


def test_cli_add_and_check_on_a_counting_filter(tmp_path: Path) -> None:
    path = str(tmp_path / "c.blc")
    made = cli("create", path, "-n", "1000", "-p", "1%", "--counting", "--counter-bits", "8")
    assert made.returncode == 0 and b"counting filter, 8-bit counters" in made.stderr
    assert cli("add", path, stdin=b"a\nb\n").returncode == 0
    check = cli("check", path, stdin=b"a\nb\nzz\n")
    assert check.returncode == 1 and check.stdout == b"a\nb\n"
    info = json.loads(cli("info", path, "--json").stdout)
    assert info["kind"] == "CountingBloomFilter" and info["counter_bits"] == 8 and info["items_added"] == 2
    assert cli("verify", path).returncode == 0
    with CountingBloomFilter.open(path) as f:
        f.remove("a")
        assert "a" not in f and "b" in f


def test_cli_on_a_scalable_filter(tmp_path: Path) -> None:
    path = str(tmp_path / "grow")
    made = cli("create", path, "--scalable", "-n", "1000", "-p", "1%")
    assert made.returncode == 0 and b"scalable filter" in made.stderr
    assert cli("add", path, stdin=b"".join(b"u%d\n" % i for i in range(5000))).returncode == 0
    check = cli("check", path, "-c", stdin=b"".join(b"u%d\n" % i for i in range(5000)))
    assert check.returncode == 0 and b"5000 might be present" in check.stdout
    info = json.loads(cli("info", path, "--json").stdout)
    assert info["kind"] == "scalable" and info["num_layers"] == 3 and len(info["layers"]) == 3
    assert "layers:" in cli("info", path).stdout.decode()
    assert cli("verify", path).returncode == 0
    assert cli("create", path, "--scalable", "-n", "10", "-p", "1%").returncode == 2  # exists
