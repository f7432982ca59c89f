"""The OpenAPI paths of remote runs: configuration versions, runs, plans, applies, the
organization's run queue and capacity, and the runner task's calls (merged into openapi.py's
document)."""

from __future__ import annotations

from typing import Any

from services.workspace.openapi import (
    LIST_DOC,
    PAGE_PARAMS,
    PARAMS,
    REL_ONE,
    _attrs,
    _doc_body,
    _op,
    _q,
)

CV_ATTRS = {"auto-queue-runs": {"type": "boolean"}, "speculative": {"type": "boolean"}}
RUN_ATTRS = {
    "message": {"type": "string", "nullable": True},
    "is-destroy": {"type": "boolean"},
    "plan-only": {"type": "boolean"},
    "auto-apply": {"type": "boolean"},
}
JSON = "application/json"
TEXT = {"text/plain": {"schema": {"type": "string"}}}
ARCHIVE = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
ACTION = {
    "name": "action",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "enum": ["apply", "discard", "cancel", "force-cancel"]},
}
CAP = {"name": "cap", "in": "path", "required": True, "schema": {"type": "string"}}


def _json_body(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            JSON: {"schema": {"type": "object", "required": required, "properties": props}}
        },
    }


def _raw(op: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    op["responses"]["200"]["content"] = content
    return op


def paths() -> dict[str, Any]:
    id_, org = PARAMS["id"], PARAMS["org"]
    upload = _op("uploadConfigurationVersion", "upload the configuration (.tar.gz)", schema=None)
    upload["requestBody"] = {"required": True, "content": ARCHIVE}
    upload["parameters"] = [_q("upload-token")]
    upload["security"] = []  # the one-time URL is the credential
    logs = {
        "parameters": [id_, CAP],
        "get": _raw(
            _op(
                "readLog",
                "the log from `offset`, at most `limit` bytes (STX first, ETX once finished)",
                query=[
                    _q("offset", {"type": "integer", "minimum": 0}),
                    _q("limit", {"type": "integer", "minimum": 0}),
                ],
                schema=None,
            ),
            TEXT,
        ),
    }
    logs["get"]["security"] = []  # the URL (log-read-url) is the credential
    redeem = _raw(
        _op(
            "redeemRunTicket",
            "the runner task trades its one-time ticket for a run token and the variables",
            body=_json_body(
                {
                    "phase": {"type": "string", "enum": ["plan", "apply"]},
                    "ticket": {"type": "string"},
                },
                ["phase", "ticket"],
            ),
            schema=None,
        ),
        {JSON: {"schema": {"type": "object"}}},
    )
    redeem["security"] = []
    result_body = _json_body(
        {
            "phase": {"type": "string", "enum": ["plan", "apply"]},
            "ok": {"type": "boolean"},
            "message": {"type": "string"},
            "has_changes": {"type": "boolean"},
            "counts": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "state_version_id": {"type": "string", "nullable": True},
        },
        ["phase", "ok"],
    )
    log_op = _op(
        "appendRunLog",
        "the runner task appends to its phase's log (run token)",
        "204",
        query=[_q("phase", {"type": "string", "enum": ["plan", "apply"]})],
    )
    log_op["requestBody"] = {"required": True, "content": TEXT}
    plan_put = _op(
        "savePlanFile", "the plan task saves its plan file (run token)", "204", schema=None
    )
    plan_put["requestBody"] = {"required": True, "content": ARCHIVE}
    plan_get = _raw(
        _op("readPlanFile", "the apply task reads the saved plan file (run token)", schema=None),
        ARCHIVE,
    )
    return {
        "/workspaces/{id}/configuration-versions": {
            "parameters": [id_],
            "post": _op(
                "createConfigurationVersion",
                "a configuration version with its one-time upload-url",
                "201",
                body=_doc_body("configuration-versions", _attrs(CV_ATTRS)),
            ),
            "get": _op(
                "listConfigurationVersions", "newest first", query=PAGE_PARAMS, schema=LIST_DOC
            ),
        },
        "/configuration-versions/{id}": {
            "parameters": [id_],
            "get": _op("showConfigurationVersion", "a configuration version"),
        },
        "/configuration-versions/{id}/download": {
            "parameters": [id_],
            "get": _raw(_op("downloadConfigurationVersion", "the .tar.gz", schema=None), ARCHIVE),
        },
        "/configuration-versions/{id}/upload": {"parameters": [id_], "put": upload},
        "/runs": {
            "post": _op(
                "createRun",
                "queue a run (plan, then apply on confirmation or auto-apply)",
                "201",
                body=_doc_body(
                    "runs",
                    _attrs(RUN_ATTRS),
                    {"workspace": REL_ONE, "configuration-version": REL_ONE},
                ),
            ),
        },
        "/runs/{id}": {"parameters": [id_], "get": _op("showRun", "a run")},
        "/workspaces/{id}/runs": {
            "parameters": [id_],
            "get": _op("listRuns", "newest first", query=PAGE_PARAMS, schema=LIST_DOC),
        },
        "/runs/{id}/actions/{action}": {
            "parameters": [id_, ACTION],
            "post": _op("runAction", "apply, discard, cancel or force-cancel", "202", schema=None),
        },
        "/plans/{id}": {"parameters": [id_], "get": _op("showPlan", "a run's plan")},
        "/applies/{id}": {"parameters": [id_], "get": _op("showApply", "a run's apply")},
        "/plans/{id}/logs/{cap}": logs,
        "/applies/{id}/logs/{cap}": logs,
        "/organizations/{org}/runs/queue": {
            "parameters": [org],
            "get": _op("runQueue", "queued runs", query=PAGE_PARAMS, schema=LIST_DOC),
        },
        "/organizations/{org}/capacity": {
            "parameters": [org],
            "get": _op("runCapacity", "pending and running runs"),
        },
        "/runs/{id}/runner/redeem": {"parameters": [id_], "post": redeem},
        "/runs/{id}/runner/logs": {"parameters": [id_], "post": log_op},
        "/runs/{id}/runner/plan-file": {"parameters": [id_], "put": plan_put, "get": plan_get},
        "/runs/{id}/runner/result": {
            "parameters": [id_],
            "post": _op(
                "reportRunResult",
                "the runner task's result (run token)",
                body=result_body,
                schema=None,
            ),
        },
    }
