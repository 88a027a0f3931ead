"""Offline shard merging (mmapbloom.merge, ``mmapbloom merge``, tools/merge_shards.py).

Merges whose promises involve processes (open-file limit, SIGKILL, a live writer) run the
merge as a real subprocess; the rest call the library.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mmapbloom import BloomConfig, BloomFilter, HashStrategy, IncompatibleFiltersError, register_strategy, verify_file
from mmapbloom.errors import FormatError, MergeError
from mmapbloom.merge import expand_shard_args, inspect_shards, merge_into, merge_shards
from tests.conftest import ROOT, run_on_terminal, write_shards

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "OPENBLAS_NUM_THREADS": "1"}
HS = 24


def cli(*args: str, limit_files: int | None = None, **kw) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    """``mmapbloom ARGS`` in a real subprocess, optionally with RLIMIT_NOFILE lowered first."""
    return subprocess.run(_argv(args, limit_files), capture_output=True, timeout=120, env=ENV, **kw)


def _argv(args: tuple[str, ...] | list[str], limit_files: int | None = None) -> list[str]:
    if limit_files is None:
        return [sys.executable, "-m", "mmapbloom", *args]
    # A wrapper rather than preexec_fn (unsafe with threads): lower the soft and hard limit,
    # then run the command line in the same interpreter.
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (%d, %d)); "
        "from mmapbloom.cli import main; sys.exit(main(sys.argv[1:]))" % (limit_files, limit_files)
    )
    return [sys.executable, "-c", code, *args]


def bits_of(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()[HS:]


def items_of(path: str) -> int:
    with BloomFilter.open(path, readonly=True) as f:
        return f.items_added


def union_reference(cfg: BloomConfig, parts: list[list[str]]) -> BloomFilter:
    ref = BloomFilter(cfg)
    ref.update(x for part in parts for x in part)
    return ref


def overlapping_parts(n_shards: int, per_shard: int, seed: int = 1) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    common = [f"common-{i}" for i in range(per_shard // 4)]
    return [common + [f"s{s}-{int(j)}" for j in rng.integers(0, 10 * per_shard, per_shard)] for s in range(n_shards)]


def listing(directory) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(os.listdir(directory))


# -- equality with the filter of the union ------------------------------------------------------
@pytest.mark.parametrize("num_bits", [20_003, 64_000])  # with and without padding bits
@pytest.mark.parametrize("chunk_bytes", [8, 1000, 4096, 16 * 2**20])
def test_union_equals_filter_of_union(tmp_path, num_bits: int, chunk_bytes: int) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig(num_bits=num_bits, num_hashes=5)
    parts = overlapping_parts(7, 300)
    shards = write_shards(tmp_path, cfg, parts)
    result = merge_shards(tmp_path / "out.blm", shards, chunk_bytes=chunk_bytes, progress=False)
    ref = union_reference(cfg, parts)
    out = str(tmp_path / "out.blm")
    assert bits_of(out) == ref.to_bytes()[HS:]  # byte for byte
    # items added: the sum of the shards' (overlap counted again), not the union's count
    assert items_of(out) == sum(items_of(s) for s in shards) == result.items_added
    assert items_of(out) > ref.items_added
    verify_file(out).close()
    assert (result.shards, result.bytes_read) == (7, 7 * ((num_bits + 7) // 8))


def test_union_through_cli_and_tool_script_with_list_and_glob(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(5000, 0.01)
    parts = overlapping_parts(6, 500)
    shards = write_shards(tmp_path, cfg, parts)
    lst = tmp_path / "list.txt"
    lst.write_text("# shard list\r\n" + "\n".join(shards[:3]) + "\n\n")
    proc = cli("merge", str(tmp_path / "a.blm"), f"@{lst}", str(tmp_path / "shard-0000[3-5].blm"))
    assert proc.returncode == 0, proc.stderr
    summary = proc.stderr.decode()
    assert summary.count("\n") == 1 and "merged 6 shards (OR)" in summary
    assert f"{6 * cfg.size_bytes:,} bytes" in summary and "GB/s" in summary and " s, " in summary
    tool = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "merge_shards.py"),
            "-q",
            str(tmp_path / "b.blm"),
            str(tmp_path / "shard-*.blm"),
        ],
        capture_output=True,
        timeout=120,
        env=ENV,
    )
    assert (tool.returncode, tool.stderr) == (0, b"")
    ref = union_reference(cfg, parts)
    for out in ("a.blm", "b.blm"):
        assert bits_of(str(tmp_path / out)) == ref.to_bytes()[HS:]
        assert items_of(str(tmp_path / out)) == sum(items_of(s) for s in shards)
    info = cli("info", "--json", str(tmp_path / "a.blm"))
    approx = json.loads(info.stdout)["approx_items"]
    distinct = len({x for part in parts for x in part})
    assert approx == pytest.approx(distinct, rel=0.05)  # the overlap shows: approx < items added
    assert approx < 0.9 * items_of(str(tmp_path / "a.blm"))


def test_intersection_contains_true_intersection(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(4000, 0.01)
    parts = overlapping_parts(4, 1000, seed=7)
    shards = write_shards(tmp_path, cfg, parts)
    proc = cli("merge", "--intersection", str(tmp_path / "and.blm"), *shards)
    assert proc.returncode == 0, proc.stderr
    assert "(AND)" in proc.stderr.decode()
    out = str(tmp_path / "and.blm")
    true_intersection = sorted(set.intersection(*(set(p) for p in parts)))
    assert len(true_intersection) >= 250
    with BloomFilter.open(out, readonly=True) as f:
        assert f.contains_many(true_intersection).all()
        only_one = [x for x in parts[0] if x.startswith("s0-")]
        assert f.contains_many(only_one).mean() < 0.05  # it is an AND, not an OR
        assert f.items_added == min(items_of(s) for s in shards)
    expected = np.bitwise_and.reduce([np.frombuffer(bits_of(s), dtype=np.uint8) for s in shards])
    assert bits_of(out) == expected.tobytes()


# -- refusals: nothing written --------------------------------------------------------------------
class OtherScheme(HashStrategy):
    name = "TST9"

    def positions(self, key: bytes, num_hashes: int, num_bits: int) -> list[int]:
        return [(len(key) + i) % num_bits for i in range(num_hashes)]


@pytest.mark.parametrize(
    "field, bad_cfg, left, right",
    [
        ("num_bits", BloomConfig(num_bits=9999, num_hashes=7), "9999", "9586"),
        ("num_hashes", BloomConfig(num_bits=9586, num_hashes=6), "6", "7"),
    ],
)
def test_incompatible_shard_refused_by_cli_nothing_written(
    tmp_path,
    field: str,
    bad_cfg: BloomConfig,  # type: ignore[no-untyped-def]
    left: str,
    right: str,
) -> None:
    cfg = BloomConfig(num_bits=9586, num_hashes=7)
    good = write_shards(tmp_path, cfg, [["a"], ["b"], ["c"]])
    bad = write_shards(tmp_path, bad_cfg, [["d"]], prefix="bad")[0]
    target = str(tmp_path / "target.blm")
    BloomFilter.create(target, cfg).close()
    before_target = open(target, "rb").read()
    before = listing(tmp_path)
    out = str(tmp_path / "out.blm")
    new = cli("merge", out, *good, bad)  # the bad shard last: validation must precede writing
    into = cli("merge", "--into", target, *good, bad)
    for proc in (new, into):
        assert proc.returncode == 2
        err = proc.stderr.decode()
        assert err.count("\n") == 1 and "Traceback" not in err
        assert bad in err and field in err and f"({left} != {right})" in err, err
    assert listing(tmp_path) == before  # no output, no temporary file
    assert open(target, "rb").read() == before_target


def test_incompatible_scheme_refused_naming_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    other = register_strategy(OtherScheme())
    good = write_shards(tmp_path, BloomConfig(num_bits=1000, num_hashes=3), [["a"], ["b"]])
    bad = write_shards(tmp_path, BloomConfig(num_bits=1000, num_hashes=3, strategy=other), [["c"]], prefix="bad")[0]
    before = listing(tmp_path)
    with pytest.raises(IncompatibleFiltersError) as info:
        merge_shards(tmp_path / "out.blm", [*good, bad], progress=False)
    assert (info.value.field, info.value.left, info.value.right) == ("strategy", "TST9", "M3M2")
    assert bad in str(info.value) and good[0] in str(info.value)
    assert listing(tmp_path) == before


def test_every_shard_validated_before_any_read_or_write(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mmapbloom.merge as merge_mod

    cfg = BloomConfig(num_bits=5000, num_hashes=4)
    shards = write_shards(tmp_path, cfg, [[f"x{i}"] for i in range(20)])
    bad = write_shards(tmp_path, BloomConfig(num_bits=5000, num_hashes=5), [["y"]], prefix="bad")[0]
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()

    def forbidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("shard data read or output opened before every shard was validated")

    monkeypatch.setattr(merge_mod, "_read_chunk", forbidden)
    monkeypatch.setattr(merge_mod, "atomic_file", forbidden)
    monkeypatch.setattr(BloomFilter, "write_lock", forbidden)
    with pytest.raises(IncompatibleFiltersError, match="num_hashes"):
        merge_shards(tmp_path / "out.blm", [*shards, bad], chunk_bytes=64)
    with pytest.raises(IncompatibleFiltersError, match="num_hashes"):
        merge_into(target, [*shards, bad], chunk_bytes=64)


@pytest.mark.parametrize("damage", ["truncate", "magic", "padding", "unknown_scheme"])
def test_damaged_shard_refused_nothing_written(tmp_path, damage: str) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig(num_bits=1001, num_hashes=3)
    shards = write_shards(tmp_path, cfg, [["a"], ["b"], ["c"]])
    data = bytearray(open(shards[-1], "rb").read())
    if damage == "truncate":
        data = data[:-1]
    elif damage == "magic":
        data[:4] = b"BLX1"
    elif damage == "padding":
        data[-1] |= 0x80
    else:
        data[4:8] = b"ZZZZ"
    open(shards[-1], "wb").write(bytes(data))
    before = listing(tmp_path)
    with pytest.raises(FormatError) as info:
        merge_shards(tmp_path / "out.blm", shards, progress=False)
    assert shards[-1] in str(info.value)
    assert listing(tmp_path) == before


def test_usage_refusals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig(num_bits=1000, num_hashes=3)
    a, b = write_shards(tmp_path, cfg, [["a"], ["b"]])
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()
    with pytest.raises(MergeError, match="named twice"):
        merge_shards(tmp_path / "o.blm", [a, b, os.path.join(str(tmp_path), ".", os.path.basename(a))])
    os.link(a, tmp_path / "hardlink.blm")
    with pytest.raises(MergeError, match="named twice"):
        inspect_shards([a, str(tmp_path / "hardlink.blm")])
    with pytest.raises(MergeError, match="no shards"):
        merge_shards(tmp_path / "o.blm", [])
    with pytest.raises(MergeError, match="target is also named"):
        merge_into(target, [a, target])
    with pytest.raises(FileNotFoundError):
        expand_shard_args([str(tmp_path / "nothing-*.blm")])
    with pytest.raises(FileExistsError):
        merge_shards(target, [a, b])  # an existing output needs replace=True
    assert not os.path.exists(tmp_path / "o.blm")
    both = cli("merge", "--into", target, "--intersection", a)
    assert both.returncode == 2 and b"--intersection cannot be combined with --into" in both.stderr
    exists = cli("merge", target, a, b)
    assert exists.returncode == 2 and b"--force" in exists.stderr
    forced = cli("merge", "--force", target, a, b)
    assert forced.returncode == 0, forced.stderr
    assert bits_of(target) == union_reference(cfg, [["a"], ["b"]]).to_bytes()[HS:]


def test_expand_shard_args(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    for name in ("a1.blm", "a2.blm", "b.blm", "odd[1].blm"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.blm").write_bytes(b"")
    (tmp_path / "l.txt").write_bytes(b"# comment\r\nb.blm\r\n\nsub/*.blm\nmissing.blm")
    assert expand_shard_args(["a*.blm", "@l.txt", "odd[1].blm", "**/c.blm"]) == [
        "a1.blm",
        "a2.blm",
        "b.blm",
        "sub/c.blm",
        "missing.blm",
        "odd[1].blm",
        "sub/c.blm",
    ]


# -- bounded resources --------------------------------------------------------------------------------
def test_2000_shards_with_open_file_limit_64(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(8000, 0.01)
    parts = [[f"item-{s}-{j}" for j in range(4)] + [f"shared-{s % 50}"] for s in range(2000)]
    shards_dir = tmp_path / "shards"
    shards_dir.mkdir()
    shards = write_shards(shards_dir, cfg, parts)
    lst = tmp_path / "all.txt"
    lst.write_text("\n".join(shards) + "\n")
    # The limit is real: the same wrapper cannot hold 100 shards open at once.
    probe = subprocess.run(
        _argv(["-"], 64)[:2]
        + [
            "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
            f"fs = [open(p, 'rb') for p in open({str(lst)!r}).read().split()[:100]]"
        ],
        capture_output=True,
        env=ENV,
    )
    assert probe.returncode != 0 and b"Too many open files" in probe.stderr
    by_list = cli("merge", str(tmp_path / "list.blm"), f"@{lst}", limit_files=64)
    by_glob = cli("merge", str(tmp_path / "glob.blm"), str(shards_dir / "*.blm"), limit_files=64)
    ref = union_reference(cfg, parts).to_bytes()[HS:]
    total_items = sum(int.from_bytes(open(s, "rb").read()[20:24], "little") for s in shards)
    for proc, out in ((by_list, "list.blm"), (by_glob, "glob.blm")):
        assert proc.returncode == 0, proc.stderr
        assert "merged 2000 shards" in proc.stderr.decode()
        assert bits_of(str(tmp_path / out)) == ref
        assert items_of(str(tmp_path / out)) == total_items


def test_sigkill_leaves_no_torn_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL merges at many moments while they write: OUT is then absent (or, when it is
    being replaced, still the old file) or complete and equal to the whole merge, never torn."""
    n_shards, body = 8, 4 * 2**20
    cfg = BloomConfig(num_bits=8 * body, num_hashes=3)
    rng = np.random.default_rng(5)
    shards = []
    expected = np.zeros(body, dtype=np.uint8)
    for i in range(n_shards):
        data = rng.integers(0, 256, body, dtype=np.uint8) & rng.integers(0, 256, body, dtype=np.uint8)
        expected |= data
        path = str(tmp_path / f"big-{i:02d}.blm")
        BloomFilter.create(path, cfg).close()
        with open(path, "r+b") as f:
            f.seek(HS)
            f.write(data.tobytes())
        shards.append(path)
    old_bytes = BloomFilter(cfg).to_bytes()  # an empty filter of the same shape
    complete = old_bytes[:HS] + expected.tobytes()  # items added 0 + 0 + ... = 0

    # Kill delays after the temporary output appears, for the first trials; later trials
    # (run only until two kills have landed while writing, one per mode) kill at once. On a
    # loaded machine a 32 MiB merge can end within the first delays (CI once got 1 of 6).
    delays = [0, 0, 0.01, 0.03, 0.06, 0.1]
    outcomes: list[str] = []
    while len(outcomes) < 6 or not _landed_in_both_modes(outcomes):
        trial = len(outcomes)
        assert trial < 30, f"no two kills landed while the merge was writing: {outcomes}"
        replace = trial % 2 == 1
        out = str(tmp_path / f"out-{trial}.blm")
        if replace:
            with open(out, "wb") as f:
                f.write(old_bytes)
        args = ["merge", "--chunk-mib", "1", "-q", *(["--force"] if replace else []), out, *shards]
        proc = subprocess.Popen(_argv(args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        prefix = ".mmapbloom-"  # the temporary output (one merge at a time here)
        writing = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any(n.startswith(prefix) for n in os.listdir(tmp_path)):
                writing = True  # the temporary output exists: the merge is writing
                break
            if not replace and os.path.exists(out):
                break  # an implementation writing OUT in place: kill it now
        time.sleep(delays[trial] if trial < len(delays) else 0)  # land the kills at different points
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        found = open(out, "rb").read() if os.path.exists(out) else None
        if found is None:
            assert not replace
            outcome = "absent"
        elif replace and found == old_bytes:
            outcome = "old"
        else:
            assert found == complete  # never torn: the whole merge or nothing
            verify_file(out).close()
            outcome = "complete"
        if outcome != "complete" and writing and proc.returncode == -signal.SIGKILL:
            outcome += ", killed while writing"
        outcomes.append(outcome)
        for name in os.listdir(tmp_path):  # a killed merge leaves at most its temporary file
            if name.startswith(prefix):
                assert name.endswith(".tmp")
                os.unlink(tmp_path / name)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(s) for s in shards]
        + [f"out-{t}.blm" for t in range(len(outcomes)) if t % 2 or "complete" in outcomes[t]]
    )


