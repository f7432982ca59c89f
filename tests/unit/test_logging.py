"""JSON logs carry tracebacks without local variables (they may hold secrets)."""

from __future__ import annotations

import io
import json
import logging

import structlog

from shared.logging import configure_logging


def test_json_tracebacks_have_no_locals() -> None:
    configure_logging(json=True)
    stream = io.StringIO()
    logging.getLogger().handlers[0].stream = stream  # type: ignore[attr-defined]
    log = structlog.get_logger("t")

    def fail(token: str) -> None:
        raise RuntimeError("boom")

    try:
        fail("hvs.SUPERSECRETTOKEN")
    except RuntimeError:
        log.exception("failed", request_id="r1")
    line = stream.getvalue().strip().splitlines()[-1]
    record = json.loads(line)
    assert record["request_id"] == "r1" and record["event"] == "failed"
    assert "SUPERSECRETTOKEN" not in line
    configure_logging(json=False)


def test_lines_logged_in_a_request_scope_carry_its_ids() -> None:
    """The gateway sets `request_scope` per request; any line logged in that task (structlog's or
    a stdlib logger's) carries the ids, and a line outside it carries none."""
    import asyncio

    from shared.logging import request_scope

    configure_logging(json=True)
    stream = io.StringIO()
    logging.getLogger().handlers[0].stream = stream  # type: ignore[attr-defined]

    async def serve(rid: str) -> None:
        request_scope.set((rid, "secrets"))
        structlog.get_logger("deep").warning("handshake slow")
        logging.getLogger("nats").warning("stdlib line")

    async def main() -> None:
        await asyncio.gather(asyncio.create_task(serve("a1")), asyncio.create_task(serve("b2")))
        structlog.get_logger("t").warning("outside")

    asyncio.run(main())
    records = [json.loads(x) for x in stream.getvalue().strip().splitlines()]
    configure_logging(json=False)
    ids = [(r.get("request_id"), r.get("api"), r["event"]) for r in records]
    assert ids == [
        ("a1", "secrets", "handshake slow"),
        ("a1", "secrets", "stdlib line"),
        ("b2", "secrets", "handshake slow"),
        ("b2", "secrets", "stdlib line"),
        (None, None, "outside"),
    ]
