"""Workspaces: create, update, list and search, show with include, delete, lock and unlock."""

from __future__ import annotations

import fnmatch
from typing import Any

from services.workspace import render, render_state
from services.workspace.context import Req
from services.workspace.handlers import state_versions
from services.workspace.handlers.runs import public_base
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_object,
    decode_body,
    parse_time,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import Workspace
from services.workspace.permissions import caps_function
from services.workspace.query import csv, include_param
from services.workspace.validate import (
    check_name,
    check_relative_path,
    check_repo_identifier,
    check_tag,
    new_id,
    resolve_tool_version,
)
from shared.messages import HttpResponse

EXECUTION_MODES = ("remote", "local", "agent")
BOOLS = {
    "allow-destroy-plan": "allow_destroy_plan",
    "auto-apply": "auto_apply",
    "file-triggers-enabled": "file_triggers_enabled",
    "global-remote-state": "global_remote_state",
    "queue-all-runs": "queue_all_runs",
    "speculative-enabled": "speculative_enabled",
    "structured-run-output-enabled": "structured_run_output_enabled",
}
INCLUDES = {
    "organization",
    "current_configuration_version",
    "current_configuration_version.ingress_attributes",
    "current_run",
    "current_run.plan",
    "current_run.configuration_version",
    "current_run.configuration_version.ingress_attributes",
    "locked_by",
    "readme",
    "outputs",
    "project",
    "current-state-version",
    "current_state_version",
    "effective_tag_bindings",
}
VCS_KEYS = {
    "oauth-token-id": "oauth_token_id",
    "identifier": "identifier",
    "branch": "branch",
    "vcs-app-installation-id": "vcs_app_installation_id",
    "github-app-installation-id": "vcs_app_installation_id",
}


def parse_vcs(value: dict[str, Any], *, create: bool) -> dict[str, Any]:
    """The keys of a vcs-repo object, checked; `create` needs the full set."""
    a = Attrs(value, "/data/attributes/vcs-repo")
    out: dict[str, Any] = {}
    for key, field in VCS_KEYS.items():
        v = a.str(key, nullable=key == "branch")
        if present(v):
            out[field] = v or ""
    sub = a.bool("ingress-submodules")
    if present(sub):
        out["ingress_submodules"] = sub
    if "identifier" in out:
        check_repo_identifier(out["identifier"], a.pointer("identifier"))
    if create:
        if not out.get("identifier"):
            raise ApiError(422, "vcs-repo must contain identifier", a.pointer("identifier"))
        if not out.get("oauth_token_id") and not out.get("vcs_app_installation_id"):
            raise ApiError(422, "vcs-repo must contain oauth-token-id", a.pointer("oauth-token-id"))
    if out.get("oauth_token_id") and out.get("vcs_app_installation_id"):
        raise ApiError(
            422,
            "oauth-token-id and vcs-app-installation-id are mutually exclusive",
            a.pointer("oauth-token-id"),
        )
    return out


def tag_items(items: list[Any], base: str) -> list[dict[str, str]]:
    """`{type: tags, id}` or `{type: tags, attributes: {name}}`, as apply wants them."""
    out: list[dict[str, str]] = []
    for i, item in enumerate(items):
        ptr = f"{base}/{i}"
        if not isinstance(item, dict) or item.get("type") != "tags":
            raise ApiError(422, "each tag must have type 'tags'", f"{ptr}/type")
        tid = item.get("id")
        attrs = item.get("attributes") if isinstance(item.get("attributes"), dict) else {}
        name = attrs.get("name")
        if isinstance(tid, str) and tid:
            out.append({"id": tid})
        elif isinstance(name, str):
            out.append({"name": check_tag(name, f"{ptr}/attributes/name"), "new_id": new_id("tag")})
        else:
            raise ApiError(422, "a tag needs an id or attributes.name", ptr)
    return out


