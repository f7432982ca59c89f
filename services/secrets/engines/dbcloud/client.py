"""The provider's admin API for programmatic API keys, over HTTP digest auth with the engine's
public/private key pair. Every failure becomes a 502 with the provider's reason."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp

from services.secrets.errors import SecretsError, upstream

API = "/api/atlas/v1.0"
TIMEOUT = aiohttp.ClientTimeout(total=15)


class NotFound(Exception):
    """The provider has no such object (a key already deleted, for instance)."""


class AdminClient:
    def __init__(self, base_url: str, public_key: str, private_key: str) -> None:
        self.base = base_url.rstrip("/") + API
        self.public_key = public_key
        self.private_key = private_key

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            # A middleware per call: it keeps the nonce and counter of one digest exchange.
            auth = aiohttp.DigestAuthMiddleware(self.public_key, self.private_key)
            async with (
                aiohttp.ClientSession(timeout=TIMEOUT, middlewares=(auth,)) as s,
                s.request(
                    method, self.base + path, json=body, headers={"Accept": "application/json"}
                ) as r,
            ):
                text = await r.text()
                if r.status == 404:
                    raise NotFound(_reason(text, r.status))
                if r.status >= 400:
                    raise upstream(f"provider API: {method} {path}: {_reason(text, r.status)}")
                return json.loads(text) if text.strip() else None
        except (NotFound, SecretsError):
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise upstream(f"provider API unreachable: {exc or type(exc).__name__}") from None
        except ValueError:
            raise upstream(f"provider API: {method} {path}: unreadable response") from None

    async def create_org_key(self, org_id: str, desc: str, roles: list[str]) -> dict[str, Any]:
        return await self._must(f"/orgs/{org_id}/apiKeys", {"desc": desc, "roles": roles})

    async def create_project_key(
        self, project_id: str, desc: str, roles: list[str]
    ) -> dict[str, Any]:
        return await self._must(f"/groups/{project_id}/apiKeys", {"desc": desc, "roles": roles})

    async def project_org(self, project_id: str) -> str:
        group = await self._get(f"/groups/{project_id}")
        return str(group.get("orgId", ""))

    async def add_access_list(
        self, org_id: str, key_id: str, ips: list[str], cidrs: list[str]
    ) -> None:
        entries = [{"ipAddress": ip} for ip in ips] + [{"cidrBlock": c} for c in cidrs]
        await self._must(f"/orgs/{org_id}/apiKeys/{key_id}/accessList", entries)

    async def delete_org_key(self, org_id: str, key_id: str) -> None:
        with contextlib.suppress(NotFound):  # already gone: that is what we wanted
            await self._call("DELETE", f"/orgs/{org_id}/apiKeys/{key_id}")

    async def unassign_project_key(self, project_id: str, key_id: str) -> None:
        with contextlib.suppress(NotFound):
            await self._call("DELETE", f"/groups/{project_id}/apiKeys/{key_id}")

    async def _must(self, path: str, body: Any) -> dict[str, Any]:
        try:
            out = await self._call("POST", path, body)
        except NotFound as exc:
            raise upstream(f"provider API: POST {path}: {exc}") from None
        return out if isinstance(out, dict) else {}

    async def _get(self, path: str) -> dict[str, Any]:
        try:
            out = await self._call("GET", path)
        except NotFound as exc:
            raise upstream(f"provider API: GET {path}: {exc}") from None
        return out if isinstance(out, dict) else {}


def _reason(text: str, status: int) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return f"HTTP {status}"
    if isinstance(body, dict):
        detail = body.get("detail") or body.get("reason") or body.get("errorCode")
        if detail:
            return f"HTTP {status}: {detail}"
    return f"HTTP {status}"
