"""OpenAPI paths of the issue-21 endpoints: Variables, agent, status, raft, validate, client
stats and GC, deployment pause and allocation health, scaling policies, namespaces, metrics."""

from __future__ import annotations

from typing import Any

from services.scheduler.api.openapi import (
    ANY_LIST,
    JOB,
    LIST_QUERY,
    NAMESPACE,
    OBJ_ID,
    _body,
    _op,
)

STRINGS = {"type": "array", "items": {"type": "string"}}
VAR_PATH = {
    "name": "path",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "example": "app/config"},
}
FLAG = {"type": "boolean", "nullable": True}
VAR_QUERY = [
    NAMESPACE,
    {"name": "cas", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "lock-acquire", "in": "query", "schema": FLAG, "allowEmptyValue": True},
    {"name": "lock-renew", "in": "query", "schema": FLAG, "allowEmptyValue": True},
    {"name": "lock-release", "in": "query", "schema": FLAG, "allowEmptyValue": True},
]
VARIABLE = _body(
    {
        "Items": {"type": "object", "additionalProperties": {"type": "string"}},
        "Lock": {
            "type": "object",
            "properties": {
                "TTL": {"type": "string", "example": "15s"},
                "LockDelay": {"type": "string", "example": "15s"},
                "ID": {"type": "string"},
            },
        },
    }
)
NAMESPACE_BODY = _body(
    {
        "Name": {"type": "string", "example": "team-a"},
        "Description": {"type": "string"},
        "Meta": {"type": "object", "additionalProperties": {"type": "string"}},
    }
)
NODE_ID = [{"name": "node_id", "in": "query", "schema": {"type": "string"}}]
ADDRESS = [{"name": "address", "in": "query", "schema": {"type": "string"}}]
NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def paths() -> dict[str, Any]:
    return {
        "/vars": {
            "get": _op(
                "listVariables", "list variables (metadata only)", ANY_LIST, query=LIST_QUERY
            )
        },
        "/var/{path}": {
            "parameters": [VAR_PATH],
            "get": _op("readVariable", "read a variable", query=[NAMESPACE]),
            "put": _op(
                "writeVariable",
                "create or update a variable; cas and lock operations",
                query=VAR_QUERY,
                body=VARIABLE,
            ),
            "delete": _op("deleteVariable", "delete a variable", query=VAR_QUERY[:2]),
        },
        "/agent/members": {"get": _op("agentMembers", "the scheduler servers")},
        "/agent/servers": {
            "get": _op("agentServers", "server RPC addresses", STRINGS),
            "put": _op("agentSetServers", "set a client's servers", query=ADDRESS),
        },
        "/agent/health": {"get": _op("agentHealth", "agent health")},
        "/agent/join": {"put": _op("agentJoin", "join servers by address", query=ADDRESS)},
        "/agent/force-leave": {
            "put": _op(
                "agentForceLeave",
                "drop a member",
                query=[{"name": "node", "in": "query", "schema": {"type": "string"}}],
            )
        },
        "/operator/raft/configuration": {
            "get": _op("raftConfiguration", "the servers as Raft peers")
        },
        "/validate/job": {
            "post": _op(
                "validateJob", "validate a job without registering it", body=_body({"Job": JOB})
            )
        },
        "/client/stats": {"get": _op("clientStats", "host figures of a node", query=NODE_ID)},
        "/client/allocation/{id}/stats": {
            "parameters": [OBJ_ID],
            "get": _op("allocationStats", "resource usage of an allocation"),
        },
        "/client/gc": {"put": _op("clientGc", "remove finished allocations' dirs", query=NODE_ID)},
        "/client/allocation/{id}/gc": {
            "parameters": [OBJ_ID],
            "put": _op("allocationGc", "remove a finished allocation's dir"),
        },
        "/deployment/pause/{id}": {
            "parameters": [OBJ_ID],
            "post": _op(
                "pauseDeployment",
                "pause or resume a deployment",
                body=_body({"Pause": {"type": "boolean"}}),
            ),
        },
        "/deployment/allocation-health/{id}": {
            "parameters": [OBJ_ID],
            "post": _op(
                "deploymentAllocationHealth",
                "mark allocations healthy or unhealthy",
                body=_body({"HealthyAllocationIDs": STRINGS, "UnhealthyAllocationIDs": STRINGS}),
            ),
        },
        "/scaling/policies": {
            "get": _op(
                "scalingPolicies",
                "list scaling policies",
                ANY_LIST,
                query=[
                    NAMESPACE,
                    {"name": "job", "in": "query", "schema": {"type": "string"}},
                    {"name": "type", "in": "query", "schema": {"type": "string"}},
                ],
            )
        },
        "/scaling/policy/{id}": {
            "parameters": [OBJ_ID],
            "get": _op("scalingPolicy", "read a scaling policy"),
        },
        "/namespaces": {
            "get": _op(
                "listNamespaces",
                "list namespaces",
                ANY_LIST,
                query=[{"name": "prefix", "in": "query", "schema": {"type": "string"}}],
            )
        },
        "/namespace": {"post": _op("createNamespace", "create a namespace", body=NAMESPACE_BODY)},
        "/namespace/{name}": {
            "parameters": [NAME],
            "get": _op("readNamespace", "read a namespace"),
            "post": _op("writeNamespace", "create or update a namespace", body=NAMESPACE_BODY),
            "delete": _op("deleteNamespace", "delete a namespace"),
        },
        "/metrics": {
            "get": _op(
                "metrics",
                "process and scheduler metrics",
                query=[{"name": "format", "in": "query", "schema": {"type": "string"}}],
            )
        },
    }
