"""`?help=1`: markdown help and an OpenAPI document for a path and the paths below it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.framework.fields import field_specs
from services.secrets.framework.openapi import document

if TYPE_CHECKING:
    from services.secrets.core.namespaces import Namespace
    from services.secrets.framework.backend import Backend
    from services.secrets.framework.path import Path


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
        ops = ", ".join(o.value for o in p.operations)
        lines.append(f"\nOperations: {ops}")
        specs = field_specs(p.fields)
        if specs:
            lines.append("\nParameters:")
            for f in msgspec.structs.fields(p.fields):
                info = msgspec.inspect.type_info(p.fields)
                doc = next((fld.type for fld in info.fields if fld.name == f.name), None)
                text = getattr(doc, "extra_json_schema", None)
                desc = ""
                if isinstance(doc, msgspec.inspect.Metadata) and doc.extra_json_schema:
                    desc = doc.extra_json_schema.get("description", "")
                if isinstance(doc, msgspec.inspect.Metadata):
                    desc = desc or getattr(doc, "description", "") or ""
                del text
                required = " (required)" if f.required else ""
                lines.append(f"- `{f.encode_name}`{required}{': ' + desc if desc else ''}")
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
