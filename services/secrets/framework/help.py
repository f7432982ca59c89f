"""`?help=1`: markdown help and an OpenAPI document for a path and the paths below it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.framework.openapi import document

if TYPE_CHECKING:
    from services.secrets.core.namespaces import Namespace
    from services.secrets.framework.backend import Backend
    from services.secrets.framework.path import Path


def _description(t: msgspec.inspect.Type) -> str:
    """The `desc()` text of a field, looking through Optional and nested metadata."""
    if isinstance(t, msgspec.inspect.Metadata):
        text = (t.extra_json_schema or {}).get("description", "")
        return text or _description(t.type)
    if isinstance(t, msgspec.inspect.UnionType):
        for member in t.types:
            text = _description(member)
            if text:
                return text
    return ""


def _markdown(backend: Backend, paths: list[Path], where: str) -> str:
    lines = [f"## {where}", ""]
    if backend.help_text:
        lines += [backend.help_text.strip(), ""]
    for p in paths:
        lines.append(f"### {', '.join(p.templates) or '/'}")
        if p.synopsis:
            lines.append(p.synopsis)
        if p.description:
            lines += ["", p.description.strip()]
        lines.append(f"\nOperations: {', '.join(o.value for o in p.operations)}")
        info = msgspec.inspect.type_info(p.fields)
        fields = getattr(info, "fields", ())
        if fields:
            lines.append("\nParameters:")
            for f in fields:
                text = _description(f.type)
                required = " (required)" if f.required else ""
                lines.append(f"- `{f.encode_name}`{required}{': ' + text if text else ''}")
        lines.append("")
    return "\n".join(lines)


def help_document(backend: Backend, rel: str, mount_path: str, ns: Namespace) -> dict[str, Any]:
    paths = backend.paths_below(rel)
    where = f"{ns.path}{mount_path}{rel}"
    return {
        "help": _markdown(backend, paths, where),
        "openapi": document([("", backend, paths)], f"help for {where}"),
        "see_also": None,
    }
