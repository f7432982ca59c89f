"""structlog set up once per process: a console renderer in dev, JSON lines otherwise. Stdlib
loggers (aiohttp, nats) go through the same processors. Request ids are bound with contextvars
by the gateway and by the bus for each message."""

from __future__ import annotations

import logging
import sys

import msgspec
import structlog
import structlog.tracebacks

_json = msgspec.json.Encoder()


def configure_logging(*, json: bool, level: str = "info") -> None:
    lvl = getattr(logging, level.upper(), logging.INFO)
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if json:
        renderer = structlog.processors.JSONRenderer(
            serializer=lambda o, **_: _json.encode(o).decode()
        )
        # Never render locals: they hold tokens, unseal shares and secret values.
        shared_tail = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        shared_tail = []
    structlog.configure(
        processors=[*shared, *shared_tail, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    # aiohttp's access log is replaced by the gateway's own canonical line per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
