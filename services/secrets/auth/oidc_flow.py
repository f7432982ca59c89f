"""The browser login of the oidc auth method (OAuth 2.0 authorization code flow with PKCE).

`oidc/auth_url` checks the redirect URI against the role and answers the provider's
authorization URL, whose `state` carries the login's sealed state (nonce, PKCE verifier, role,
redirect URI; oidc_state.py), so the call writes nothing and the callback may reach any replica.
`oidc/callback` (a GET, or a form POST with response_mode form_post) opens the state, exchanges
the code at the provider's token endpoint with the client credentials, verifies the ID token
(signature, issuer, audience, nonce) and logs in. A state serves one callback, whatever its
outcome.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import msgspec

from services.secrets.auth.jwt_config import JwtConfig
from services.secrets.auth.jwt_fetch import FetchError, fetch_json
from services.secrets.auth.jwt_login import authorize
from services.secrets.auth.jwt_verify import Expected
from services.secrets.auth.oidc_state import OidcState, OidcStates, new_state
from services.secrets.auth.token_params import addr_allowed
from services.secrets.errors import bad_request, permission_denied
from services.secrets.framework.fields import desc
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.auth.jwt import JwtBackend
    from services.secrets.core.barrier import BarrierView

LOGIN_FAILED = "Login failed. "
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
# OAuth error codes a provider may send back; anything else is reported as unknown.
_PROVIDER_ERRORS = {
    "invalid_request",
    "unauthorized_client",
    "access_denied",
    "unsupported_response_type",
    "invalid_scope",
    "server_error",
    "temporarily_unavailable",
}


class AuthUrlFields(msgspec.Struct, kw_only=True):
    role: Annotated[str, desc("the role to log in with")] = ""
    redirect_uri: Annotated[str, desc("where the provider sends the browser back")] = ""
    client_nonce: Annotated[str, desc("a nonce the callback must repeat")] = ""


class CallbackFields(msgspec.Struct, kw_only=True):
    state: str = ""
    code: str = ""
    id_token: str = ""
    client_nonce: str = ""
    error: str = ""
    error_description: str = ""


def valid_redirect(uri: str, allowed: list[str]) -> bool:
    """Exact match, except that a loopback URI may use any port (RFC 8252 7.3), as Vault."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return False
    if host not in _LOOPBACK:
        return uri in allowed

    def portless(u: str) -> str:
        p = urlsplit(u)
        netloc = f"[{p.hostname}]" if p.hostname and ":" in p.hostname else p.hostname or ""
        return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))

    try:
        return any(portless(uri) == portless(a) for a in allowed)
    except ValueError:
        return False


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class OidcFlow:
    def __init__(self, backend: JwtBackend, storage: BarrierView) -> None:
        self.b = backend
        self.states = OidcStates(storage)

    async def auth_url(self, req: Request, f: AuthUrlFields) -> Response:
        config = await self.b.config()
        if config is None:
            raise bad_request("could not load configuration")
        if not config.is_oidc():
            raise bad_request("OIDC login is not configured for this mount")
        role_name = (f.role or config.default_role).lower()
        if not role_name:
            raise bad_request("missing role")
        role = await self.b.role(role_name)
        if role is None:
            raise bad_request(f"role {role_name!r} could not be found")
        if not f.redirect_uri:
            raise bad_request("missing redirect_uri")
        if not valid_redirect(f.redirect_uri, role.allowed_redirect_uris):
            raise bad_request(f"unauthorized redirect_uri: {f.redirect_uri}")
        redirect_uri = f.redirect_uri
        if config.oidc_response_mode == "form_post":
            redirect_uri = redirect_uri.replace("ui/vault", "v1", 1)
        try:
            doc = await self.b.keys.provider(config)
        except FetchError as exc:
            raise bad_request(f"error contacting the OIDC provider: {exc}") from None
        state = new_state(role_name, redirect_uri, f.client_nonce)
        implicit = "id_token" in config.oidc_response_types
        params = {
            "client_id": config.oidc_client_id,
            "nonce": state.nonce,
            "redirect_uri": redirect_uri,
            "response_type": "id_token" if implicit else "code",
            "scope": " ".join(["openid", *role.oidc_scopes]),
            "state": await self.states.seal(state),
        }
        if not implicit:
            params["code_challenge"] = _challenge(state.code_verifier)
            params["code_challenge_method"] = "S256"
        if config.oidc_response_mode:
            params["response_mode"] = config.oidc_response_mode
        if role.max_age:
            params["max_age"] = str(role.max_age)
        endpoint = str(doc.get("authorization_endpoint") or "")
        return Response(data={"auth_url": f"{endpoint}?{urlencode(params)}"})

    async def callback(self, req: Request, f: CallbackFields) -> Response:
        config = await self.b.config()
        if config is None or not config.is_oidc():
            raise bad_request(LOGIN_FAILED + "Could not load configuration")
        state = await self.states.open(f.state)
        # Consumed before anything else, whatever the outcome (as OpenBao does): a failed
        # callback cannot be retried, nor its code replayed, with the same state.
        if state is None or not await self.states.use(state):
            raise bad_request(LOGIN_FAILED + "Expired or missing OAuth state.")
        role = await self.b.role(state.role)
        if role is None:
            raise bad_request(LOGIN_FAILED + "Role could not be found")
        if f.error:
            code = f.error.strip().lower()
            reason = code if code in _PROVIDER_ERRORS else "An unknown error occurred"
            raise bad_request(LOGIN_FAILED + reason)
        if state.client_nonce and f.client_nonce != state.client_nonce:
            raise bad_request("invalid client_nonce")
        if not addr_allowed(req.remote_addr, role.token_bound_cidrs):
            raise permission_denied()
        if f.code:
            raw = await self._exchange(config, state, f.code)
        else:  # the implicit flow hands the ID token over directly; the code flow never does
            raw = f.id_token if "id_token" in config.oidc_response_types else ""
        if not raw:
            raise bad_request(LOGIN_FAILED + "No code or id_token received.")
        claims = await self._verified(config, role.bound_audiences, state.nonce, raw)
        if role.bound_subject and claims.get("sub") != role.bound_subject:
            raise bad_request(LOGIN_FAILED + "sub claim does not match bound subject")
        claims.pop("nonce", None)
        return Response(auth=authorize(req, state.role, role, claims, prefix=LOGIN_FAILED))

    async def _exchange(self, config: JwtConfig, state: OidcState, code: str) -> str:
        try:
            doc = await self.b.keys.provider(config)
            endpoint = str(doc.get("token_endpoint") or "")
            if not endpoint:
                raise FetchError("the provider names no token endpoint")
            answer = await fetch_json(
                endpoint,
                config.oidc_discovery_ca_pem,
                form={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": state.redirect_uri,
                    "code_verifier": state.code_verifier,
                },
                basic_auth=(config.oidc_client_id, config.oidc_client_secret),
            )
        except FetchError as exc:
            raise bad_request(f"{LOGIN_FAILED}Error exchanging oidc code: {exc}") from None
        token = answer.get("id_token")
        if not isinstance(token, str) or not token:
            raise bad_request(LOGIN_FAILED + "No id_token found in response.")
        return token

    async def _verified(
        self, config: JwtConfig, audiences: list[str], nonce: str, raw: str
    ) -> dict[str, Any]:
        expected = Expected(
            algorithms=config.algorithms(),
            issuer=config.oidc_discovery_url,
            audiences=audiences or [config.oidc_client_id],
            nonce=nonce,
        )
        return await self.b.verified(
            config, raw, expected, LOGIN_FAILED + "Token verification failed. "
        )
