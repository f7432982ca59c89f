"""ACL endpoints: bootstrap, policies and tokens, as Nomad has them."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from typing import Any

import structlog

from services.scheduler.acl import PolicyError, parse_rules
from services.scheduler.acl_bootstrap import BootstrapRefused, read_reset_file, reset_index_for
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.query import answer_ok, blocking, parse_options

log = structlog.get_logger("scheduler.acl")


def _token_stub(t: dict[str, Any]) -> dict[str, Any]:
    return {
        k: t.get(k)
        for k in (
            "AccessorID",
            "Name",
            "Type",
            "Policies",
            "Roles",
            "Global",
            "CreateTime",
            "ExpirationTime",
            "CreateIndex",
            "ModifyIndex",
        )
    }


def _new_token(
    name: str, kind: str, policies: list[str], global_: bool = False, secret: str = ""
) -> dict[str, Any]:
    return {
        "AccessorID": str(uuid.uuid4()),
        "SecretID": secret or str(uuid.UUID(bytes=secrets.token_bytes(16))),
        "Name": name,
        "Type": kind,
        "Policies": policies or None,
        "Roles": None,
        "Global": global_,
        "ExpirationTime": None,
        "ExpirationTTL": 0,
    }


def _require_enabled(ctx: ApiContext) -> None:
    if not ctx.acl_enabled:
        raise bad("ACL support disabled")


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


async def bootstrap(ctx: ApiContext, req: Request) -> Any:
    """Once (services/scheduler/acl_bootstrap.py): a configured management token already counts
    as the bootstrap; the reset file in the server's data dir allows one more."""
    _require_enabled(ctx)
    data = req.json() or {}
    secret = data.get("BootstrapSecret", "") if isinstance(data, dict) else ""
    if secret and (not isinstance(secret, str) or not _UUID.match(secret)):
        raise bad("invalid acl token")
    await ctx.record_configured_bootstrap()
    done = ctx.t.acl_bootstrap_index
    try:
        reset = reset_index_for(done, read_reset_file(ctx.server_dir) if done else 0)
    except BootstrapRefused as exc:
        raise bad(str(exc)) from None
    token = _new_token("Bootstrap Token", "management", [], True, secret)
    _, result = await ctx.append("acl.bootstrap", {"token": token, "reset_index": reset})
    if reset:
        # An audit trail of the operator's reset (the token itself is never logged).
        log.warning("ACL bootstrap reset used", reset_index=reset, accessor=result["AccessorID"])
    return ok(result, index=result["CreateIndex"])


async def list_policies(ctx: ApiContext, req: Request) -> Any:
    _require_enabled(ctx)
    opts = parse_options(req)
    ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        pols = sorted(ctx.t.acl_policies.values(), key=lambda p: p["Name"])
        return ctx.t.index["acl_policy"], [
            {k: p.get(k) for k in ("Name", "Description", "CreateIndex", "ModifyIndex")}
            for p in pols
            if p["Name"].startswith(opts.prefix)
        ]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["acl_policy"]
    )


async def policy(ctx: ApiContext, req: Request, name: str) -> Any:
    _require_enabled(ctx)
    if req.method == "GET":
        ctx.require_management(req)
        pol = ctx.t.acl_policies.get(name)
        if pol is None:
            raise HttpError(404, "ACL policy not found")
        return ok(pol, index=pol["ModifyIndex"])
    ctx.require_management(req)
    if req.method == "DELETE":
        index, _ = await ctx.append("acl.policy.delete", {"names": [name]})
        return ok(None, index=index)
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body")
    if data.get("Name") and data["Name"] != name:
        raise bad("Policy name does not match request path")
    rules = data.get("Rules", "")
    try:
        parse_rules(str(rules))
    except PolicyError as exc:
        raise bad(f"policy {name} invalid: {exc}") from None
    pol = {
        "Name": name,
        "Description": str(data.get("Description", "")),
        "Rules": str(rules),
        "JobACL": None,
    }
    index, _ = await ctx.append("acl.policy.upsert", {"policies": [pol]})
    return ok(None, index=index)


async def list_tokens(ctx: ApiContext, req: Request) -> Any:
    _require_enabled(ctx)
    ctx.require_management(req)
    opts = parse_options(req)

    def compute() -> tuple[int, Any]:
        toks = sorted(ctx.t.acl_tokens.values(), key=lambda t: t["AccessorID"])
        return ctx.t.index["acl_token"], [
            _token_stub(t) for t in toks if t["AccessorID"].startswith(opts.prefix)
        ]

    return await blocking(
        ctx.replog, opts, compute, answer_ok, index_of=lambda: ctx.t.index["acl_token"]
    )


async def token_self(ctx: ApiContext, req: Request) -> Any:
    _require_enabled(ctx)
    secret = ctx.token_of(req)
    if ctx.is_configured_management(secret):
        return ok(_configured_management_token(ctx, secret))
    accessor = ctx.t.token_by_secret.get(secret)
    if accessor is None:
        raise HttpError(403, "ACL token not found")
    return ok(ctx.t.acl_tokens[accessor])


def _configured_management_token(ctx: ApiContext, secret: str) -> dict[str, Any]:
    """The configured management token is Nomad's bootstrap token, but its secret never enters
    the log: its record is made on demand, with an accessor derived one-way from the secret."""
    digest = hashlib.sha256(b"trellis-configured-management-token:" + secret.encode()).digest()
    index = ctx.t.acl_bootstrap_index
    return {
        **_new_token("Bootstrap Token", "management", [], True, secret),
        "AccessorID": str(uuid.UUID(bytes=digest[:16], version=4)),
        "CreateIndex": index,
        "ModifyIndex": index,
    }


async def create_token(ctx: ApiContext, req: Request, accessor: str = "") -> Any:
    _require_enabled(ctx)
    ctx.require_management(req)
    data = req.json()
    if not isinstance(data, dict):
        raise bad("Failed to decode request body")
    kind = data.get("Type") or "client"
    if kind not in ("client", "management"):
        raise bad("Token type must be client or management")
    policies = data.get("Policies") or []
    if kind == "client" and not policies:
        raise bad("1 error occurred:\n\t* client token missing policies\n\n")
    if kind == "management" and policies:
        raise bad("1 error occurred:\n\t* management token cannot be associated with policies\n\n")
    if accessor:
        old = ctx.t.acl_tokens.get(accessor)
        if old is None:
            raise HttpError(404, "ACL token not found")
        token = {
            **old,
            "Name": data.get("Name", old["Name"]),
            "Type": kind,
            "Policies": policies or None,
        }
    else:
        token = _new_token(str(data.get("Name", "")), kind, policies, bool(data.get("Global")))
    _, result = await ctx.append("acl.token.upsert", {"tokens": [token]})
    return ok(result[0], index=result[0]["ModifyIndex"])


async def token(ctx: ApiContext, req: Request, accessor: str) -> Any:
    _require_enabled(ctx)
    if req.method == "GET":
        tok = ctx.t.acl_tokens.get(accessor)
        acl = ctx.resolve(req)
        if tok is None:
            raise HttpError(404, "ACL token not found")
        if not acl.management and tok["SecretID"] != ctx.token_of(req):
            raise HttpError(403, "Permission denied")
        return ok(tok, index=tok["ModifyIndex"])
    if req.method == "DELETE":
        ctx.require_management(req)
        index, _ = await ctx.append("acl.token.delete", {"accessors": [accessor]})
        return ok(None, index=index)
    return await create_token(ctx, req, accessor)
