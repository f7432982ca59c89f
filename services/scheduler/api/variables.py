"""Nomad Variables over HTTP: GET /v1/vars (metadata only), and GET, PUT, DELETE /v1/var/:path
with `cas` and the lock operations. Items are sealed here, before they enter the log, under the
scheduler's data key from the secrets barrier; they are opened only to answer a caller with
`read` on the path, and never logged."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from services.scheduler.acl import Acl
from services.scheduler.api.context import PERMISSION_DENIED, ApiContext
from services.scheduler.api.http import HttpError, Request, bad, ok
from services.scheduler.api.jobs import _filtered
from services.scheduler.api.query import blocking, parse_options
from services.scheduler.variables.acl import allow_variable
from services.scheduler.variables.model import (
    LOCK_OPS,
    VariableError,
    check_items,
    check_path,
    metadata,
    parse_lock,
    vkey,
)
from services.scheduler.variables.workload import DATA_KEY, aad
from shared.deferred import Deferred
from shared.messages import HttpResponse
from shared.sealing import KeyUnavailable, seal, unseal


def _now() -> int:
    return time.time_ns()


async def _key(ctx: ApiContext) -> bytes:
    if ctx.keys is None:
        raise HttpError(500, "this scheduler has no access to the variables encryption key")
    try:
        return await ctx.keys.get(DATA_KEY)
    except KeyUnavailable as exc:
        raise HttpError(
            503,
            "the encryption key for variables is not available (is the secrets service "
            f"running and unsealed?): {exc.reason}",
        ) from None


async def _items(ctx: ApiContext, rec: dict[str, Any]) -> dict[str, str]:
    sealed = rec.get("_Sealed")
    if not sealed:
        return {}
    try:
        plain = unseal(await _key(ctx), sealed, aad(rec["Namespace"], rec["Path"]))
    except ValueError:
        raise HttpError(500, "a stored variable does not decrypt under the current key") from None
    return json.loads(plain)


async def full(
    ctx: ApiContext, rec: dict[str, Any], *, items: bool = True, lock_id: bool = False
) -> dict[str, Any]:
    out = metadata(rec, _now(), with_lock_id=lock_id)
    out["Items"] = await _items(ctx, rec) if items else None
    return out


def _ns(req: Request) -> str:
    ns = req.namespace
    if ns == "*":
        raise bad("a variable belongs to one namespace: '*' is only for listing")
    return ns


def _require(ctx: ApiContext, req: Request, ns: str, path: str, cap: str) -> Acl:
    acl = ctx.resolve(req)
    if not allow_variable(acl, ns, path, cap):
        raise HttpError(403, PERMISSION_DENIED)
    return acl


def _path(parts: list[str]) -> str:
    path = "/".join(parts)
    try:
        check_path(path)
    except VariableError as exc:
        raise bad(str(exc)) from None
    return path


async def list_vars(ctx: ApiContext, req: Request) -> Any:
    opts = parse_options(req)
    ns = req.namespace
    acl = ctx.resolve(req)

    def compute() -> tuple[int, Any]:
        now = _now()
        recs = [
            v
            for v in ctx.t.variables.values()
            if (ns == "*" or v["Namespace"] == ns)
            and v["Path"].startswith(opts.prefix)
            and allow_variable(acl, v["Namespace"], v["Path"], "list")
        ]
        recs.sort(key=lambda v: (v["Namespace"], v["Path"]))
        metas = _filtered(opts, [metadata(v, now) for v in recs])
        if opts.next_token:
            metas = [m for m in metas if f"{m['Namespace']}.{m['Path']}" >= opts.next_token]
        token = ""
        if opts.per_page and len(metas) > opts.per_page:
            nxt = metas[opts.per_page]
            token = f"{nxt['Namespace']}.{nxt['Path']}"
            metas = metas[: opts.per_page]
        return ctx.t.index["variables"], (metas, token)

    def answer(index: int, result: Any) -> Any:
        body, token = result
        return ok(body, index=index, headers={"X-Sched-NextToken": token} if token else None)

    return await blocking(
        ctx.replog, opts, compute, answer, index_of=lambda: ctx.t.index["variables"]
    )


async def variable(ctx: ApiContext, req: Request, *parts: str) -> Any:
    path = _path(list(parts))
    if req.method == "GET":
        return await _read(ctx, req, path)
    if req.method == "DELETE":
        return await _delete(ctx, req, path)
    return await _write(ctx, req, path)


async def _read(ctx: ApiContext, req: Request, path: str) -> Any:
    opts = parse_options(req)
    ns = _ns(req)
    _require(ctx, req, ns, path, "read")

    def compute() -> tuple[int, Any]:
        rec = ctx.t.variables.get(vkey(ns, path))
        return (rec["ModifyIndex"], rec) if rec else (ctx.t.index["variables"], None)

    async def respond(index: int, rec: Any) -> HttpResponse:
        if rec is None:
            raise HttpError(404, "variable not found")
        return ok(await full(ctx, rec), index=index)

    # Unsealing is async: the blocking query yields (index, record); the answer comes after.
    return await _after(await blocking(ctx.replog, opts, compute, lambda i, r: (i, r)), respond)


async def _after(got: Any, respond: Any) -> Any:
    if isinstance(got, Deferred):
        inner = got.finish

        async def finish() -> Any:
            return await _after(await inner(), respond)

        return Deferred(got.ready, finish)
    return await respond(*got)


def _cas(req: Request) -> int | None:
    if not req.has("cas"):
        return None
    raw = req.q("cas")
    if not raw.isdigit():
        raise bad(f'can not parse cas: strconv.ParseUint: parsing "{raw}": invalid syntax')
    value = int(raw)
    if value >= 2**64:
        raise bad(f'can not parse cas: strconv.ParseUint: parsing "{raw}": value out of range')
    return value


def _lock_op(req: Request) -> str:
    ops = [op for op in LOCK_OPS if req.has(op)]
    if len(ops) > 1:
        raise bad("only one lock operation may be given")
    return ops[0] if ops else "set"


async def _conflict(ctx: ApiContext, acl: Acl, result: dict[str, Any]) -> HttpResponse:
    """409 with the variable that won, its items shown only to a reader."""
    rec = result.get("conflict")
    if rec is None:
        # CAS against a variable that does not exist: Nomad answers with an empty variable.
        body: dict[str, Any] = {"CreateIndex": 0, "ModifyIndex": 0, "Items": None}
        resp = ok(body, index=0)
    else:
        may_read = allow_variable(acl, rec["Namespace"], rec["Path"], "read")
        body = await full(ctx, rec, items=may_read)
        resp = ok(body, index=rec["ModifyIndex"])
    resp.status = 409
    return resp


async def _write(ctx: ApiContext, req: Request, path: str) -> Any:
    ns = _ns(req)
    op = _lock_op(req)
    acl = _require(ctx, req, ns, path, "write")
    data = req.json()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: the variable must be a JSON object")
    try:
        items = check_items(data.get("Items"), required=op == "set")
        ttl, delay, lock_id = parse_lock(data.get("Lock"))
    except VariableError as exc:
        raise bad(str(exc)) from None
    payload: dict[str, Any] = {"namespace": ns, "path": path, "op": op, "cas": _cas(req)}
    if lock_id:
        payload["lock_id"] = lock_id
    if op in ("lock-renew", "lock-release") and not lock_id:
        raise bad(f"{op} requires the lock ID in Lock.ID")
    if op == "lock-acquire":
        payload.update(ttl=ttl, lock_delay=delay, new_lock_id=str(uuid.uuid4()))
    if items and op in ("set", "lock-acquire"):
        plain = json.dumps(items, sort_keys=True).encode()
        payload["sealed"] = seal(await _key(ctx), plain, aad(ns, path))
    index, result = await ctx.append("var.apply", payload)
    if "conflict" in result or "conflict_missing" in result:
        return await _conflict(ctx, acl, result)
    if "error" in result:
        raise HttpError(404, result["error"])
    rec = result["record"]
    if op in ("lock-renew",):
        return ok(metadata(rec, _now(), with_lock_id=True), index=index)
    return ok(await full(ctx, rec, lock_id=op == "lock-acquire"), index=index)


async def _delete(ctx: ApiContext, req: Request, path: str) -> Any:
    ns = _ns(req)
    acl = _require(ctx, req, ns, path, "destroy")
    payload: dict[str, Any] = {"namespace": ns, "path": path, "op": "delete", "cas": _cas(req)}
    lock_id = req.q("lock-id")
    if lock_id:
        payload["lock_id"] = lock_id
    index, result = await ctx.append("var.apply", payload)
    if "conflict" in result or "conflict_missing" in result:
        return await _conflict(ctx, acl, result)
    return HttpResponse(
        status=204, headers={"X-Sched-Index": str(index), "X-Sched-KnownLeader": "true"}, body=b""
    )
