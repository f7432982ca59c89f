"""Pure parts of state storage: reading Terraform state files, sealing values to what they
belong to, the data-key transport, the state-version and variable rules applied by the state
machine, and run-token permissions (remote state consumers, global-remote-state)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from cryptography.exceptions import InvalidTag

from services.workspace import permissions as perms
from services.workspace import tfstate
from services.workspace.jsonapi import ApiError
from services.workspace.permissions import Caller
from services.workspace.sealing import seal, unseal
from shared.cluster_identity import ClusterIdentity
from shared.datakeys import new_request, open_reply, seal_for
from shared.replog import ApplyError
from shared.service_identity import derive_service_key
from tests.unit.test_workspace_state import Machine, m, ws  # noqa: F401 - the fixture

LINEAGE = "8a5a1c5e-0000-4000-8000-000000000001"


def test_parse_reads_outputs_types_and_resources() -> None:
    raw = json.dumps(
        {
            "version": 4,
            "terraform_version": "1.0.3",
            "serial": 7,
            "lineage": LINEAGE,
            "outputs": {
                "a": {"value": "x", "type": "string"},
                "b": {"value": {"k": [1, True]}, "sensitive": True},
            },
            "resources": [
                {"mode": "managed", "type": "null_resource", "name": "n", "instances": [{}, {}]}
            ],
        }
    ).encode()
    st = tfstate.parse(raw)
    assert (st.version, st.serial, st.lineage, st.terraform_version) == (4, 7, LINEAGE, "1.0.3")
    a, b = st.outputs
    assert (a.name, a.value_json, a.type_json, a.sensitive) == ("a", b'"x"', b'"string"', False)
    # No type in the file: inferred the way Terraform writes types.
    assert json.loads(b.type_json) == ["object", {"k": ["tuple", ["number", "bool"]]}]
    assert b.sensitive is True
    assert tfstate.resource_summary(st.resources) == [
        {"name": "n", "type": "null_resource", "count": 2, "module": "root", "provider": ""}
    ]


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"not json", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'{"serial": 1}', "format version"),
        (b'{"version": 4, "serial": -1}', "serial"),
        (b'{"version": 4, "serial": true}', "serial"),
        (b'{"version": 4, "serial": 1, "outputs": []}', "outputs"),
        (b'{"version": 4, "serial": 1, "outputs": {"x": {}}}', "no value"),
        (b'{"version": 4, "serial": 1, "lineage": 5}', "lineage"),
        (b'{"version": 4, "serial": 99999999999999999999999}', "serial"),
        (b'{"version": 99999999999999999999, "serial": 1}', "format version"),
    ],
)
def test_parse_refuses_what_is_not_a_state(raw: bytes, words: str) -> None:
    with pytest.raises(ApiError) as exc:
        tfstate.parse(raw)
    assert exc.value.status == 422 and words in exc.value.detail


def test_md5_is_checked_on_exact_bytes() -> None:
    raw = b'{"version": 4}'
    tfstate.check_md5(raw, hashlib.md5(raw).hexdigest().upper())
    with pytest.raises(ApiError):
        tfstate.check_md5(raw + b" ", hashlib.md5(raw).hexdigest())


def test_sealed_values_are_bound_to_their_owner() -> None:
    key = os.urandom(32)
    blob = seal(key, b"hunter2", "state:sv-1")
    assert b"hunter2" not in blob
    assert unseal(key, blob, "state:sv-1") == b"hunter2"
    with pytest.raises(ValueError):
        unseal(key, blob, "state:sv-2")  # moved to another record
    with pytest.raises(ValueError):
        unseal(os.urandom(32), blob, "state:sv-1")
    with pytest.raises(ValueError):
        unseal(key, blob[:-1] + bytes([blob[-1] ^ 1]), "state:sv-1")
    with pytest.raises(ValueError):
        unseal(key, b"\x02" + blob[1:], "state:sv-1")


def test_data_key_transport() -> None:
    data_key = os.urandom(32)
    signer = derive_service_key(ClusterIdentity.from_seed(os.urandom(32)), "workspace")
    private, req = new_request("workspace/state", signer, "c")
    reply = seal_for(req, data_key)
    assert data_key not in reply.sealed_key
    assert open_reply(private, req, reply) == data_key
    other, _ = new_request("workspace/state", signer, "c")
    with pytest.raises(InvalidTag):
        open_reply(other, req, reply)  # only the requester's one-time key opens it


def sv(m: Machine, sv_id: str, serial: int, by: list[str], **extra: object) -> str:  # noqa: F811
    return m(
        "sv.create",
        {
            "id": sv_id,
            "workspace_id": "ws-a",
            "serial": serial,
            "lineage": extra.pop("lineage", LINEAGE),
            "md5": extra.pop("md5", f"{serial:032x}"),
            "status": extra.pop("status", "finalized"),
            "by": by,
            **extra,
        },
    )


def test_state_versions_need_the_lock_and_a_higher_serial(m: Machine) -> None:  # noqa: F811
    ws(m, "ws-a", "a")
    me, other = ["users", "user-1"], ["users", "user-2"]
    with pytest.raises(ApplyError) as exc:
        sv(m, "sv-1", 1, me)
    assert exc.value.code == 409 and "locked" in exc.value.message
    m("ws.lock", {"id": "ws-a", "by": other})
    with pytest.raises(ApplyError) as exc:
        sv(m, "sv-1", 1, me)
    assert "locked by User user-2" in exc.value.message
    m("ws.unlock", {"id": "ws-a", "by": other})
    m("ws.lock", {"id": "ws-a", "by": me})
    sv(m, "sv-1", 5, me)
    assert m.state.workspaces["ws-a"].current_state_version_id == "sv-1"
    for serial, kw in ((4, {}), (5, {"md5": "f" * 32}), (6, {"lineage": "other"})):
        with pytest.raises(ApplyError) as exc:
            sv(m, "sv-x", serial, me, **kw)
        assert exc.value.code == 409
    sv(m, "sv-2", 5, me, md5=f"{5:032x}")  # the same state again is fine
    sv(m, "sv-3", 1, me, lineage="other", force=True)
    sv(m, "sv-4", 2, me, lineage="other", status="pending")
    assert m.state.workspaces["ws-a"].current_state_version_id == "sv-3"  # pending: not yet
    fields = {
        "size": 10,
        "state_format": 4,
        "terraform_version": "1.0.3",
        "resource_count": 0,
        "resources_json": b"[]",
        "outputs": [{"id": "wsout-1", "name": "o"}],
        "sealed_values": b"x",
    }
    m("sv.finalize", {"id": "sv-4", **fields})
    assert m.state.workspaces["ws-a"].current_state_version_id == "sv-4"
    assert m.state.output_sv["wsout-1"] == "sv-4"
    with pytest.raises(ApplyError):
        m("sv.finalize", {"id": "sv-4", **fields})
    # Snapshots keep versions and their indexes; deleting the workspace drops them.
    restored = Machine()
    restored.state.restore(m.state.snapshot(), m.index)
    assert restored.state.sv_by_ws["ws-a"] == ["sv-1", "sv-2", "sv-3", "sv-4"]
    assert restored.state.output_sv == {"wsout-1": "sv-4"}
    m("ws.delete", {"id": "ws-a"})
    assert not m.state.state_versions and not m.state.output_sv


def test_variable_rules(m: Machine) -> None:  # noqa: F811
    ws(m, "ws-a", "a")
    base = {"workspace_id": "ws-a", "key": "k", "category": "env", "sealed_value": b"s"}
    m("var.create", {**base, "id": "var-1", "sensitive": True})
    m("var.create", {**base, "id": "var-2", "category": "terraform"})
    with pytest.raises(ApplyError) as exc:
        m("var.create", {**base, "id": "var-3"})
    assert exc.value.code == 422 and "Key has already been taken" in exc.value.message
    with pytest.raises(ApplyError):
        m("var.update", {"id": "var-2", "changes": {"category": "env"}})  # would collide
    with pytest.raises(ApplyError):
        m("var.update", {"id": "var-1", "changes": {"sensitive": False}})
    m("var.update", {"id": "var-1", "changes": {"key": "k2", "description": "d"}})
    assert m.state.variables["var-1"].key == "k2"
    m("var.delete", {"id": "var-2"})
    assert m.state.vars_by_ws["ws-a"] == ["var-1"]


def test_run_tokens_see_what_is_shared_with_their_workspace(m: Machine) -> None:  # noqa: F811
    for wid in ("ws-own", "ws-net", "ws-far"):
        ws(m, wid, wid)
    w = m.state.workspaces
    run = Caller(kind="run", org_id="org-1", workspace_id="ws-own", run_id="run-1")
    assert run.lock_holder == ("runs", "run-1")
    assert perms.workspace_caps(m.state, run, w["ws-own"]) == perms.RUN_OWN
    assert perms.workspace_caps(m.state, run, w["ws-net"]) == frozenset()
    m("ws.consumers", {"id": "ws-net", "op": "add", "ids": ["ws-own"]})
    caps = perms.workspace_caps(m.state, run, w["ws-net"])
    assert "read-state" in caps and "write-state" not in caps and "lock" not in caps
    m("ws.update", {"id": "ws-far", "changes": {"global_remote_state": True}})
    assert perms.workspace_caps(m.state, run, w["ws-far"]) == perms.RUN_REMOTE_STATE
    other_org = Caller(kind="run", org_id="org-2", workspace_id="ws-x", run_id="run-2")
    assert perms.workspace_caps(m.state, other_org, w["ws-far"]) == frozenset()
    caps_of = perms.caps_function(m.state, run, m.state.orgs["org-1"])
    assert [caps_of(w[x]) == perms.workspace_caps(m.state, run, w[x]) for x in w] == [True] * 3


def test_variable_sets_rules(m: Machine) -> None:  # noqa: F811
    ws(m, "ws-a", "a")
    ws(m, "ws-b", "b")
    m("varset.create", {"id": "vs-1", "org_id": "org-1", "name": "s", "workspace_ids": ["ws-a"]})
    with pytest.raises(ApplyError):
        m("varset.create", {"id": "vs-2", "org_id": "org-1", "name": "s"})
    with pytest.raises(ApplyError):
        m("varset.create", {"id": "vs-2", "org_id": "org-1", "name": "t", "workspace_ids": ["x"]})
    assert "vs-2" not in m.state.varsets
    m("var.create", {"id": "var-1", "varset_id": "vs-1", "key": "K", "category": "env"})
    with pytest.raises(ApplyError):
        m("var.create", {"id": "var-2", "varset_id": "vs-1", "key": "K", "category": "env"})
    # The same key on the workspace itself is its own namespace.
    m("var.create", {"id": "var-3", "workspace_id": "ws-a", "key": "K", "category": "env"})
    w = m.state.workspaces
    assert [v.id for v in m.state.varsets_for(w["ws-a"])] == ["vs-1"]
    assert m.state.varsets_for(w["ws-b"]) == []
    m("varset.rel", {"id": "vs-1", "rel": "projects", "op": "add", "ids": ["prj-def"]})
    assert [v.id for v in m.state.varsets_for(w["ws-b"])] == ["vs-1"]
    restored = Machine()
    restored.state.restore(m.state.snapshot(), m.index)
    assert restored.state.vars_by_set == {"vs-1": ["var-1"]}
    assert restored.state.varsets["vs-1"].project_ids == ["prj-def"]
    m("ws.delete", {"id": "ws-a"})
    assert m.state.varsets["vs-1"].workspace_ids == []
    m("varset.delete", {"id": "vs-1"})
    assert "var-1" not in m.state.variables and "vs-1" not in m.state.vars_by_set


async def test_keys_are_cached_for_a_while_and_errors_are_503() -> None:
    from services.workspace.sealing import Keys
    from shared.errors import ServiceError

    calls: list[str] = []

    async def fetch(name: str) -> bytes:
        calls.append(name)
        if name == "sealed":
            raise ServiceError(503, "the secrets service is sealed")
        return name.encode().ljust(32, b"k")

    keys = Keys(fetch, ttl=3600)
    assert await keys.get("a") == await keys.get("a")
    assert calls == ["a"]
    expiring = Keys(fetch, ttl=0)
    await expiring.get("a")
    await expiring.get("a")
    assert calls == ["a", "a", "a"]  # expired at once: fetched each time
    with pytest.raises(ApiError) as exc:
        await keys.get("sealed")
    assert exc.value.status == 503 and "unsealed" in exc.value.detail
