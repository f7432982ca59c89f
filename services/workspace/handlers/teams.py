"""Teams, their organization access and members, and team access to workspaces."""

from __future__ import annotations

from typing import Any

from services.workspace import permissions as perms
from services.workspace import render
from services.workspace.context import Req
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_list,
    data_object,
    ids_of,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import CUSTOM_ACCESS, ORG_ACCESS_KEYS, Team, TeamAccess
from services.workspace.validate import check_name, new_id
from shared.messages import HttpResponse

ACCESS_LEVELS = ("read", "plan", "write", "admin", "custom")


def _team_fields(a: Attrs, create: bool) -> dict[str, Any]:
    f: dict[str, Any] = {}
    name = a.required_str("name") if create else a.str("name")
    if present(name):
        f["name"] = check_name(name, a.pointer("name"), max_len=90)
    vis = a.str("visibility")
    if present(vis):
        if vis not in ("secret", "organization"):
            raise ApiError(
                422, "visibility must be secret or organization", a.pointer("visibility")
            )
        f["visibility"] = vis
    sso = a.str("sso-team-id", nullable=True)
    if present(sso):
        f["sso_team_id"] = sso
    access = a.obj("organization-access")
    if present(access):
        oa: dict[str, bool] = {}
        for k, v in access.items():
            if k not in ORG_ACCESS_KEYS or not isinstance(v, bool):
                raise ApiError(
                    422,
                    f"organization-access.{k} is not a known boolean",
                    a.pointer("organization-access"),
                )
            oa[k] = v
        f["organization_access"] = oa
    return f


def _visible(r: Req, team: Team, acc: perms.OrgAccess) -> bool:
    if acc.can("manage-teams") or acc.can("manage-membership") or team.visibility == "organization":
        return True
    return team.id in perms.caller_teams(r.state, r.who, team.org_id)


async def create(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "manage-teams", "organization")
    f = _team_fields(Attrs(data_object(r.http.body, "teams")["attributes"]), True)
    if f.get("organization_access") and not acc.can("manage-organization-access"):
        raise ApiError(404, "organization not found")
    tid = await r.write("team.create", {"id": new_id("team"), "org_id": org.id, **f})
    # The anchor answers a team create with 200, not 201.
    return respond(200, {"data": render.team(r.state, r.state.teams[tid], acc)})


