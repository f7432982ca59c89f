"""The OpenAPI paths of state versions, their outputs and workspace variables (merged into
openapi.py's document)."""

from __future__ import annotations

from typing import Any

from services.workspace.openapi import (
    LIST_DOC,
    PAGE_PARAMS,
    PARAMS,
    REL_ONE,
    _attrs,
    _doc_body,
    _ids_body,
    _link,
    _op,
    _q,
)

SV_ATTRS = {
    "serial": {"type": "integer", "minimum": 0},
    "md5": {"type": "string", "pattern": "^[0-9a-fA-F]{32}$"},
    "lineage": {"type": "string"},
    "state": {"type": "string", "format": "byte"},
    "json-state": {"type": "string", "format": "byte"},
    "json-state-outputs": {"type": "string", "format": "byte"},
    "force": {"type": "boolean"},
}
VAR_ATTRS = {
    "key": {"type": "string"},
    "value": {"type": "string"},
    "description": {"type": "string", "nullable": True},
    "category": {"type": "string", "enum": ["terraform", "env"]},
    "hcl": {"type": "boolean"},
    "sensitive": {"type": "boolean"},
}
VARSET_ATTRS = {
    "name": {"type": "string"},
    "description": {"type": "string", "nullable": True},
    "global": {"type": "boolean"},
    "priority": {"type": "boolean"},
}
FILTERS = [
    *PAGE_PARAMS,
    _q("filter[workspace][name]", {"type": "string", "example": "my-workspace"}),
    _q("filter[organization][name]", {"type": "string", "example": "my-org"}),
]
VAR_PARAM = {"name": "var", "in": "path", "required": True, "schema": {"type": "string"}}
STATE_FILE = {"application/json": {"schema": {"type": "object"}}}


