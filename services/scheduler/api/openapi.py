"""The OpenAPI 3 document of the scheduler's HTTP API (Nomad's /v1 shape), served
unauthenticated at GET /v1/openapi.json; `links` chain register -> read / versions / delete."""

from __future__ import annotations

from typing import Any

import msgspec

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import Request
from shared.messages import HttpResponse

OPENAPI_VERSION = "3.0.3"
JSON = "application/json"

# Errors are plain text, as Nomad writes them.
_ERRORS = {
    "400": "invalid request (bad body, parameter or job)",
    "403": "permission denied (ACLs on)",
    "404": "not found",
    "405": "invalid method",
    "409": "conflict (EnforceIndex mismatch)",
}
ANY_OBJ: dict[str, Any] = {"type": "object"}
ANY_LIST: dict[str, Any] = {"type": "array", "items": {"type": "object"}}

# `index` and `wait` (blocking queries) are left out on purpose: a generated index far in the
# future makes a request wait up to five minutes, which no fuzzer budget survives.
NAMESPACE = {"name": "namespace", "in": "query", "schema": {"type": "string"}}
LIST_QUERY = [
    NAMESPACE,
    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
    {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "next_token", "in": "query", "schema": {"type": "string"}},
    {"name": "filter", "in": "query", "schema": {"type": "string"}},
]
JOB_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "example": "example"},
}
OBJ_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}

