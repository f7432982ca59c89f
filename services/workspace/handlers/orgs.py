"""Organizations (with their entitlement set) and projects."""

from __future__ import annotations

from typing import Any

from services.workspace import permissions as perms
from services.workspace import render
from services.workspace.context import Req
from services.workspace.handlers import state_versions
from services.workspace.jsonapi import ApiError, Attrs, data_object, not_found, present, respond
from services.workspace.validate import PROJECT_RE, check_name, new_id
from shared.messages import HttpResponse

EMAIL_HINT = "email must be an email address"


def _email(a: Attrs, required: bool) -> Any:
    email = a.required_str("email") if required else a.str("email")
    if present(email) and "@" not in email:
        raise ApiError(422, EMAIL_HINT, a.pointer("email"))
    return email


async def create(r: Req) -> HttpResponse:
    if r.who.kind not in ("admin", "user"):
        raise ApiError(404, "only user tokens can create organizations")
    a = Attrs(data_object(r.http.body, "organizations")["attributes"])
    name = check_name(a.required_str("name"), a.pointer("name"), max_len=40)
    email = _email(a, True)
    org_id = await r.write(
        "org.create",
        {
            "id": new_id("org"),
            "name": name,
            "email": email,
            "owners_team_id": new_id("team"),
            "default_project_id": new_id("prj"),
            "creator_user_id": r.who.user_id if r.who.kind == "user" else None,
        },
    )
    org = r.state.orgs[org_id]
    return respond(
        201, {"data": render.organization(r.state, org, perms.org_access(r.state, r.who, org))}
    )


async def list_(r: Req) -> HttpResponse:
    orgs = sorted(
        (o for o in r.state.orgs.values() if perms.org_access(r.state, r.who, o).member),
        key=lambda o: o.name,
    )
    q = (r.query.get("q") or "").lower()
    orgs = [o for o in orgs if q in o.name.lower() or q in o.email.lower()]
    return respond(
        200,
        r.list_doc(
            orgs, lambda o: render.organization(r.state, o, perms.org_access(r.state, r.who, o))
        ),
    )


async def show(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    return respond(200, {"data": render.organization(r.state, org, acc)})


def _owner(r: Req) -> tuple[Any, Any]:
    org, acc = r.org(r.params["org"])
    if not acc.owner or acc.org_token:
        raise not_found("organization")  # settings and deletion: the owners team only
    return org, acc


async def update(r: Req) -> HttpResponse:
    org, acc = _owner(r)
    a = Attrs(data_object(r.http.body, "organizations")["attributes"])
    changes: dict[str, Any] = {}
    name = a.str("name")
    if present(name):
        changes["name"] = check_name(name, a.pointer("name"), max_len=40)
    email = _email(a, False)
    if present(email):
        changes["email"] = email
    for key in ("session-timeout", "session-remember"):
        v = a.int(key, nullable=True)
        if present(v):
            changes[key.replace("-", "_")] = v
    for key in (
        "cost-estimation-enabled",
        "allow-force-delete-workspaces",
        "assessments-enforced",
        "send-passing-statuses-for-untriggered-speculative-plans",
    ):
        v = a.bool(key)
        if present(v):
            changes[key.replace("-", "_")] = v
    mode = a.str("default-execution-mode")
    if present(mode):
        if mode not in ("remote", "local", "agent"):
            raise ApiError(
                422,
                "default-execution-mode must be remote, local or agent",
                a.pointer("default-execution-mode"),
            )
        changes["default_execution_mode"] = mode
    policy = a.str("collaborator-auth-policy")
    if present(policy):
        if policy not in ("password", "two_factor_mandatory"):
            raise ApiError(
                422,
                "collaborator-auth-policy must be password or two_factor_mandatory",
                a.pointer("collaborator-auth-policy"),
            )
        changes["collaborator_auth_policy"] = policy
    await r.write("org.update", {"org_id": org.id, "changes": changes})
    return respond(200, {"data": render.organization(r.state, r.state.orgs[org.id], acc)})


async def delete(r: Req) -> HttpResponse:
    org, _ = _owner(r)
    sv_ids = [i for w in r.state.org_workspaces(org.id) for i in r.state.sv_by_ws.get(w.id, [])]
    await r.write("org.delete", {"org_id": org.id})
    await state_versions.drop_blobs(r, sv_ids)
    return respond(204)


async def entitlements(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    return respond(200, {"data": render.entitlement_set(org)})


# --- projects ---


def _project_fields(a: Attrs, create: bool) -> dict[str, Any]:
    f: dict[str, Any] = {}
    name = a.required_str("name") if create else a.str("name")
    if present(name):
        if not PROJECT_RE.match(name):
            raise ApiError(
                422, "name must be 3 to 40 letters, numbers, spaces, - or _", a.pointer("name")
            )
        f["name"] = name
    desc = a.str("description", nullable=True)
    if present(desc):
        f["description"] = desc or ""
    return f


async def create_project(r: Req) -> HttpResponse:
    org, acc = r.org(r.params["org"])
    r.require(acc, "manage-projects", "organization")
    f = _project_fields(Attrs(data_object(r.http.body, "projects")["attributes"]), True)
    pid = await r.write("project.create", {"id": new_id("prj"), "org_id": org.id, **f})
    return respond(201, {"data": render.project(r.state, r.state.projects[pid])})


async def list_projects(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    names = set((r.query.get("filter[names]") or "").split(",")) - {""}
    q = (r.query.get("q") or "").lower()
    items = sorted(
        (
            p
            for p in r.state.projects.values()
            if p.org_id == org.id and (not names or p.name in names) and q in p.name.lower()
        ),
        key=lambda p: p.name,
    )
    return respond(200, r.list_doc(items, lambda p: render.project(r.state, p)))


def _project(r: Req, manage: bool) -> Any:
    prj = r.state.projects.get(r.params["id"])
    if prj is None:
        raise not_found("project")
    _, acc = r.org_by_id(prj.org_id)
    if manage:
        r.require(acc, "manage-projects", "project")
    return prj


async def show_project(r: Req) -> HttpResponse:
    return respond(200, {"data": render.project(r.state, _project(r, False))})


async def update_project(r: Req) -> HttpResponse:
    prj = _project(r, True)
    f = _project_fields(Attrs(data_object(r.http.body, "projects")["attributes"]), False)
    await r.write("project.update", {"id": prj.id, "changes": f})
    return respond(200, {"data": render.project(r.state, prj)})


async def delete_project(r: Req) -> HttpResponse:
    prj = _project(r, True)
    await r.write("project.delete", {"id": prj.id})
    return respond(204)