def paths() -> dict[str, Any]:
    id_ = PARAMS["id"]
    download = _op("downloadStateVersion", "the raw state file", schema=None)
    download["responses"]["200"]["content"] = STATE_FILE
    upload = _op("uploadStateVersion", "upload the state of a pending version", schema=None)
    upload["requestBody"] = {"required": True, "content": STATE_FILE}
    upload["parameters"] = [_q("upload-token")]
    upload["security"] = []  # the one-time URL is the credential
    return {
        "/workspaces/{id}/state-versions": {
            "parameters": [id_],
            "post": _op(
                "createStateVersion",
                "create a state version (the workspace must be locked by the caller)",
                "201",
                body=_doc_body(
                    "state-versions",
                    _attrs(SV_ATTRS, ["serial", "md5"]),
                    {"run": REL_ONE},
                ),
                links={
                    "ShowStateVersion": _link("showStateVersion", id="$response.body#/data/id"),
                    "ListStateVersionOutputs": _link(
                        "listStateVersionOutputs", id="$response.body#/data/id"
                    ),
                },
            ),
        },
        "/workspaces/{id}/current-state-version": {
            "parameters": [id_],
            "get": _op(
                "currentStateVersion",
                "the workspace's current state version",
                query=[_q("include")],
            ),
        },
        "/workspaces/{id}/current-state-version-outputs": {
            "parameters": [id_],
            "get": _op(
                "currentStateVersionOutputs",
                "outputs of the current state version",
                query=PAGE_PARAMS,
                schema=LIST_DOC,
            ),
        },
        "/state-versions": {
            "get": _op(
                "listStateVersions",
                "state versions of one workspace, newest first",
                query=FILTERS,
                schema=LIST_DOC,
            ),
        },
        "/state-versions/{id}": {
            "parameters": [id_],
            "get": _op("showStateVersion", "show a state version", query=[_q("include")]),
        },
        "/state-versions/{id}/download": {"parameters": [id_], "get": download},
        "/state-versions/{id}/content": {"parameters": [id_], "put": upload},
        "/state-versions/{id}/outputs": {
            "parameters": [id_],
            "get": _op(
                "listStateVersionOutputs",
                "outputs of a state version (sensitive values withheld)",
                query=PAGE_PARAMS,
                schema=LIST_DOC,
            ),
        },
        "/state-version-outputs/{id}": {
            "parameters": [id_],
            "get": _op("showStateVersionOutput", "show one output"),
        },
        "/workspaces/{id}/vars": {
            "parameters": [id_],
            "get": _op("listWorkspaceVars", "list variables", query=PAGE_PARAMS, schema=LIST_DOC),
            "post": _op(
                "createWorkspaceVar",
                "create a variable",
                "201",
                body=_doc_body("vars", _attrs(VAR_ATTRS, ["key", "category"])),
                links={
                    "UpdateWorkspaceVar": _link(
                        "updateWorkspaceVar",
                        id="$request.path.id",
                        var="$response.body#/data/id",
                    ),
                    "DeleteWorkspaceVar": _link(
                        "deleteWorkspaceVar",
                        id="$request.path.id",
                        var="$response.body#/data/id",
                    ),
                },
            ),
        },
        "/workspaces/{id}/vars/{var}": {
            "parameters": [id_, VAR_PARAM],
            "patch": _op(
                "updateWorkspaceVar",
                "update a variable",
                body=_doc_body("vars", _attrs(VAR_ATTRS)),
            ),
            "delete": _op("deleteWorkspaceVar", "delete a variable", "204"),
        },
        "/vars": {
            "get": _op("listVars", "list a workspace's variables", query=FILTERS, schema=LIST_DOC),
            "post": _op(
                "createVar",
                "create a variable (relationships.workspace)",
                "201",
                body=_doc_body(
                    "vars", _attrs(VAR_ATTRS, ["key", "category"]), {"workspace": REL_ONE}
                ),
            ),
        },
        "/organizations/{org}/varsets": {
            "parameters": [PARAMS["org"]],
            "get": _op(
                "listVarsets", "list variable sets", query=[*PAGE_PARAMS, _q("q")], schema=LIST_DOC
            ),
            "post": _op(
                "createVarset",
                "create a variable set",
                "201",
                body=_doc_body(
                    "varsets",
                    _attrs(VARSET_ATTRS, ["name"]),
                    {
                        "workspaces": {"type": "object"},
                        "projects": {"type": "object"},
                        "vars": {"type": "object"},
                    },
                ),
                links={
                    "ShowVarset": _link("showVarset", id="$response.body#/data/id"),
                    "ListVarsetVars": _link("listVarsetVars", id="$response.body#/data/id"),
                },
            ),
        },
        "/varsets/{id}": {
            "parameters": [id_],
            "get": _op("showVarset", "show a variable set"),
            "patch": _op(
                "updateVarset",
                "update a variable set",
                body=_doc_body("varsets", _attrs(VARSET_ATTRS)),
            ),
            "delete": _op("deleteVarset", "delete a variable set and its variables", "204"),
        },
        "/varsets/{id}/relationships/workspaces": {
            "parameters": [id_],
            "post": _op(
                "attachVarsetWorkspaces", "apply to workspaces", "204", body=_ids_body("workspaces")
            ),
            "delete": _op(
                "detachVarsetWorkspaces",
                "stop applying to workspaces",
                "204",
                body=_ids_body("workspaces"),
            ),
        },
        "/varsets/{id}/relationships/projects": {
            "parameters": [id_],
            "post": _op(
                "attachVarsetProjects", "apply to projects", "204", body=_ids_body("projects")
            ),
            "delete": _op(
                "detachVarsetProjects",
                "stop applying to projects",
                "204",
                body=_ids_body("projects"),
            ),
        },
        "/varsets/{id}/relationships/vars": {
            "parameters": [id_],
            "get": _op("listVarsetVars", "the set's variables", query=PAGE_PARAMS, schema=LIST_DOC),
            "post": _op(
                "createVarsetVar",
                "add a variable to the set",
                "201",
                body=_doc_body("vars", _attrs(VAR_ATTRS, ["key", "category"])),
            ),
        },
        "/varsets/{id}/relationships/vars/{var}": {
            "parameters": [id_, VAR_PARAM],
            "patch": _op(
                "updateVarsetVar",
                "update a variable of the set",
                body=_doc_body("vars", _attrs(VAR_ATTRS)),
            ),
            "delete": _op("deleteVarsetVar", "delete a variable of the set", "204"),
        },
        "/workspaces/{id}/varsets": {
            "parameters": [id_],
            "get": _op(
                "listWorkspaceVarsets",
                "variable sets applied to a workspace",
                query=PAGE_PARAMS,
                schema=LIST_DOC,
            ),
        },
        "/vars/{id}": {
            "parameters": [id_],
            "patch": _op(
                "updateVar", "update a variable", body=_doc_body("vars", _attrs(VAR_ATTRS))
            ),
            "delete": _op("deleteVar", "delete a variable", "204"),
        },
    }
