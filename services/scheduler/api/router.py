"""Routing of /v1 paths to handlers, and the envelope handler the bus calls: every failure
becomes a plain-text answer with Nomad's status code, never a 500 for bad input."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import structlog

from services.scheduler.api import acl_endpoints as acl
from services.scheduler.api import agent as agent_api
from services.scheduler.api import cluster, events, fs, housekeeping, jobs, lifecycle, openapi
from services.scheduler.api import deployment_ops as dep_ops
from services.scheduler.api import metrics as metrics_api
from services.scheduler.api import namespaces as ns_api
from services.scheduler.api import scaling as scaling_api
from services.scheduler.api import stats as stats_api
from services.scheduler.api import status as status_api
from services.scheduler.api import validate as validate_api
from services.scheduler.api import variables as vars_api
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, error
from shared.bus import CallContext
from shared.deferred import Deferred
from shared.messages import HttpRequest, HttpResponse

log = structlog.get_logger("scheduler.api")

Handler = Callable[..., Awaitable[HttpResponse]]
INVALID_METHOD = "Invalid method"

# (path after /v1 as segments with ":x" placeholders, {method: handler})
ROUTES: list[tuple[list[str], dict[str, Handler]]] = [
    (["openapi.json"], {"GET": openapi.serve}),
    (["jobs"], {"GET": jobs.list_jobs, "POST": jobs.register, "PUT": jobs.register}),
    (["jobs", "parse"], {"POST": jobs.parse, "PUT": jobs.parse, "GET": jobs.parse}),
    (
        ["job", ":id"],
        {"GET": jobs.read, "POST": jobs.register, "PUT": jobs.register, "DELETE": jobs.deregister},
    ),
    (["job", ":id", "submission"], {"GET": jobs.submission}),
    (["job", ":id", "versions"], {"GET": jobs.versions}),
    (["job", ":id", "allocations"], {"GET": jobs.allocations}),
    (["job", ":id", "evaluations"], {"GET": jobs.evaluations}),
    (["job", ":id", "deployments"], {"GET": jobs.deployments}),
    (["job", ":id", "deployment"], {"GET": jobs.latest_deployment}),
    (["job", ":id", "summary"], {"GET": jobs.summary}),
    (["job", ":id", "stable"], {"POST": jobs.stable, "PUT": jobs.stable}),
    (["job", ":id", "evaluate"], {"POST": jobs.evaluate, "PUT": jobs.evaluate}),
    # day two (issue 17)
    (["job", ":id", "plan"], {"POST": lifecycle.plan, "PUT": lifecycle.plan}),
    (["job", ":id", "revert"], {"POST": lifecycle.revert, "PUT": lifecycle.revert}),
    (
        ["job", ":id", "scale"],
        {"GET": lifecycle.scale_status, "POST": lifecycle.scale, "PUT": lifecycle.scale},
    ),
    (["job", ":id", "dispatch"], {"POST": lifecycle.dispatch, "PUT": lifecycle.dispatch}),
    (
        ["job", ":id", "periodic", "force"],
        {"POST": lifecycle.periodic_force, "PUT": lifecycle.periodic_force},
    ),
    (["allocation", ":id", "stop"], {"POST": lifecycle.alloc_stop, "PUT": lifecycle.alloc_stop}),
    (["node", ":id", "drain"], {"POST": housekeeping.node_drain, "PUT": housekeeping.node_drain}),
    (["system", "gc"], {"PUT": housekeeping.system_gc, "POST": housekeeping.system_gc}),
    (["search"], {"POST": housekeeping.search, "PUT": housekeeping.search}),
    (["search", "fuzzy"], {"POST": housekeeping.fuzzy_search, "PUT": housekeeping.fuzzy_search}),
    (["event", "stream"], {"GET": events.stream}),
    (["client", "fs", "logs", ":id"], {"GET": fs.logs}),
    (["client", "fs", "ls", ":id"], {"GET": fs.ls}),
    (["client", "fs", "cat", ":id"], {"GET": fs.cat}),
    (["client", "fs", "stat", ":id"], {"GET": fs.stat}),
    (["client", "fs", "readat", ":id"], {"GET": fs.readat}),
    (["client", "fs", "stream", ":id"], {"GET": fs.stream}),
    (["client", "allocation", ":id", "restart"], {"POST": fs.restart, "PUT": fs.restart}),
    (["client", "allocation", ":id", "signal"], {"POST": fs.signal, "PUT": fs.signal}),
    # Nomad Variables, agent and housekeeping endpoints (issue 21)
    (["vars"], {"GET": vars_api.list_vars}),
    (
        ["var", "*path"],
        {m: vars_api.variable for m in ("GET", "PUT", "POST", "DELETE")},
    ),
    (["agent", "members"], {"GET": agent_api.members}),
    (
        ["agent", "servers"],
        {"GET": agent_api.servers, "PUT": agent_api.servers, "POST": agent_api.servers},
    ),
    (["agent", "health"], {"GET": agent_api.health}),
    (["agent", "join"], {"PUT": agent_api.join, "POST": agent_api.join}),
    (["agent", "force-leave"], {"PUT": agent_api.force_leave, "POST": agent_api.force_leave}),
    (["operator", "raft", "configuration"], {"GET": status_api.raft_configuration}),
    (["validate", "job"], {"PUT": validate_api.validate_job, "POST": validate_api.validate_job}),
    (["client", "stats"], {"GET": stats_api.client_stats}),
    (["client", "allocation", ":id", "stats"], {"GET": stats_api.alloc_stats}),
    (["client", "gc"], {m: stats_api.client_gc for m in ("GET", "PUT", "POST")}),
    (
        ["client", "allocation", ":id", "gc"],
        {m: stats_api.alloc_gc for m in ("GET", "PUT", "POST")},
    ),
    (["deployment", "pause", ":id"], {"PUT": dep_ops.pause, "POST": dep_ops.pause}),
    (
        ["deployment", "allocation-health", ":id"],
        {"PUT": dep_ops.allocation_health, "POST": dep_ops.allocation_health},
    ),
    (["scaling", "policies"], {"GET": scaling_api.list_policies}),
    (["scaling", "policy", ":id"], {"GET": scaling_api.read_policy}),
    (["namespaces"], {"GET": ns_api.list_namespaces}),
    (["namespace"], {"PUT": ns_api.write, "POST": ns_api.write}),
    (["namespace", ":name"], {m: ns_api.read for m in ("GET", "PUT", "POST", "DELETE")}),
    (["metrics"], {"GET": metrics_api.metrics}),
    (["nodes"], {"GET": cluster.list_nodes}),
    (["node", ":id"], {"GET": cluster.read_node}),
    (["node", ":id", "allocations"], {"GET": cluster.node_allocations}),
    (
        ["node", ":id", "eligibility"],
        {"POST": cluster.node_eligibility, "PUT": cluster.node_eligibility},
    ),
    (["allocations"], {"GET": cluster.list_allocations}),
    (["allocation", ":id"], {"GET": cluster.read_allocation}),
    (["evaluations"], {"GET": cluster.list_evaluations}),
    (["evaluation", ":id"], {"GET": cluster.read_evaluation}),
    (["evaluation", ":id", "allocations"], {"GET": cluster.evaluation_allocations}),
    (["deployments"], {"GET": cluster.list_deployments}),
    (["deployment", ":id"], {"GET": cluster.read_deployment}),
    (["deployment", "allocations", ":id"], {"GET": cluster.deployment_allocations}),
    (
        ["deployment", "promote", ":id"],
        {"POST": cluster.promote_deployment, "PUT": cluster.promote_deployment},
    ),
    (
        ["deployment", "fail", ":id"],
        {"POST": cluster.fail_deployment, "PUT": cluster.fail_deployment},
    ),
    (["status", "leader"], {"GET": status_api.leader}),
    (["status", "peers"], {"GET": status_api.peers}),
    (["regions"], {"GET": cluster.regions}),
    (["agent", "self"], {"GET": cluster.agent_self}),
    (["acl", "bootstrap"], {"POST": acl.bootstrap, "PUT": acl.bootstrap}),
    (["acl", "policies"], {"GET": acl.list_policies}),
    (
        ["acl", "policy", ":id"],
        {"GET": acl.policy, "POST": acl.policy, "PUT": acl.policy, "DELETE": acl.policy},
    ),
    (["acl", "tokens"], {"GET": acl.list_tokens}),
    (["acl", "token"], {"POST": acl.create_token, "PUT": acl.create_token}),
    (["acl", "token", "self"], {"GET": acl.token_self}),
    (
        ["acl", "token", ":id"],
        {"GET": acl.token, "POST": acl.token, "PUT": acl.token, "DELETE": acl.token},
    ),
]


def match(segments: list[str]) -> tuple[dict[str, Handler], list[str]] | None:
    """Literal segments win over placeholders (`/jobs/parse`, `/acl/token/self`). A last
    pattern segment `*x` takes the rest of the path, one argument per segment (`/var/a/b`)."""
    best: tuple[int, dict[str, Handler], list[str]] | None = None
    for pattern, methods in ROUTES:
        if pattern[-1].startswith("*") and len(segments) >= len(pattern):
            segments_ = segments[: len(pattern) - 1]
            if all(p.startswith(":") or p == s for p, s in zip(pattern, segments_, strict=False)):
                literal = sum(1 for p in pattern[:-1] if not p.startswith(":"))
                args = [s for p, s in zip(pattern, segments_, strict=False) if p.startswith(":")]
                args += segments[len(pattern) - 1 :]
                if best is None or literal > best[0]:
                    best = (literal, methods, args)
            continue
        if len(pattern) != len(segments):
            continue
        args: list[str] = []
        literal = 0
        for p, s in zip(pattern, segments, strict=True):
            if p.startswith(":"):
                args.append(s)
            elif p == s:
                literal += 1
            else:
                break
        else:
            if best is None or literal > best[0]:
                best = (literal, methods, args)
    return (best[1], best[2]) if best else None


def _job_suffixes() -> list[list[str]]:
    """The sub-resources of `/job/:id/...`, longest first (from the route table itself)."""
    tails = {tuple(p[2:]) for p, _ in ROUTES if p[:2] == ["job", ":id"] and len(p) > 2}
    return sorted((list(t) for t in tails), key=len, reverse=True)


def job_segments(segments: list[str]) -> list[str]:
    """Job IDs may hold slashes (dispatched and periodic children: `parent/dispatch-...`), and
    clients send them unescaped. As Nomad does, a known sub-resource at the end names the
    endpoint and everything between `job/` and it is the ID."""
    if len(segments) < 3 or segments[0] != "job":
        return segments
    rest = segments[1:]
    for tail in _JOB_SUFFIXES:
        if len(rest) > len(tail) and rest[-len(tail) :] == tail:
            return ["job", "/".join(rest[: -len(tail)]), *tail]
    return ["job", "/".join(rest)]


_JOB_SUFFIXES = _job_suffixes()


class Router:
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    async def handle(self, env: HttpRequest, _: CallContext) -> HttpResponse | Deferred:
        """The answer, or a Deferred one (a blocking query still waiting: shared/deferred.py)."""
        try:
            req = Request.from_envelope(env)
            if not req.segments or req.segments[0] != "v1":
                return error(404, "404 page not found")
            found = match(job_segments(req.segments[1:]))
            if found is None:
                return error(404, "404 page not found")
            methods, args = found
            handler = methods.get(req.method)
            if handler is None:
                return error(405, INVALID_METHOD)
            return self._complete(req, await handler(self.ctx, req, *args))
        except HttpError as exc:
            return error(exc.code, exc.message)
        except Exception:
            log.exception("scheduler request failed", path=env.path)
            return error(500, "internal error")

    def _complete(self, req: Request, resp: HttpResponse | Deferred) -> HttpResponse | Deferred:
        if isinstance(resp, Deferred):
            # The rest of the answer happens later: give it the same error handling.
            inner = resp.finish

            async def finish() -> HttpResponse | Deferred:
                try:
                    return self._complete(req, await inner())
                except HttpError as exc:
                    return error(exc.code, exc.message)
                except Exception:
                    log.exception("scheduler request failed", path=req.raw.path)
                    return error(500, "internal error")

            return Deferred(resp.ready, finish)
        if req.has("pretty") and resp.headers.get("Content-Type") == "application/json":
            resp.body = json.dumps(json.loads(resp.body or b"null"), indent=4).encode()
        return resp