def parse_workspace(
    data: dict[str, Any], *, create: bool
) -> tuple[dict[str, Any], Any, list[dict[str, str]]]:
    """(field changes, vcs change, tags to add) from a workspace document."""
    a = Attrs(data["attributes"])
    rels = data["relationships"]
    f: dict[str, Any] = {}
    name = a.str("name")
    if create or present(name):
        if not present(name) or not name:
            raise ApiError(422, "name is required", a.pointer("name"))
        f["name"] = check_name(name, a.pointer("name"))
    for key, field in BOOLS.items():
        v = a.bool(key)
        if present(v):
            f[field] = v
    desc = a.str("description", nullable=True)
    if present(desc):
        f["description"] = desc
    mode, ops = a.str("execution-mode"), a.bool("operations")
    if present(mode) and present(ops):
        raise ApiError(
            422,
            "operations is deprecated and cannot be combined with execution-mode",
            a.pointer("operations"),
        )
    if present(mode):
        if mode not in EXECUTION_MODES:
            raise ApiError(
                422,
                f"execution-mode must be one of {', '.join(EXECUTION_MODES)}",
                a.pointer("execution-mode"),
            )
        f["execution_mode"] = mode
    elif present(ops):
        f["execution_mode"] = "remote" if ops else "local"
    pool = a.str("agent-pool-id", nullable=True)
    if present(pool) and pool:
        if (present(mode) and mode != "agent") or ops is True:
            raise ApiError(
                422,
                f"agent-pool-id must not be given when execution-mode is {f['execution_mode']}",
                a.pointer("agent-pool-id"),
            )
        f["agent_pool_id"] = pool
    elif present(pool):
        f["agent_pool_id"] = None
    for key in ("tool-version", "terraform-version"):
        v = a.str(key)
        if present(v):
            f["tool_version"] = resolve_tool_version(v, a.pointer(key))
    if create and "tool_version" not in f:
        f["tool_version"] = resolve_tool_version("latest", a.pointer("tool-version"))
    prefixes = a.str_list("trigger-prefixes")
    if present(prefixes):
        f["trigger_prefixes"] = [
            check_relative_path(p, a.pointer("trigger-prefixes")) for p in prefixes
        ]
    wd = a.str("working-directory", nullable=True)
    if present(wd):
        f["working_directory"] = (
            check_relative_path(wd, a.pointer("working-directory")) if wd else None
        )
    destroy_at = a.attrs.get("auto-destroy-at", None)
    if "auto-destroy-at" in a:
        f["auto_destroy_at"] = parse_time(destroy_at, a.pointer("auto-destroy-at"))
    if create:
        for key, field in (("source-name", "source_name"), ("source-url", "source_url")):
            v = a.str(key, nullable=True)
            if present(v):
                f[field] = v
    vcs: Any = None
    raw_vcs = a.obj("vcs-repo", nullable=True)
    if present(raw_vcs):
        if raw_vcs is None:
            vcs = None if create else "remove"
        else:
            vcs = parse_vcs(raw_vcs, create=create)
    prj = relationship_ids(rels, "project", "projects", many=False)
    if present(prj) and prj is not None:
        f["project_id"] = prj
    tags: list[dict[str, str]] = []
    if "tags" in rels:
        rel = rels["tags"]
        if not isinstance(rel, dict) or not isinstance(rel.get("data"), list):
            raise ApiError(
                422, "relationships.tags.data must be an array", "/data/relationships/tags"
            )
        tags = tag_items(rel["data"], "/data/relationships/tags/data")
    names = a.str_list("tag-names")
    if present(names):
        tags += [
            {"name": check_tag(n, a.pointer("tag-names")), "new_id": new_id("tag")} for n in names
        ]
    return f, vcs, tags


def includes(r: Req) -> list[str]:
    return include_param(r.query, sorted(INCLUDES))


async def included_for(r: Req, workspaces: list[Workspace], inc: list[str]) -> list[dict[str, Any]]:
    from services.workspace import permissions as perms

    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()

    def add(doc: dict[str, Any]) -> None:
        key = (doc["type"], doc["id"])
        if key not in seen:
            seen.add(key)
            out.append(doc)

    for ws in workspaces:
        if "organization" in inc:
            org = r.state.orgs[ws.org_id]
            add(render.organization(r.state, org, perms.org_access(r.state, r.who, org)))
        if "project" in inc and ws.project_id in r.state.projects:
            add(render.project(r.state, r.state.projects[ws.project_id]))
        if "locked_by" in inc and ws.locked_by:
            kind, holder = ws.locked_by
            if kind == "users" and holder in r.state.users:
                add(render.user(r.state.users[holder]))
            elif kind == "teams" and holder in r.state.teams:
                org = r.state.orgs[ws.org_id]
                add(
                    render.team(
                        r.state, r.state.teams[holder], perms.org_access(r.state, r.who, org)
                    )
                )
            elif kind == "users":
                add({"id": holder, "type": "users", "attributes": {"username": "admin"}})
        sv = r.state.current_state(ws.id)
        if sv is None:
            continue
        caps = r.ws_caps(ws)
        if ("current_state_version" in inc or "current-state-version" in inc) and (
            "read-state" in caps
        ):
            add(render_state.state_version(sv, public_base(r)))
        if "outputs" in inc and "read-state-outputs" in caps:
            for doc in await state_versions.workspace_outputs(r, sv):
                add(doc)
    return out


async def _doc(r: Req, ws: Workspace, caps: frozenset[str], status: int = 200) -> HttpResponse:
    doc: dict[str, Any] = {"data": render.workspace(r.state, ws, caps)}
    inc = includes(r)
    if inc:
        doc["included"] = await included_for(r, [ws], inc)
    return respond(status, doc)


async def create(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "manage-workspaces", "organization")
    data = data_object(r.http.body, "workspaces")
    fields, vcs, tags = parse_workspace(data, create=True)
    fields.update(id=new_id("ws"), org_id=org.id)
    if vcs:
        fields["vcs_repo"] = vcs
    ws_id = await r.write("ws.create", {"fields": fields, "tags": tags})
    ws = r.state.workspaces[ws_id]
    return respond(201, {"data": render.workspace(r.state, ws, r.ws_caps(ws))})