def _landed_in_both_modes(outcomes: list[str]) -> bool:
    """True once a kill landed while writing both a new output (even trials, "absent") and
    a replacement (odd trials, "old")."""
    landed = [t % 2 for t, o in enumerate(outcomes) if o.endswith("killed while writing")]
    return 0 in landed and 1 in landed


def test_into_while_another_process_adds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig.for_items(200_000, 0.01)
    parts = [[f"shard{s}-{j}" for j in range(20_000)] for s in range(4)]
    shards = write_shards(tmp_path, cfg, parts)
    target = str(tmp_path / "live.blm")
    with BloomFilter.create(target, cfg) as f:
        f.update(f"before-{i}" for i in range(1000))
        before_items = f.items_added
    writer_code = (
        "import sys; from mmapbloom import BloomFilter\n"
        "f = BloomFilter.open(sys.argv[1]); print('ready', flush=True); new = 0\n"
        "for i in range(30000):\n"
        "    new += f.add(f'live-{i}')\n"
        "print(new, flush=True)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", writer_code, target], stdout=subprocess.PIPE, env=ENV)
    assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
    merge = cli("merge", "--into", target, "--chunk-mib", "1", *shards)
    writer_new = int(writer.stdout.readline())
    assert writer.wait(60) == 0
    assert merge.returncode == 0, merge.stderr
    assert "into" in merge.stderr.decode()
    everything = (
        [f"before-{i}" for i in range(1000)] + [f"live-{i}" for i in range(30000)] + [x for part in parts for x in part]
    )
    ref = BloomFilter(cfg)
    ref.update(everything)
    with BloomFilter.open(target, readonly=True) as f:
        assert f.contains_many(everything).all()
        assert f.to_bytes()[HS:] == ref.to_bytes()[HS:]  # not a bit lost on either side
        assert f.items_added == before_items + writer_new + sum(items_of(s) for s in shards)


