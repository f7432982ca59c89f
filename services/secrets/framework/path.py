"""Path declarations: a template, the field struct, the operations with their handlers, and help.

Templates are not regexes: `roles/{name}` captures one segment, `data/{path*}` the rest of the
path, and a Path may list several templates (`sign-verbatim`, `sign-verbatim/{role}`). The same
template becomes the router's regex and the OpenAPI path, so the two cannot disagree.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from services.secrets.framework.request import Request, Response


class Op(enum.StrEnum):
    READ = "read"
    LIST = "list"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    PATCH = "patch"

    @property
    def capability(self) -> str:
        return self.value


Handler = Callable[["Request", Any], Awaitable["Response"]]
ExistenceCheck = Callable[["Request", Any], Awaitable[bool]]


@dataclass(frozen=True)
class Operation:
    handler: Handler
    summary: str = ""
    # Ops that need `sudo` on top of the capability (Vault's root-protected paths).
    sudo: bool = False
    unauthenticated: bool = False


class NoFields(msgspec.Struct):
    pass


_PARAM = re.compile(r"\{(\w+)(\*?)\}")


def template_regex(template: str) -> re.Pattern[str]:
    """`{name}` one segment, `{path*}` the rest; a trailing slash is optional (LIST paths)."""
    slash = template.endswith("/")
    template = template.rstrip("/") if slash else template
    out, pos = [], 0
    for m in _PARAM.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name, greedy = m.group(1), m.group(2)
        out.append(f"(?P<{name}>.+)" if greedy else f"(?P<{name}>[^/]+)")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + ("/?" if slash else ""))


def template_openapi(template: str) -> str:
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", template)


@dataclass
class Path:
    templates: tuple[str, ...]
    operations: dict[Op, Operation]
    fields: type[msgspec.Struct] = NoFields
    synopsis: str = ""
    description: str = ""
    # Decides create vs update for a write; without one every write is an update.
    exists: ExistenceCheck | None = None
    # The handler takes any JSON object (KV data) rather than declared fields.
    arbitrary_input: bool = False
    regexes: list[re.Pattern[str]] = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.templates, str):
            self.templates = (self.templates,)
        self.regexes = [template_regex(t) for t in self.templates]

    def match(self, rel: str) -> dict[str, str] | None:
        for rx in self.regexes:
            m = rx.fullmatch(rel)
            if m:
                return {k: v for k, v in m.groupdict().items() if v is not None}
        return None


def write(handler: Handler, summary: str = "", **kw: Any) -> dict[Op, Operation]:
    """A handler for both create and update."""
    op = Operation(handler, summary, **kw)
    return {Op.CREATE: op, Op.UPDATE: op}
