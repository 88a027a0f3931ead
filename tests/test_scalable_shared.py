"""A scalable filter directory shared by two real users (``setpriv`` as root): a growth by
one user must leave every layer and the manifest usable by the other, whatever the
grower's umask, and a handle that only queries never needs write access to a layer."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from typing import Any, Iterator

import pytest

from tests.conftest import ROOT

GROUP = 4242  # a group both users are given (supplementary)
ALICE, BOB = 1000, 65534

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root and setpriv to run processes as two other users",
    ),
]

PRELUDE = """
import json, os, sys
sys.path.insert(0, {root!r})
os.umask({umask})
from mmapbloom import ScalableBloomFilter
path = {path!r}
keys = lambda tag, n: [f"{{tag}}-{{i}}" for i in range(n)]
"""


def as_user(uid: int, umask: int, path: str, body: str, **popen: Any) -> "subprocess.Popen[str]":
    code = PRELUDE.format(root=ROOT, umask=umask, path=path) + textwrap.dedent(body)
    return subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={GROUP}", sys.executable, "-c", code],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        **popen,
    )


def run_as(uid: int, umask: int, path: str, body: str) -> Any:
    proc = as_user(uid, umask, path, body)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"uid {uid}: exit {proc.returncode}: {err[-2000:]}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def other_users_can_run_the_checkout() -> None:
    """Skip when the other users cannot import this checkout's package with this
    interpreter (a clone inside a 0700 directory, such as ``mktemp -d``'s): the test needs
    their processes to run the code under test, and changing the checkout's permissions
    is not the test's business."""
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={ALICE}",
            f"--regid={ALICE}",
            f"--groups={GROUP}",
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {ROOT!r}); import mmapbloom, numpy",
        ],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.skip(f"uid {ALICE} cannot run this checkout ({probe.stderr.strip().splitlines()[-1:]})")


@pytest.fixture
def shared() -> Iterator[str]:
    """A directory both users may write: group GROUP, mode 2775 (setgid: new files get the
    group), in /tmp so that both can reach it."""
    where = tempfile.mkdtemp(prefix="mmapbloom-shared-")
    os.chown(where, 0, GROUP)
    os.chmod(where, 0o2775)
    yield where
    shutil.rmtree(where)


def modes(path: str) -> dict[str, str]:
    return {n: oct(stat.S_IMODE(os.stat(os.path.join(path, n)).st_mode)) for n in sorted(os.listdir(path))}


GROW = """
with ScalableBloomFilter.open(path) as f:
    f.update(keys("{tag}", {n}))
    print(json.dumps({{"layers": f.num_layers}}))
"""

# Alice keeps a read-write handle open across Bob's growth, then queries and adds through it.
ALICE_HOLDS = """
f = ScalableBloomFilter.open(path)
print("open", flush=True)
sys.stdin.readline()
found = bool(f.contains_many(keys("bob", {n})).all()) and all(k in f for k in keys("bob", 50))
new = f.update(keys("alice2", {n}))
g = ScalableBloomFilter.open(path)  # a fresh read-write handle too
found2 = bool(g.contains_many(keys("bob", {n}) + keys("alice2", {n})).all())
g.verify()
print(json.dumps({{"found": found, "new": new, "found2": found2, "layers": f.num_layers}}))
"""


def _alice_across_bob(path: str, bob_umask: int) -> dict[str, Any]:
    alice = as_user(ALICE, 0o022, path, ALICE_HOLDS.format(n=3000), stdin=subprocess.PIPE)
    assert alice.stdout is not None and alice.stdout.readline().strip() == "open"
    assert run_as(BOB, bob_umask, path, GROW.format(tag="bob", n=3000))["layers"] >= 3  # Bob grew it
    out, err = alice.communicate("go\n", timeout=120)
    assert alice.returncode == 0, err[-2000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_growth_by_another_user_follows_the_directory_modes(shared: str) -> None:
    path = os.path.join(shared, "s")
    # Alice creates it group-writable (umask 002); Bob grows it with umask 022.
    run_as(ALICE, 0o002, path, "ScalableBloomFilter.create(path, 500, 0.01).close(); print('{}')")
    result = _alice_across_bob(path, 0o022)
    assert result == {"found": True, "new": result["new"], "found2": True, "layers": result["layers"]}
    assert result["new"] >= 2900 and result["layers"] >= 4  # a few false positives are refused
    got = modes(path)
    assert {m for n, m in got.items() if n.startswith("layer-")} == {"0o664"}, got
    assert got["manifest.json"] == "0o664", got
    assert {os.stat(os.path.join(path, n)).st_gid for n in got} == {GROUP}


def test_mode_given_at_create_is_kept_by_every_growth(shared: str) -> None:
    path = os.path.join(shared, "s")
    # A private umask for both: only mode=0o660 at create makes the directory shareable.
    run_as(ALICE, 0o077, path, "ScalableBloomFilter.create(path, 500, 0.01, mode=0o660).close(); print('{}')")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o2770
    result = _alice_across_bob(path, 0o077)
    assert result["found"] and result["found2"] and result["layers"] >= 4
    got = modes(path)
    assert set(got.values()) == {"0o660"}, got


def test_a_query_only_handle_needs_no_write_access_to_a_new_layer(shared: str) -> None:
    path = os.path.join(shared, "s")
    run_as(ALICE, 0o002, path, "ScalableBloomFilter.create(path, 500, 0.01).close(); print('{}')")
    run_as(BOB, 0o022, path, GROW.format(tag="bob", n=1000))
    os.chmod(os.path.join(path, "layer-0001.blm"), 0o644)  # Bob's layer, not writable by Alice
    body = """
    f = ScalableBloomFilter.open(path)
    found = bool(f.contains_many(keys("bob", 1000)).all()) and "bob-7" in f and not f.add("bob-7")
    try:
        f.add("alice-new")
    except PermissionError as exc:
        err = str(exc)
    print(json.dumps({"found": found, "err": err}))
    """
    result = run_as(ALICE, 0o022, path, body)
    assert result["found"], result
    assert "layer-0001.blm" in result["err"] and "not writable by this user" in result["err"], result