TASK = {
    "type": "object",
    "required": ["Name", "Driver"],
    "properties": {
        "Name": {"type": "string"},
        "Driver": {"type": "string", "example": "raw_exec"},
        "Config": {"type": "object"},
        "Env": {"type": "object", "additionalProperties": {"type": "string"}},
        "Resources": {
            "type": "object",
            "properties": {"CPU": {"type": "integer"}, "MemoryMB": {"type": "integer"}},
        },
    },
}
GROUP = {
    "type": "object",
    "required": ["Name", "Tasks"],
    "properties": {
        "Name": {"type": "string"},
        "Count": {"type": "integer", "minimum": 0, "maximum": 10},
        "Tasks": {"type": "array", "items": TASK, "minItems": 1},
        "Meta": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
JOB = {
    "type": "object",
    "required": ["ID"],
    "properties": {
        "ID": {"type": "string", "example": "example"},
        "Name": {"type": "string"},
        "Type": {"type": "string", "enum": ["service", "batch", "system", "sysbatch"]},
        "Namespace": {"type": "string"},
        "Priority": {"type": "integer", "minimum": 1, "maximum": 100},
        "Datacenters": {"type": "array", "items": {"type": "string"}},
        "Meta": {"type": "object", "additionalProperties": {"type": "string"}},
        "TaskGroups": {"type": "array", "items": GROUP},
    },
}
REGISTER_BODY = {
    "required": True,
    "content": {
        JSON: {
            "schema": {
                "type": "object",
                "required": ["Job"],
                "properties": {
                    "Job": JOB,
                    "EnforceIndex": {"type": "boolean"},
                    "JobModifyIndex": {"type": "integer", "minimum": 0},
                    "PreserveCounts": {"type": "boolean"},
                    "EvalPriority": {"type": "integer", "minimum": 1, "maximum": 100},
                    "Submission": {
                        "type": "object",
                        "properties": {
                            "Source": {"type": "string"},
                            "Format": {"type": "string"},
                            "Variables": {"type": "string"},
                        },
                    },
                },
            }
        }
    },
}
PARSE_BODY = {
    "required": True,
    "content": {
        JSON: {
            "schema": {
                "type": "object",
                "required": ["JobHCL"],
                "properties": {
                    "JobHCL": {"type": "string"},
                    "Canonicalize": {"type": "boolean"},
                    "Variables": {"type": "string"},
                    "VariableFlags": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        }
    },
}


def _body(props: dict[str, Any]) -> dict[str, Any]:
    return {"content": {JSON: {"schema": {"type": "object", "properties": props}}}}


def _op(
    op_id: str,
    summary: str,
    schema: dict[str, Any] = ANY_OBJ,
    *,
    query: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    links: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK", "content": {JSON: {"schema": schema}}}
    if links:
        ok["links"] = links
    out: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": {"200": ok}}
    for code, text in _ERRORS.items():
        out["responses"][code] = {
            "description": text,
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    if query:
        out["parameters"] = query
    if body is not None:
        out["requestBody"] = body
    return out


def _job_link(op_id: str) -> dict[str, Any]:
    # The register response has no job id; the request that made it does.
    return {"operationId": op_id, "parameters": {"id": "$request.body#/Job/ID"}}


REGISTER_LINKS = {
    "ReadJob": _job_link("readJob"),
    "JobVersions": _job_link("jobVersions"),
    "JobSummary": _job_link("jobSummary"),
    "JobAllocations": _job_link("jobAllocations"),
    "JobEvaluations": _job_link("jobEvaluations"),
    "EvaluateJob": _job_link("evaluateJob"),
    "DeregisterJob": _job_link("deregisterJob"),
    "ReadEvaluation": {
        "operationId": "readEvaluation",
        "parameters": {"id": "$response.body#/EvalID"},
    },
}


def _paths() -> dict[str, Any]:
    ns = [NAMESPACE]
    job = [JOB_ID]
    p: dict[str, Any] = {
        "/jobs": {
            "get": _op(
                "listJobs",
                "list jobs",
                ANY_LIST,
                query=[*LIST_QUERY, {"name": "meta", "in": "query", "schema": {"type": "boolean"}}],
            ),
            "post": _op(
                "registerJob", "register a job", query=ns, body=REGISTER_BODY, links=REGISTER_LINKS
            ),
        },
        "/jobs/parse": {
            "post": _op("parseJob", "parse HCL2 into a job", query=ns, body=PARSE_BODY)
        },
        "/job/{id}": {
            "parameters": job,
            "get": _op("readJob", "read a job", query=ns),
            "post": _op("updateJob", "register a job at its id", query=ns, body=REGISTER_BODY),
            "delete": _op(
                "deregisterJob",
                "stop (or purge) a job",
                query=[*ns, {"name": "purge", "in": "query", "schema": {"type": "boolean"}}],
            ),
        },
        "/job/{id}/versions": {
            "parameters": job,
            "get": _op(
                "jobVersions",
                "a job's versions",
                query=[*ns, {"name": "diffs", "in": "query", "schema": {"type": "boolean"}}],
            ),
        },
        "/job/{id}/submission": {
            "parameters": job,
            "get": _op(
                "jobSubmission",
                "the source a version was submitted with",
                query=[
                    *ns,
                    {
                        "name": "version",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 0},
                    },
                ],
            ),
        },
        "/job/{id}/allocations": {
            "parameters": job,
            "get": _op(
                "jobAllocations",
                "a job's allocations",
                ANY_LIST,
                query=[*ns, {"name": "all", "in": "query", "schema": {"type": "boolean"}}],
            ),
        },
        "/job/{id}/evaluations": {
            "parameters": job,
            "get": _op("jobEvaluations", "a job's evaluations", ANY_LIST, query=ns),
        },
        "/job/{id}/deployments": {
            "parameters": job,
            "get": _op("jobDeployments", "a job's deployments", ANY_LIST, query=ns),
        },
        "/job/{id}/deployment": {
            "parameters": job,
            "get": _op("jobLatestDeployment", "a job's latest deployment", query=ns),
        },
        "/job/{id}/summary": {
            "parameters": job,
            "get": _op("jobSummary", "a job's summary", query=ns),
        },
        "/job/{id}/stable": {
            "parameters": job,
            "post": _op(
                "jobStable",
                "mark a version stable",
                query=ns,
                body=_body(
                    {"JobVersion": {"type": "integer", "minimum": 0}, "Stable": {"type": "boolean"}}
                ),
            ),
        },
        "/job/{id}/evaluate": {
            "parameters": job,
            "post": _op("evaluateJob", "create an evaluation for a job", query=ns),
        },
        "/nodes": {"get": _op("listNodes", "list client nodes", ANY_LIST, query=LIST_QUERY)},
        "/node/{id}": {"parameters": [OBJ_ID], "get": _op("readNode", "read a node")},
        "/node/{id}/allocations": {
            "parameters": [OBJ_ID],
            "get": _op("nodeAllocations", "a node's allocations", ANY_LIST),
        },
        "/node/{id}/eligibility": {
            "parameters": [OBJ_ID],
            "post": _op(
                "nodeEligibility",
                "toggle scheduling eligibility",
                body=_body({"Eligibility": {"type": "string", "enum": ["eligible", "ineligible"]}}),
            ),
        },
        "/allocations": {
            "get": _op("listAllocations", "list allocations", ANY_LIST, query=LIST_QUERY)
        },
        "/allocation/{id}": {
            "parameters": [OBJ_ID],
            "get": _op("readAllocation", "read an allocation", query=ns),
        },
        "/evaluations": {
            "get": _op(
                "listEvaluations",
                "list evaluations",
                ANY_LIST,
                query=[
                    *LIST_QUERY,
                    {"name": "status", "in": "query", "schema": {"type": "string"}},
                    {"name": "job", "in": "query", "schema": {"type": "string"}},
                ],
            )
        },
        "/evaluation/{id}": {
            "parameters": [OBJ_ID],
            "get": _op("readEvaluation", "read an evaluation", query=ns),
        },
        "/evaluation/{id}/allocations": {
            "parameters": [OBJ_ID],
            "get": _op("evaluationAllocations", "an evaluation's allocations", ANY_LIST),
        },
        "/deployments": {
            "get": _op("listDeployments", "list deployments", ANY_LIST, query=LIST_QUERY)
        },
        "/deployment/{id}": {
            "parameters": [OBJ_ID],
            "get": _op("readDeployment", "read a deployment", query=ns),
        },
        "/deployment/allocations/{id}": {
            "parameters": [OBJ_ID],
            "get": _op("deploymentAllocations", "a deployment's allocations", ANY_LIST),
        },
        "/deployment/promote/{id}": {
            "parameters": [OBJ_ID],
            "post": _op(
                "promoteDeployment",
                "promote canaries",
                body=_body(
                    {
                        "All": {"type": "boolean"},
                        "Groups": {"type": "array", "items": {"type": "string"}},
                    }
                ),
            ),
        },
        "/deployment/fail/{id}": {
            "parameters": [OBJ_ID],
            "post": _op("failDeployment", "mark a deployment failed"),
        },
        "/status/leader": {"get": _op("statusLeader", "the leader's address", {"type": "string"})},
        "/status/peers": {
            "get": _op(
                "statusPeers", "server peers", {"type": "array", "items": {"type": "string"}}
            )
        },
        "/regions": {
            "get": _op("regions", "known regions", {"type": "array", "items": {"type": "string"}})
        },
        "/agent/self": {"get": _op("agentSelf", "this agent")},
        "/acl/policies": {"get": _op("aclPolicies", "list ACL policies", ANY_LIST)},
        "/acl/token/self": {"get": _op("aclTokenSelf", "the calling token")},
    }
    from services.scheduler.api import openapi_day_two  # its paths use the helpers above

    p.update(openapi_day_two.paths())
    from services.scheduler.api import openapi_nomad  # issue 21: Variables, agent, ...

    p.update(openapi_nomad.paths())
    return {"/v1" + path: item for path, item in p.items()}


def document() -> dict[str, Any]:
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Trellis scheduler API",
            "version": "1",
            "description": "Nomad-style job scheduler. With ACLs on, send `X-Sched-Token` "
            "(or `X-Nomad-Token`).",
        },
        "paths": _paths(),
    }


# Built once: the document is static.
_BODY = msgspec.json.encode(document())


async def serve(_ctx: ApiContext, _req: Request) -> HttpResponse:
    return HttpResponse(status=200, headers={"Content-Type": JSON}, body=_BODY)
