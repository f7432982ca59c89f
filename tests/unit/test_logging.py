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
