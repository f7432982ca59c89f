"""Users, API tokens (user, team and organization) and VCS app installations, including the
site-admin API that creates users and feeds installations."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from services.workspace import render
from services.workspace.context import Req
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_object,
    decode_body,
    not_found,
    parse_time,
    present,
    respond,
)
from services.workspace.model import Token, User
from services.workspace.permissions import ADMIN_USER_ID
from services.workspace.validate import check_name, new_id
from shared.messages import HttpResponse

ADMIN_USER = User(id=ADMIN_USER_ID, username="admin", email="")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return f"{secrets.token_hex(7)}.atlasv1.{secrets.token_urlsafe(48)}"


def _site_admin(r: Req) -> None:
    if r.who.kind != "admin":
        raise not_found("resource")


async def account_details(r: Req) -> HttpResponse:
    if r.who.kind == "admin":
        return respond(200, {"data": render.user(ADMIN_USER, site_admin=True)})
    if r.who.kind != "user" or r.who.user_id not in r.state.users:
        raise not_found("user")  # team and organization tokens have no account
    return respond(200, {"data": render.user(r.state.users[r.who.user_id])})


async def create_user(r: Req) -> HttpResponse:
    _site_admin(r)
    a = Attrs(data_object(r.http.body, "users")["attributes"])
    username = check_name(a.required_str("username"), a.pointer("username"), what="username")
    email = a.str("email")
    uid = await r.write(
        "user.create",
        {"id": new_id("user"), "username": username, "email": email if present(email) else ""},
    )
    return respond(201, {"data": render.user(r.state.users[uid])})


async def list_users(r: Req) -> HttpResponse:
    _site_admin(r)
    users = sorted(r.state.users.values(), key=lambda u: u.username)
    return respond(200, r.list_doc(users, render.user))


async def show_user(r: Req) -> HttpResponse:
    u = r.state.users.get(r.params["id"])
    if u is None:
        raise not_found("user")
    return respond(200, {"data": render.user(u)})


# --- tokens ---


# The legacy single-token endpoints (organization, team) document `authentication-token`;
# the plural is accepted there too, as before.
LEGACY_TYPES = ("authentication-token", "authentication-tokens")


def _token_attrs(
    r: Req, *, optional_body: bool, types: tuple[str, ...] = ("authentication-tokens",)
) -> tuple[str | None, str | None]:
    body = r.http.body
    doc = None
    if optional_body:
        # Clients send nothing, `null` or `{}` when they have no attributes to give.
        doc = decode_body(body) if body.strip() else None
        if not isinstance(doc, dict) or doc.get("data") is None:
            return None, None
    given = doc["data"].get("type") if doc and isinstance(doc.get("data"), dict) else None
    a = Attrs(data_object(body, given if given in types else types[0])["attributes"])
    desc = a.str("description", nullable=True)
    exp = parse_time(a.attrs.get("expired-at"), a.pointer("expired-at"))
    return (desc if present(desc) else None), exp


async def _issue(
    r: Req, kind: str, owner: str, *, replace: bool, description: str | None, expired_at: str | None
) -> HttpResponse:
    secret = new_secret()
    tid = await r.write(
        "token.create",
        {
            "id": new_id("at"),
            "kind": kind,
            "owner_id": owner,
            "digest": digest(secret),
            "description": description,
            "expired_at": expired_at,
            "replace": replace,
            "created_by": r.who.user_id,
        },
    )
    # The secret is shown once, here; only its digest is kept.
    return respond(201, {"data": render.token(r.state.tokens[tid], secret)})


def _user_self(r: Req) -> str:
    uid = r.params["id"]
    if uid not in r.state.users or (r.who.kind != "admin" and r.who.user_id != uid):
        raise not_found("user")
    return uid


async def create_user_token(r: Req) -> HttpResponse:
    uid = _user_self(r)
    desc, exp = _token_attrs(r, optional_body=True)
    return await _issue(r, "user", uid, replace=False, description=desc, expired_at=exp)


async def list_user_tokens(r: Req) -> HttpResponse:
    uid = _user_self(r)
    toks = [t for t in r.state.tokens.values() if t.kind == "user" and t.owner_id == uid]
    return respond(200, r.list_doc(toks, render.token))


def _may_manage_token(r: Req, tok: Token) -> bool:
    who = r.who
    if who.kind == "admin":
        return True
    if tok.kind == "user":
        return who.kind == "user" and who.user_id == tok.owner_id
    org_id = (
        tok.owner_id
        if tok.kind == "organization"
        else (r.state.teams[tok.owner_id].org_id if tok.owner_id in r.state.teams else None)
    )
    if org_id is None or org_id not in r.state.orgs:
        return False
    _, acc = r.org_by_id(org_id)
    if tok.kind == "organization":
        return acc.owner and not acc.org_token
    return acc.can("manage-teams")


def _token(r: Req) -> Token:
    tok = r.state.tokens.get(r.params["id"])
    if tok is None or not _may_manage_token(r, tok):
        raise not_found("authentication token")
    return tok


async def show_token(r: Req) -> HttpResponse:
    return respond(200, {"data": render.token(_token(r))})


async def delete_token(r: Req) -> HttpResponse:
    tok = _token(r)
    await r.write("token.delete", {"id": tok.id})
    return respond(204)


def _org_owner(r: Req) -> str:
    org, acc = r.org(r.params["org"])
    if not acc.owner or acc.org_token:
        raise not_found("organization")  # only owners manage the organization token
    return org.id


async def create_org_token(r: Req) -> HttpResponse:
    org_id = _org_owner(r)
    _, exp = _token_attrs(r, optional_body=True, types=LEGACY_TYPES)
    return await _issue(r, "organization", org_id, replace=True, description=None, expired_at=exp)


def _org_token(r: Req, org_id: str) -> Token:
    for t in r.state.tokens.values():
        if t.kind == "organization" and t.owner_id == org_id:
            return t
    raise not_found("authentication token")


async def show_org_token(r: Req) -> HttpResponse:
    return respond(200, {"data": render.token(_org_token(r, _org_owner(r)))})


async def delete_org_token(r: Req) -> HttpResponse:
    tok = _org_token(r, _org_owner(r))
    await r.write("token.delete", {"id": tok.id})
    return respond(204)


def _team_manager(r: Req) -> str:
    team = r.state.teams.get(r.params["id"])
    if team is None:
        raise not_found("team")
    _, acc = r.org_by_id(team.org_id)
    r.require(acc, "manage-teams", "team")
    return team.id


def _legacy(r: Req, team_id: str) -> Token:
    for t in r.state.tokens.values():
        if t.kind == "team" and t.owner_id == team_id and t.description is None:
            return t
    raise not_found("authentication token")


async def create_team_token(r: Req) -> HttpResponse:
    """The legacy single team token: a new one replaces the old one."""
    team_id = _team_manager(r)
    _, exp = _token_attrs(r, optional_body=True, types=LEGACY_TYPES)
    return await _issue(r, "team", team_id, replace=True, description=None, expired_at=exp)


async def show_team_token(r: Req) -> HttpResponse:
    return respond(200, {"data": render.token(_legacy(r, _team_manager(r)))})


async def delete_team_token(r: Req) -> HttpResponse:
    tok = _legacy(r, _team_manager(r))
    await r.write("token.delete", {"id": tok.id})
    return respond(204)


async def create_team_token_v2(r: Req) -> HttpResponse:
    """Multiple team tokens, told apart by a description unique within the team."""
    team_id = _team_manager(r)
    desc, exp = _token_attrs(r, optional_body=False)
    if not desc:
        raise ApiError(422, "description is required", "/data/attributes/description")
    return await _issue(r, "team", team_id, replace=False, description=desc, expired_at=exp)


async def list_team_tokens(r: Req) -> HttpResponse:
    team_id = _team_manager(r)
    toks = [t for t in r.state.tokens.values() if t.kind == "team" and t.owner_id == team_id]
    return respond(200, r.list_doc(toks, render.token))


# --- VCS app installations ---


async def create_installation(r: Req) -> HttpResponse:
    _site_admin(r)
    a = Attrs(data_object(r.http.body, "vcs-app-installations")["attributes"])
    name = a.required_str("name")
    inst_id = a.int("installation-id")
    if not present(inst_id) or inst_id <= 0:
        raise ApiError(
            422, "installation-id must be a positive integer", a.pointer("installation-id")
        )
    rec: dict[str, Any] = {"id": new_id("ghain"), "name": name, "installation_id": inst_id}
    for key in ("icon-url", "installation-type", "installation-url"):
        v = a.str(key)
        if present(v):
            rec[key.replace("-", "_")] = v
    vid = await r.write("vcs.create", rec)
    return respond(201, {"data": render.vcs_installation(r.state.vcs[vid])})


async def delete_installation(r: Req) -> HttpResponse:
    _site_admin(r)
    if r.params["id"] not in r.state.vcs:
        raise not_found("installation")
    await r.write("vcs.delete", {"id": r.params["id"]})
    return respond(204)


def _vcs_user(r: Req) -> None:
    # Installations belong to the authorized app of a user: team and org tokens see none.
    if r.who.kind not in ("admin", "user"):
        raise not_found("installation")


async def list_installations(r: Req) -> HttpResponse:
    _vcs_user(r)
    name = r.query.get("filter[name]")
    inst = r.query.get("filter[installation_id]")
    items = [
        v
        for v in sorted(r.state.vcs.values(), key=lambda v: v.name)
        if (name is None or v.name == name) and (inst is None or str(v.installation_id) == inst)
    ]
    return respond(200, r.list_doc(items, render.vcs_installation))


async def show_installation(r: Req) -> HttpResponse:
    _vcs_user(r)
    v = r.state.vcs.get(r.params["id"])
    if v is None:
        raise not_found("installation")
    return respond(200, {"data": render.vcs_installation(v)})
