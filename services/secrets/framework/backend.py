"""A backend is a set of paths behind one mount (an engine, an auth method, or sys)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import (
    SecretsError,
    bad_request,
    unsupported_operation,
    unsupported_path,
)
from services.secrets.framework.fields import FieldError, decode_fields
from services.secrets.framework.path import NoFields, Op, Operation, Path

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry
    from services.secrets.framework.request import Request, Response


@dataclass(frozen=True)
class SecretType:
    """How the lease manager revokes and renews one kind of secret of a backend."""

    revoke: Callable[[dict[str, Any]], Awaitable[None]]
    renew: Callable[[dict[str, Any], int], Awaitable[int]] | None = None


@dataclass(frozen=True)
class Routed:
    """A path's match; shared by every request to the same path, so never changed."""

    path: Path
    captures: dict[str, str]


ROUTE_MEMO_MAX = 4096


class Backend:
    """Subclasses set `type_name`, build `self.paths` in `build_paths()`, and may register
    `secret_types` for leases. One instance per mount."""

    type_name = ""
    help_text = ""
    # Auth methods answer login without a token; engines list unauthenticated paths here.
    is_auth = False
    _routes: tuple[list[Path], dict[str, Routed | None]] | None = None

    def __init__(self, core: Any, mount: MountEntry | None, storage: BarrierView) -> None:
        self.core = core
        self.mount = mount
        self.storage = storage
        self.secret_types: dict[str, SecretType] = {}
        self.paths: list[Path] = self.build_paths()

    def build_paths(self) -> list[Path]:
        return []

    async def initialize(self) -> None:
        """Called once the mount is live (e.g. to create default config)."""

    async def cleanup(self) -> None:
        """Called when the mount is disabled: delete whatever the backend keeps."""

    def route(self, rel: str) -> Routed | None:
        # The same paths route a path the same way: each path is matched once, then looked up
        # (the memo follows `self.paths`, which KV rebuilds when a tune changes its version).
        routes = self._routes
        if routes is None or routes[0] is not self.paths:
            routes = self._routes = (self.paths, {})
        memo = routes[1]
        if rel in memo:
            return memo[rel]
        found = self._match(rel)
        if len(memo) >= ROUTE_MEMO_MAX:
            memo.clear()  # client-chosen paths must not grow it without bound
        memo[rel] = found
        return found

    def _match(self, rel: str) -> Routed | None:
        for p in self.paths:
            captures = p.match(rel)
            if captures is not None:
                if any(v.endswith(".") for v in captures.values()):
                    return None  # a parameter ending in a period is not a path (rule 7)
                return Routed(p, captures)
        return None

    def paths_below(self, rel: str) -> list[Path]:
        """Paths whose templates start at or below `rel` (for help)."""
        rel = rel.rstrip("/")
        out = []
        for p in self.paths:
            if not rel or any(t.startswith(rel) for t in p.templates) or p.match(rel) is not None:
                out.append(p)
        return out

    async def resolve_op(self, routed: Routed, op: Op, req: Request, fields: Any) -> Op:
        """A write is a create when the path says nothing exists there yet."""
        if op in (Op.CREATE, Op.UPDATE):
            if routed.path.exists is not None:
                return Op.UPDATE if await routed.path.exists(req, fields) else Op.CREATE
            return Op.UPDATE if Op.UPDATE in routed.path.operations else Op.CREATE
        return op

    def operation(self, routed: Routed, op: Op) -> Operation:
        spec = routed.path.operations.get(op)
        if spec is None:
            raise unsupported_operation()
        return spec

    def decode(self, routed: Routed, data: dict[str, Any]) -> tuple[Any, list[str]]:
        path = routed.path
        if path.arbitrary_input:
            fields = (
                decode_fields(path.fields, {}, routed.captures)[0]
                if path.fields is not NoFields
                else None
            )
            return fields, []
        try:
            return decode_fields(path.fields, data, routed.captures)
        except FieldError as exc:
            raise bad_request(str(exc)) from None

    async def call(self, routed: Routed, op: Op, req: Request, fields: Any) -> Response:
        spec = self.operation(routed, op)
        try:
            return await spec.handler(req, fields)
        except SecretsError:
            raise
        except msgspec.ValidationError as exc:
            raise bad_request(str(exc)) from None


def require_route(backend: Backend, rel: str) -> Routed:
    routed = backend.route(rel)
    if routed is None:
        raise unsupported_path(rel)
    return routed
