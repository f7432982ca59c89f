"""Client nodes authenticate with their own node secret: the rule, the register check at apply
time (state unchanged when refused), client updates limited to authenticated nodes, and the
identity files a client keeps (0600, the same node after a restart)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from services.scheduler import nodeauth
from services.scheduler.client import identity
from shared.replog import ApplyError

from .test_sched_acl_bootstrap import Log
from .test_sched_placement import node

SECRET = "4a3c6a5e-6f1b-4f6e-9a55-0c1d2e3f4a5b"


def with_secret(i: int, secret: str) -> dict[str, object]:
    return {**node(i), nodeauth.HASH_FIELD: nodeauth.secret_hash(secret)}


def test_matches_needs_the_exact_secret() -> None:
    rec = {nodeauth.HASH_FIELD: nodeauth.secret_hash(SECRET)}
    assert nodeauth.matches(rec, SECRET)
    assert not nodeauth.matches(rec, SECRET + "\x00")
    assert not nodeauth.matches(rec, SECRET.upper())
    assert not nodeauth.matches(rec, "")
    assert not nodeauth.matches(rec, None)
    assert not nodeauth.matches({}, SECRET)  # a record without a hash proves nothing
    assert not nodeauth.matches(None, SECRET)


def test_refused_lists_unknown_missing_and_wrong() -> None:
    nodes = {"a": {nodeauth.HASH_FIELD: nodeauth.secret_hash(SECRET)}}
    assert nodeauth.refused(nodes, ["a"], {"a": SECRET}) == []
    assert nodeauth.refused(nodes, ["a", "b"], {"a": SECRET, "b": SECRET}) == ["b"]
    assert nodeauth.refused(nodes, ["a"], {}) == ["a"]
    assert nodeauth.refused(nodes, ["a"], {"a": "x" * 36}) == ["a"]


def test_register_rule() -> None:
    h = nodeauth.secret_hash(SECRET)
    assert nodeauth.may_register(None, h)
    assert nodeauth.may_register({}, h)  # a record from before node secrets
    assert nodeauth.may_register({nodeauth.HASH_FIELD: h}, h)
    assert not nodeauth.may_register({nodeauth.HASH_FIELD: h}, nodeauth.secret_hash("other" * 8))
    assert nodeauth.valid_secret(SECRET) and not nodeauth.valid_secret("short")
    assert not nodeauth.valid_secret(None)


def test_second_registration_with_another_secret_changes_nothing() -> None:
    log = Log()
    log.append("node.register", {"nodes": [with_secret(1, SECRET)]})
    before = dict(log.fsm.t.nodes["n1"])
    forged = {**with_secret(1, "f" * 36), "Name": "evil"}
    with pytest.raises(ApplyError) as err:
        log.append("node.register", {"nodes": [with_secret(2, "b" * 36), forged]})
    assert err.value.code == 403
    assert log.fsm.t.nodes["n1"] == before
    assert "n2" not in log.fsm.t.nodes  # the whole entry is refused
    log.append("node.register", {"nodes": [{**with_secret(1, SECRET), "Name": "renamed"}]})
    assert log.fsm.t.nodes["n1"]["Name"] == "renamed"


def test_client_updates_only_touch_authenticated_nodes() -> None:
    log = Log()
    log.fsm.t.put_alloc(
        {
            "ID": "a1",
            "Namespace": "default",
            "JobID": "j",
            "TaskGroup": "g",
            "NodeID": "n1",
            "ClientStatus": "running",
            "DesiredStatus": "run",
        }
    )
    log.append(
        "alloc.client_update",
        {"updates": [{"ID": "a1", "ClientStatus": "failed"}], "node_ids": ["n2"]},
    )
    assert log.fsm.t.allocs["a1"]["ClientStatus"] == "running"


def test_identity_is_kept_private_and_stable(tmp_path: Path) -> None:
    data = tmp_path / "client"
    nid, secret = identity.load_or_create(str(data))
    assert (nid, secret) == identity.load_or_create(str(data))
    for name in (identity.CLIENT_ID, identity.SECRET_ID):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600
    assert (data / identity.SECRET_ID).read_text() == secret
    assert not [p for p in data.iterdir() if p.name.endswith(".tmp")]
    # A file left empty by a crash is replaced, a wider one tightened.
    (data / identity.SECRET_ID).write_text("")
    (data / identity.CLIENT_ID).chmod(0o644)
    nid2, secret2 = identity.load_or_create(str(data))
    assert nid2 == nid and secret2 and secret2 != secret
    assert stat.S_IMODE((data / identity.CLIENT_ID).stat().st_mode) == 0o600
