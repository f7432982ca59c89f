"""The workspace API end to end over HTTP: a real gateway, workspace replicas in-process and
the session's nats-server; raw JSON:API requests, checked against bodies and stored state."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from services.gateway.main import Gateway
from services.workspace.service import WorkspaceService
from shared.bus import Bus
from shared.settings import Settings

pytestmark = pytest.mark.nats

CT = "application/vnd.api+json"


@dataclass
class Api:
    """A tiny JSON:API client over aiohttp, with the admin token by default."""

    base: str
    admin: str
    http: aiohttp.ClientSession
    services: list[WorkspaceService] = field(default_factory=list)

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "",
        raw: bytes | None = None,
        query: str = "",
    ) -> tuple[int, Any]:
        headers = {"Content-Type": CT}
        tok = self.admin if token == "" else token
        if tok is not None:
            headers["Authorization"] = f"Bearer {tok}"
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        url = f"{self.base}{path}" + (f"?{query}" if query else "")
        async with self.http.request(method, url, data=data, headers=headers) as resp:
            text = await resp.read()
            if resp.status >= 400:
                # Every error is a JSON:API error document with a string status.
                assert resp.content_type == CT, (resp.status, text)
            doc = json.loads(text) if text and "json" in resp.content_type else text
            if resp.status >= 400:
                assert doc["errors"][0]["status"] == str(resp.status)
            return resp.status, doc

    async def ok(
        self, method: str, path: str, body: Any = None, status: int = 200, **kw: Any
    ) -> Any:
        got, doc = await self.call(method, path, body, **kw)
        assert got == status, (got, doc)
        return doc

    async def org(self, name: str) -> None:
        await self.ok(
            "POST",
            "/api/v2/organizations",
            {
                "data": {
                    "type": "organizations",
                    "attributes": {"name": name, "email": "o@example.com"},
                }
            },
            201,
        )

    async def workspace(self, org: str, name: str, **attrs: Any) -> dict[str, Any]:
        doc = await self.ok(
            "POST",
            f"/api/v2/organizations/{org}/workspaces",
            {"data": {"type": "workspaces", "attributes": {"name": name, **attrs}}},
            201,
        )
        return doc["data"]


async def start_cluster(
    nats_url: str, name: str, replicas: int, admin: str
) -> tuple[Gateway, list[Bus], list[WorkspaceService]]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name=name,
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
    )
    buses = [await Bus.connect(nats_url, "gateway")]
    gw = Gateway(buses[0], settings)
    services = []
    for i in range(replicas):
        bus = await Bus.connect(nats_url, f"workspace-{i}")
        buses.append(bus)
        svc = WorkspaceService(bus, settings, admin_token=admin)
        await svc.start()
        services.append(svc)
    await gw.start()
    return gw, buses, services


@pytest.fixture
async def api(nats_url: str, unique: str) -> AsyncIterator[Api]:
    admin = secrets.token_hex(16)
    gw, buses, services = await start_cluster(nats_url, unique, 2, admin)
    async with aiohttp.ClientSession() as http:
        yield Api(gw.addresses["workspace"], admin, http, services)
    await gw.stop()
    for svc in services:
        await svc.stop()
    for bus in buses:
        await bus.close()


def ws_doc(name: str | None = None, **attrs: Any) -> dict[str, Any]:
    if name is not None:
        attrs["name"] = name
    return {"data": {"type": "workspaces", "attributes": attrs}}


async def test_discovery_ping_and_auth(api: Api, unique: str) -> None:
    async with api.http.get(f"{api.base}/.well-known/terraform.json") as resp:
        assert resp.status == 200
        disco = await resp.json(content_type=None)
        assert disco["tfe.v2"] == "/api/v2/" and disco["modules.v1"].endswith("/")
    async with api.http.get(f"{api.base}/api/v2/ping") as resp:
        assert resp.status == 204
        assert resp.headers["TFP-API-Version"] == "2.5"
    status, doc = await api.call("GET", "/api/v2/organizations", token=None)
    assert status == 401 and doc["errors"][0]["title"] == "unauthorized"
    status, _ = await api.call("GET", "/api/v2/organizations", token="not-a-token")
    assert status == 401
    status, _ = await api.call("GET", "/api/v2/nope")
    assert status == 404
    status, _ = await api.call("PUT", "/api/v2/organizations")
    assert status == 405


async def test_workspace_create_defaults_show_update(api: Api, unique: str) -> None:
    org = unique
    await api.org(org)
    ws = await api.workspace(org, "net-prod", description="core network")
    a = ws["attributes"]
    assert ws["type"] == "workspaces" and ws["id"].startswith("ws-")
    assert a["allow-destroy-plan"] is True and a["auto-apply"] is False
    assert a["execution-mode"] == "remote" and a["operations"] is True
    assert a["file-triggers-enabled"] is True and a["global-remote-state"] is False
    assert a["queue-all-runs"] is False and a["speculative-enabled"] is True
    assert a["trigger-prefixes"] == [] and a["vcs-repo"] is None
    assert a["tool-version"] == a["terraform-version"] and a["tool-version"][0].isdigit()
    assert a["locked"] is False and a["environment"] == "default"
    assert a["created-at"].endswith("Z") and len(a["created-at"]) == 24  # ...SS.mmmZ
    assert a["permissions"]["can-update"] is True and len(a["permissions"]) == 15
    assert a["actions"] == {"is-destroyable": True}
    assert ws["relationships"]["organization"]["data"] == {"id": org, "type": "organizations"}
    assert "related" in ws["relationships"]["remote-state-consumers"]["links"]
    assert ws["links"]["self"] == f"/api/v2/organizations/{org}/workspaces/net-prod"

    by_id = await api.ok("GET", f"/api/v2/workspaces/{ws['id']}", query="include=organization")
    assert by_id["data"]["id"] == ws["id"]
    assert by_id["included"][0]["type"] == "organizations"
    by_name = await api.ok("GET", f"/api/v2/organizations/{org}/workspaces/net-prod")
    assert by_name["data"]["id"] == ws["id"]

    # Update by name: rename, constraint tool version, VCS repository, then remove it.
    doc = await api.ok(
        "PATCH",
        f"/api/v2/organizations/{org}/workspaces/net-prod",
        ws_doc(
            "net-production",
            **{
                "terraform-version": "~> 1.5.0",
                "auto-apply": True,
                "vcs-repo": {"identifier": "acme/net", "oauth-token-id": "ot-1"},
                "working-directory": "envs/prod",
            },
        ),
    )
    a = doc["data"]["attributes"]
    assert a["name"] == "net-production" and a["tool-version"] == "1.5.7"
    assert a["auto-apply"] is True and a["description"] == "core network"
    assert a["vcs-repo"]["identifier"] == "acme/net" and a["vcs-repo"]["branch"] == ""
    assert a["vcs-repo-identifier"] == "acme/net"
    status, _ = await api.call("GET", f"/api/v2/organizations/{org}/workspaces/net-prod")
    assert status == 404
    doc = await api.ok(
        "PATCH", f"/api/v2/workspaces/{ws['id']}", ws_doc(**{"vcs-repo": {"branch": "main"}})
    )
    assert doc["data"]["attributes"]["vcs-repo"]["branch"] == "main"
    assert doc["data"]["attributes"]["vcs-repo"]["oauth-token-id"] == "ot-1"
    doc = await api.ok("PATCH", f"/api/v2/workspaces/{ws['id']}", ws_doc(**{"vcs-repo": None}))
    assert doc["data"]["attributes"]["vcs-repo"] is None
    # Both replicas hold the same record.
    await asyncio.gather(*(s.log.barrier() for s in api.services if s.log))
    names = {s.state.workspaces[ws["id"]].name for s in api.services}
    assert names == {"net-production"}


BAD_CREATES: list[tuple[Any, str]] = [
    (ws_doc("bad name!"), "/data/attributes/name"),
    (ws_doc(), "/data/attributes/name"),
    ({"data": {"type": "workspace", "attributes": {"name": "x"}}}, "/data/type"),
    ({"data": []}, "/data"),
    (ws_doc("a", **{"execution-mode": "agent"}), ""),
    (
        ws_doc("a", **{"execution-mode": "remote", "agent-pool-id": "apool-1"}),
        "/data/attributes/agent-pool-id",
    ),
    (
        ws_doc("a", **{"agent-pool-id": "apool-1", "operations": True}),
        "/data/attributes/agent-pool-id",
    ),
    (
        ws_doc("a", **{"execution-mode": "local", "operations": False}),
        "/data/attributes/operations",
    ),
    (ws_doc("a", **{"execution-mode": "cloud"}), "/data/attributes/execution-mode"),
    (ws_doc("a", **{"vcs-repo": {"identifier": "acme/x"}}), "/data/attributes/vcs-repo/"),
    (ws_doc("a", **{"vcs-repo": {"oauth-token-id": "ot-1"}}), "/data/attributes/vcs-repo/"),
    (ws_doc("a", **{"vcs-repo": {"oauth-token-id": "o", "identifier": "no-slash"}}), "/data"),
    (ws_doc("a", **{"auto-apply": "yes"}), "/data/attributes/auto-apply"),
    (ws_doc("a", **{"tool-version": "~> 9.0"}), "/data/attributes/tool-version"),
    (ws_doc("a", **{"working-directory": "../up"}), "/data/attributes/working-directory"),
    (ws_doc("a", **{"trigger-prefixes": [1]}), "/data/attributes/trigger-prefixes"),
]


async def test_workspace_bad_input_is_422(api: Api, unique: str) -> None:
    await api.org(unique)
    path = f"/api/v2/organizations/{unique}/workspaces"
    for body, pointer in BAD_CREATES:
        status, doc = await api.call("POST", path, body)
        assert status == 422, (body, doc)
        assert doc["errors"][0]["source"]["pointer"].startswith(pointer) if pointer else True
    status, doc = await api.call("POST", path, raw=b"{not json")
    assert status == 422 and "malformed JSON" in doc["errors"][0]["detail"]
    ok = await api.workspace(
        unique, "agent-ws", **{"execution-mode": "agent", "agent-pool-id": "apool-1"}
    )
    assert ok["relationships"]["agent-pool"]["data"]["id"] == "apool-1"
    await api.workspace(unique, "dup")
    status, doc = await api.call("POST", path, ws_doc("dup"))
    assert status == 422 and doc["errors"][0]["detail"] == "Name has already been taken"
    # Nothing half applied: only the two good workspaces exist.
    listed = await api.ok("GET", path)
    assert sorted(w["attributes"]["name"] for w in listed["data"]) == ["agent-ws", "dup"]
    status, _ = await api.call("GET", "/api/v2/workspaces/ws-nonexisting")
    assert status == 404
    status, _ = await api.call("POST", "/api/v2/organizations/nope/workspaces", ws_doc("a"))
    assert status == 404


async def test_list_pagination_and_search(api: Api, unique: str) -> None:
    org = unique
    await api.org(org)
    for i in range(23):
        ws = await api.workspace(org, f"svc-{i:02d}" if i % 2 else f"db-{i:02d}")
        tags = ["prod"] if i % 3 == 0 else ["dev"]
        if i % 5 == 0:
            tags.append("eu")
        await api.ok(
            "POST",
            f"/api/v2/workspaces/{ws['id']}/relationships/tags",
            {"data": [{"type": "tags", "attributes": {"name": t}} for t in tags]},
            204,
        )
    path = f"/api/v2/organizations/{org}/workspaces"
    doc = await api.ok("GET", path)
    assert len(doc["data"]) == 20
    meta = doc["meta"]["pagination"]
    assert meta == {
        "current-page": 1,
        "page-size": 20,
        "prev-page": None,
        "next-page": 2,
        "total-pages": 2,
        "total-count": 23,
    }
    assert doc["links"]["next"].endswith("page%5Bnumber%5D=2&page%5Bsize%5D=20")
    assert doc["links"]["prev"] is None
    # Raw and encoded brackets mean the same.
    raw = await api.ok("GET", path, query="page[number]=2&page[size]=5")
    enc = await api.ok("GET", path, query="page%5Bnumber%5D=2&page%5Bsize%5D=5")
    assert [w["id"] for w in raw["data"]] == [w["id"] for w in enc["data"]]
    assert raw["meta"]["pagination"]["total-pages"] == 5
    empty = await api.ok("GET", path, query="page[number]=999&page[size]=100")
    assert empty["data"] == [] and empty["meta"]["pagination"]["total-count"] == 23
    for bad in ("page[size]=0", "page[size]=101", "page[number]=0", "page[size]=x"):
        status, _ = await api.call("GET", path, query=bad)
        assert status == 422, bad
    doc = await api.ok("GET", path, query="search[name]=svc&page[size]=100")
    assert len(doc["data"]) == 11
    doc = await api.ok("GET", path, query="search%5Btags%5D=prod,eu&page[size]=100")
    assert sorted(w["attributes"]["name"] for w in doc["data"]) == ["db-00", "svc-15"]
    doc = await api.ok("GET", path, query="search[tags]=prod&search[exclude-tags]=eu")
    assert sorted(w["attributes"]["name"] for w in doc["data"]) == [
        "db-06",
        "db-12",
        "db-18",
        "svc-03",
        "svc-09",
        "svc-21",
    ]
    doc = await api.ok("GET", path, query="search[name]=nothing")
    assert doc["meta"]["pagination"]["current-page"] == 1
    assert doc["meta"]["pagination"]["total-count"] == 0
    status, _ = await api.call("GET", path, query="include=bogus")
    assert status == 400


async def test_lock_unlock_force_unlock_delete(api: Api, unique: str) -> None:
    await api.org(unique)
    ws = await api.workspace(unique, "locky")
    base = f"/api/v2/workspaces/{ws['id']}/actions"
    doc = await api.ok("POST", f"{base}/lock", {"reason": "maintenance"})
    assert doc["data"]["attributes"]["locked"] is True
    assert doc["data"]["relationships"]["locked-by"]["data"]["type"] == "users"
    status, _ = await api.call("POST", f"{base}/lock")
    assert status == 409
    doc = await api.ok("POST", f"{base}/unlock")
    assert doc["data"]["attributes"]["locked"] is False
    status, _ = await api.call("POST", f"{base}/unlock")
    assert status == 409
    status, _ = await api.call("POST", f"{base}/force-unlock")
    assert status == 409
    await api.ok("POST", f"{base}/lock")
    doc = await api.ok("POST", f"{base}/force-unlock")
    assert doc["data"]["attributes"]["locked"] is False
    status, _ = await api.call("POST", f"{base}/lock", raw=b"[1, 2")
    assert status == 422
    await api.ok("DELETE", f"/api/v2/organizations/{unique}/workspaces/locky", status=204)
    status, _ = await api.call("GET", f"/api/v2/workspaces/{ws['id']}")
    assert status == 404


async def test_workspace_tags(api: Api, unique: str) -> None:
    await api.org(unique)
    a = await api.workspace(unique, "a")
    b = await api.workspace(unique, "b")
    rel = f"/api/v2/workspaces/{a['id']}/relationships/tags"
    await api.ok(
        "POST",
        rel,
        {"data": [{"type": "tags", "attributes": {"name": n}} for n in ("tag1", "tag2", "tag3")]},
        204,
    )
    doc = await api.ok("GET", rel)
    assert [t["attributes"]["name"] for t in doc["data"]] == ["tag1", "tag2", "tag3"]
    assert doc["meta"]["pagination"]["total-count"] == 3
    tag1 = doc["data"][0]
    assert tag1["id"].startswith("tag-") and tag1["attributes"]["instance-count"] == 1
    # By id on another workspace; then tag-names shows insertion order.
    await api.ok(
        "POST",
        f"/api/v2/workspaces/{b['id']}/relationships/tags",
        {"data": [{"type": "tags", "id": tag1["id"]}]},
        204,
    )
    status, _ = await api.call(
        "POST",
        f"/api/v2/workspaces/{b['id']}/relationships/tags",
        {"data": [{"type": "tags", "id": "tag-unknown"}]},
    )
    assert status == 422
    status, _ = await api.call("POST", rel, {"data": [{"type": "tags"}]})
    assert status == 422
    status, _ = await api.call(
        "POST", rel, {"data": [{"type": "tags", "attributes": {"name": "bad tag"}}]}
    )
    assert status == 422
    got = await api.ok("GET", f"/api/v2/workspaces/{a['id']}")
    assert got["data"]["attributes"]["tag-names"] == ["tag1", "tag2", "tag3"]
    org_tags = await api.ok("GET", f"/api/v2/organizations/{unique}/tags")
    counts = {t["attributes"]["name"]: t["attributes"]["instance-count"] for t in org_tags["data"]}
    assert counts == {"tag1": 2, "tag2": 1, "tag3": 1}
    # Removing: unknown names are ignored; a tag left on no workspace leaves the org list.
    await api.ok(
        "DELETE",
        rel,
        {
            "data": [
                {"type": "tags", "attributes": {"name": "tag2"}},
                {"type": "tags", "attributes": {"name": "zzz"}},
            ]
        },
        204,
    )
    org_tags = await api.ok("GET", f"/api/v2/organizations/{unique}/tags")
    assert sorted(t["attributes"]["name"] for t in org_tags["data"]) == ["tag1", "tag3"]
    # Create with tags in one go, as the terraform cloud block does.
    doc = await api.ok(
        "POST",
        f"/api/v2/organizations/{unique}/workspaces",
        {
            "data": {
                "type": "workspaces",
                "attributes": {"name": "c"},
                "relationships": {
                    "tags": {"data": [{"type": "tags", "attributes": {"name": "tag3"}}]}
                },
            }
        },
        201,
    )
    assert doc["data"]["attributes"]["tag-names"] == ["tag3"]


async def test_remote_state_consumers(api: Api, unique: str) -> None:
    await api.org(unique)
    src = await api.workspace(unique, "src")
    c1 = await api.workspace(unique, "c1")
    c2 = await api.workspace(unique, "c2")
    glob = await api.workspace(unique, "glob", **{"global-remote-state": True})
    for spelling in ("remote-state-consumers", "remote_state_consumers"):
        path = f"/api/v2/workspaces/{src['id']}/relationships/{spelling}"
        await api.ok("PATCH", path, {"data": [{"type": "workspaces", "id": c1["id"]}]}, 204)
        # Whole workspace nodes (as go-tfe sends) are fine: only type and id count.
        await api.ok(
            "POST",
            path,
            {
                "data": [
                    {"type": "workspaces", "id": c2["id"], "attributes": {"name": "ignored"}},
                    {"type": "workspaces", "id": c1["id"]},
                ]
            },
            204,
        )
        doc = await api.ok("GET", path)
        assert [w["id"] for w in doc["data"]] == [c1["id"], c2["id"]]
        await api.ok("DELETE", path, {"data": [{"type": "workspaces", "id": c1["id"]}]}, 204)
        doc = await api.ok("GET", path)
        assert [w["id"] for w in doc["data"]] == [c2["id"]]
    path = f"/api/v2/workspaces/{src['id']}/relationships/remote-state-consumers"
    for body in (
        {"data": [{"type": "workspaces", "id": src["id"]}]},  # itself
        {"data": [{"type": "workspaces", "id": "ws-nope"}]},
        {"data": [{"type": "teams", "id": c1["id"]}]},
        {"data": {"type": "workspaces", "id": c1["id"]}},
    ):
        status, _ = await api.call("POST", path, body)
        assert status == 422, body
    status, doc = await api.call(
        "POST",
        f"/api/v2/workspaces/{glob['id']}/relationships/remote-state-consumers",
        {"data": [{"type": "workspaces", "id": c1["id"]}]},
    )
    assert status == 422 and "global-remote-state" in doc["errors"][0]["detail"]
    # A global workspace's consumers are all the others.
    doc = await api.ok(
        "GET", f"/api/v2/workspaces/{glob['id']}/relationships/remote-state-consumers"
    )
    assert doc["meta"]["pagination"]["total-count"] == 3


def polset(name: str, rels: dict[str, Any] | None = None, **attrs: Any) -> dict[str, Any]:
    return {
        "data": {
            "type": "policy-sets",
            "attributes": {"name": name, **attrs},
            "relationships": rels or {},
        }
    }


def rel(type_: str, *ids: str) -> dict[str, Any]:
    return {"data": [{"type": type_, "id": i} for i in ids]}


async def test_policies_and_policy_sets(api: Api, unique: str) -> None:
    org = unique
    await api.org(org)
    ws = await api.workspace(org, "w1")
    prj = await api.ok(
        "POST",
        f"/api/v2/organizations/{org}/projects",
        {"data": {"type": "projects", "attributes": {"name": "Platform"}}},
        201,
    )
    pol = await api.ok(
        "POST",
        f"/api/v2/organizations/{org}/policies",
        {
            "data": {
                "type": "policies",
                "attributes": {
                    "name": "no-public-buckets",
                    "kind": "opa",
                    "query": "data.terraform.deny",
                    "enforcement-level": "mandatory",
                },
            }
        },
        201,
    )
    pol_id = pol["data"]["id"]
    assert pol_id.startswith("pol-")
    await api.ok("PUT", f"/api/v2/policies/{pol_id}/upload", raw=b"package terraform\n")
    status, _ = await api.call(
        "POST",
        f"/api/v2/organizations/{org}/policies",
        {
            "data": {
                "type": "policies",
                "attributes": {
                    "name": "x",
                    "kind": "opa",
                    "query": "q",
                    "enforcement-level": "hard-mandatory",
                },
            }
        },
    )
    assert status == 422
    base = f"/api/v2/organizations/{org}/policy-sets"
    created = await api.ok(
        "POST",
        base,
        polset(
            "opa-set",
            {
                "policies": rel("policies", pol_id),
                "workspaces": rel("workspaces", ws["id"]),
                "projects": rel("projects", prj["data"]["id"]),
            },
            kind="opa",
            overridable=True,
            description="**md**",
        ),
        201,
    )
    ps = created["data"]
    assert ps["id"].startswith("polset-") and ps["attributes"]["kind"] == "opa"
    assert ps["attributes"]["overridable"] is True and ps["attributes"]["policy-count"] == 1
    assert ps["attributes"]["workspace-count"] == 1 and ps["attributes"]["versioned"] is False
    assert ps["relationships"]["workspaces"]["data"] == [{"id": ws["id"], "type": "workspaces"}]
    vcs = {"identifier": "acme/policies", "oauth-token-id": "ot-1", "branch": ""}
    vset = await api.ok(
        "POST", base, polset("vcs-set", **{"vcs-repo": vcs, "policies-path": "opa"}), 201
    )
    assert vset["data"]["attributes"]["versioned"] is True
    glob = await api.ok("POST", base, polset("global-set", **{"global": True}), 201)
    assert "workspaces" not in glob["data"]["relationships"]

    bad = [
        polset("bad name"),
        polset("s1", kind="rego"),
        polset("s2", overridable=True),  # sentinel
        polset("s3", {"policies": rel("policies", pol_id)}, **{"vcs-repo": vcs}, kind="opa"),
        polset("s4", {"workspaces": rel("workspaces", ws["id"])}, **{"global": True}),
        polset("s5", {"workspaces": rel("workspaces", "ws-unknown")}),
        polset("s6", {"policies": rel("policies", "pol-unknown")}),
        polset("s7", **{"policies-path": "x"}),
        polset("s8", **{"vcs-repo": {"oauth-token-id": "ot-1"}}),
        polset("s9", **{"vcs-repo": {**vcs, "vcs-app-installation-id": "ghain-1"}}),
        polset("opa-set", kind="opa"),
        {"data": {"type": "policy-set", "attributes": {"name": "t"}}},
    ]
    for body in bad:
        status, doc = await api.call("POST", base, body)
        assert status == 422, (body, doc)
    # Relationship writes and their rules.
    vid, gid, sid = vset["data"]["id"], glob["data"]["id"], ps["id"]
    status, _ = await api.call(
        "POST", f"/api/v2/policy-sets/{vid}/relationships/policies", rel("policies", pol_id)
    )
    assert status == 422
    for kind in ("workspaces", "projects"):
        status, _ = await api.call(
            "POST",
            f"/api/v2/policy-sets/{gid}/relationships/{kind}",
            rel(kind, ws["id"] if kind == "workspaces" else prj["data"]["id"]),
        )
        assert status == 422
    status, _ = await api.call(
        "POST",
        f"/api/v2/policy-sets/{sid}/relationships/workspaces",
        rel("workspaces", "ws-missing"),
    )
    assert status == 422
    await api.ok(
        "DELETE",
        f"/api/v2/policy-sets/{sid}/relationships/workspaces",
        rel("workspaces", ws["id"]),
        204,
    )
    await api.ok(
        "DELETE", f"/api/v2/policy-sets/{sid}/relationships/policies", rel("policies", pol_id), 204
    )
    await api.ok(
        "POST", f"/api/v2/policy-sets/{sid}/relationships/policies", rel("policies", pol_id), 204
    )
    # Lists: filters, search, include.
    doc = await api.ok("GET", base, query="filter[kind]=opa&include=policies,workspaces")
    assert sorted(p["attributes"]["name"] for p in doc["data"]) == ["opa-set"]
    assert {i["type"] for i in doc["included"]} == {"policies"}
    doc = await api.ok("GET", base, query="filter%5Bversioned%5D=true")
    assert [p["attributes"]["name"] for p in doc["data"]] == ["vcs-set"]
    doc = await api.ok("GET", base, query="filter[versioned]=false&search[name]=set")
    assert sorted(p["attributes"]["name"] for p in doc["data"]) == ["global-set", "opa-set"]
    assert doc["meta"]["pagination"]["total-count"] == 2
    # API-managed versions: create, upload a tar.gz, it becomes current.
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("policy.rego")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"x = 1"[:4]))
    ver = await api.ok("POST", f"/api/v2/policy-sets/{gid}/versions", status=201)
    assert ver["data"]["attributes"]["status"] == "pending"
    await api.ok("PUT", ver["data"]["links"]["upload"], raw=buf.getvalue())
    doc = await api.ok("GET", f"/api/v2/policy-sets/{gid}", query="include=current_version")
    assert doc["data"]["relationships"]["current-version"]["data"]["id"] == ver["data"]["id"]
    assert doc["included"][0]["type"] == "policy-set-versions"
    assert doc["included"][0]["attributes"]["status"] == "ready"
    assert doc["data"]["attributes"]["versioned"] is True
    # Update: rename, clear workspaces with an empty array, refuse an unknown project.
    doc = await api.ok(
        "PATCH",
        f"/api/v2/policy-sets/{sid}",
        polset("opa-renamed", {"projects": {"data": []}}, description=None),
    )
    assert doc["data"]["attributes"]["name"] == "opa-renamed"
    assert doc["data"]["relationships"]["projects"]["data"] == []
    status, _ = await api.call(
        "PATCH",
        f"/api/v2/policy-sets/{sid}",
        polset("opa-renamed", {"projects": rel("projects", "prj-nope")}),
    )
    assert status == 422
    await api.ok("DELETE", f"/api/v2/policy-sets/{sid}", status=204)
    status, _ = await api.call("GET", f"/api/v2/policy-sets/{sid}")
    assert status == 404


async def make_user(api: Api, name: str) -> tuple[str, str]:
    user = await api.ok(
        "POST",
        "/api/v2/admin/users",
        {
            "data": {
                "type": "users",
                "attributes": {"username": name, "email": f"{name}@example.com"},
            }
        },
        201,
    )
    uid = user["data"]["id"]
    tok = await api.ok(
        "POST",
        f"/api/v2/users/{uid}/authentication-tokens",
        {"data": {"type": "authentication-tokens", "attributes": {"description": "cli"}}},
        201,
    )
    return uid, tok["data"]["attributes"]["token"]


async def test_permission_model(api: Api, unique: str) -> None:
    org = unique
    await api.org(org)
    ws = await api.workspace(org, "app")
    other = await api.workspace(org, "secret-app")
    _, alice = await make_user(api, f"alice-{unique}")
    me = await api.ok("GET", "/api/v2/account/details", token=alice)
    assert me["data"]["attributes"]["username"] == f"alice-{unique}"
    # Not a member yet: the organization does not exist for alice.
    status, _ = await api.call("GET", f"/api/v2/organizations/{org}", token=alice)
    assert status == 404
    team = await api.ok(
        "POST",
        f"/api/v2/organizations/{org}/teams",
        {"data": {"type": "teams", "attributes": {"name": "devs", "visibility": "organization"}}},
    )
    team_id = team["data"]["id"]
    await api.ok(
        "POST", f"/api/v2/teams/{team_id}/relationships/users", rel("users", f"alice-{unique}"), 204
    )
    access = await api.ok(
        "POST",
        "/api/v2/team-workspaces",
        {
            "data": {
                "type": "team-workspaces",
                "attributes": {"access": "write"},
                "relationships": {
                    "workspace": {"data": {"type": "workspaces", "id": ws["id"]}},
                    "team": {"data": {"type": "teams", "id": team_id}},
                },
            }
        },
    )
    assert access["data"]["attributes"]["access"] == "write"
    doc = await api.ok("GET", f"/api/v2/workspaces/{ws['id']}", token=alice)
    perms = doc["data"]["attributes"]["permissions"]
    assert perms["can-lock"] and perms["can-queue-apply"] and not perms["can-update"]
    assert not perms["can-force-unlock"]
    status, _ = await api.call("GET", f"/api/v2/workspaces/{other['id']}", token=alice)
    assert status == 404  # no access: invisible
    listed = await api.ok("GET", f"/api/v2/organizations/{org}/workspaces", token=alice)
    assert [w["id"] for w in listed["data"]] == [ws["id"]]
    status, _ = await api.call("PATCH", f"/api/v2/workspaces/{ws['id']}", ws_doc("x"), token=alice)
    assert status == 404  # write is not admin
    status, _ = await api.call(
        "POST", f"/api/v2/organizations/{org}/workspaces", ws_doc("nope"), token=alice
    )
    assert status == 404
    await api.ok("POST", f"/api/v2/workspaces/{ws['id']}/actions/lock", token=alice)
    status, doc = await api.call("POST", f"/api/v2/workspaces/{ws['id']}/actions/unlock")
    assert status == 409 and "locked by User" in doc["errors"][0]["detail"]
    await api.ok("POST", f"/api/v2/workspaces/{ws['id']}/actions/unlock", token=alice)

    # A team token for a team with no access sees nothing; manage-workspaces sees it all.
    idle = await api.ok(
        "POST",
        f"/api/v2/organizations/{org}/teams",
        {"data": {"type": "teams", "attributes": {"name": "idle"}}},
    )
    tok = await api.ok(
        "POST", f"/api/v2/teams/{idle['data']['id']}/authentication-token", status=201
    )
    idle_token = tok["data"]["attributes"]["token"]
    status, _ = await api.call("GET", f"/api/v2/workspaces/{ws['id']}", token=idle_token)
    assert status == 404
    listed = await api.ok("GET", f"/api/v2/organizations/{org}/workspaces", token=idle_token)
    assert listed["data"] == []
    await api.ok(
        "PATCH",
        f"/api/v2/teams/{idle['data']['id']}",
        {
            "data": {
                "type": "teams",
                "attributes": {"organization-access": {"manage-workspaces": True}},
            }
        },
    )
    created = await api.ok(
        "POST", f"/api/v2/organizations/{org}/workspaces", ws_doc("by-team"), 201, token=idle_token
    )
    assert created["data"]["attributes"]["permissions"]["can-update"] is True
    # Policy sets need manage-policies.
    status, _ = await api.call("GET", f"/api/v2/organizations/{org}/policy-sets", token=idle_token)
    assert status == 404
    # The organization token manages workspaces but cannot lock them.
    otok = await api.ok("POST", f"/api/v2/organizations/{org}/authentication-token", status=201)
    org_token = otok["data"]["attributes"]["token"]
    doc = await api.ok(
        "POST", f"/api/v2/organizations/{org}/workspaces", ws_doc("by-org"), 201, token=org_token
    )
    assert doc["data"]["attributes"]["permissions"]["can-lock"] is False
    status, _ = await api.call(
        "POST", f"/api/v2/workspaces/{ws['id']}/actions/lock", token=org_token
    )
    assert status == 404
    status, _ = await api.call(
        "POST",
        "/api/v2/organizations",
        {"data": {"type": "organizations", "attributes": {"name": "x", "email": "x@example.com"}}},
        token=org_token,
    )
    assert status == 404  # only user tokens create organizations
    # A replaced organization token stops working.
    await api.ok("POST", f"/api/v2/organizations/{org}/authentication-token", status=201)
    status, _ = await api.call("GET", f"/api/v2/organizations/{org}", token=org_token)
    assert status == 401
    # Owners: the creator of an organization is in its owners team.
    _, bob = await make_user(api, f"bob-{unique}")
    await api.ok(
        "POST",
        "/api/v2/organizations",
        {
            "data": {
                "type": "organizations",
                "attributes": {"name": f"{org}-b", "email": "b@example.com"},
            }
        },
        201,
        token=bob,
    )
    teams = await api.ok("GET", f"/api/v2/organizations/{org}-b/teams", token=bob)
    owners = [t for t in teams["data"] if t["attributes"]["name"] == "owners"]
    assert owners and owners[0]["relationships"]["users"]["data"][0]["type"] == "users"
    status, _ = await api.call("GET", f"/api/v2/organizations/{org}-b", token=alice)
    assert status == 404


async def test_vcs_installations(api: Api, unique: str) -> None:
    made = await api.ok(
        "POST",
        "/api/v2/admin/vcs-app-installations",
        {
            "data": {
                "type": "vcs-app-installations",
                "attributes": {
                    "name": f"acme-{unique}",
                    "installation-id": 4242,
                    "icon-url": "https://example.com/i.png",
                    "installation-type": "Organization",
                    "installation-url": "https://example.com/inst/4242",
                },
            }
        },
        201,
    )
    iid = made["data"]["id"]
    assert iid.startswith("ghain-") and made["data"]["type"] == "vcs-app-installations"
    doc = await api.ok(
        "GET", "/api/v2/github-app/installations", query="filter[installation_id]=4242"
    )
    assert [d["id"] for d in doc["data"]] == [iid]
    doc = await api.ok(
        "GET", "/api/v2/github-app/installations", query=f"filter%5Bname%5D=acme-{unique}"
    )
    assert doc["data"][0]["attributes"]["installation-id"] == 4242
    doc = await api.ok("GET", f"/api/v2/github-app/installation/{iid}")
    assert doc["data"]["attributes"]["name"] == f"acme-{unique}"
    status, _ = await api.call("GET", "/api/v2/github-app/installation/ghain-none")
    assert status == 404
    _, carol = await make_user(api, f"carol-{unique}")
    status, _ = await api.call(
        "POST",
        "/api/v2/admin/vcs-app-installations",
        {
            "data": {
                "type": "vcs-app-installations",
                "attributes": {"name": "x", "installation-id": 1},
            }
        },
        token=carol,
    )
    assert status == 404  # the site-admin API is for site admins
    # A policy set from an installation (user tokens only).
    await api.org(unique)
    doc = await api.ok(
        "POST",
        f"/api/v2/organizations/{unique}/policy-sets",
        polset(
            "from-app", **{"vcs-repo": {"identifier": "acme/p", "vcs-app-installation-id": iid}}
        ),
        201,
    )
    assert doc["data"]["attributes"]["vcs-repo"]["vcs-app-installation-id"] == iid
    status, _ = await api.call(
        "POST",
        f"/api/v2/organizations/{unique}/policy-sets",
        polset(
            "from-nowhere",
            **{"vcs-repo": {"identifier": "acme/p", "vcs-app-installation-id": "ghain-x"}},
        ),
    )
    assert status == 422


GARBAGE: list[bytes] = [
    b"",
    b"null",
    b"[]",
    b"{}",
    b"{not json",
    b'{"data": null}',
    b'{"data": "x"}',
    b'{"data": [1, "x", null]}',
    b'{"data": {"type": 7, "attributes": "x"}}',
    b'{"data": [{"type": "tags", "attributes": []}, {"type": "workspaces", "id": 5}]}',
    b'{"data": {"type": "workspaces", "attributes": {"name": ["x"], "vcs-repo": "r", '
    b'"trigger-prefixes": "p", "tool-version": 1}, "relationships": {"project": 1}}}',
]


async def test_no_body_or_id_gives_a_500(api: Api, unique: str) -> None:
    """Every write route, fed garbage bodies and unknown or real ids: always a 4xx (or 2xx)
    JSON:API answer, never a 500."""
    from services.workspace.routes import TABLE

    await api.org(unique)
    ws = await api.workspace(unique, "victim")
    fills = [
        {
            "org": unique,
            "id": ws["id"],
            "name": "victim",
            "var": "var-unknown",
            "action": "apply",
            "cap": "x",
        },
        {
            "org": "nope",
            "id": "x-unknown",
            "name": "nope",
            "var": "var-unknown",
            "action": "cancel",
            "cap": "x",
        },
    ]
    for method, pattern, _, _ in TABLE:
        if pattern.startswith("/.well-known") or "{rsc:" in pattern:
            pattern = pattern.replace(
                "{rsc:remote[-_]state[-_]consumers}", "remote-state-consumers"
            )
        for fill in fills:
            path = (
                "/api/v2" + pattern.format(**fill)
                if not pattern.startswith("/.well-known")
                else pattern
            )
            if method in ("DELETE",) and fill["id"] == ws["id"] and "relationships" not in path:
                continue  # keep the victim around for the other routes
            for body in GARBAGE if method != "GET" else [b""]:
                status, doc = await api.call(method, path, raw=body)
                assert status < 500, (method, path, body, doc)
