"""State versions, their outputs and workspace variables over HTTP: a real gateway, a secrets
replica (it keeps the data keys), two workspace replicas and the session nats-server. Shapes,
locking, serial/lineage/md5 rules, the upload URL, pagination, permissions (access levels,
custom state-versions, run tokens with remote state consumers), and encryption at rest checked
on the raw JetStream bytes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
import pytest

from services.workspace.executor import public_url
from services.workspace.handlers.accounts import digest
from services.workspace.service import WorkspaceService
from shared.bus import Bus
from tests.harness import Cluster, start_cluster
from tests.integration.test_workspace_api import Api

pytestmark = pytest.mark.nats


@pytest.fixture
async def env(nats_url: str) -> AsyncIterator[tuple[Api, Cluster]]:
    cluster = await start_cluster(nats_url)
    admin = secrets.token_hex(16)
    services = []
    for i in range(2):
        bus = await Bus.connect(nats_url, f"workspace-{i}")
        cluster.buses.append(bus)
        svc = WorkspaceService(bus, cluster.settings, admin_token=admin)
        await svc.start()
        cluster.extra.append(svc)
        services.append(svc)
    async with aiohttp.ClientSession() as http:
        yield Api(cluster.workspace_url, admin, http, services), cluster
    await cluster.close()


def state_file(serial: int, lineage: str, outputs: dict[str, Any], pad: int = 0) -> bytes:
    doc = {
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": serial,
        "lineage": lineage,
        "outputs": outputs,
        "resources": [
            {
                "mode": "data",
                "type": "terraform_remote_state",
                "name": "net",
                "provider": 'provider["terraform.io/builtin/terraform"]',
                "instances": [{"schema_version": 0, "attributes": {"pad": "x" * pad}}],
            }
        ],
    }
    return json.dumps(doc, indent=2).encode()


def sv_doc(raw: bytes | None, serial: int, lineage: str, **attrs: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"serial": serial, "lineage": lineage, **attrs}
    if raw is not None:
        a.setdefault("md5", hashlib.md5(raw).hexdigest())
        a.setdefault("state", base64.b64encode(raw).decode())
    return {"data": {"type": "state-versions", "attributes": a}}


async def setup(api: Api, org: str, *names: str) -> list[str]:
    await api.org(org)
    return [(await api.workspace(org, n, **{"execution-mode": "local"}))["id"] for n in names]


async def team_token(api: Api, org: str, name: str, ws_id: str | None, **access: Any) -> str:
    team = (
        await api.ok(
            "POST",
            f"/api/v2/organizations/{org}/teams",
            {"data": {"type": "teams", "attributes": {"name": name}}},
        )
    )["data"]["id"]
    if ws_id is not None:
        await api.ok(
            "POST",
            "/api/v2/team-workspaces",
            {
                "data": {
                    "type": "team-workspaces",
                    "attributes": access,
                    "relationships": {
                        "workspace": {"data": {"type": "workspaces", "id": ws_id}},
                        "team": {"data": {"type": "teams", "id": team}},
                    },
                }
            },
        )
    doc = await api.ok(
        "POST",
        f"/api/v2/teams/{team}/authentication-token",
        {"data": {"type": "authentication-token"}},
        201,
    )
    return doc["data"]["attributes"]["token"]


async def test_create_show_list_download_and_outputs(env: tuple[Api, Cluster]) -> None:
    api, cluster = env
    org = "o" + uuid.uuid4().hex[:8]
    (ws,) = await setup(api, org, "net")
    lineage = str(uuid.uuid4())
    raw = state_file(
        1,
        lineage,
        {
            "vpc": {"value": "vpc-1", "type": "string"},
            "pw": {"value": "hunter2", "type": "string", "sensitive": True},
            "ports": {"value": [1, 2], "type": ["tuple", ["number", "number"]]},
        },
    )
    # The workspace must be locked by the writer.
    status, doc = await api.call(
        "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw, 1, lineage)
    )
    assert status == 409 and "locked" in doc["errors"][0]["detail"]
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/lock", {"reason": "test"})
    created = await api.ok(
        "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw, 1, lineage), 201
    )
    data = created["data"]
    assert data["type"] == "state-versions" and data["id"].startswith("sv-")
    attrs = data["attributes"]
    assert attrs["serial"] == 1 and attrs["status"] == "finalized"
    assert attrs["size"] == len(raw) and attrs["state-version"] == 4
    assert attrs["terraform-version"] == "1.0.3" and attrs["resources-processed"] is True
    # Absolute, as on HCP Terraform: the address clients reach the API at.
    download = f"/api/v2/state-versions/{data['id']}/download"
    assert attrs["hosted-state-download-url"] == public_url(cluster.settings) + download
    assert attrs["resources"] == [
        {
            "name": "net",
            "type": "data.terraform_remote_state",
            "count": 1,
            "module": "root",
            "provider": 'provider["terraform.io/builtin/terraform"]',
        }
    ]
    assert attrs["providers"] == {
        'provider["terraform.io/builtin/terraform"]': {"data.terraform-remote-state": 1}
    }
    rels = data["relationships"]
    assert rels["workspace"]["data"] == {"id": ws, "type": "workspaces"}
    assert len(rels["outputs"]["data"]) == 3
    assert data["links"]["self"] == f"/api/v2/state-versions/{data['id']}"

    # current-state-version, show, download (the exact bytes), workspace relationships.
    cur = await api.ok("GET", f"/api/v2/workspaces/{ws}/current-state-version")
    assert cur["data"]["id"] == data["id"]
    assert (await api.ok("GET", f"/api/v2/state-versions/{data['id']}"))["data"] == cur["data"]
    with_outputs = await api.ok(
        "GET", f"/api/v2/state-versions/{data['id']}", query="include=outputs"
    )
    assert {o["attributes"]["name"] for o in with_outputs["included"]} == {"vpc", "pw", "ports"}
    status, _ = await api.call(
        "GET", f"/api/v2/state-versions/{data['id']}", query="include=secrets"
    )
    assert status == 400
    got = await api.ok("GET", download)
    assert (got if isinstance(got, bytes) else json.dumps(got).encode()) and got == json.loads(raw)
    wsdoc = (await api.ok("GET", f"/api/v2/workspaces/{ws}"))["data"]
    assert wsdoc["relationships"]["current-state-version"]["data"] == {
        "id": data["id"],
        "type": "state-versions",
    }
    assert len(wsdoc["relationships"]["outputs"]["data"]) == 3
    inc = await api.ok(
        "GET", f"/api/v2/workspaces/{ws}", query="include=outputs,current_state_version"
    )
    kinds = {(d["type"], d["attributes"].get("name")): d for d in inc["included"]}
    assert ("state-versions", None) in kinds
    assert kinds[("workspace-outputs", "vpc")]["attributes"]["value"] == "vpc-1"
    assert kinds[("workspace-outputs", "pw")]["attributes"]["value"] is None

    # Outputs: lists withhold sensitive values; a single output shows it to state readers.
    outs = await api.ok("GET", f"/api/v2/workspaces/{ws}/current-state-version-outputs")
    by_name = {o["attributes"]["name"]: o for o in outs["data"]}
    assert by_name["vpc"]["attributes"]["value"] == "vpc-1"
    assert by_name["ports"]["attributes"]["value"] == [1, 2]
    assert by_name["ports"]["attributes"]["detailed-type"] == ["tuple", ["number", "number"]]
    assert by_name["ports"]["attributes"]["type"] == "array"
    assert by_name["vpc"]["attributes"]["type"] == "string"
    assert by_name["pw"]["attributes"] | {"value": None} == by_name["pw"]["attributes"]
    assert by_name["pw"]["attributes"]["sensitive"] is True
    listed = await api.ok("GET", f"/api/v2/state-versions/{data['id']}/outputs")
    assert [o["id"] for o in listed["data"]] == [o["id"] for o in outs["data"]]
    one = await api.ok("GET", f"/api/v2/state-version-outputs/{by_name['pw']['id']}")
    assert one["data"]["attributes"]["value"] == "hunter2"

    # Successors: lower or equal serial with other content, other lineage, bad md5 or serial.
    raw2 = state_file(2, lineage, {"vpc": {"value": "vpc-2", "type": "string"}})
    for doc_, code, words in (
        (sv_doc(state_file(1, lineage, {}), 1, lineage), 409, "serial"),
        (sv_doc(state_file(2, "other", {}), 2, "other"), 409, "lineage"),
        (sv_doc(raw2, 2, lineage, md5="0" * 32), 422, "md5"),
        (sv_doc(raw2, 3, lineage), 422, "serial"),
        (sv_doc(raw2, 2, lineage, state="%%%"), 422, "base64"),
        (sv_doc(None, 2, lineage, md5="zz"), 422, "md5"),
        (sv_doc(None, 2**63, lineage, md5="0" * 32), 422, "serial"),
        (sv_doc(None, 2, "x" * 1000, md5="0" * 32), 422, "lineage"),
        ({"data": {"type": "state-versions", "attributes": {"md5": "0" * 32}}}, 422, "serial"),
    ):
        status, err = await api.call("POST", f"/api/v2/workspaces/{ws}/state-versions", doc_)
        assert status == code and words in err["errors"][0]["detail"], (doc_, err)
    forced = sv_doc(state_file(1, "other", {}), 1, "other", force=True)
    await api.ok("POST", f"/api/v2/workspaces/{ws}/state-versions", forced, 201)
    for serial in (2, 3, 4):
        raw_n = state_file(serial, "other", {})
        await api.ok(
            "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw_n, serial, "other"), 201
        )

    # List: both filters required; newest first; paginated.
    status, _ = await api.call("GET", "/api/v2/state-versions", query="filter[workspace][name]=net")
    assert status == 400
    q = f"filter%5Bworkspace%5D%5Bname%5D=net&filter%5Borganization%5D%5Bname%5D={org}"
    page1 = await api.ok("GET", "/api/v2/state-versions", query=q + "&page%5Bsize%5D=2")
    assert [d["attributes"]["serial"] for d in page1["data"]] == [4, 3]
    assert page1["meta"]["pagination"]["total-count"] == 5
    assert page1["meta"]["pagination"]["total-pages"] == 3
    assert "page%5Bnumber%5D=2" in page1["links"]["next"]
    page3 = await api.ok("GET", "/api/v2/state-versions", query=q + "&page[size]=2&page[number]=3")
    assert [d["attributes"]["serial"] for d in page3["data"]] == [1]
    status, _ = await api.call(
        "GET",
        "/api/v2/state-versions",
        query=f"filter[workspace][name]=nope&filter[organization][name]={org}",
    )
    assert status == 404


async def test_upload_url(env: tuple[Api, Cluster]) -> None:
    api, cluster = env
    org = "o" + uuid.uuid4().hex[:8]
    (ws,) = await setup(api, org, "big")
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/lock")
    lineage = str(uuid.uuid4())
    # A state just under the 32 MB request limit (more than fits inline once base64'd).
    limit = cluster.settings.max_request_bytes
    big = "y" * 200_000  # a large output: its sealed value goes to the blob store too
    outputs = {"x": {"value": big, "type": "string"}}
    pad = limit - len(state_file(1, lineage, outputs)) - 16
    raw = state_file(1, lineage, outputs, pad=pad)
    assert limit - 16 <= len(raw) <= limit
    md5 = hashlib.md5(raw).hexdigest()
    created = await api.ok(
        "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(None, 1, lineage, md5=md5), 201
    )
    attrs = created["data"]["attributes"]
    assert attrs["status"] == "pending" and attrs["hosted-state-download-url"] is None
    url = attrs["hosted-state-upload-url"]
    content = f"/api/v2/state-versions/{created['data']['id']}/content?"
    assert url.startswith(public_url(cluster.settings) + content)
    url = url.removeprefix(public_url(cluster.settings))  # the gateway of this test
    status, _ = await api.call("GET", f"/api/v2/workspaces/{ws}/current-state-version")
    assert status == 404  # pending versions are not current
    path, _, query = url.partition("?")
    # The URL is the credential: a wrong one is a 404, even with a valid token.
    status, _ = await api.call("PUT", path, raw=raw, query="upload-token=wrong")
    assert status == 404
    status, _ = await api.call("PUT", path, raw=b'{"version": 4}', query=query, token=None)
    assert status == 422  # md5 mismatch, nothing stored
    status, _ = await api.call("PUT", path, raw=raw + b" " * 17, query=query, token=None)
    assert status == 413  # over the request limit; the URL stays usable
    status, _ = await api.call("PUT", path, raw=raw, query=query, token=None)
    assert status == 200
    status, _ = await api.call("PUT", path, raw=raw, query=query, token=None)
    assert status == 404  # used once
    cur = await api.ok("GET", f"/api/v2/workspaces/{ws}/current-state-version")
    assert cur["data"]["id"] == created["data"]["id"]
    assert cur["data"]["attributes"]["status"] == "finalized"
    assert cur["data"]["attributes"]["size"] == len(raw)
    outs = await api.ok("GET", f"/api/v2/workspaces/{ws}/current-state-version-outputs")
    assert outs["data"][0]["attributes"]["value"] == big
    async with api.http.get(
        api.base + urlsplit(cur["data"]["attributes"]["hosted-state-download-url"]).path,
        headers={"Authorization": f"Bearer {api.admin}"},
    ) as resp:
        assert resp.status == 200 and hashlib.md5(await resp.read()).hexdigest() == md5
    # Deleting the workspace deletes its sealed state files from the object store.
    blobs = api.services[0].blobs
    assert await blobs.get(created["data"]["id"]) is not None
    await api.ok("DELETE", f"/api/v2/workspaces/{ws}", status=204)
    assert await blobs.get(created["data"]["id"]) is None
    assert await blobs.get(created["data"]["id"] + ".outputs") is None


async def test_state_permissions(env: tuple[Api, Cluster]) -> None:
    api, _ = env
    org = "o" + uuid.uuid4().hex[:8]
    ws, other = await setup(api, org, "net", "other")
    lineage = str(uuid.uuid4())
    raw = state_file(
        1,
        lineage,
        {
            "a": {"value": "1", "type": "string"},
            "s": {"value": "t0p", "type": "string", "sensitive": True},
        },
    )
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/lock")
    sv = (
        await api.ok(
            "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw, 1, lineage), 201
        )
    )["data"]
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/unlock")
    outs = sv["relationships"]["outputs"]["data"]
    secret_out = outs[1]["id"]
    paths = {
        "current": f"/api/v2/workspaces/{ws}/current-state-version",
        "show": f"/api/v2/state-versions/{sv['id']}",
        "download": f"/api/v2/state-versions/{sv['id']}/download",
        "outputs": f"/api/v2/workspaces/{ws}/current-state-version-outputs",
        "output": f"/api/v2/state-version-outputs/{secret_out}",
    }

    async def visible(token: str) -> dict[str, int]:
        return {k: (await api.call("GET", p, token=token))[0] for k, p in paths.items()}

    nobody = await team_token(api, org, "nobody", other, access="admin")
    assert set((await visible(nobody)).values()) == {404}
    outputs_only = await team_token(
        api, org, "outs", ws, access="custom", **{"state-versions": "read-outputs"}
    )
    assert await visible(outputs_only) == {
        "current": 404,
        "show": 404,
        "download": 404,
        "outputs": 200,
        "output": 200,
    }
    _, one = await api.call("GET", paths["output"], token=outputs_only)
    assert one["data"]["attributes"]["value"] is None  # sensitive: needs read-state
    reader = await team_token(api, org, "readers", ws, access="read")
    assert set((await visible(reader)).values()) == {200}
    _, one = await api.call("GET", paths["output"], token=reader)
    assert one["data"]["attributes"]["value"] == "t0p"
    # Writing needs write-state and the lock (here: custom write + locking).
    raw2 = state_file(2, lineage, {})
    for token in (reader, outputs_only):
        status, _ = await api.call("POST", f"/api/v2/workspaces/{ws}/actions/lock", token=token)
        assert status == 404
    writer = await team_token(
        api,
        org,
        "writers",
        ws,
        access="custom",
        **{"state-versions": "write", "workspace-locking": True},
    )
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/lock", token=writer)
    status, _ = await api.call(
        "POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw2, 2, lineage), token=reader
    )
    assert status == 404
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{ws}/state-versions",
        sv_doc(raw2, 2, lineage),
        201,
        token=writer,
    )
    # Held by the writers' team: someone else's unlock is a 409 naming the holder (what
    # go-tfe looks for); an admin's force-unlock releases it.
    status, err = await api.call("POST", f"/api/v2/workspaces/{ws}/actions/unlock")
    assert status == 409 and "is locked by Team" in err["errors"][0]["detail"]
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/force-unlock")
    status, _ = await api.call(
        "POST",
        f"/api/v2/workspaces/{ws}/state-versions",
        sv_doc(state_file(3, lineage, {}), 3, lineage),
        token=writer,
    )
    assert status == 409  # no longer holds the lock
    # The organization token manages workspaces but never writes state.
    org_tok = (
        await api.ok(
            "POST",
            f"/api/v2/organizations/{org}/authentication-token",
            {"data": {"type": "authentication-token"}},
            201,
        )
    )["data"]["attributes"]["token"]
    status, _ = await api.call(
        "POST",
        f"/api/v2/workspaces/{ws}/state-versions",
        sv_doc(state_file(3, lineage, {}), 3, lineage),
        token=org_tok,
    )
    assert status == 404


async def test_run_tokens_follow_remote_state_sharing(env: tuple[Api, Cluster]) -> None:
    """Run tokens (what remote runs will carry) read their own workspace's state, and another
    workspace's only when it shares it: as a remote state consumer or globally."""
    api, _ = env
    org = "o" + uuid.uuid4().hex[:8]
    net, app, stranger = await setup(api, org, "net", "app", "stranger")
    lineage = str(uuid.uuid4())
    await api.ok("POST", f"/api/v2/workspaces/{net}/actions/lock")
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{net}/state-versions",
        sv_doc(state_file(1, lineage, {"vpc": {"value": "v", "type": "string"}}), 1, lineage),
        201,
    )
    await api.ok("POST", f"/api/v2/workspaces/{net}/actions/unlock")
    svc = api.services[0]
    tokens = {}
    for ws in (app, stranger):
        secret = secrets.token_urlsafe(24)
        await svc.log.append(
            "token.create",
            msgspec.msgpack.encode(
                {
                    "id": "at-" + uuid.uuid4().hex[:16],
                    "kind": "run",
                    "owner_id": ws,
                    "digest": digest(secret),
                    "description": "run-" + uuid.uuid4().hex[:16],
                }
            ),
        )
        tokens[ws] = secret
    current = f"/api/v2/workspaces/{net}/current-state-version"
    for ws in (app, stranger):
        status, _ = await api.call("GET", current, token=tokens[ws])
        assert status == 404
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{net}/relationships/remote-state-consumers",
        {"data": [{"type": "workspaces", "id": app}]},
        204,
    )
    assert (await api.call("GET", current, token=tokens[app]))[0] == 200
    assert (await api.call("GET", current, token=tokens[stranger]))[0] == 404
    # Read, never write, another workspace's state; its own it may lock and write.
    status, _ = await api.call("POST", f"/api/v2/workspaces/{net}/actions/lock", token=tokens[app])
    assert status == 404
    await api.ok("POST", f"/api/v2/workspaces/{app}/actions/lock", token=tokens[app])
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{app}/state-versions",
        sv_doc(state_file(1, lineage, {}), 1, lineage),
        201,
        token=tokens[app],
    )
    doc = await api.ok("GET", f"/api/v2/workspaces/{app}", token=tokens[app])
    assert doc["data"]["relationships"]["locked-by"]["data"]["type"] == "runs"
    await api.ok(
        "PATCH",
        f"/api/v2/workspaces/{net}",
        {"data": {"type": "workspaces", "attributes": {"global-remote-state": True}}},
    )
    assert (await api.call("GET", current, token=tokens[stranger]))[0] == 200


