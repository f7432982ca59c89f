"""Vault's identity templates in JSON mode, for the claims of identity tokens.

`{{identity.entity.metadata.email}}` becomes the JSON encoding of the value, so a template is
JSON once every placeholder is replaced. Unknown values render as an empty string, as Vault
renders a missing metadata key; an unknown placeholder is refused when the role is written.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from services.secrets.framework.durations import parse_duration
from services.secrets.identity.access import EntityView

_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# Top-level claims a template may not set: the issuer sets them.
RESERVED_CLAIMS = (
    "iat",
    "aud",
    "exp",
    "iss",
    "sub",
    "namespace",
    "nonce",
    "auth_time",
    "at_hash",
    "c_hash",
)


class TemplateError(ValueError):
    pass


def _value(name: str, entity: EntityView, now: float) -> Any:
    parts = name.split(".")
    if parts[:2] == ["time", "now"]:
        if len(parts) == 2:
            return int(now)
        if len(parts) == 4 and parts[2] in ("plus", "minus"):
            try:
                delta = parse_duration(parts[3])
            except ValueError:
                raise TemplateError(f"invalid duration in {name!r}") from None
            return int(now + delta if parts[2] == "plus" else now - delta)
        raise TemplateError(f"unknown template placeholder {name!r}")
    if parts[:2] != ["identity", "entity"] or len(parts) < 3:
        raise TemplateError(f"unknown template placeholder {name!r}")
    field, rest = parts[2], parts[3:]
    metadata = entity.metadata
    if field in ("id", "name") and not rest:
        return getattr(entity, field)
    if field == "metadata":
        return metadata if not rest else metadata.get(".".join(rest), "")
    if field == "groups" and rest in (["ids"], ["names"]):
        return entity.group_ids if rest == ["ids"] else entity.group_names
    if field == "aliases" and len(rest) >= 2:
        accessor, attr = rest[0], rest[1:]
        alias = next((a for a in entity.aliases if a.mount_accessor == accessor), None)
        if attr in (["id"], ["name"]):
            return getattr(alias, attr[0]) if alias else ""
        if attr[0] in ("metadata", "custom_metadata"):
            values = (getattr(alias, attr[0]) if alias else None) or {}
            return values if len(attr) == 1 else values.get(".".join(attr[1:]), "")
    raise TemplateError(f"unknown template placeholder {name!r}")


def render(template: str, entity: EntityView, now: float | None = None) -> str:
    at = time.time() if now is None else now
    return _PLACEHOLDER.sub(lambda m: json.dumps(_value(m.group(1), entity, at)), template)


def claims(template: str, entity: EntityView) -> dict[str, Any]:
    """The template's claims for `entity`, without reserved ones. Raises TemplateError."""
    if not template.strip():
        return {}
    try:
        parsed = json.loads(render(template, entity))
    except json.JSONDecodeError as exc:
        raise TemplateError(f"error parsing template JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise TemplateError("error parsing template JSON: the template must be a JSON object")
    reserved = [k for k in parsed if k in RESERVED_CLAIMS]
    if reserved:
        raise TemplateError(
            f"top level key {reserved[0]!r} not allowed. Restricted keys: "
            + ", ".join(RESERVED_CLAIMS)
        )
    return parsed
