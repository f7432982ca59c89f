"""Routing of /v1 paths to handlers, and the envelope handler the bus calls: every failure
becomes a plain-text answer with Nomad's status code, never a 500 for bad input."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import structlog

from services.scheduler.api import acl_endpoints as acl
from services.scheduler.api import cluster, jobs, openapi
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
    (["status", "leader"], {"GET": cluster.leader}),
    (["status", "peers"], {"GET": cluster.peers}),
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
    """Literal segments win over placeholders (`/jobs/parse`, `/acl/token/self`)."""
    best: tuple[int, dict[str, Handler], list[str]] | None = None
    for pattern, methods in ROUTES:
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


class Router:
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    async def handle(self, env: HttpRequest, _: CallContext) -> HttpResponse | Deferred:
        """The answer, or a Deferred one (a blocking query still waiting: shared/deferred.py)."""
        try:
            req = Request.from_envelope(env)
            if not req.segments or req.segments[0] != "v1":
                return error(404, "404 page not found")
            found = match(req.segments[1:])
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