async def raw_stream_bytes(cluster: Cluster, bus: Bus) -> bytes:
    """Every message of every JetStream stream of this cluster, as stored."""
    js = bus.nc.jetstream()
    out = bytearray()
    # The session's nats-server holds every test's streams: read all pages, not the first.
    infos: list = []
    while True:
        page = await js.streams_info(offset=len(infos))
        if not page or page[0].config.name in {i.config.name for i in infos}:
            break
        infos += page
    for info in infos:
        name = info.config.name
        if cluster.settings.cluster_name not in name:
            continue
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(name, seq)
            except Exception:  # deleted or purged sequence
                continue
            out += msg.data or b""
    return bytes(out)


async def test_states_and_variables_are_encrypted_at_rest(env: tuple[Api, Cluster]) -> None:
    api, cluster = env
    org = "o" + uuid.uuid4().hex[:8]
    (ws,) = await setup(api, org, "vault")
    marker_state, marker_var, marker_env = (f"m{uuid.uuid4().hex}" for _ in range(3))
    lineage = str(uuid.uuid4())
    raw = state_file(1, lineage, {"o": {"value": marker_state, "type": "string"}})
    await api.ok("POST", f"/api/v2/workspaces/{ws}/actions/lock")
    await api.ok("POST", f"/api/v2/workspaces/{ws}/state-versions", sv_doc(raw, 1, lineage), 201)
    for key, value, sensitive, cat in (
        ("plain", marker_var, False, "terraform"),
        ("SECRET", marker_env, True, "env"),
    ):
        await api.ok(
            "POST",
            f"/api/v2/workspaces/{ws}/vars",
            {
                "data": {
                    "type": "vars",
                    "attributes": {
                        "key": key,
                        "value": value,
                        "category": cat,
                        "sensitive": sensitive,
                    },
                }
            },
            201,
        )
    await api.services[0].log.snapshot_now()
    stored = await raw_stream_bytes(cluster, api.services[0].bus)
    assert len(stored) > len(raw)  # the state, the log and the snapshot are all in there
    for marker in (marker_state, marker_var, marker_env):
        assert marker.encode() not in stored
    # ... while the API still gives them back to those allowed to read them.
    cur = await api.ok("GET", f"/api/v2/workspaces/{ws}/current-state-version")
    got = await api.ok("GET", urlsplit(cur["data"]["attributes"]["hosted-state-download-url"]).path)
    assert got["outputs"]["o"]["value"] == marker_state


