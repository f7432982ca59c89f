"""What a CA role lets a sign or issue request put into a certificate: principals, key id,
lifetime, critical options and extensions. Pure; the result is the crypto worker's argument set
minus the keys."""

from __future__ import annotations

import base64
import binascii
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from services.secrets.engines.ssh.roles import SSHRole, string_map

DEFAULT_KEY_ID = "vault-{{token_display_name}}-{{public_key_hash}}"
ANONYMOUS_KEY_ID = "vault-{{public_key_hash}}"


class PolicyError(ValueError):
    """The role does not allow what was asked (a 400 naming the problem)."""


@dataclass
class SignInput:
    """The caller's part of a sign or issue request (ttl 0 means "not given")."""

    valid_principals: list[str] = field(default_factory=list)
    cert_type: str = "user"
    key_id: str = ""
    ttl: int = 0
    critical_options: dict[str, Any] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)


def check_public_key_text(text: str) -> None:
    """A cheap structural check (`type base64`, the blob naming the same type) so that a garbled
    key is reported before any role rule; the crypto worker does the real parse."""
    parts = text.split()
    if not parts:
        raise PolicyError("missing public_key")
    if len(parts) < 2:
        raise PolicyError("failed to parse public_key as SSH key: expected '<type> <base64>'")
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (n,) = struct.unpack_from(">I", blob, 0)
        named = blob[4 : 4 + n].decode()
    except (binascii.Error, ValueError, struct.error):
        raise PolicyError("failed to parse public_key as SSH key: invalid key data") from None
    if named != parts[0]:
        raise PolicyError(
            f"failed to parse public_key as SSH key: the key says it is {named!r}, not {parts[0]!r}"
        )


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i.strip() for i in items if i.strip()))


def _host_allowed(role: SSHRole, allowed: list[str], name: str) -> bool:
    for domain in allowed:
        if role.allow_bare_domains and name == domain:
            return True
        if role.allow_subdomains and name.endswith("." + domain):
            return True
    return False


def principals(role: SSHRole, requested: list[str], cert_type: str) -> list[str]:
    """User certificates: allowed_users ('*' any, empty none), default_user when none are asked
    for. Host certificates: allowed_domains with allow_bare_domains / allow_subdomains."""
    if cert_type == "host":
        allowed_text, default = role.allowed_domains, ""
    else:
        allowed_text, default = role.allowed_users, role.default_user
    wanted = _dedupe(requested) or _dedupe(_split(default))
    any_allowed = allowed_text.strip() == "*"
    if not wanted:
        if any_allowed or role.allow_empty_principals:
            return []
        raise PolicyError(
            "refusing to issue an unsafe, globally valid certificate with no "
            "principals: set valid_principals or the role's default_user"
        )
    if any_allowed:
        return wanted
    allowed = _dedupe(_split(allowed_text))
    if not allowed:
        field_name = "allowed_domains" if cert_type == "host" else "allowed_users"
        raise PolicyError(f"the role allows no principals: its {field_name} is empty")
    for name in wanted:
        ok = _host_allowed(role, allowed, name) if cert_type == "host" else name in allowed
        if not ok:
            raise PolicyError(f"{name} is not a valid value for valid_principals")
    return wanted


def lifetime(role: SSHRole, requested: int, mount_default: int, mount_max: int) -> int:
    """The role's ttl (or the mount default) unless one is asked for; capped at max_ttl, which an
    explicit request may not exceed."""
    ttl = requested or role.ttl or mount_default
    max_ttl = role.max_ttl or mount_max
    if ttl > max_ttl:
        if requested:
            raise PolicyError(f"ttl is larger than the maximum allowed ({max_ttl} seconds)")
        ttl = max_ttl
    return ttl


def key_id(role: SSHRole, requested: str, display_name: str, role_name: str) -> str:
    """`{{public_key_hash}}` is left for the crypto worker, which is the one that parses the key."""
    if requested:
        if not role.allow_user_key_ids:
            raise PolicyError("setting key_id is not allowed by the role")
        return requested
    fmt = role.key_id_format or (DEFAULT_KEY_ID if display_name else ANONYMOUS_KEY_ID)
    return fmt.replace("{{token_display_name}}", display_name).replace("{{role_name}}", role_name)


def critical_options(role: SSHRole, requested: dict[str, Any]) -> dict[str, str]:
    if not requested:
        return dict(role.default_critical_options)  # defaults are not limited by the allow list
    opts = string_map(requested, "critical_options")
    if role.allowed_critical_options.strip():
        allowed = set(_split(role.allowed_critical_options))
        bad = sorted(k for k in opts if k not in allowed)
        if bad:
            raise PolicyError(f"critical options not on the allowed list: {bad}")
    return opts


def extensions(role: SSHRole, requested: dict[str, Any]) -> dict[str, str]:
    if not requested:
        return dict(role.default_extensions)
    exts = string_map(requested, "extensions")
    if role.allowed_extensions.strip() == "*":
        return exts
    allowed = set(_split(role.allowed_extensions))
    bad = sorted(k for k in exts if k not in allowed)
    if bad:
        raise PolicyError(f"extensions not on the allowed list: {bad}")
    return exts


def plan(
    role: SSHRole,
    req: SignInput,
    *,
    role_name: str,
    display_name: str,
    mount_default: int,
    mount_max: int,
    now: float | None = None,
) -> dict[str, Any]:
    """The crypto worker's sign arguments (without ca_private_key and public_key) and the TTL."""
    cert_type = (req.cert_type or "user").strip().lower()
    if cert_type == "user" and not role.allow_user_certificates:
        raise PolicyError("cert_type 'user' is not allowed by the role")
    if cert_type == "host" and not role.allow_host_certificates:
        raise PolicyError("cert_type 'host' is not allowed by the role")
    if cert_type not in ("user", "host"):
        raise PolicyError("cert_type must be either 'user' or 'host'")
    if req.ttl < 0:
        raise PolicyError("ttl cannot be negative")
    ttl = lifetime(role, req.ttl, mount_default, mount_max)
    start = int(now if now is not None else time.time())
    return {
        "cert_type": cert_type,
        "principals": principals(role, req.valid_principals, cert_type),
        "key_id": key_id(role, req.key_id, display_name, role_name),
        "valid_after": max(0, start - role.not_before_duration),
        "valid_before": start + ttl,
        "critical_options": critical_options(role, req.critical_options),
        "extensions": extensions(role, req.extensions),
        "algorithm_signer": role.algorithm_signer,
        "allowed_user_key_lengths": role.allowed_user_key_lengths,
        "ttl": ttl,
    }
