"""An expiring filter directory shared by two real users (``setpriv`` as root): a rotation
by one user (a new period file, a new manifest, a dropped period removed) leaves every
file usable by the other, whatever the rotating user's umask, and a handle that only
queries never needs write access to a period file. The mode rules of the scalable filter
(tests/test_scalable_shared.py), applied across rotations."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import textwrap
from typing import Any

import pytest

from tests.test_scalable_shared import ALICE, BOB, GROUP, as_user, modes, shared  # noqa: F401  (a fixture)
from tests.test_scalable_shared import other_users_can_run_the_checkout  # noqa: F401  (autouse fixture)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
        reason="needs root and setpriv to run processes as two other users",
    ),
]

W, K = 40.0, 4
P = W / K

PRELUDE = """
from mmapbloom import ExpiringBloomFilter
now = [{t!r}]
clock = lambda: now[0]
"""


def code(body: str, t: float) -> str:
    """``body`` after a prelude whose injected clock reads ``t`` (the scalable test's
    prelude, before it, gives ``sys``, ``json``, ``path`` and ``keys``)."""
    return PRELUDE.format(t=t) + textwrap.dedent(body)


def run_as(uid: int, umask: int, path: str, body: str, t: float) -> Any:
    proc = as_user(uid, umask, path, code(body, t))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"uid {uid}: exit {proc.returncode}: {err[-2000:]}"
    return json.loads(out.strip().splitlines()[-1])


ROTATE = """
with ExpiringBloomFilter.open(path, clock=clock) as f:
    new = f.update(keys("{tag}", {n}))
    print(json.dumps({{"new": new, "periods": [e["period"] for e in f.info()["live_periods"]]}}))
"""

# Alice keeps a read-write handle open across Bob's rotations, then queries and adds
# through it at Bob's time, and through a fresh read-write handle.
ALICE_HOLDS = """
f = ExpiringBloomFilter.open(path, clock=clock)
f.update(keys("alice", 200))
print("open", flush=True)
now[0] = float(sys.stdin.readline())
found = bool(f.contains_many(keys("bob", 200)).all()) and all(k in f for k in keys("bob", 50))
new = f.update(keys("alice2", 200))
again = f.add("alice2-0")
g = ExpiringBloomFilter.open(path, clock=clock)
found2 = bool(g.contains_many(keys("bob", 200) + keys("alice2", 200)).all())
g.verify()
print(json.dumps({"found": found, "new": new, "again": again, "found2": found2}))
"""


def _alice_across_bob(path: str, bob_umask: int) -> dict[str, Any]:
    alice = as_user(ALICE, 0o022, path, code(ALICE_HOLDS, 0.5), stdin=subprocess.PIPE)
    assert alice.stdout is not None and alice.stdout.readline().strip() == "open"
    t = 0.5
    for step in range(1, K + 3):  # Bob rotates K + 2 times: period 0 (Alice's first) is dropped
        t = step * P + 0.5
        got = run_as(BOB, bob_umask, path, ROTATE.format(tag="bob", n=200), t)
        assert got["periods"][-1] == step
    assert 0 not in got["periods"]
    out, err = alice.communicate(f"{t}\n", timeout=120)
    assert alice.returncode == 0, err[-2000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _period_modes(path: str) -> dict[str, str]:
    return {n: m for n, m in modes(path).items() if not n.endswith(".mutex")}


def test_rotations_by_another_user_follow_the_directory_modes(shared: str) -> None:  # noqa: F811
    path = os.path.join(shared, "e")
    # Alice creates it group-writable (umask 002); Bob rotates it with umask 022.
    run_as(
        ALICE,
        0o002,
        path,
        f"ExpiringBloomFilter.create(path, {W}, 2000, 0.01, periods={K}, clock=clock).close(); print('{{}}')",
        0.5,
    )
    result = _alice_across_bob(path, 0o022)
    assert result == {"found": True, "new": 200, "again": False, "found2": True}, result
    got = _period_modes(path)
    assert {m for n, m in got.items() if n.startswith("period-")} == {"0o664"}, got
    assert got["manifest.json"] == "0o664" and got["lock"] == "0o664", got
    assert "period-0.blm" not in got
    assert {os.stat(os.path.join(path, n)).st_gid for n in got} == {GROUP}


def test_mode_given_at_create_is_kept_by_every_rotation(shared: str) -> None:  # noqa: F811
    path = os.path.join(shared, "e")
    # A private umask for both: only mode=0o660 at create makes the directory shareable.
    run_as(
        ALICE,
        0o077,
        path,
        f"ExpiringBloomFilter.create(path, {W}, 2000, 0.01, periods={K}, clock=clock, mode=0o660).close(); print('{{}}')",
        0.5,
    )
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o2770
    result = _alice_across_bob(path, 0o077)
    assert result["found"] and result["found2"] and result["new"] == 200
    assert set(_period_modes(path).values()) == {"0o660"}, modes(path)


def test_a_query_only_handle_needs_no_write_access_to_a_period(shared: str) -> None:  # noqa: F811
    path = os.path.join(shared, "e")
    run_as(
        ALICE,
        0o002,
        path,
        f"ExpiringBloomFilter.create(path, {W}, 2000, 0.01, periods={K}, clock=clock).close(); print('{{}}')",
        0.5,
    )
    run_as(BOB, 0o022, path, ROTATE.format(tag="bob", n=100), P + 0.5)
    os.chmod(os.path.join(path, "period-1.blm"), 0o644)  # Bob's period, not writable by Alice
    body = """
    f = ExpiringBloomFilter.open(path, clock=clock)
    found = bool(f.contains_many(keys("bob", 100)).all()) and "bob-7" in f and not f.add("bob-7")
    try:
        f.add("alice-new")
        err = ""
    except PermissionError as exc:
        err = str(exc)
    print(json.dumps({"found": found, "err": err}))
    """
    result = run_as(ALICE, 0o022, path, body, P + 0.5)
    assert result["found"], result
    assert "not writable by this user" in result["err"] and "queries work" in result["err"], result