async def test_variables(env: tuple[Api, Cluster]) -> None:
    api, _ = env
    org = "o" + uuid.uuid4().hex[:8]
    ws, other = await setup(api, org, "app", "other")
    base = f"/api/v2/workspaces/{ws}/vars"

    def var(**attrs: Any) -> dict[str, Any]:
        return {"data": {"type": "vars", "attributes": attrs}}

    created = await api.ok(
        "POST",
        base,
        var(key="region", value="eu-west-1", category="terraform", description="where", hcl=False),
        201,
    )
    v = created["data"]
    assert v["type"] == "vars" and v["id"].startswith("var-")
    assert v["attributes"] | {"created-at": None, "version-id": None} == {
        "key": "region",
        "value": "eu-west-1",
        "description": "where",
        "sensitive": False,
        "category": "terraform",
        "hcl": False,
        "created-at": None,
        "version-id": None,
    }
    assert v["relationships"]["configurable"]["data"] == {"id": ws, "type": "workspaces"}
    secret = await api.ok(
        "POST", base, var(key="TOKEN", value="sekrit", category="env", sensitive=True), 201
    )
    assert secret["data"]["attributes"]["value"] is None  # write-only from the start
    hcl = await api.ok(
        "POST", base, var(key="tags", value='{a = "b"}', category="terraform", hcl=True), 201
    )
    assert hcl["data"]["attributes"]["hcl"] is True
    # Same key in the other category is fine; the same key and category is not.
    await api.ok("POST", base, var(key="region", value="x", category="env"), 201)
    for bad, words in (
        (var(key="region", value="y", category="terraform"), "taken"),
        (var(key="x", value="y", category="shell"), "category"),
        (var(key="x", value="y"), "category"),
        (var(key="1bad", category="env"), "key"),
        (var(key="has-dash", category="env"), "key"),
        (var(value="y", category="env"), "key"),
        (var(key="x", value=5, category="env"), "value"),
        (var(key="x", category="env", sensitive="yes"), "sensitive"),
        ({"data": {"type": "variables", "attributes": {}}}, "type"),
    ):
        status, err = await api.call("POST", base, bad)
        assert status == 422 and words in err["errors"][0]["detail"], (bad, err)

    listed = await api.ok("GET", base, query="page[size]=2")
    assert listed["meta"]["pagination"]["total-count"] == 4
    assert [d["attributes"]["key"] for d in listed["data"]] == ["region", "TOKEN"]
    assert listed["data"][1]["attributes"]["value"] is None

    # Update: value and description; a sensitive variable stays write-only and sensitive.
    upd = await api.ok(
        "PATCH",
        f"{base}/{v['id']}",
        {"data": {"type": "vars", "id": v["id"], "attributes": {"value": "us-east-1"}}},
    )
    assert upd["data"]["attributes"]["value"] == "us-east-1"
    assert upd["data"]["attributes"]["version-id"] != v["attributes"]["version-id"]
    status, _ = await api.call(
        "PATCH",
        f"{base}/{secret['data']['id']}",
        {"data": {"type": "vars", "attributes": {"sensitive": False}}},
    )
    assert status == 422
    made_secret = await api.ok(
        "PATCH",
        f"/api/v2/vars/{v['id']}",
        {"data": {"type": "vars", "attributes": {"sensitive": True}}},
    )
    assert made_secret["data"]["attributes"]["value"] is None

    # The older /vars interface: filters, create with a workspace relationship, delete.
    q = f"filter[workspace][name]=app&filter[organization][name]={org}"
    assert len((await api.ok("GET", "/api/v2/vars", query=q))["data"]) == 4
    status, _ = await api.call("GET", "/api/v2/vars")
    assert status == 400
    legacy = await api.ok(
        "POST",
        "/api/v2/vars",
        {
            "data": {
                "type": "vars",
                "attributes": {"key": "size", "value": "3", "category": "terraform"},
                "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws}}},
            }
        },
        201,
    )
    await api.ok("DELETE", f"/api/v2/vars/{legacy['data']['id']}", status=204)
    await api.ok("DELETE", f"{base}/{hcl['data']['id']}", status=204)
    assert len((await api.ok("GET", base))["data"]) == 3
    # A variable is reached only through its own workspace.
    status, _ = await api.call("DELETE", f"/api/v2/workspaces/{other}/vars/{v['id']}")
    assert status == 404

    # Permissions: read access lists values, cannot write; no access is a 404.
    reader = await team_token(api, org, "readers", ws, access="read")
    assert (await api.call("GET", base, token=reader))[0] == 200
    assert (await api.call("POST", base, var(key="k", category="env"), token=reader))[0] == 404
    nobody = await team_token(api, org, "nobody", other, access="write")
    assert (await api.call("GET", base, token=nobody))[0] == 404
    custom = await team_token(api, org, "vars-only", ws, access="custom", variables="write")
    await api.ok("POST", base, var(key="k", category="env", value="v"), 201, token=custom)


