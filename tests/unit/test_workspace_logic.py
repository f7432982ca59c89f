"""Pure helpers of the workspace service: query strings and pagination, name and version
rules, the permission model, and the routing table."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.workspace import permissions as perms
from services.workspace.jsonapi import ApiError, Attrs, data_object, iso
from services.workspace.query import Page, parse_query
from services.workspace.routes import Router
from services.workspace.state import WorkspaceState
from services.workspace.validate import check_name, resolve_tool_version
from shared.replog import LogEntry


def test_query_brackets_raw_or_encoded() -> None:
    assert parse_query("page%5Bsize%5D=5&search[name]=a+b") == {
        "page[size]": "5",
        "search[name]": "a b",
    }
    assert parse_query("") == {}


def test_pagination_meta_and_links() -> None:
    page = Page.from_query({"page[number]": "2", "page[size]": "10"})
    assert page.slice(list(range(25))) == list(range(10, 20))
    assert page.meta(25) == {
        "current-page": 2,
        "page-size": 10,
        "prev-page": 1,
        "next-page": 3,
        "total-pages": 3,
        "total-count": 25,
    }
    links = page.links("/x", {"page[number]": "2", "search[name]": "a"}, 25)
    assert links["next"] == "/x?page%5Bnumber%5D=3&page%5Bsize%5D=10&search%5Bname%5D=a"
    assert Page(1, 20).meta(0)["total-pages"] == 1
    assert Page(1, 20).links("/x", {}, 0)["next"] is None
    for bad in (
        {"page[size]": "101"},
        {"page[size]": "0"},
        {"page[number]": "-1"},
        {"page[number]": "one"},
    ):
        with pytest.raises(ApiError) as exc:
            Page.from_query(bad)
        assert exc.value.status == 422


def test_names_and_versions() -> None:
    assert check_name("ok_name-1", "/p") == "ok_name-1"
    for bad in ("", "has space", "x" * 91, "dot.ted"):
        with pytest.raises(ApiError):
            check_name(bad, "/p")
    assert resolve_tool_version("1.3.0", "/p") == "1.3.0"
    assert resolve_tool_version("~> 1.5.0", "/p") == "1.5.7"
    assert resolve_tool_version(">= 1.2, < 1.8", "/p") == "1.7.5"
    assert resolve_tool_version("latest", "/p") == resolve_tool_version("", "/p")
    for bad in ("~> 9.0", "banana"):
        with pytest.raises(ApiError):
            resolve_tool_version(bad, "/p")


def test_iso_has_milliseconds() -> None:
    assert iso(0.5) == "1970-01-01T00:00:00.500Z"


def test_attrs_types_and_documents() -> None:
    a = Attrs({"n": 1, "b": True, "s": None})
    with pytest.raises(ApiError):
        a.int("b")  # a boolean is not an integer
    with pytest.raises(ApiError):
        a.bool("n")
    assert a.str("s", nullable=True) is None
    for body in (
        b"",
        b"[",
        b'{"data": 1}',
        b'{"data": {"type": "x"}}',
        b'{"data": {"type": "workspaces", "attributes": []}}',
    ):
        with pytest.raises(ApiError) as exc:
            data_object(body, "workspaces")
        assert exc.value.status == 422


def build() -> WorkspaceState:
    s = WorkspaceState()
    n = 0

    def op(name: str, p: dict[str, Any]) -> None:
        nonlocal n
        n += 1
        s.apply(n, LogEntry(type=name, payload=msgspec.msgpack.encode(p), time=1.0, id=str(n)))

    op("user.create", {"id": "user-o", "username": "owner"})
    op("user.create", {"id": "user-r", "username": "reader"})
    op(
        "org.create",
        {
            "id": "org-1",
            "name": "acme",
            "email": "a@x",
            "creator_user_id": "user-o",
            "owners_team_id": "team-own",
            "default_project_id": "prj-1",
        },
    )
    op("ws.create", {"fields": {"id": "ws-1", "org_id": "org-1", "name": "a"}})
    op("ws.create", {"fields": {"id": "ws-2", "org_id": "org-1", "name": "b"}})
    op("team.create", {"id": "team-r", "org_id": "org-1", "name": "r", "user_ids": ["user-r"]})
    op(
        "team.create",
        {
            "id": "team-p",
            "org_id": "org-1",
            "name": "p",
            "organization_access": {"manage-policies": True},
        },
    )
    op(
        "access.create",
        {
            "id": "tws-1",
            "team_id": "team-r",
            "workspace_id": "ws-1",
            "access": "custom",
            "custom": {"runs": "plan", "workspace-locking": True},
        },
    )
    return s


def test_permission_model() -> None:
    s = build()
    w1, w2 = s.workspaces["ws-1"], s.workspaces["ws-2"]
    owner = perms.Caller(kind="user", user_id="user-o")
    reader = perms.Caller(kind="user", user_id="user-r")
    policy_team = perms.Caller(kind="team", team_id="team-p")
    org_token = perms.Caller(kind="organization", org_id="org-1")
    stranger = perms.Caller(kind="user", user_id="user-x")
    assert perms.workspace_caps(s, owner, w1) == perms.ADMIN
    caps = perms.workspace_caps(s, reader, w1)
    assert {"read-runs", "queue-plan", "lock"} <= caps and "queue-apply" not in caps
    assert perms.workspace_caps(s, reader, w2) == frozenset()  # 404
    assert perms.workspace_caps(s, policy_team, w2) == perms.READ
    assert perms.workspace_caps(s, stranger, w1) == frozenset()
    obj = perms.permissions_object(perms.workspace_caps(s, org_token, w1))
    assert obj["can-update"] and not obj["can-lock"] and not obj["can-queue-run"]
    assert len(obj) == 15
    caps_of = perms.caps_function(s, reader, s.orgs["org-1"])
    assert caps_of(w1) == caps and caps_of(w2) == frozenset()
    acc = perms.org_access(s, policy_team, s.orgs["org-1"])
    assert acc.can("manage-policies") and not acc.can("manage-workspaces")


def test_router() -> None:
    r = Router()
    h, params, auth = r.match("GET", "/api/v2/organizations/a%20b/workspaces/x")
    assert h is not None and params == {"org": "a b", "name": "x"} and auth
    h, params, _ = r.match("POST", "/api/v2/workspaces/ws-1/relationships/remote_state_consumers")
    assert h is not None and params["id"] == "ws-1"
    h, _, allowed = r.match("PUT", "/api/v2/workspaces/ws-1")
    assert h is None and set(allowed) == {"GET", "PATCH", "DELETE"}
    h, _, auth = r.match("GET", "/.well-known/terraform.json")
    assert h is not None and auth is False
