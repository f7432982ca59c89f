"""Variable sets: variables shared by many workspaces of an organization, applied globally or
to chosen workspaces and projects. Managing them takes the organization's manage-workspaces
permission; reading them, read-workspaces. Their variables follow the workspace variables'
rules (sealed values, sensitive ones write-only)."""

from __future__ import annotations

from typing import Any

from services.workspace.context import Req
from services.workspace.handlers import variables
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_list,
    data_object,
    ids_of,
    iso,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import Variable, VariableSet
from services.workspace.render import API, ref, refs
from services.workspace.validate import new_id
from shared.messages import HttpResponse

RELS = {"workspaces": "workspaces", "projects": "projects"}


def render(r: Req, vs: VariableSet) -> dict[str, Any]:
    org = r.state.orgs[vs.org_id]
    var_ids = r.state.vars_by_set.get(vs.id, [])
    return {
        "id": vs.id,
        "type": "varsets",
        "attributes": {
            "name": vs.name,
            "description": vs.description,
            "global": vs.is_global,
            "priority": vs.priority,
            "updated-at": iso(vs.updated_at),
            "var-count": len(var_ids),
            "workspace-count": len(vs.workspace_ids),
            "project-count": len(vs.project_ids),
        },
        "relationships": {
            "organization": ref("organizations", org.name),
            "workspaces": refs("workspaces", vs.workspace_ids),
            "projects": refs("projects", vs.project_ids),
            "vars": refs("vars", var_ids),
        },
        "links": {"self": f"{API}/varsets/{vs.id}"},
    }


def _fields(data: dict[str, Any], *, create: bool) -> dict[str, Any]:
    a = Attrs(data["attributes"])
    f: dict[str, Any] = {}
    name = a.str("name")
    if present(name) or create:
        if not present(name) or not name.strip() or len(name) > 128:
            raise ApiError(422, "name is required (at most 128 characters)", a.pointer("name"))
        f["name"] = name
    desc = a.str("description", nullable=True)
    if present(desc):
        f["description"] = desc
    for key, field in (("global", "is_global"), ("priority", "priority")):
        v = a.bool(key)
        if present(v):
            f[field] = v
    for rel, field in (("workspaces", "workspace_ids"), ("projects", "project_ids")):
        ids = relationship_ids(data["relationships"], rel, RELS[rel], many=True)
        if present(ids):
            f[field] = ids
    return f


def _inline_vars(rels: dict[str, Any]) -> list[dict[str, Any]]:
    """Variables given with the set (HCP Terraform's create accepts them), all checked before
    anything is written."""
    if "vars" not in rels:
        return []
    rel = rels["vars"]
    if not isinstance(rel, dict) or not isinstance(rel.get("data"), list):
        raise ApiError(422, "relationships.vars.data must be an array", "/data/relationships/vars")
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(rel["data"]):
        ptr = f"/data/relationships/vars/data/{i}"
        if not isinstance(item, dict) or item.get("type") != "vars":
            raise ApiError(422, "each variable must be {type: vars, attributes}", ptr)
        if not isinstance(item.get("attributes"), dict):
            raise ApiError(422, "each variable needs an attributes object", ptr)
        f = variables.parse_fields(Attrs(item["attributes"], f"{ptr}/attributes"), create=True)
        if (f["key"], f["category"]) in seen:
            raise ApiError(422, "Key has already been taken", f"{ptr}/attributes/key")
        seen.add((f["key"], f["category"]))
    return rel["data"]


def _set(r: Req, need: str) -> VariableSet:
    vs = r.state.varsets.get(r.params["id"])
    if vs is None:
        raise not_found("variable set")
    _, acc = r.org_by_id(vs.org_id)
    if not acc.can(need):
        raise not_found("variable set")
    return vs


async def create(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "manage-workspaces", "organization")
    data = data_object(r.http.body, "varsets")
    f = _fields(data, create=True)
    inline = _inline_vars(data["relationships"])
    vs_id = new_id("varset")
    await r.write("varset.create", {**f, "id": vs_id, "org_id": org.id})
    for item in inline:
        await variables.create_in(r, {"varset_id": vs_id}, item)
    return respond(201, {"data": render(r, r.state.varsets[vs_id])})


async def list_(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "read-workspaces", "organization")
    q = (r.query.get("q") or "").lower()
    items = [
        vs
        for vs in r.state.varsets.values()
        if vs.org_id == org.id and (not q or q in vs.name.lower())
    ]
    items.sort(key=lambda vs: vs.name)
    return respond(200, r.list_doc(items, lambda vs: render(r, vs)))


async def show(r: Req) -> HttpResponse:
    return respond(200, {"data": render(r, _set(r, "read-workspaces"))})


async def update(r: Req) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    f = _fields(data_object(r.http.body, "varsets"), create=False)
    await r.write("varset.update", {"id": vs.id, "changes": f})
    return respond(200, {"data": render(r, vs)})


async def delete(r: Req) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    await r.write("varset.delete", {"id": vs.id})
    return respond(204)


async def _relate(r: Req, rel: str, op: str) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    ids = ids_of(data_list(r.http.body, RELS[rel]))
    await r.write("varset.rel", {"id": vs.id, "rel": rel, "op": op, "ids": ids})
    return respond(204)


async def add_workspaces(r: Req) -> HttpResponse:
    return await _relate(r, "workspaces", "add")


async def remove_workspaces(r: Req) -> HttpResponse:
    return await _relate(r, "workspaces", "remove")


async def add_projects(r: Req) -> HttpResponse:
    return await _relate(r, "projects", "add")


async def remove_projects(r: Req) -> HttpResponse:
    return await _relate(r, "projects", "remove")


# --- the variables of a set ---


def _var(r: Req, vs: VariableSet) -> Variable:
    v = r.state.variables.get(r.params["var"])
    if v is None or v.varset_id != vs.id:
        raise not_found("variable")
    return v


async def create_var(r: Req) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    return await variables.create_in(r, {"varset_id": vs.id}, data_object(r.http.body, "vars"))


async def list_vars(r: Req) -> HttpResponse:
    vs = _set(r, "read-workspaces")
    return await variables.list_of(r, r.state.vars_by_set.get(vs.id, []))


async def update_var(r: Req) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    return await variables.update_var(r, _var(r, vs))


async def delete_var(r: Req) -> HttpResponse:
    vs = _set(r, "manage-workspaces")
    v = _var(r, vs)
    await r.write("var.delete", {"id": v.id})
    return respond(204)


async def for_workspace(r: Req) -> HttpResponse:
    """The sets that apply to a workspace (global, attached to it or to its project)."""
    ws, _ = r.workspace(r.params["id"], "read-vars")
    items = sorted(r.state.varsets_for(ws), key=lambda vs: vs.name)
    return respond(200, r.list_doc(items, lambda vs: render(r, vs)))