async def list_(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    names = set((r.query.get("filter[names]") or "").split(",")) - {""}
    q = (r.query.get("q") or "").lower()
    items = sorted(
        (
            t
            for t in r.state.teams.values()
            if t.org_id == org.id
            and _visible(r, t, acc)
            and (not names or t.name in names)
            and q in t.name.lower()
        ),
        key=lambda t: t.name,
    )
    return respond(200, r.list_doc(items, lambda t: render.team(r.state, t, acc)))


def _team(r: Req, flag: str | None = None) -> tuple[Team, perms.OrgAccess]:
    team = r.state.teams.get(r.params["id"])
    if team is None:
        raise not_found("team")
    _, acc = r.org_by_id(team.org_id)
    if not _visible(r, team, acc) or (flag and not acc.can(flag)):
        raise not_found("team")
    return team, acc


async def show(r: Req) -> HttpResponse:
    team, acc = _team(r)
    return respond(200, {"data": render.team(r.state, team, acc)})


async def update(r: Req) -> HttpResponse:
    team, acc = _team(r, "manage-teams")
    f = _team_fields(Attrs(data_object(r.http.body, "teams")["attributes"]), False)
    if "organization_access" in f and not acc.can("manage-organization-access"):
        raise not_found("team")
    await r.write("team.update", {"id": team.id, "changes": f})
    return respond(200, {"data": render.team(r.state, team, acc)})


async def delete(r: Req) -> HttpResponse:
    team, _ = _team(r, "manage-teams")
    await r.write("team.delete", {"id": team.id})
    return respond(204)


async def _members(r: Req, op: str) -> HttpResponse:
    team, _ = _team(r, "manage-membership")
    # Memberships name users by username, as the anchor does.
    names = ids_of(data_list(r.http.body, "users"))
    await r.write("team.members", {"id": team.id, "op": op, "usernames": names})
    return respond(204)


async def add_members(r: Req) -> HttpResponse:
    return await _members(r, "add")


async def remove_members(r: Req) -> HttpResponse:
    return await _members(r, "remove")


# --- team access to workspaces ---


def _access_fields(a: Attrs, access: str) -> dict[str, Any]:
    custom: dict[str, Any] = {}
    for key, allowed in CUSTOM_ACCESS.items():
        if key in a:
            v = a.attrs[key]
            if v not in allowed or isinstance(v, bool) != isinstance(allowed[0], bool):
                raise ApiError(
                    422, f"{key} must be one of {', '.join(map(str, allowed))}", a.pointer(key)
                )
            custom[key] = v
    if custom and access != "custom":
        raise ApiError(422, "per-category permissions need access custom", a.pointer("access"))
    return custom


def _level(a: Attrs, required: bool) -> Any:
    access = a.required_str("access") if required else a.str("access")
    if present(access) and access not in ACCESS_LEVELS:
        raise ApiError(
            422, f"access must be one of {', '.join(ACCESS_LEVELS)}", a.pointer("access")
        )
    return access


async def create_access(r: Req) -> HttpResponse:
    data = data_object(r.http.body, "team-workspaces")
    a = Attrs(data["attributes"])
    access = _level(a, True)
    custom = _access_fields(a, access)
    ws_id = relationship_ids(data["relationships"], "workspace", "workspaces", many=False)
    team_id = relationship_ids(data["relationships"], "team", "teams", many=False)
    if not isinstance(ws_id, str):
        raise ApiError(422, "relationships.workspace is required", "/data/relationships/workspace")
    if not isinstance(team_id, str):
        raise ApiError(422, "relationships.team is required", "/data/relationships/team")
    ws, _ = r.workspace(ws_id, "admin")
    team = r.state.teams.get(team_id)
    if team is None or team.org_id != ws.org_id:
        raise ApiError(422, "team not found", "/data/relationships/team")
    aid = await r.write(
        "access.create",
        {
            "id": new_id("tws"),
            "team_id": team.id,
            "workspace_id": ws.id,
            "access": access,
            "custom": custom,
        },
    )
    return respond(200, {"data": render.team_access(r.state.team_access[aid])})


async def list_access(r: Req) -> HttpResponse:
    ws_id = r.query.get("filter[workspace][id]")
    if not ws_id:
        raise ApiError(422, "filter[workspace][id] is required", title="invalid query parameter")
    ws, _ = r.workspace(ws_id, "admin")
    items = [a for a in r.state.team_access.values() if a.workspace_id == ws.id]
    return respond(200, r.list_doc(items, render.team_access))


def _access(r: Req) -> TeamAccess:
    a = r.state.team_access.get(r.params["id"])
    if a is None:
        raise not_found("team access")
    r.workspace(a.workspace_id, "admin")
    return a


async def show_access(r: Req) -> HttpResponse:
    return respond(200, {"data": render.team_access(_access(r))})


async def update_access(r: Req) -> HttpResponse:
    cur = _access(r)
    a = Attrs(data_object(r.http.body, "team-workspaces")["attributes"])
    access = _level(a, False)
    level = access if present(access) else cur.access
    changes: dict[str, Any] = {"access": level}
    custom = _access_fields(a, level)
    changes["custom"] = {**(cur.custom if level == "custom" else {}), **custom}
    await r.write("access.update", {"id": cur.id, "changes": changes})
    return respond(200, {"data": render.team_access(cur)})


async def delete_access(r: Req) -> HttpResponse:
    cur = _access(r)
    await r.write("access.delete", {"id": cur.id})
    return respond(204)
