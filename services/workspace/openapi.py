"""The OpenAPI 3 document of the workspace API (JSON:API over /api/v2), served unauthenticated
at GET /api/v2/openapi.json; `links` let stateful fuzzers chain create -> show/update/delete."""

from __future__ import annotations

from typing import Any

import msgspec

from services.workspace.context import Req
from shared.messages import HttpResponse

MEDIA = "application/vnd.api+json"
OPENAPI_VERSION = "3.0.3"

ERROR_DOC: dict[str, Any] = {
    "type": "object",
    "required": ["errors"],
    "properties": {
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "status": {"type": "string"},
                    "title": {"type": "string"},
                    "detail": {"type": "string"},
                    "source": {"type": "object"},
                },
            },
        }
    },
}
RESOURCE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string"},
        "attributes": {"type": "object"},
        "relationships": {"type": "object"},
        "links": {"type": "object"},
    },
}
ONE_DOC = {"type": "object", "properties": {"data": RESOURCE, "included": {"type": "array"}}}
LIST_DOC = {
    "type": "object",
    "properties": {
        "data": {"type": "array", "items": RESOURCE},
        "links": {"type": "object"},
        "meta": {"type": "object"},
    },
}
_ERRORS = {
    "400": "invalid query parameter",
    "401": "no valid API token",
    "404": "not found (also: not authorised)",
    "405": "method not allowed",
    "409": "conflict (duplicate name, locked workspace)",
    "422": "invalid document",
}

# Path parameters that clients know before they create anything. The examples name the
# resources a fresh install or a tutorial would have (`my-org`), so example-driven tools hit
# real objects as well as 404s.
NAME_SCHEMA = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$", "example": "my-org"}
PARAMS: dict[str, dict[str, Any]] = {
    "org": {"name": "org", "in": "path", "required": True, "schema": NAME_SCHEMA},
    "name": {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "example": "my-workspace"},
    },
    "id": {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
}
PAGE_PARAMS = [
    {"name": "page[number]", "in": "query", "schema": {"type": "integer", "minimum": 1}},
    {
        "name": "page[size]",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
    },
]


def _attrs(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def _doc_body(type_: str, attrs: dict[str, Any], rels: dict[str, Any] | None = None) -> Any:
    """A single-resource JSON:API request document of `type_`."""
    data: dict[str, Any] = {
        "type": "object",
        "required": ["type", "attributes"],
        "properties": {"type": {"type": "string", "enum": [type_]}, "attributes": attrs},
    }
    if rels:
        data["properties"]["relationships"] = {"type": "object", "properties": rels}
    return {
        "required": True,
        "content": {
            MEDIA: {
                "schema": {"type": "object", "required": ["data"], "properties": {"data": data}}
            }
        },
    }


def _ids_body(type_: str) -> dict[str, Any]:
    """A relationship document: `data` is an array of `{type, id}`."""
    item = {
        "type": "object",
        "required": ["type", "id"],
        "properties": {"type": {"type": "string", "enum": [type_]}, "id": {"type": "string"}},
    }
    return {
        "required": True,
        "content": {
            MEDIA: {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {"data": {"type": "array", "items": item}},
                }
            }
        },
    }


def _responses(ok: str, schema: dict[str, Any] | None = ONE_DOC) -> dict[str, Any]:
    out: dict[str, Any] = {ok: {"description": "OK"}}
    if ok != "204" and schema is not None:
        out[ok]["content"] = {MEDIA: {"schema": schema}}
    for code, text in _ERRORS.items():
        out[code] = {"description": text, "content": {MEDIA: {"schema": ERROR_DOC}}}
    return out


def _op(
    op_id: str,
    summary: str,
    ok: str = "200",
    *,
    body: dict[str, Any] | None = None,
    query: list[dict[str, Any]] | None = None,
    schema: dict[str, Any] | None = ONE_DOC,
    links: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "responses": _responses(ok, schema),
    }
    if body is not None:
        out["requestBody"] = body
    if query:
        out["parameters"] = query
    if links:
        out["responses"][ok]["links"] = links
    return out


def _link(op_id: str, **params: str) -> dict[str, Any]:
    return {"operationId": op_id, "parameters": params}


def _q(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema or {"type": "string"}}


