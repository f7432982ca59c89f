"""Where the jwt/oidc auth method gets verification keys and provider metadata, cached per
mount for a minute so logins do not fetch a JWKS each time; a JWT signed by a key the cache
does not know yet triggers a refetch (the provider rotated), at most one per 10 seconds so
forged tokens cannot make the service hammer the provider."""

from __future__ import annotations

import time
from typing import Any

from services.secrets.auth.jwt_config import JwtConfig, discover
from services.secrets.auth.jwt_fetch import fetch_json
from services.secrets.auth.jwt_verify import PublicKey, jwks_keys, pem_keys

CACHE_SECONDS = 60.0
MIN_REFETCH_SECONDS = 10.0


class KeySource:
    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], tuple[float, Any]] = {}

    async def _cached(self, kind: str, url: str, ca_pem: str, fresh: bool, load: Any) -> Any:
        key = (kind + url, ca_pem)
        hit = self._docs.get(key)
        if hit is not None:
            age = time.monotonic() - hit[0]
            if age < (MIN_REFETCH_SECONDS if fresh else CACHE_SECONDS):
                return hit[1]
        value = await load()
        self._docs[key] = (time.monotonic(), value)
        return value

    async def provider(self, config: JwtConfig, *, fresh: bool = False) -> dict[str, Any]:
        """The discovery document; raises FetchError."""
        url, ca = config.oidc_discovery_url, config.oidc_discovery_ca_pem
        return await self._cached("doc:", url, ca, fresh, lambda: discover(url, ca))

    async def keys(self, config: JwtConfig, *, fresh: bool = False) -> list[PublicKey]:
        """Raises FetchError or VerifyError."""
        if config.jwt_validation_pubkeys:
            return pem_keys(config.jwt_validation_pubkeys)
        if config.jwks_url:
            url, ca = config.jwks_url, config.jwks_ca_pem
        else:
            doc = await self.provider(config, fresh=fresh)
            url, ca = str(doc.get("jwks_uri") or ""), config.oidc_discovery_ca_pem
        jwks = await self._cached("jwks:", url, ca, fresh, lambda: fetch_json(url, ca))
        return jwks_keys(jwks)