async def test_variable_sets(env: tuple[Api, Cluster]) -> None:
    api, _ = env
    org = "o" + uuid.uuid4().hex[:8]
    app, db, other = await setup(api, org, "app", "db", "other")

    def var(**attrs: Any) -> dict[str, Any]:
        return {"type": "vars", "attributes": attrs}

    created_doc = await api.ok(
        "POST",
        f"/api/v2/organizations/{org}/varsets",
        {
            "data": {
                "type": "varsets",
                "attributes": {"name": "aws", "description": "creds", "global": False},
                "relationships": {
                    "workspaces": {"data": [{"type": "workspaces", "id": app}]},
                    "vars": {
                        "data": [
                            var(key="AWS_REGION", value="eu-west-1", category="env"),
                            var(key="AWS_SECRET", value="s3", category="env", sensitive=True),
                        ]
                    },
                },
            }
        },
        201,
    )
    created = created_doc["data"]
    vs = created["id"]
    assert created["type"] == "varsets" and vs.startswith("varset-")
    assert created["attributes"]["var-count"] == 2
    assert created["attributes"]["workspace-count"] == 1
    assert created["relationships"]["workspaces"]["data"] == [{"id": app, "type": "workspaces"}]
    # A bad inline variable refuses the whole set; a duplicate name is 422.
    for bad in (
        {"relationships": {"vars": {"data": [var(key="x", category="shell")]}}},
        {"relationships": {"vars": {"data": [var(key="X", category="env")] * 2}}},
        {},
    ):
        status, _ = await api.call(
            "POST",
            f"/api/v2/organizations/{org}/varsets",
            {"data": {"type": "varsets", "attributes": {"name": "aws"}, **bad}},
        )
        assert status == 422, bad
    listed = await api.ok("GET", f"/api/v2/organizations/{org}/varsets")
    assert [d["attributes"]["name"] for d in listed["data"]] == ["aws"]

    vars_ = await api.ok("GET", f"/api/v2/varsets/{vs}/relationships/vars")
    by_key = {d["attributes"]["key"]: d for d in vars_["data"]}
    assert by_key["AWS_REGION"]["attributes"]["value"] == "eu-west-1"
    assert by_key["AWS_SECRET"]["attributes"]["value"] is None
    assert by_key["AWS_REGION"]["relationships"]["configurable"]["data"] == {
        "id": vs,
        "type": "varsets",
    }
    added = await api.ok(
        "POST",
        f"/api/v2/varsets/{vs}/relationships/vars",
        {"data": var(key="tf_var", value="1", category="terraform")},
        201,
    )
    await api.ok(
        "PATCH",
        f"/api/v2/varsets/{vs}/relationships/vars/{added['data']['id']}",
        {"data": {"type": "vars", "attributes": {"value": "2"}}},
    )
    await api.ok(
        "DELETE", f"/api/v2/varsets/{vs}/relationships/vars/{added['data']['id']}", status=204
    )
    # The set's variables are not the workspace's own.
    status, _ = await api.call("DELETE", f"/api/v2/vars/{by_key['AWS_REGION']['id']}")
    assert status == 404

    # Where it applies: attached workspaces, then a project, then everywhere (global).
    async def applied(ws_id: str) -> list[str]:
        doc = await api.ok("GET", f"/api/v2/workspaces/{ws_id}/varsets")
        return [d["id"] for d in doc["data"]]

    assert await applied(app) == [vs] and await applied(db) == []
    await api.ok(
        "POST",
        f"/api/v2/varsets/{vs}/relationships/workspaces",
        {"data": [{"type": "workspaces", "id": db}]},
        204,
    )
    assert await applied(db) == [vs]
    await api.ok(
        "DELETE",
        f"/api/v2/varsets/{vs}/relationships/workspaces",
        {"data": [{"type": "workspaces", "id": db}, {"type": "workspaces", "id": db}]},
        204,
    )
    assert await applied(db) == []
    status, _ = await api.call(
        "POST",
        f"/api/v2/varsets/{vs}/relationships/workspaces",
        {"data": [{"type": "workspaces", "id": "ws-nope"}]},
    )
    assert status == 422
    prj = (await api.ok("GET", f"/api/v2/workspaces/{other}"))["data"]["relationships"]
    await api.ok(
        "POST",
        f"/api/v2/varsets/{vs}/relationships/projects",
        {"data": [{"type": "projects", "id": prj["project"]["data"]["id"]}]},
        204,
    )
    assert await applied(other) == [vs]
    await api.ok(
        "PATCH",
        f"/api/v2/varsets/{vs}",
        {"data": {"type": "varsets", "attributes": {"global": True, "name": "aws-all"}}},
    )
    assert (await api.ok("GET", f"/api/v2/varsets/{vs}"))["data"]["attributes"]["global"]

    # Permissions: managing takes manage-workspaces; workspace access alone shows nothing.
    writer = await team_token(api, org, "writers", app, access="write")
    assert (await api.call("GET", f"/api/v2/varsets/{vs}", token=writer))[0] == 404
    status, _ = await api.call(
        "POST",
        f"/api/v2/organizations/{org}/varsets",
        {"data": {"type": "varsets", "attributes": {"name": "mine"}}},
        token=writer,
    )
    assert status == 404
    assert (await api.call("GET", f"/api/v2/workspaces/{app}/varsets", token=writer))[0] == 200

    await api.ok("DELETE", f"/api/v2/varsets/{vs}", status=204)
    assert (await api.call("GET", f"/api/v2/varsets/{vs}"))[0] == 404
    assert await applied(app) == []


