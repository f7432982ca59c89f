"""Tags: a workspace's tags, and an organization's tag list."""

from __future__ import annotations

from services.workspace import render
from services.workspace.context import Req
from services.workspace.handlers.workspaces import tag_items
from services.workspace.jsonapi import ApiError, data_list, decode_body, ids_of, respond
from shared.messages import HttpResponse


async def list_for_workspace(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"])
    tags = [r.state.tags[t] for t in ws.tag_ids if t in r.state.tags]
    return respond(200, r.list_doc(tags, lambda t: render.tag(r.state, t)))


def _items(body: bytes) -> list[dict[str, str]]:
    doc = decode_body(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ApiError(422, "the document must have a data array", "/data")
    return tag_items(doc["data"], "/data")


async def add(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "manage-tags")
    await r.write("ws.tags", {"id": ws.id, "op": "add", "items": _items(r.http.body)})
    return respond(204)


async def remove(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "manage-tags")
    await r.write("ws.tags", {"id": ws.id, "op": "remove", "items": _items(r.http.body)})
    return respond(204)


async def list_for_org(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    q = (r.query.get("q") or r.query.get("search[name]") or "").lower()
    exclude = r.query.get("filter[exclude][taggable][id]")
    skip = set()
    if exclude:
        ws = r.state.workspaces.get(exclude)
        skip = set(ws.tag_ids) if ws and ws.org_id == org.id else set()
    tags = sorted(
        (t for t in r.state.org_tags(org.id) if q in t.name.lower() and t.id not in skip),
        key=lambda t: t.name,
    )
    return respond(200, r.list_doc(tags, lambda t: render.tag(r.state, t)))


async def delete_for_org(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "manage-workspaces", "organization")
    ids = ids_of(data_list(r.http.body, "tags"))
    await r.write("tags.delete", {"org_id": org.id, "ids": ids})
    return respond(204)


async def add_workspaces(r: Req) -> HttpResponse:
    tag = r.state.tags.get(r.params["id"])
    if tag is None:
        raise ApiError(404, "tag not found")
    _, acc = r.org_by_id(tag.org_id)
    r.require(acc, "manage-workspaces", "tag")
    ids = ids_of(data_list(r.http.body, "workspaces"))
    await r.write("tag.workspaces", {"tag_id": tag.id, "ids": ids})
    return respond(204)