def _target(r: Req, need: str = "read-runs") -> tuple[Workspace, frozenset[str]]:
    if "id" in r.params:
        return r.workspace(r.params["id"], need)
    return r.workspace_named(r.params["org"], r.params["name"], need)


async def show(r: Req) -> HttpResponse:
    ws, caps = _target(r)
    return await _doc(r, ws, caps)


async def update(r: Req) -> HttpResponse:
    ws, _ = _target(r, "admin")
    data = data_object(r.http.body, "workspaces")
    fields, vcs, tags = parse_workspace(data, create=False)
    await r.write("ws.update", {"id": ws.id, "changes": fields, "vcs": vcs, "tags": tags})
    return await _doc(r, r.state.workspaces[ws.id], r.ws_caps(ws))


async def delete(r: Req) -> HttpResponse:
    ws, _ = _target(r, "admin")
    sv_ids = list(r.state.sv_by_ws.get(ws.id, []))
    await r.write("ws.delete", {"id": ws.id})
    await state_versions.drop_blobs(r, sv_ids)
    return respond(204)


async def safe_delete(r: Req) -> HttpResponse:
    ws, _ = _target(r, "admin")
    sv_ids = list(r.state.sv_by_ws.get(ws.id, []))
    await r.write("ws.delete", {"id": ws.id, "safe": True})
    await state_versions.drop_blobs(r, sv_ids)
    return respond(204)


def filter_workspaces(r: Req, org_id: str) -> list[tuple[Workspace, frozenset[str]]]:
    """The organization's workspaces the caller can read, after search/filter parameters."""
    state, q = r.state, r.query
    caps_of = caps_function(state, r.who, state.orgs[org_id])
    name = (q.get("search[name]") or "").lower()
    wildcard = q.get("search[wildcard-name]")
    want_tags = csv(q.get("search[tags]"))
    not_tags = csv(q.get("search[exclude-tags]"))
    project = q.get("filter[project][id]")
    # Tag searches narrow by the tag -> workspaces index before anything is looked at.
    cand: set[str] | None = None
    for t in sorted(
        want_tags, key=lambda t: len(state.tag_ws.get(state.tag_by_name.get((org_id, t), ""), ()))
    ):
        tid = state.tag_by_name.get((org_id, t))
        if tid is None:
            return []  # a tag nobody has: nothing can match them all
        cand = set(state.tag_ws[tid]) if cand is None else cand & state.tag_ws[tid]
    excluded: set[str] = set()
    for t in not_tags:
        tid = state.tag_by_name.get((org_id, t))
        if tid is not None:
            excluded |= state.tag_ws[tid]
    out = []
    for _, wid, lower in state.ws_sorted.get(org_id, ()):
        if name and name not in lower:
            continue
        if (cand is not None and wid not in cand) or wid in excluded:
            continue
        ws = state.workspaces[wid]
        if wildcard and not fnmatch.fnmatchcase(ws.name, wildcard):
            continue
        if project and ws.project_id != project:
            continue
        caps = caps_of(ws)
        if "read-runs" in caps:
            out.append((ws, caps))
    sort = q.get("sort", "name")
    if sort not in ("name", "-name"):
        keys = {
            "created-at": lambda x: x[0].created_at,
            "latest-change-at": lambda x: x[0].latest_change_at,
        }
        key = keys.get(sort.lstrip("-"))
        if key is None:
            raise ApiError(400, f"invalid sort parameter {sort!r}", title="invalid sort")
        out.sort(key=key, reverse=sort.startswith("-"))
    elif sort == "-name":
        out.reverse()
    return out


async def list_(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    inc = includes(r)
    items = filter_workspaces(r, org.id)
    doc = r.list_doc(items, lambda x: render.workspace(r.state, x[0], x[1]))
    if inc:
        page = r.page().slice(items)
        doc["included"] = await included_for(r, [w for w, _ in page], inc)
    return respond(200, doc)


def _reason(body: bytes) -> str:
    if not body.strip():
        return ""
    doc = decode_body(body)
    if doc is None:
        return ""
    if not isinstance(doc, dict) or not isinstance(doc.get("reason", ""), str):
        raise ApiError(422, "the body must be an object with an optional string reason")
    return doc.get("reason", "")


async def lock(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "lock")
    reason = _reason(r.http.body)
    await r.write("ws.lock", {"id": ws.id, "by": list(r.who.lock_holder), "reason": reason})
    return await _doc(r, ws, r.ws_caps(ws))


async def unlock(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "lock")
    await r.write("ws.unlock", {"id": ws.id, "by": list(r.who.lock_holder)})
    return await _doc(r, ws, r.ws_caps(ws))


async def force_unlock(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "force-unlock")
    await r.write("ws.unlock", {"id": ws.id, "by": list(r.who.lock_holder), "force": True})
    return await _doc(r, ws, r.ws_caps(ws))
