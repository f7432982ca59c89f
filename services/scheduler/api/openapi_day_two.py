"""OpenAPI paths of the day-two endpoints (issue 17), merged into api/openapi.py's document."""

from __future__ import annotations

from typing import Any

from services.scheduler.api.openapi import (
    ANY_LIST,
    JOB,
    JOB_ID,
    NAMESPACE,
    OBJ_ID,
    _body,
    _op,
)

ns = [NAMESPACE]
STR = {"type": "string"}
INT0 = {"type": "integer", "minimum": 0}


def _q(name: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


FS_PATH = _q("path", {"type": "string", "example": "alloc/logs"})
RAW = {"type": "string"}


def paths() -> dict[str, Any]:
    job = [JOB_ID]
    alloc = [OBJ_ID]
    return {
        "/job/{id}/plan": {
            "parameters": job,
            "post": _op(
                "planJob",
                "dry-run a job change: diff, placements and failures; nothing is written",
                query=ns,
                body=_body({"Job": JOB, "Diff": {"type": "boolean"}}),
            ),
        },
        "/job/{id}/revert": {
            "parameters": job,
            "post": _op(
                "revertJob",
                "register an earlier version again",
                query=ns,
                body=_body({"JobVersion": INT0, "EnforcePriorVersion": INT0}),
            ),
        },
        "/job/{id}/scale": {
            "parameters": job,
            "get": _op("jobScaleStatus", "a job's group counts and scaling events", query=ns),
            "post": _op(
                "scaleJob",
                "change a group's count (with a message recorded as a scaling event)",
                query=ns,
                body=_body(
                    {
                        "Count": {"type": "integer", "minimum": 0, "maximum": 5},
                        "Target": {"type": "object", "properties": {"Group": STR}},
                        "Message": STR,
                        "Error": {"type": "boolean"},
                        "Meta": {"type": "object"},
                    }
                ),
            ),
        },
        "/job/{id}/dispatch": {
            "parameters": job,
            "post": _op(
                "dispatchJob",
                "dispatch a parameterized job with a payload (base64) and meta",
                query=ns,
                body=_body(
                    {
                        "Payload": {"type": "string", "format": "byte"},
                        "Meta": {"type": "object", "additionalProperties": STR},
                    }
                ),
            ),
        },
        "/job/{id}/periodic/force": {
            "parameters": job,
            "post": _op("forcePeriodicJob", "launch a periodic job now", query=ns),
        },
        "/allocation/{id}/stop": {
            "parameters": alloc,
            "post": _op("stopAllocation", "stop an allocation (it is replaced)", query=ns),
        },
        "/node/{id}/drain": {
            "parameters": [OBJ_ID],
            "post": _op(
                "drainNode",
                "drain a node (or cancel a drain with DrainSpec null)",
                body=_body(
                    {
                        "DrainSpec": {
                            "type": "object",
                            "nullable": True,
                            "properties": {
                                "Deadline": {"type": "integer"},
                                "IgnoreSystemJobs": {"type": "boolean"},
                            },
                        },
                        "MarkEligible": {"type": "boolean"},
                    }
                ),
            ),
        },
        "/system/gc": {"put": _op("systemGC", "garbage-collect terminal records now")},
        "/search": {
            "post": _op(
                "search",
                "prefix search over jobs, evals, allocs, nodes, deployments, namespaces",
                query=ns,
                body=_body(
                    {
                        "Prefix": STR,
                        "Context": {
                            "type": "string",
                            "enum": [
                                "all",
                                "jobs",
                                "evals",
                                "allocs",
                                "nodes",
                                "deployment",
                                "namespaces",
                            ],
                        },
                    }
                ),
            ),
        },
        "/event/stream": {
            "get": _op(
                "eventStream",
                "newline-delimited JSON events by topic from an index on; `{}` every 10 s while"
                " idle (an endless stream: the fuzz suites leave it out)",
                query=[
                    *ns,
                    _q("topic", {"type": "string", "example": "Job:*"}),
                    _q("index", INT0),
                ],
            ),
        },
        "/search/fuzzy": {
            "post": _op(
                "fuzzySearch",
                "substring search over job, group, task and node names",
                query=ns,
                body=_body(
                    {
                        "Text": {"type": "string", "minLength": 2},
                        "Context": {
                            "type": "string",
                            "enum": ["all", "jobs", "nodes", "groups", "tasks", "namespaces"],
                        },
                    }
                ),
            ),
        },
        "/client/fs/logs/{id}": {
            "parameters": alloc,
            "get": _op(
                "allocLogs",
                "a task's stdout/stderr (framed JSON, or plain text with plain=true), across "
                "its rotated files; follow=true streams until the task is dead",
                RAW,
                query=[
                    _q("task", STR, required=True),
                    _q("type", {"type": "string", "enum": ["stdout", "stderr"]}, required=True),
                    _q("origin", {"type": "string", "enum": ["start", "end"]}),
                    _q("offset", INT0),
                    _q("follow", {"type": "boolean"}),
                    _q("plain", {"type": "boolean"}),
                ],
            ),
        },
        "/client/fs/ls/{id}": {
            "parameters": alloc,
            "get": _op(
                "allocFsList", "list a directory of the allocation", ANY_LIST, query=[FS_PATH]
            ),
        },
        "/client/fs/stat/{id}": {
            "parameters": alloc,
            "get": _op("allocFsStat", "stat a file of the allocation", query=[FS_PATH]),
        },
        "/client/fs/cat/{id}": {
            "parameters": alloc,
            "get": _op("allocFsCat", "read a file of the allocation", RAW, query=[FS_PATH]),
        },
        "/client/allocation/{id}/restart": {
            "parameters": alloc,
            "post": _op(
                "restartAllocation",
                "restart an allocation's tasks in place",
                body=_body({"TaskName": STR}),
            ),
        },
        "/client/allocation/{id}/signal": {
            "parameters": alloc,
            "post": _op(
                "signalAllocation",
                "send a signal to an allocation's tasks",
                body=_body({"Signal": {"type": "string", "example": "SIGUSR1"}, "Task": STR}),
            ),
        },
        "/client/fs/readat/{id}": {
            "parameters": alloc,
            "get": _op(
                "allocFsReadAt",
                "read part of a file of the allocation",
                RAW,
                query=[FS_PATH, _q("offset", INT0), _q("limit", INT0)],
            ),
        },
        "/client/fs/stream/{id}": {
            "parameters": alloc,
            "get": _op(
                "allocFsStream",
                "stream a file of the allocation (framed JSON, followed unless follow=false)",
                RAW,
                query=[
                    FS_PATH,
                    _q("origin", {"type": "string", "enum": ["start", "end"]}),
                    _q("offset", INT0),
                    _q("follow", {"type": "boolean"}),
                    _q("plain", {"type": "boolean"}),
                ],
            ),
        },
    }
