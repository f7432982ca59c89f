"""identity/lookup/entity and identity/lookup/group: find one by id, name, alias id, or alias
name and mount; nothing found is a 204, as in OpenBao."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.identity import views

if TYPE_CHECKING:
    from services.secrets.identity.backend import IdentityBackend
    from services.secrets.identity.index import IdentityIndex


class LookupFields(msgspec.Struct, kw_only=True):
    id: str | None = None
    name: str | None = None
    alias_id: str | None = None
    alias_name: str | None = None
    alias_mount_accessor: str | None = None


def check_criteria(f: LookupFields) -> None:
    given = [v for v in msgspec.structs.astuple(f) if v is not None]
    if not given:
        raise bad_request("query parameter not supplied")
    pair = f.alias_name and f.alias_mount_accessor
    if len(given) == 1 and (f.alias_name or f.alias_mount_accessor):
        raise bad_request("both 'alias_name' and 'alias_mount_accessor' needs to be set")
    if len(given) > 1 and not (len(given) == 2 and pair):
        raise bad_request(
            "query parameter conflict; please supply distinct set of query parameters"
        )


def lookup_paths(b: IdentityBackend) -> list[Path]:
    async def answer(
        req: Request,
        f: LookupFields,
        find: Callable[[IdentityIndex], Any],
        view: Callable[..., Any],
    ) -> Response:
        check_criteria(f)
        index = await b.store.fresh()
        found = find(index)
        if found is None:
            return Response()
        return Response(data=view(index, found, views.mounts(b.core, req.namespace)))

    async def entity(req: Request, f: LookupFields) -> Response:
        def find(ix: IdentityIndex) -> Any:
            if f.id:
                return ix.entities.get(f.id)
            if f.name:
                return ix.entity_by_name(f.name)
            if f.alias_id:
                return ix.entity_of_alias(f.alias_id)
            alias = ix.alias_by_factors(f.alias_mount_accessor or "", f.alias_name or "")
            return ix.entity_of_alias(alias.id) if alias is not None else None

        return await answer(req, f, find, views.entity_view)

    async def group(req: Request, f: LookupFields) -> Response:
        def find(ix: IdentityIndex) -> Any:
            if f.id:
                return ix.groups.get(f.id)
            if f.name:
                return ix.group_by_name(f.name)
            if f.alias_id:
                return ix.group_of_alias(f.alias_id)
            alias = ix.group_alias_by_factors(f.alias_mount_accessor or "", f.alias_name or "")
            return ix.group_of_alias(alias.id) if alias is not None else None

        return await answer(req, f, find, views.group_view)

    return [
        Path(
            "lookup/entity",
            write(entity, "Look up an entity"),
            LookupFields,
            synopsis="Query entities based on various properties.",
        ),
        Path(
            "lookup/group",
            write(group, "Look up a group"),
            LookupFields,
            synopsis="Query groups based on various properties.",
        ),
    ]
