"""structlog set up once per process: a console renderer in dev, JSON lines otherwise. Stdlib
loggers (aiohttp, nats) go through the same processors. Request ids are bound with contextvars
by the bus for each message, and by the gateway through `request_scope` (one ContextVar set per
request, cheaper than structlog's binding, which cost the gateway a share of each request).

Logs hold no secret: tracebacks are rendered without local variables (they hold tokens, unseal
shares and secret values), in both renderers, and every event, structlog's or a stdlib
logger's, passes through shared/redact.py after its traceback is rendered."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar

import msgspec
import structlog
import structlog.tracebacks

from shared.redact import redact_credentials

_json = msgspec.json.Encoder()

# (request id, api) of the request the current task serves; every event logged in it carries them.
request_scope: ContextVar[tuple[str, str] | None] = ContextVar("request_scope", default=None)


def _add_request_scope(
    _: object, __: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    scope = request_scope.get()
    if scope is not None:
        event.setdefault("request_id", scope[0])
        event.setdefault("api", scope[1])
    return event


def _exception_renderer(json: bool) -> structlog.types.Processor:
    if json:
        return structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
    # A plain traceback: file, line and code, never the frames' variables.
    return structlog.processors.format_exc_info


def configure_logging(*, json: bool, level: str = "info") -> None:
    lvl = getattr(logging, level.upper(), logging.INFO)
    shared = [
        structlog.contextvars.merge_contextvars,
        _add_request_scope,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if json:
        renderer = structlog.processors.JSONRenderer(
            serializer=lambda o, **_: _json.encode(o).decode()
        )
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    exceptions = _exception_renderer(json)
    structlog.configure(
        processors=[
            *shared,
            exceptions,
            redact_credentials,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # Stdlib records (aiohttp, nats, asyncio) carry their exc_info to here.
                exceptions,
                redact_credentials,
                renderer,
            ],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    # aiohttp's access log is replaced by the gateway's own canonical line per request.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