async def test_data_keys_come_sealed_from_the_secrets_service(env: tuple[Api, Cluster]) -> None:
    """Every replica hands out the same key per name, created once in the barrier; names
    outside the fixed list are refused; a sealed cluster refuses (503)."""
    from services.workspace.sealing import bus_fetch
    from shared.errors import ServiceError
    from shared.service_identity import load_service_key

    _, cluster = env
    second = await cluster.add_secrets_replica()
    # A replica that joins an unsealed cluster gets the keyring from a peer: wait for it.
    deadline = asyncio.get_running_loop().time() + 15
    while second.core is None or second.core.sealed:
        assert asyncio.get_running_loop().time() < deadline, "the new replica stayed sealed"
        await asyncio.sleep(0.05)
    bus = cluster.buses[0]
    fetch = bus_fetch(
        bus, cluster.settings.cluster_name, load_service_key(cluster.settings, "workspace")
    )
    keys = {await fetch("workspace/state") for _ in range(4)}
    assert len(keys) == 1 and len(next(iter(keys))) == 32
    assert await fetch("workspace/variables") not in keys
    with pytest.raises(ServiceError) as exc:
        await fetch("secrets/root")
    assert exc.value.code == 400
    status, _ = await cluster.request("POST", "/v1/sys/seal")
    assert status in (200, 204)
    with pytest.raises(ServiceError) as exc:
        await fetch("workspace/state")
    assert exc.value.code == 503