def test_progress_bar_only_on_a_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = BloomConfig(num_bits=8 * 2**20, num_hashes=3)
    shards = write_shards(tmp_path, cfg, [["a"], ["b"], ["c"]])
    piped = cli("merge", str(tmp_path / "piped.blm"), *shards)
    assert piped.returncode == 0 and piped.stderr.decode().count("\n") == 1  # the summary only
    assert "merge:" not in piped.stderr.decode()
    status, text = run_on_terminal(_argv(["merge", "--chunk-mib", "1", str(tmp_path / "tty.blm"), *shards]), ENV)
    assert status == 0
    assert "merge:" in text and "/3.00M" in text and "B/s" in text, text  # tqdm bar over 3 MiB
    assert "merged 3 shards" in text
    assert bits_of(str(tmp_path / "tty.blm")) == bits_of(str(tmp_path / "piped.blm"))


# -- one rule for the items counter -------------------------------------------------------
def full_shards(tmp_path, n_shards: int = 10) -> tuple[BloomConfig, list[str], int]:  # type: ignore[no-untyped-def]
    """``n_shards`` shards of ``for_items(10_000, 0.01)``, each added 10,000 distinct items,
    and the sum of their items added (a false positive at add time does not count)."""
    cfg = BloomConfig.for_items(10_000, 0.01)
    parts = [[f"s{s}-{i}" for i in range(10_000)] for s in range(n_shards)]
    paths = write_shards(tmp_path, cfg, parts)
    total = sum(items_of(p) for p in paths)
    assert 0.98 * 10_000 * n_shards < total <= 10_000 * n_shards  # each shard is full
    return cfg, paths, total


