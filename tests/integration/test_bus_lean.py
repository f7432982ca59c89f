"""What the bus puts on the wire and counts per message: no headers unless the caller gives a
request id, a caller or headers; a request id given arrives and is bound for the handler's
logs only; each message is counted once, by outcome, under its subject family."""

from __future__ import annotations

import msgspec
import pytest
import structlog
from prometheus_client import REGISTRY

from shared.bus import Bus, CallContext
from shared.errors import ServiceError

pytestmark = pytest.mark.nats


class Ask(msgspec.Struct):
    fail: bool = False


class Answer(msgspec.Struct):
    request_id: str
    logged: str
    had_headers: bool


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_headers_only_when_given_and_one_count_per_message(
    nats_url: str, unique: str
) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")

    async def handler(msg: Ask, ctx: CallContext) -> Answer:
        if msg.fail:
            raise ServiceError(409, "refused")
        logged = structlog.contextvars.get_contextvars().get("request_id", "")
        return Answer(request_id=ctx.request_id, logged=logged, had_headers=bool(ctx.headers))

    subject = f"{unique}.ask"
    family = subject.split(".", 1)[-1]
    ok_before = _count("trellis_bus_handled_total", subject=family, outcome="ok")
    seconds_before = _count("trellis_bus_handle_seconds_count", subject=family)
    try:
        await server.serve(subject, handler, Ask, queue="q")
        bare = await client.request(subject, Ask(), Answer, timeout=5)
        assert bare == Answer(request_id="", logged="", had_headers=False)
        rid = f"rid-{unique}"
        tagged = await client.request(subject, Ask(), Answer, timeout=5, request_id=rid)
        assert tagged == Answer(request_id=rid, logged=rid, had_headers=True)
        with pytest.raises(ServiceError):
            await client.request(subject, Ask(fail=True), Answer, timeout=5)
        assert _count("trellis_bus_handled_total", subject=family, outcome="ok") == ok_before + 2
        assert _count("trellis_bus_handled_total", subject=family, outcome="error") == 1
        assert _count("trellis_bus_handle_seconds_count", subject=family) == seconds_before + 3
    finally:
        await client.close()
        await server.close()
