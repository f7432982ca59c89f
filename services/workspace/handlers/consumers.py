"""Remote state consumers: which workspaces may read a workspace's state."""

from __future__ import annotations

from services.workspace import render
from services.workspace.context import Req
from services.workspace.jsonapi import ApiError, data_list, ids_of, respond
from services.workspace.permissions import caps_function
from shared.messages import HttpResponse


async def list_(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"])
    caps_of = caps_function(r.state, r.who, r.state.orgs[ws.org_id])
    if ws.global_remote_state:
        # Every other workspace of the organization may read it.
        cands = [w for w in r.state.org_workspaces(ws.org_id) if w.id != ws.id]
    else:
        cands = [r.state.workspaces[c] for c in ws.consumer_ids if c in r.state.workspaces]
    items = [(w, c) for w in cands if "read-runs" in (c := caps_of(w))]
    return respond(200, r.list_doc(items, lambda x: render.workspace(r.state, x[0], x[1])))


async def _write(r: Req, op: str) -> HttpResponse:
    if op == "replace":
        ws, _ = r.workspace(r.params["id"])
        _, acc = r.org_by_id(ws.org_id)
        # Replacing the whole list is for organization-wide workspace managers only.
        r.require(acc, "manage-workspaces", "workspace")
    else:
        ws, _ = r.workspace(r.params["id"], "admin")
    ids = ids_of(data_list(r.http.body, "workspaces"))
    caps_of = caps_function(r.state, r.who, r.state.orgs[ws.org_id])
    for i, cid in enumerate(ids):
        c = r.state.workspaces.get(cid)
        if c is None or c.org_id != ws.org_id or "read-runs" not in caps_of(c):
            raise ApiError(422, f"workspace {cid} not found", f"/data/{i}/id")
    await r.write("ws.consumers", {"id": ws.id, "op": op, "ids": ids})
    return respond(204)


async def replace(r: Req) -> HttpResponse:
    return await _write(r, "replace")


async def add(r: Req) -> HttpResponse:
    return await _write(r, "add")


async def remove(r: Req) -> HttpResponse:
    return await _write(r, "remove")
