"""Request parsing and response writing in Nomad's conventions: plain-text errors with Nomad's
status codes, JSON bodies with Go field names, X-Sched-* query meta headers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

import msgspec

from shared import jsonbody
from shared.messages import HttpRequest, HttpResponse

_json = msgspec.json.Encoder()


class HttpError(Exception):
    """An answer other than 200: Nomad writes the message as a plain-text body."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def bad(message: str) -> HttpError:
    return HttpError(400, message)


@dataclass
class Request:
    method: str
    segments: list[str]
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    raw: HttpRequest
    token: str = ""
    vars: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_envelope(cls, env: HttpRequest) -> Request:
        parts = [unquote(p) for p in env.path.split("/") if p != ""]
        query = parse_qs(env.query, keep_blank_values=True)
        return cls(env.method.upper(), parts, query, env.headers, env.body, env)

    def q(self, name: str, default: str = "") -> str:
        vals = self.query.get(name)
        return vals[0] if vals else default

    def has(self, name: str) -> bool:
        return name in self.query

    def flag(self, name: str) -> bool:
        """Go's ParseBool, as Nomad reads boolean query parameters."""
        v = self.q(name)
        if name in self.query and v == "":
            return True
        if v in ("1", "t", "T", "true", "TRUE", "True"):
            return True
        if v in ("", "0", "f", "F", "false", "FALSE", "False"):
            return False
        raise bad(
            f"Failed to parse value of {name!r} ({v}) as a bool: strconv.ParseBool: "
            f'parsing "{v}": invalid syntax'
        )

    def json(self) -> Any:
        if not self.body.strip():
            return None
        try:
            return jsonbody.decode(self.body)  # the shared policy: strict, bounded
        except jsonbody.BodyError as exc:
            raise bad(f"Failed to decode request body: {exc.detail}") from None

    @property
    def namespace(self) -> str:
        return self.q("namespace") or "default"


def meta_headers(index: int) -> dict[str, str]:
    return {
        "X-Sched-Index": str(max(index, 1)),
        "X-Sched-KnownLeader": "true",
        "X-Sched-LastContact": "0",
    }


def ok(
    body: Any,
    *,
    index: int | None = None,
    headers: dict[str, str] | None = None,
    pretty: bool = False,
) -> HttpResponse:
    hdrs = {"Content-Type": "application/json"}
    if index is not None:
        hdrs.update(meta_headers(index))
    if headers:
        hdrs.update(headers)
    data = (json.dumps(body, indent=4).encode() + b"\n") if pretty else _json.encode(body)
    return HttpResponse(status=200, headers=hdrs, body=data)


def error(code: int, message: str) -> HttpResponse:
    return HttpResponse(
        status=code, headers={"Content-Type": "text/plain; charset=utf-8"}, body=message.encode()
    )
