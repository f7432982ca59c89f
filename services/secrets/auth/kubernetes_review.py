"""Kubernetes' TokenReview API, as the kubernetes auth method calls it: one POST to
`<host>/apis/authentication.k8s.io/v1/tokenreviews` over HTTPS that trusts the configured
`kubernetes_ca_cert`, with bounded time and answer size.

Every failure is a ReviewError whose message names the reason, never the token."""

from __future__ import annotations

import contextlib
import hashlib
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from shared import jsonbody

TIMEOUT = aiohttp.ClientTimeout(total=10, connect=5)
MAX_ANSWER = 1 << 20
PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


class ReviewError(ValueError):
    pass


@dataclass(frozen=True)
class Reviewed:
    name: str
    namespace: str
    uid: str


def api_url(host: str) -> str:
    """A host, host:port or URL; a bare host means HTTPS."""
    base = host.strip().rstrip("/")
    if "://" not in base:
        base = f"https://{base}"
    return base + PATH


class TlsContexts:
    """One client context per CA bundle, built once (loading a bundle costs a few ms)."""

    def __init__(self) -> None:
        self._key = b""
        self._ctx: ssl.SSLContext | None = None

    def get(self, ca_pem: str) -> ssl.SSLContext:
        key = hashlib.sha256(ca_pem.encode()).digest()
        if self._ctx is None or key != self._key:
            # Only the configured CA is trusted, never the system store (as Vault's client).
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            # No usable CA: every handshake fails verification, as Vault warns and does.
            if ca_pem.strip():
                with contextlib.suppress(ssl.SSLError, ValueError):
                    ctx.load_verify_locations(cadata=ca_pem)
            self._key, self._ctx = key, ctx
        return self._ctx


def _result(doc: Any, audiences: list[str]) -> Reviewed:
    if not isinstance(doc, dict):
        raise ReviewError("lookup failed: the answer is not a TokenReview")
    if doc.get("kind") == "Status" and doc.get("status") != "Success":
        raise ReviewError(f"lookup failed: {str(doc.get('message', ''))[:200]}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ReviewError("lookup failed: the answer has no status")
    if status.get("error"):
        raise ReviewError(f"lookup failed: {str(status['error'])[:200]}")
    if status.get("authenticated") is not True:
        raise ReviewError("lookup failed: service account jwt not valid")
    if audiences:
        got = status.get("audiences") or []
        if not any(a in got for a in audiences):
            raise ReviewError("lookup failed: service account jwt not valid for the audience")
    user = status.get("user") if isinstance(status.get("user"), dict) else {}
    parts = str(user.get("username", "")).split(":")
    if len(parts) != 4:
        raise ReviewError("lookup failed: unexpected username format")
    if parts[0] != "system" or parts[1] != "serviceaccount":
        raise ReviewError("lookup failed: username returned is not a service account")
    return Reviewed(name=parts[3], namespace=parts[2], uid=str(user.get("uid", "")))


async def review(
    host: str, ca: ssl.SSLContext, bearer: str, token: str, audiences: list[str]
) -> Reviewed:
    """Ask the API server who `token` is, authenticating as `bearer`."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, **({"audiences": audiences} if audiences else {})},
    }
    headers = {
        "Authorization": f"Bearer {bearer}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    url = api_url(host)
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.post(
                url,
                data=msgspec.json.encode(body),
                headers=headers,
                ssl=ca if url.startswith("https://") else False,
                allow_redirects=False,
            ) as resp,
        ):
            raw = await resp.content.read(MAX_ANSWER + 1)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
        raise ReviewError(
            f"lookup failed: cannot reach the API server: {type(exc).__name__}"
        ) from None
    if len(raw) > MAX_ANSWER:
        raise ReviewError("lookup failed: the answer is too large")
    if status == 401:
        raise ReviewError(
            "lookup failed: service account unauthorized; this could mean it has been "
            "deleted or recreated with a new token"
        )
    if not 200 <= status <= 206:
        raise ReviewError(f"lookup failed: the API server answered {status}")
    try:
        doc = jsonbody.loads(raw)
    except ValueError:
        raise ReviewError("lookup failed: the answer is not JSON") from None
    return _result(doc, audiences)
