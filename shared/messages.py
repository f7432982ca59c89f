"""Wire types that cross service boundaries. msgpack on the wire; new fields always get defaults
so that old and new replicas can talk to each other during a rolling upgrade."""

from __future__ import annotations

import msgspec


class HttpRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One HTTP request as the gateway forwards it to the service that owns the API."""

    method: str
    path: str
    # The raw query string: each API parses it its own way (brackets, repeated keys).
    query: str = ""
    headers: dict[str, str] = {}
    body: bytes = b""
    remote_addr: str = ""
    request_id: str = ""
    # The TLS client's certificate (DER), leaf first: sent only for logins that need it.
    client_certs: list[bytes] = []


class HttpResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The owning service's answer, written back by the gateway as it is."""

    status: int
    headers: dict[str, str] = {}
    body: bytes = b""


class BusError(msgspec.Struct, kw_only=True):
    """A handler's typed failure. `code` is an HTTP-like status so edges can map it directly."""

    code: int
    message: str


class Echo(msgspec.Struct, kw_only=True):
    """The trivial request the benchmarks use as their baseline."""

    payload: bytes = b""
