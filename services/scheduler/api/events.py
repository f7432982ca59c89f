"""GET /v1/event/stream: Nomad's event stream as NDJSON, one `{"Index": n, "Events": [...]}`
line per applied entry after `index`, `{}` when nothing happened within the heartbeat. One
request answers one chunk and waits like a blocking query (a Deferred: no task, no slot held);
the gateway turns the chunks into one long-lived streamed response (services/gateway/streams.py)
by asking again from the index each chunk ends at."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import Request, bad, meta_headers
from services.scheduler.api.render import public
from services.scheduler.state.events import Batch, event_type, matches, parse_topics
from shared.deferred import Deferred
from shared.messages import HttpResponse

HEARTBEAT = 10.0  # Nomad sends `{}` every 10 s
MAX_EVENTS = 2000  # per chunk: a reader far behind catches up over several


def _keys(topic: str, rec: dict[str, Any]) -> list[str]:
    if topic == "Job":
        return [rec["ID"]]
    if topic in ("Allocation", "Evaluation", "Deployment"):
        return [rec["ID"], rec.get("JobID", "")]
    return [rec["ID"]]


def _events(
    batch: Batch, topics: dict[str, set[str]], ns: str, allow_ns: Any, nodes_ok: bool
) -> list[dict[str, Any]]:
    out = []
    for topic, rec in batch.changes:
        if topic == "Node":
            if not nodes_ok:
                continue
        else:
            rec_ns = rec.get("Namespace", "default")
            if (ns != "*" and rec_ns != ns) or not allow_ns(rec_ns):
                continue
        keys = _keys(topic, rec)
        if not matches(topics, topic, keys):
            continue
        out.append(
            {
                "Topic": topic,
                "Type": event_type(topic, batch.kind),
                "Key": rec["ID"],
                "Namespace": rec.get("Namespace", ""),
                "FilterKeys": keys[1:] or None,
                "Index": batch.index,
                "Payload": {topic: public(rec)},
            }
        )
    return out


async def stream(ctx: ApiContext, req: Request) -> Any:
    topics = parse_topics(req.query.get("topic", []))
    if isinstance(topics, str):
        raise bad(topics)
    raw = req.q("index") or "0"
    if not raw.isdigit():
        raise bad(f"Unable to parse index: {raw!r}")
    since = int(raw)
    ns = req.namespace
    acl = ctx.resolve(req)
    nodes_ok = acl.allow_level("node", False)

    def allow_ns(n: str) -> bool:
        return acl.allow_ns(n, "read-job")

    def chunk() -> HttpResponse | None:
        lines: list[bytes] = []
        last = since
        count = 0
        for batch in ctx.fsm.events.since(since):
            events = _events(batch, topics, ns, allow_ns, nodes_ok)
            last = batch.index
            if events:
                lines.append(json.dumps({"Index": batch.index, "Events": events}).encode())
                count += len(events)
            if count >= MAX_EVENTS:
                break
        if last == since:
            return None
        return _ndjson(lines or [b"{}"], last)

    got = chunk()
    if got is not None:
        return got
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEARTBEAT

    def park() -> Deferred:
        after = max(ctx.replog.applied_index, since)
        ready = ctx.replog.park(after, max(deadline - loop.time(), 0.0))

        async def finish() -> Any:
            got = chunk()
            if got is not None:
                return got
            if loop.time() < deadline:
                return park()  # the log moved, nothing this reader follows: wait on
            return _ndjson([b"{}"], max(since, ctx.fsm.events.last_index))

        return Deferred(ready, finish)

    return park()


def _ndjson(lines: list[bytes], index: int) -> HttpResponse:
    headers = {"Content-Type": "application/json", **meta_headers(index)}
    return HttpResponse(status=200, headers=headers, body=b"\n".join(lines) + b"\n")
