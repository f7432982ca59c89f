"""Outbound HTTP of the jwt/oidc auth method: discovery documents, JWKS and the token endpoint.

Each call trusts only the CA PEM configured for it (or the system roots without one; an
http URL uses no TLS, as Go's client does), is bounded in time and size, and fails with a
message that names the URL and the problem but never a secret sent along.
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import msgspec

TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)
MAX_BYTES = 1 << 20


class FetchError(Exception):
    pass


def ssl_context(ca_pem: str) -> ssl.SSLContext:
    """Raises FetchError when the PEM holds no certificate."""
    if not ca_pem.strip():
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError):
        raise FetchError("could not parse the CA PEM value") from None


async def fetch_json(
    url: str,
    ca_pem: str = "",
    *,
    form: dict[str, str] | None = None,
    basic_auth: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """GET `url` (or POST `form` to it) and decode a JSON object."""
    context = ssl_context(ca_pem)
    auth = aiohttp.BasicAuth(*basic_auth) if basic_auth else None
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.request(
                "POST" if form is not None else "GET",
                url,
                data=form,
                auth=auth,
                ssl=context,
                headers={"Accept": "application/json"},
                allow_redirects=False,
            ) as resp,
        ):
            body = await resp.content.read(MAX_BYTES + 1)
            status = resp.status
    except (aiohttp.InvalidURL, ValueError):
        raise FetchError(f"invalid URL {url!r}") from None
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as exc:
        raise FetchError(f"request to {url!r} failed: {type(exc).__name__}") from None
    if len(body) > MAX_BYTES:
        raise FetchError(f"the response of {url!r} is too large")
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        data = None
    if status != 200:
        # An OAuth error code (RFC 6749 5.2) says what went wrong and carries no secret.
        code = data.get("error") if isinstance(data, dict) else None
        detail = f": {code}" if isinstance(code, str) and code.isprintable() else ""
        raise FetchError(f"{url!r} answered {status}{detail}")
    if not isinstance(data, dict):
        raise FetchError(f"{url!r} did not answer a JSON object")
    return data