ORG_ATTRS = {
    "name": {"type": "string"},
    "email": {"type": "string"},
    "default-execution-mode": {"type": "string", "enum": ["remote", "local", "agent"]},
    "collaborator-auth-policy": {"type": "string", "enum": ["password", "two_factor_mandatory"]},
}
WS_ATTRS = {
    "name": {"type": "string"},
    "description": {"type": "string", "nullable": True},
    "auto-apply": {"type": "boolean"},
    "allow-destroy-plan": {"type": "boolean"},
    "execution-mode": {"type": "string", "enum": ["remote", "local", "agent"]},
    "terraform-version": {"type": "string"},
    "working-directory": {"type": "string", "nullable": True},
    "trigger-prefixes": {"type": "array", "items": {"type": "string"}},
    "tag-names": {"type": "array", "items": {"type": "string"}},
    "auto-destroy-at": {"type": "string", "nullable": True},
    "vcs-repo": {
        "type": "object",
        "nullable": True,
        "properties": {
            "identifier": {"type": "string"},
            "branch": {"type": "string"},
            "oauth-token-id": {"type": "string"},
        },
    },
}
REL_ONE = {
    "type": "object",
    "properties": {
        "data": {
            "type": "object",
            "nullable": True,
            "properties": {"type": {"type": "string"}, "id": {"type": "string"}},
        }
    },
}
PROJECT_ATTRS = {"name": {"type": "string"}, "description": {"type": "string", "nullable": True}}
TEAM_ATTRS = {
    "name": {"type": "string"},
    "visibility": {"type": "string", "enum": ["secret", "organization"]},
    "sso-team-id": {"type": "string", "nullable": True},
    "organization-access": {"type": "object", "additionalProperties": {"type": "boolean"}},
}
WS_LINKS = {
    "ShowWorkspace": _link("showWorkspace", id="$response.body#/data/id"),
    "UpdateWorkspace": _link("updateWorkspace", id="$response.body#/data/id"),
    "DeleteWorkspace": _link("deleteWorkspace", id="$response.body#/data/id"),
    "LockWorkspace": _link("lockWorkspace", id="$response.body#/data/id"),
    "WorkspaceTags": _link("listWorkspaceTags", id="$response.body#/data/id"),
    "CreateWorkspaceVar": _link("createWorkspaceVar", id="$response.body#/data/id"),
    "ListWorkspaceVars": _link("listWorkspaceVars", id="$response.body#/data/id"),
    "CurrentStateVersion": _link("currentStateVersion", id="$response.body#/data/id"),
}
ORG_LINKS = {
    "ShowOrganization": _link("showOrganization", org="$response.body#/data/attributes/name"),
    "CreateWorkspace": _link("createWorkspace", org="$response.body#/data/attributes/name"),
    "CreateProject": _link("createProject", org="$response.body#/data/attributes/name"),
    "CreateTeam": _link("createTeam", org="$response.body#/data/attributes/name"),
    "DeleteOrganization": _link("deleteOrganization", org="$response.body#/data/attributes/name"),
}