def test_merge_past_the_design_point_warns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Ten full shards of for_items(10_000, 0.01) merged into one such filter (real rate
    about 0.99): merge_shards and merge_into warn as add and union do, and the count is
    the exact sum."""
    from mmapbloom import OverCapacityWarning

    cfg, shards, total = full_shards(tmp_path)
    out = str(tmp_path / "out.blm")
    with pytest.warns(OverCapacityWarning, match=rf"past its design point: {total} items") as record:
        result = merge_shards(out, shards, progress=False)
    assert [w.filename for w in record] == [__file__]  # points at the caller
    assert out in str(record[0].message)
    assert result.items_added == items_of(out) == total
    with BloomFilter.open(out, readonly=True) as f:
        assert f.is_over_capacity() and f.observed_fp_rate() > 0.9
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()
    with pytest.warns(OverCapacityWarning, match=rf"past its design point: {total} items") as record:
        result = merge_into(target, shards, progress=False)
    assert [w.filename for w in record] == [__file__]
    assert result.items_added == items_of(target) == total
    assert bits_of(target) == bits_of(out)
    # The same rule as union: ten unions of the same shards warn once, with the same count.
    acc = BloomFilter(cfg)
    with pytest.warns(OverCapacityWarning, match=r"past its design point"):
        for path in shards:
            with BloomFilter.open(path, readonly=True) as shard:
                acc.union(shard)
    assert acc.items_added == total and acc.to_bytes()[HS:] == bits_of(out)


def test_merge_within_the_design_point_is_silent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import warnings

    cfg = BloomConfig.for_items(100_000, 0.01)
    shards = write_shards(tmp_path, cfg, [[f"s{s}-{i}" for i in range(10_000)] for s in range(10)])
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert merge_shards(tmp_path / "out.blm", shards, progress=False).items_added == 100_000
        assert merge_shards(tmp_path / "and.blm", shards, intersection=True, progress=False).items_added == 10_000
        assert merge_into(target, shards, progress=False).items_added == 100_000


def test_merge_counter_saturates(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The sum saturates at 2**32 - 1, never wraps (the shared rule, with the warning)."""
    from mmapbloom import OverCapacityWarning

    cfg = BloomConfig(num_bits=1000, num_hashes=3)
    shards = write_shards(tmp_path, cfg, [["a"], ["b"]])
    for path in shards:  # forge a nearly saturated count in each header
        with open(path, "r+b") as fh:
            fh.seek(20)
            fh.write((2**32 - 10).to_bytes(4, "little"))
    with pytest.warns(OverCapacityWarning):
        assert merge_shards(tmp_path / "out.blm", shards, progress=False).items_added == 2**32 - 1
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()
    with pytest.warns(OverCapacityWarning):
        assert merge_into(target, shards, progress=False).items_added == 2**32 - 1
    assert items_of(target) == items_of(str(tmp_path / "out.blm")) == 2**32 - 1


