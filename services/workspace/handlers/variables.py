"""Workspace variables, at `/workspaces/:id/vars` and the older `/vars`: Terraform and
environment variables, HCL or plain, sensitive ones write-only. Every value is sealed under the
variables' data key before it enters the log (sealing.py)."""

from __future__ import annotations

import re
import secrets
from typing import Any

from services.workspace.context import Req
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_object,
    iso,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import Variable, Workspace
from services.workspace.render import API
from services.workspace.sealing import VARIABLES_KEY, seal, unseal
from services.workspace.validate import new_id
from shared.messages import HttpResponse

CATEGORIES = ("terraform", "env")
KEY_RE = {
    "terraform": re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$"),
    "env": re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"),
}
MAX_VALUE = 256 * 1024


def _aad(var_id: str) -> str:
    return f"var:{var_id}"


def _version_id() -> str:
    return secrets.token_hex(20)


async def render(r: Req, v: Variable) -> dict[str, Any]:
    value: str | None = None
    if not v.sensitive and v.sealed_value:
        key = await r.key_store.get(VARIABLES_KEY)
        try:
            value = unseal(key, v.sealed_value, _aad(v.id)).decode()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(500, "a stored variable does not authenticate") from None
    if v.varset_id:
        owner = {"id": v.varset_id, "type": "varsets"}
        related = f"{API}/varsets/{v.varset_id}"
        self_link = f"{API}/varsets/{v.varset_id}/relationships/vars/{v.id}"
    else:
        owner = {"id": v.workspace_id or "", "type": "workspaces"}
        related = f"{API}/workspaces/{v.workspace_id}"
        self_link = f"{API}/workspaces/{v.workspace_id}/vars/{v.id}"
    return {
        "id": v.id,
        "type": "vars",
        "attributes": {
            "key": v.key,
            "value": value,  # sensitive values are write-only: never shown again
            "description": v.description,
            "sensitive": v.sensitive,
            "category": v.category,
            "hcl": v.hcl,
            "created-at": iso(v.created_at),
            "version-id": v.version_id,
        },
        "relationships": {"configurable": {"data": owner, "links": {"related": related}}},
        "links": {"self": self_link},
    }


def parse_fields(a: Attrs, *, create: bool, category_now: str | None = None) -> dict[str, Any]:
    """Checked field changes from `data.attributes` (the value still in clear, as `value`)."""
    f: dict[str, Any] = {}
    category = a.str("category")
    if present(category):
        if category not in CATEGORIES:
            raise ApiError(422, "category must be terraform or env", a.pointer("category"))
        f["category"] = category
    elif create:
        raise ApiError(422, "category is required (terraform or env)", a.pointer("category"))
    key = a.str("key")
    if present(key) or create:
        if not present(key) or not key:
            raise ApiError(422, "key is required", a.pointer("key"))
        cat = f.get("category", category_now or "terraform")
        if not KEY_RE[cat].fullmatch(key):
            what = "an environment variable name" if cat == "env" else "a Terraform variable name"
            raise ApiError(422, f"key must be {what} of at most 128 characters", a.pointer("key"))
        f["key"] = key
    value = a.str("value", nullable=True)
    if present(value):
        value = value or ""
        if len(value.encode()) > MAX_VALUE:
            raise ApiError(422, "value is limited to 256 KiB", a.pointer("value"))
        f["value"] = value
    desc = a.str("description", nullable=True)
    if present(desc):
        if desc is not None and len(desc) > 512:
            raise ApiError(
                422, "description is limited to 512 characters", a.pointer("description")
            )
        f["description"] = desc
    for name in ("hcl", "sensitive"):
        v = a.bool(name)
        if present(v):
            f[name] = v
    return f


async def _seal_value(r: Req, var_id: str, f: dict[str, Any]) -> None:
    if "value" in f:
        key = await r.key_store.get(VARIABLES_KEY)
        f["sealed_value"] = seal(key, f.pop("value").encode(), _aad(var_id))


async def create_in(r: Req, owner: dict[str, str], data: dict[str, Any]) -> HttpResponse:
    """Create a variable owned by `owner`: {"workspace_id": ...} or {"varset_id": ...}."""
    f = parse_fields(Attrs(data["attributes"]), create=True)
    var_id = new_id("var")
    f.setdefault("value", "")
    await _seal_value(r, var_id, f)
    await r.write("var.create", {**f, **owner, "id": var_id, "version_id": _version_id()})
    return respond(201, {"data": await render(r, r.state.variables[var_id])})


async def list_of(r: Req, var_ids: list[str]) -> HttpResponse:
    docs = [await render(r, r.state.variables[i]) for i in var_ids]
    return respond(200, r.list_doc(docs, lambda d: d))


def _var_of(r: Req, ws: Workspace | None, var_id: str, need: str) -> Variable:
    v = r.state.variables.get(var_id)
    if v is None or v.workspace_id is None or (ws is not None and v.workspace_id != ws.id):
        raise not_found("variable")
    try:
        r.workspace(v.workspace_id, need)
    except ApiError:
        raise not_found("variable") from None
    return v


async def update_var(r: Req, v: Variable) -> HttpResponse:
    data = data_object(r.http.body, "vars")
    if data.get("id") not in (None, v.id):
        raise ApiError(422, "data.id does not match the variable in the path", "/data/id")
    f = parse_fields(Attrs(data["attributes"]), create=False, category_now=v.category)
    if "category" in f and "key" not in f and not KEY_RE[f["category"]].fullmatch(v.key):
        raise ApiError(422, f"key {v.key!r} is not valid for category {f['category']}")
    await _seal_value(r, v.id, f)
    f["version_id"] = _version_id()
    await r.write("var.update", {"id": v.id, "changes": f})
    return respond(200, {"data": await render(r, r.state.variables[v.id])})


# --- /workspaces/:id/vars ---


async def ws_create(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "write-vars")
    return await create_in(r, {"workspace_id": ws.id}, data_object(r.http.body, "vars"))


async def ws_list(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "read-vars")
    return await list_of(r, r.state.vars_by_ws.get(ws.id, []))


async def ws_update(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "write-vars")
    return await update_var(r, _var_of(r, ws, r.params["var"], "write-vars"))


async def ws_delete(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "write-vars")
    v = _var_of(r, ws, r.params["var"], "write-vars")
    await r.write("var.delete", {"id": v.id})
    return respond(204)


# --- /vars (the older interface) ---


async def create(r: Req) -> HttpResponse:
    data = data_object(r.http.body, "vars")
    ws_id = relationship_ids(data["relationships"], "workspace", "workspaces", many=False)
    if not isinstance(ws_id, str):
        ws_id = relationship_ids(data["relationships"], "configurable", "workspaces", many=False)
    if not isinstance(ws_id, str):
        raise ApiError(
            422, "relationships.workspace.data must name a workspace", "/data/relationships"
        )
    ws, _ = r.workspace(ws_id, "write-vars")
    return await create_in(r, {"workspace_id": ws.id}, data)


async def list_(r: Req) -> HttpResponse:
    ws = r.workspace_filtered("read-vars")
    return await list_of(r, r.state.vars_by_ws.get(ws.id, []))


async def update(r: Req) -> HttpResponse:
    return await update_var(r, _var_of(r, None, r.params["id"], "write-vars"))


async def delete(r: Req) -> HttpResponse:
    v = _var_of(r, None, r.params["id"], "write-vars")
    await r.write("var.delete", {"id": v.id})
    return respond(204)
