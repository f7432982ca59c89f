"""The three APIs the gateway serves: which subject owns each, and how each API words an error
that the gateway itself produces (413, 503, 504...)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from shared import subjects

ErrorFormatter = Callable[[int, str], tuple[bytes, str]]


def secrets_error(status: int, message: str) -> tuple[bytes, str]:
    return json.dumps({"errors": [message]}).encode(), "application/json"


def jsonapi_error(status: int, message: str) -> tuple[bytes, str]:
    titles = {
        400: "bad request",
        404: "not found",
        405: "method not allowed",
        413: "payload too large",
        503: "service unavailable",
        504: "gateway timeout",
    }
    err = {"status": str(status), "title": titles.get(status, "error"), "detail": message}
    return json.dumps({"errors": [err]}).encode(), "application/vnd.api+json"


def plain_error(status: int, message: str) -> tuple[bytes, str]:
    return message.encode(), "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ApiSpec:
    name: str
    subject: subjects.Subject
    format_error: ErrorFormatter
    # Header a client must send when `require_request_header` is set (the secrets API only).
    request_header: tuple[str, ...] = ()
    # Blocking queries (`?index=&wait=`): the gateway's deadline follows the requested wait.
    blocking_queries: bool = False


SECRETS = ApiSpec(
    "secrets", subjects.API_SECRETS, secrets_error, ("x-svc-request", "x-vault-request")
)
WORKSPACE = ApiSpec("workspace", subjects.API_WORKSPACE, jsonapi_error)
SCHEDULER = ApiSpec("scheduler", subjects.API_SCHEDULER, plain_error, blocking_queries=True)
