"""Redaction of credentials in log events, at the source: a structlog processor that replaces
the value of every credential-named field (tokens, X-Vault-Token, X-Nomad-Token,
Authorization, passwords, secret ids, unseal keys, private keys) at any depth, and masks
token-shaped strings (hvs./hvb./hvr. tokens, Bearer and Basic credentials, PEM private keys)
anywhere in a message or a rendered traceback."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

# Field and header names whose value is a credential, compared lower-case with '_' for '-'.
_EXACT = {
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "token",
    "tokens",
    "x_vault_token",
    "x_nomad_token",
    "x_svc_token",
    "x_consul_token",
    "password",
    "passwd",
    "new_password",
    "secret",
    "secret_id",
    "secret_key",
    "client_secret",
    "unseal_key",
    "unseal_keys",
    "key_share",
    "share",
    "shares",
    "keys",
    "keys_base64",
    "recovery_keys",
    "private_key",
    "keyring",
    "root_key",
    "otp",
    "hmac_key",
    "node_secret",
    "wrapping_token",
}
_SUFFIXES = ("_token", "_password", "_secret", "_secret_id", "_private_key", "_unseal_key")
# Token-shaped text: Vault-style service/batch/recovery tokens, HTTP credentials, PEM keys.
_PATTERNS = (
    re.compile(r"\bhv[sbr]\.[A-Za-z0-9_.\-]{8,}"),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9+/=._~\-]{4,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"),
)
_MAX_DEPTH = 8


def sensitive(name: str) -> bool:
    key = name.lower().replace("-", "_")
    return key in _EXACT or key.endswith(_SUFFIXES)


def mask(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


def scrub(value: Any, depth: int = 0) -> Any:
    """A copy of `value` with credential fields replaced and token-shaped text masked."""
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, bytes):
        return mask(value.decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and sensitive(k) else scrub(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(v, depth + 1) for v in value]
    return value


def redact_credentials(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """The structlog processor: runs after tracebacks are rendered and before the renderer."""
    return scrub(event)