def _paths() -> dict[str, Any]:
    org, name, id_ = PARAMS["org"], PARAMS["name"], PARAMS["id"]
    ws_rels = {"project": REL_ONE, "tags": {"type": "object"}}
    ws_query = [_q("include")]
    p: dict[str, Any] = {
        "/ping": {"get": _op("ping", "liveness", "204")},
        "/account/details": {"get": _op("accountDetails", "the calling user")},
        "/organizations": {
            "get": _op("listOrganizations", "list organizations", query=[*PAGE_PARAMS, _q("q")]),
            "post": _op(
                "createOrganization",
                "create an organization",
                "201",
                body=_doc_body("organizations", _attrs(ORG_ATTRS, ["name", "email"])),
                links=ORG_LINKS,
            ),
        },
        "/organizations/{org}": {
            "parameters": [org],
            "get": _op("showOrganization", "show an organization"),
            "patch": _op(
                "updateOrganization",
                "update an organization",
                body=_doc_body("organizations", _attrs(ORG_ATTRS)),
            ),
            "delete": _op("deleteOrganization", "delete an organization", "204"),
        },
        "/organizations/{org}/entitlement-set": {
            "parameters": [org],
            "get": _op("showEntitlements", "the organization's entitlements"),
        },
        "/organizations/{org}/projects": {
            "parameters": [org],
            "get": _op(
                "listProjects", "list projects", query=[*PAGE_PARAMS, _q("q"), _q("filter[names]")]
            ),
            "post": _op(
                "createProject",
                "create a project",
                "201",
                body=_doc_body("projects", _attrs(PROJECT_ATTRS, ["name"])),
                links={
                    "ShowProject": _link("showProject", id="$response.body#/data/id"),
                    "UpdateProject": _link("updateProject", id="$response.body#/data/id"),
                    "DeleteProject": _link("deleteProject", id="$response.body#/data/id"),
                },
            ),
        },
        "/projects/{id}": {
            "parameters": [id_],
            "get": _op("showProject", "show a project"),
            "patch": _op(
                "updateProject",
                "update a project",
                body=_doc_body("projects", _attrs(PROJECT_ATTRS)),
            ),
            "delete": _op("deleteProject", "delete a project", "204"),
        },
        "/organizations/{org}/workspaces": {
            "parameters": [org],
            "get": _op(
                "listWorkspaces",
                "list and search workspaces",
                query=[
                    *PAGE_PARAMS,
                    _q("search[name]"),
                    _q("search[tags]"),
                    _q("search[exclude-tags]"),
                    _q("search[wildcard-name]"),
                    _q("filter[project][id]"),
                    _q("sort", {"type": "string", "enum": ["name", "-name", "created-at"]}),
                    _q("include"),
                ],
                schema=LIST_DOC,
            ),
            "post": _op(
                "createWorkspace",
                "create a workspace",
                "201",
                body=_doc_body("workspaces", _attrs(WS_ATTRS, ["name"]), ws_rels),
                links=WS_LINKS,
            ),
        },
        "/organizations/{org}/workspaces/{name}": {
            "parameters": [org, name],
            "get": _op("showWorkspaceByName", "show a workspace by name", query=ws_query),
            "patch": _op(
                "updateWorkspaceByName",
                "update a workspace by name",
                body=_doc_body("workspaces", _attrs(WS_ATTRS), ws_rels),
            ),
            "delete": _op("deleteWorkspaceByName", "delete a workspace by name", "204"),
        },
        "/workspaces/{id}": {
            "parameters": [id_],
            "get": _op("showWorkspace", "show a workspace", query=ws_query),
            "patch": _op(
                "updateWorkspace",
                "update a workspace",
                body=_doc_body("workspaces", _attrs(WS_ATTRS), ws_rels),
            ),
            "delete": _op("deleteWorkspace", "delete a workspace", "204"),
        },
        "/workspaces/{id}/actions/safe-delete": {
            "parameters": [id_],
            "post": _op("safeDeleteWorkspace", "delete a workspace that manages nothing", "204"),
        },
        "/workspaces/{id}/actions/lock": {
            "parameters": [id_],
            "post": _op(
                "lockWorkspace",
                "lock a workspace",
                body={
                    "content": {
                        MEDIA: {
                            "schema": {
                                "type": "object",
                                "properties": {"reason": {"type": "string"}},
                            }
                        }
                    }
                },
                links={
                    "UnlockWorkspace": _link("unlockWorkspace", id="$request.path.id"),
                    # The lock is what writing a state version needs.
                    "CreateStateVersion": _link("createStateVersion", id="$request.path.id"),
                },
            ),
        },
        "/workspaces/{id}/actions/unlock": {
            "parameters": [id_],
            "post": _op("unlockWorkspace", "unlock a workspace"),
        },
        "/workspaces/{id}/actions/force-unlock": {
            "parameters": [id_],
            "post": _op("forceUnlockWorkspace", "force-unlock a workspace"),
        },
        "/workspaces/{id}/relationships/tags": {
            "parameters": [id_],
            "get": _op("listWorkspaceTags", "a workspace's tags", schema=LIST_DOC),
            "post": _op("addWorkspaceTags", "add tags", "204", body=_ids_body("tags")),
            "delete": _op("removeWorkspaceTags", "remove tags", "204", body=_ids_body("tags")),
        },
        "/workspaces/{id}/relationships/remote-state-consumers": {
            "parameters": [id_],
            "get": _op("listConsumers", "remote state consumers", schema=LIST_DOC),
            "post": _op("addConsumers", "add consumers", "204", body=_ids_body("workspaces")),
            "patch": _op(
                "replaceConsumers", "replace consumers", "204", body=_ids_body("workspaces")
            ),
            "delete": _op(
                "removeConsumers", "remove consumers", "204", body=_ids_body("workspaces")
            ),
        },
        "/organizations/{org}/tags": {
            "parameters": [org],
            "get": _op(
                "listOrgTags",
                "an organization's tags",
                query=[*PAGE_PARAMS, _q("q")],
                schema=LIST_DOC,
            ),
            "delete": _op("deleteOrgTags", "delete tags", "204", body=_ids_body("tags")),
        },
        "/organizations/{org}/teams": {
            "parameters": [org],
            "get": _op("listTeams", "list teams", query=[*PAGE_PARAMS, _q("q")], schema=LIST_DOC),
            "post": _op(
                "createTeam",
                "create a team",
                "201",
                body=_doc_body("teams", _attrs(TEAM_ATTRS, ["name"])),
                links={
                    "ShowTeam": _link("showTeam", id="$response.body#/data/id"),
                    "UpdateTeam": _link("updateTeam", id="$response.body#/data/id"),
                    "DeleteTeam": _link("deleteTeam", id="$response.body#/data/id"),
                },
            ),
        },
        "/teams/{id}": {
            "parameters": [id_],
            "get": _op("showTeam", "show a team"),
            "patch": _op(
                "updateTeam", "update a team", body=_doc_body("teams", _attrs(TEAM_ATTRS))
            ),
            "delete": _op("deleteTeam", "delete a team", "204"),
        },
        "/teams/{id}/relationships/users": {
            "parameters": [id_],
            "post": _op("addTeamMembers", "add members", "204", body=_ids_body("users")),
            "delete": _op("removeTeamMembers", "remove members", "204", body=_ids_body("users")),
        },
        "/team-workspaces": {
            "get": _op(
                "listTeamAccess",
                "team access to workspaces",
                query=[_q("filter[workspace][id]")],
                schema=LIST_DOC,
            ),
            "post": _op(
                "createTeamAccess",
                "grant a team access to a workspace",
                "201",
                body=_doc_body(
                    "team-workspaces",
                    _attrs(
                        {
                            "access": {
                                "type": "string",
                                "enum": ["read", "plan", "write", "admin", "custom"],
                            }
                        },
                        ["access"],
                    ),
                    {"workspace": REL_ONE, "team": REL_ONE},
                ),
            ),
        },
        "/team-workspaces/{id}": {
            "parameters": [id_],
            "get": _op("showTeamAccess", "show a team access"),
            "delete": _op("deleteTeamAccess", "revoke a team access", "204"),
        },
        "/admin/users": {
            "get": _op("listUsers", "list users", schema=LIST_DOC),
            "post": _op(
                "createUser",
                "create a user",
                "201",
                body=_doc_body(
                    "users",
                    _attrs(
                        {"username": {"type": "string"}, "email": {"type": "string"}},
                        ["username"],
                    ),
                ),
                links={"ShowUser": _link("showUser", id="$response.body#/data/id")},
            ),
        },
        "/users/{id}": {"parameters": [id_], "get": _op("showUser", "show a user")},
        "/organizations/{org}/policies": {
            "parameters": [org],
            "get": _op("listPolicies", "list policies", query=PAGE_PARAMS, schema=LIST_DOC),
        },
        "/policies/{id}": {"parameters": [id_], "get": _op("showPolicy", "show a policy")},
        "/organizations/{org}/policy-sets": {
            "parameters": [org],
            "get": _op("listPolicySets", "list policy sets", query=PAGE_PARAMS, schema=LIST_DOC),
        },
        "/policy-sets/{id}": {"parameters": [id_], "get": _op("showPolicySet", "show a set")},
    }
    from services.workspace import openapi_state  # it builds on the helpers above

    p.update(openapi_state.paths())
    from services.workspace import openapi_runs

    p.update(openapi_runs.paths())
    return {"/api/v2" + path: item for path, item in p.items()}


def document() -> dict[str, Any]:
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Trellis workspace API",
            "version": "2",
            "description": "HCP Terraform-style JSON:API for organizations, projects, "
            "workspaces, teams, tags, policies, state versions, variables and remote runs. "
            "Authenticate with "
            "`Authorization: Bearer <token>`.",
        },
        "paths": _paths(),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


# Built once: the document is static.
_BODY = msgspec.json.encode(document())


async def serve(_: Req) -> HttpResponse:
    return HttpResponse(status=200, headers={"content-type": "application/json"}, body=_BODY)
