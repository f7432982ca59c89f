"""OpenAPI 3 documents generated from the path declarations that also route and validate.
Templates become OpenAPI paths as they are; field structs become request schemas."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.framework.path import NoFields, Op, Path, template_openapi

if TYPE_CHECKING:
    from services.secrets.framework.backend import Backend

OPENAPI_VERSION = "3.0.3"
_PARAMS = re.compile(r"\{(\w+)\*?\}")

_ERRORS = {
    "400": "invalid request",
    "403": "permission denied",
    "404": "not found",
    "405": "unsupported operation",
    "503": "sealed",
}
ERROR_SCHEMA = {
    "type": "object",
    "properties": {"errors": {"type": "array", "items": {"type": "string"}}},
}


def _component_prefix(struct: type) -> str:
    return struct.__module__.replace("services.secrets.", "").replace(".", "_") + "_"


def _body_schema(
    struct: type[msgspec.Struct], captures: set[str], components: dict[str, Any]
) -> dict[str, Any] | None:
    if struct is NoFields:
        return None
    prefix = _component_prefix(struct)
    (ref,), comps = msgspec.json.schema_components(
        [struct], ref_template=f"#/components/schemas/{prefix}{{name}}"
    )
    for name, schema in comps.items():
        components[prefix + name] = schema
    # Path parameters travel in the URL, not the body.
    name = ref["$ref"].rsplit("/", 1)[1]
    own = dict(components[name])
    props = {k: v for k, v in own.get("properties", {}).items() if k not in captures}
    if not props:
        return None
    own["properties"] = props
    if "required" in own:
        own["required"] = [r for r in own["required"] if r not in captures] or None
        if own["required"] is None:
            del own["required"]
    own.pop("title", None)
    return own


def _responses(ok: str) -> dict[str, Any]:
    out: dict[str, Any] = {ok: {"description": "OK"}}
    if ok == "200":
        out["204"] = {"description": "OK, no content"}
    for code, text in _ERRORS.items():
        out[code] = {"description": text, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    return out


def path_items(path: Path, prefix: str, components: dict[str, Any]) -> dict[str, Any]:
    items: dict[str, Any] = {}
    for template in path.templates:
        url = "/" + prefix + template_openapi(template)
        captures = set(_PARAMS.findall(template))
        params = [
            {"name": c, "in": "path", "required": True, "schema": {"type": "string"}}
            for c in sorted(captures)
        ]
        item: dict[str, Any] = {"description": path.synopsis}
        if params:
            item["parameters"] = params
        ops = path.operations
        if Op.READ in ops or Op.LIST in ops:
            get: dict[str, Any] = {
                "summary": (ops.get(Op.READ) or ops[Op.LIST]).summary or path.synopsis,
                "responses": _responses("200"),
            }
            if Op.LIST in ops:
                get["parameters"] = [
                    {
                        "name": "list",
                        "in": "query",
                        "required": Op.READ not in ops,
                        "schema": {"type": "string", "enum": ["true"]},
                    }
                ]
            items.setdefault(url, item)["get"] = get
        writes = ops.get(Op.UPDATE) or ops.get(Op.CREATE)
        if writes is not None:
            post: dict[str, Any] = {
                "summary": writes.summary or path.synopsis,
                "responses": _responses("200"),
            }
            schema = (
                {"type": "object"}
                if path.arbitrary_input
                else _body_schema(path.fields, captures, components)
            )
            if schema is not None:
                post["requestBody"] = {"content": {"application/json": {"schema": schema}}}
            items.setdefault(url, item)["post"] = post
        if Op.DELETE in ops:
            items.setdefault(url, item)["delete"] = {
                "summary": ops[Op.DELETE].summary or path.synopsis,
                "responses": _responses("204"),
            }
        if Op.PATCH in ops:
            items.setdefault(url, item)["patch"] = {
                "summary": ops[Op.PATCH].summary or path.synopsis,
                "responses": _responses("200"),
                "requestBody": {
                    "content": {"application/merge-patch+json": {"schema": {"type": "object"}}}
                },
            }
    return items


def document(entries: list[tuple[str, Backend, list[Path]]], title: str) -> dict[str, Any]:
    """entries: (URL prefix, backend, its paths to include)."""
    components: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for prefix, _backend, plist in entries:
        for p in plist:
            paths.update(path_items(p, prefix, components))
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": title, "version": "1", "description": "Trellis secrets service"},
        "paths": paths,
        "components": {"schemas": components},
    }