def test_cli_merge_past_the_design_point_warns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg, shards, total = full_shards(tmp_path)
    proc = cli("merge", str(tmp_path / "out.blm"), *shards)
    assert proc.returncode == 0, proc.stderr
    assert b"warning" in proc.stderr and f"past its design point: {total} items".encode() in proc.stderr
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, cfg).close()
    proc = cli("merge", "--into", target, *shards)
    assert proc.returncode == 0, proc.stderr
    assert f"past its design point: {total} items".encode() in proc.stderr


# -- one compatibility check -------------------------------------------------------------------
def test_one_compatibility_check_for_configs_filters_and_shards(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    a = BloomConfig(num_bits=1000, num_hashes=3)
    assert a.is_compatible(BloomConfig(num_bits=1000, num_hashes=3)) and not a.is_compatible("x")
    assert a.difference(BloomConfig(num_bits=1000, num_hashes=4)) == ("num_hashes", 3, 4)
    with pytest.raises(
        IncompatibleFiltersError, match=r"^here: incompatible filters: num_bits differs \(1000 != 999\)$"
    ):
        a.check_compatible(BloomConfig(num_bits=999, num_hashes=3), where="here")
    # Filters' union and both merges all go through BloomConfig.check_compatible.
    calls: list[tuple[int, int]] = []
    real = BloomConfig.check_compatible

    def spy(self: BloomConfig, other: BloomConfig, *, where: str = "") -> None:
        calls.append((self.num_bits, other.num_bits))
        real(self, other, where=where)

    monkeypatch.setattr(BloomConfig, "check_compatible", spy)
    shards = write_shards(tmp_path, a, [["x"], ["y"]])
    BloomFilter(a).union(BloomFilter(a))
    assert BloomFilter(a).is_compatible(BloomFilter(a)) and not BloomFilter(a).is_compatible(
        BloomFilter(BloomConfig(num_bits=1001, num_hashes=3))
    )
    merge_shards(tmp_path / "out.blm", shards, progress=False)
    target = str(tmp_path / "t.blm")
    BloomFilter.create(target, a).close()
    merge_into(target, shards, progress=False)
    # union 1, is_compatible 2, merge_shards 1 (shard 2 against shard 1), merge_into 1 + 2
    # (the shards among themselves, then each against the target).
    assert len(calls) == 1 + 2 + 1 + 3


def test_merge_and_extents_use_no_private_fields_of_the_filter() -> None:
    """merge, extents, dask and scalable reach a filter's bytes through its storage
    object's methods (``fd``, ``duplicate_fd``, ``check_size``, ``body_range``, ``body``)
    and its items counter through ``base.add_items`` and ``base.items_loader``: never the storage's
    buffer, the counter or the bit array directly."""
    import re

    import mmapbloom

    for name in ("merge", "extents", "dask", "scalable"):
        with open(os.path.join(os.path.dirname(mmapbloom.__file__), f"{name}.py")) as fh:  # the installed package
            source = fh.read()
        assert not re.findall(r"\._storage\.buf|\.buf\b|\._counter|\._items\b|\._bits\(\)|\._cells\(\)", source), name
