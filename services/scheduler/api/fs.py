"""/v1/client/fs/*: an allocation's files and logs, read on the node that runs it. The scheduler
forwards each request over the bus to that node and believes the answer only when it carries
the node's secret (nodeauth)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from services.scheduler import nodeauth, sealbox, wire
from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import HttpError, Request, bad
from shared import service_proof
from shared.messages import HttpResponse

NODE_TIMEOUT = 10.0
FOLLOW_POLL = 0.25
FOLLOW_WAIT = 5.0  # a followed read's chunk waits this long for new output
LOG_OFFSET = "X-Sched-Log-Offset"  # a file stream's next offset
LOG_DONE = "X-Sched-Log-Done"
# A followed read's position, "<log file number>:<offset in it>": the scheduler answers it in
# LOG_POSITION and the gateway sends it back in LOG_RESUME for the next chunk (an offset from
# the oldest kept byte would move when rotation deletes a file).
LOG_POSITION = "X-Sched-Log-Position"
LOG_RESUME = "x-sched-log-resume"
# Set by the gateway on the follow-up chunks of one /v1/client/fs/stream (gateway/streams.py):
# a file gone by then was deleted while streamed, which is a frame, not a 404.
STREAM_RESUME = "x-sched-stream-resume"
MAX_INT64 = 2**63 - 1
READ_LIMIT = 4 * 1024 * 1024  # per answer: bounded memory
FRAME_SIZE = 64 * 1024  # Nomad's largest stream frame


def _alloc(ctx: ApiContext, req: Request, alloc_id: str, cap: str) -> dict[str, Any]:
    a = ctx.t.allocs.get(alloc_id)
    if a is None:
        prefixed = [
            v for k, v in ctx.t.allocs.items() if len(alloc_id) >= 2 and k.startswith(alloc_id)
        ]
        if len(prefixed) != 1:
            raise HttpError(404, f"Unknown allocation {alloc_id!r}")
        a = prefixed[0]
    ctx.require_ns(req, a["Namespace"], cap)
    return a


def _int(req: Request, name: str, default: int = 0) -> int:
    raw = req.q(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad(f"Failed to parse {name}: {raw!r} is not an integer") from None
    if not 0 <= value <= MAX_INT64:  # Nomad parses these as int64
        raise bad(f"{name} must be between 0 and {MAX_INT64}")
    return value


async def _ask(ctx: ApiContext, alloc: dict[str, Any], fr: wire.FsRequest) -> wire.FsReply:
    node_id = alloc["NodeID"]
    node = ctx.t.nodes.get(node_id)
    if node is None or ctx.bus is None:
        raise HttpError(404, f"Unknown node {node_id!r}")
    subject = wire.subject(ctx.cluster, f"{wire.NODE_FS}.{node_id}")
    # Signed as the scheduler (the node obeys nothing else), answered sealed to a one-time key:
    # file contents, logs and the node's secret never cross the bus in the clear.
    if ctx.service_key is None:
        raise HttpError(500, "the scheduler has no service key to sign node requests with")
    reader = X25519PrivateKey.generate()
    fr.reader_public = reader.public_key().public_bytes_raw()
    body = wire.fs_signed_bytes(node_id, fr)
    fr.proof = service_proof.prove(ctx.service_key, ctx.cluster, wire.FS_PURPOSE, body)
    try:
        msg = await ctx.bus.nc.request(subject, msgspec.msgpack.encode(fr), timeout=NODE_TIMEOUT)
    except Exception:
        raise HttpError(504, f"node {node_id} did not answer") from None
    try:
        outer = msgspec.msgpack.decode(msg.data, type=wire.FsReply)
        plain = sealbox.open_sealed(reader, outer.sealed, node_id.encode())
        reply = msgspec.msgpack.decode(plain, type=wire.FsReply)
    except (msgspec.DecodeError, sealbox.SealError, ValueError):
        raise HttpError(502, f"node {node_id} gave a malformed answer") from None
    if reply.node_id != node_id or not nodeauth.matches(node, reply.secret):
        raise HttpError(502, f"the answer did not come from node {node_id}")
    if reply.code != 200:
        raise HttpError(reply.code if 400 <= reply.code < 600 else 500, reply.error)
    return reply


def _raw(data: bytes, content_type: str = "text/plain; charset=utf-8") -> HttpResponse:
    return HttpResponse(status=200, headers={"Content-Type": content_type}, body=data)


def _json(body: Any) -> HttpResponse:
    return HttpResponse(
        status=200,
        headers={"Content-Type": "application/json"},
        body=msgspec.json.encode(body),
    )


async def ls(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-fs")
    reply = await _ask(ctx, a, wire.FsRequest(op="ls", alloc_id=a["ID"], path=req.q("path") or "/"))
    return _json(reply.files)


async def stat(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-fs")
    path = req.q("path")
    if not path:
        raise bad("must provide a file path")
    reply = await _ask(ctx, a, wire.FsRequest(op="stat", alloc_id=a["ID"], path=path))
    return _json(reply.files[0])


async def cat(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-fs")
    path = req.q("path")
    if not path:
        raise bad("must provide a file path")
    fr = wire.FsRequest(op="readat", alloc_id=a["ID"], path=path, limit=READ_LIMIT)
    return _raw((await _ask(ctx, a, fr)).data)


async def readat(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-fs")
    path = req.q("path")
    if not path:
        raise bad("must provide a file path")
    offset = _int(req, "offset")
    limit = min(_int(req, "limit", READ_LIMIT) or READ_LIMIT, READ_LIMIT)
    fr = wire.FsRequest(op="readat", alloc_id=a["ID"], path=path, offset=offset, limit=limit)
    return _raw((await _ask(ctx, a, fr)).data)


def _log_position(raw: str) -> tuple[int, int]:
    file, _, offset = raw.partition(":")
    digits = all(x.isascii() and x.isdigit() and len(x) <= 19 for x in (file, offset))
    if not digits or max(int(file), int(offset)) > MAX_INT64:
        raise bad(f"invalid log position {raw[:40]!r}")
    return int(file), int(offset)


def _frames(frames: list[tuple[str, int, bytes]]) -> bytes:
    # Nomad's StreamFrame objects, back to back; Data is base64 as Go encodes []byte.
    return b"".join(
        json.dumps(
            {"File": f, "Offset": off + len(d), "Data": base64.b64encode(d).decode()}
        ).encode()
        for f, off, d in frames
    )


async def logs(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    a = _alloc(ctx, req, alloc_id, "read-logs")
    task = req.q("task")
    if not task:
        raise bad("must include task name")
    stream = req.q("type")
    if stream not in ("stdout", "stderr"):
        raise bad(f'Illegal log type: "{stream}"')
    origin = req.q("origin") or "start"
    if origin not in ("start", "end"):
        raise bad(f'Unknown origin "{origin}"')
    offset = _int(req, "offset")
    follow = req.flag("follow")
    plain = req.flag("plain")
    fr = wire.FsRequest(
        op="logs",
        alloc_id=a["ID"],
        task=task,
        stream=stream,
        origin=origin,
        offset=offset,
        limit=READ_LIMIT,
    )
    if resume := req.headers.get(LOG_RESUME):
        fr.log_file, fr.offset = _log_position(resume)
    reply = await _ask(ctx, a, fr)
    frames = list(reply.frames)
    headers: dict[str, str] = {}
    if follow:
        # One chunk of a followed read: what is there now, else what the task writes within
        # FOLLOW_WAIT; the gateway asks again from LOG_POSITION until X-Sched-Log-Done
        # (services/gateway/streams.py), so the client sees one stream.
        deadline = time.monotonic() + FOLLOW_WAIT
        while not frames and not reply.task_dead and time.monotonic() < deadline:
            await asyncio.sleep(FOLLOW_POLL)
            fr.log_file, fr.offset = reply.log_file, reply.log_offset
            with contextlib.suppress(HttpError):
                reply = await _ask(ctx, a, fr)
                frames = list(reply.frames)
        done = reply.task_dead and reply.total == 0
        headers = {
            LOG_POSITION: f"{reply.log_file}:{reply.log_offset}",
            LOG_DONE: "true" if done else "false",
        }
    if plain:
        resp = _raw(b"".join(d for _, _, d in frames))
    else:
        resp = _raw(_frames(frames), "application/json")
    resp.headers.update(headers)
    return resp


def _stream_frame(path: str, end: int, data: bytes = b"", event: str = "") -> bytes:
    # Nomad's StreamFrame: every field omitted when empty; Offset is where the data ends.
    frame: dict[str, Any] = {"Offset": end} if end else {}
    if data:
        frame["Data"] = base64.b64encode(data).decode()
    frame["File"] = path
    if event:
        frame["FileEvent"] = event
    return json.dumps(frame).encode()


async def stream(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    """/v1/client/fs/stream: a file of the allocation from `offset` (counted from `origin`),
    then, with `follow` (the default), what is appended to it, a `file truncated` frame when
    it shrinks and a `file deleted` frame, the last, when it goes. Answered one chunk per
    request, as a followed log read is."""
    a = _alloc(ctx, req, alloc_id, "read-fs")
    path = req.q("path")
    if not path:
        raise bad("must provide a file name")
    origin = req.q("origin") or "start"
    if origin not in ("start", "end"):
        raise bad("origin must be start or end")
    offset = _int(req, "offset")
    follow = req.flag("follow") if req.has("follow") else True
    plain = req.flag("plain")
    fr = wire.FsRequest(
        op="stream", alloc_id=a["ID"], path=path, origin=origin, offset=offset, limit=READ_LIMIT
    )
    seen = req.headers.get(STREAM_RESUME) == "true"
    deadline = time.monotonic() + FOLLOW_WAIT
    frames: list[bytes] = []
    data = b""
    pos = offset
    done = False
    while True:
        try:
            reply = await _ask(ctx, a, fr)
        except HttpError as exc:
            if exc.code != 404 or not seen:
                raise
            frames.append(_stream_frame(path, pos, event="file deleted"))
            done = True
            break
        seen = True
        pos = fr.offset if fr.origin == "start" else max(0, reply.total - fr.offset)
        fr.origin = "start"
        if reply.total < pos:
            frames.append(_stream_frame(path, 0, event="file truncated"))
            fr.offset = pos = 0
            continue
        data = reply.data
        for i in range(0, len(data), FRAME_SIZE):
            chunk = data[i : i + FRAME_SIZE]
            frames.append(_stream_frame(path, pos + i + len(chunk), chunk))
        pos += len(data)
        fr.offset = pos
        if data or not follow or time.monotonic() >= deadline:
            done = not follow and pos >= reply.total
            break
        await asyncio.sleep(FOLLOW_POLL)
    # An empty chunk of frames is Nomad's heartbeat, {}.
    resp = _raw(data) if plain else _raw(b"".join(frames) or b"{}", "application/json")
    resp.headers.update({LOG_OFFSET: str(pos), LOG_DONE: "true" if done else "false"})
    return resp


async def _lifecycle(ctx: ApiContext, req: Request, alloc_id: str, op: str) -> Any:
    a = ctx.t.allocs.get(alloc_id)
    if a is None:
        raise HttpError(404, "Unknown allocation")
    ctx.require_ns(req, a["Namespace"], "alloc-lifecycle")
    data = req.json() or {}
    if not isinstance(data, dict):
        raise bad("Failed to decode request body: expected a JSON object")
    task = data.get("TaskName") or data.get("Task") or ""
    sig = data.get("Signal") or ""
    if not isinstance(task, str) or not isinstance(sig, str):
        raise bad("Failed to decode request body: TaskName and Signal must be strings")
    await _ask(ctx, a, wire.FsRequest(op=op, alloc_id=a["ID"], task=task, signal=sig))
    return _json({"Index": ctx.t.index["allocs"]})


async def restart(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    return await _lifecycle(ctx, req, alloc_id, "restart")


async def signal(ctx: ApiContext, req: Request, alloc_id: str) -> Any:
    return await _lifecycle(ctx, req, alloc_id, "signal")
