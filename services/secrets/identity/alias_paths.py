"""identity/entity-alias*: the names an entity has on auth mounts (one per mount)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import KVPairs
from services.secrets.framework.listing import listing
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.identity import views
from services.secrets.identity.access import generated_name
from services.secrets.identity.model import Alias, Entity, copy, metadata_problem, new_id, now
from services.secrets.identity.store import Change, StoreOp

if TYPE_CHECKING:
    from services.secrets.core.mounts import MountEntry
    from services.secrets.core.namespaces import Namespace
    from services.secrets.identity.backend import IdentityBackend
    from services.secrets.identity.index import IdentityIndex


class AliasFields(msgspec.Struct, kw_only=True):
    id: str = ""
    name: str = ""
    mount_accessor: str = ""
    canonical_id: str = ""
    entity_id: str = ""  # the older name of canonical_id
    custom_metadata: KVPairs | None = None


def alias_paths(b: IdentityBackend) -> list[Path]:
    def write_op(req: Request, f: AliasFields, table: dict[str, MountEntry]) -> StoreOp[Response]:
        ns = req.namespace
        canonical = f.canonical_id or f.entity_id
        if f.custom_metadata:
            problem = metadata_problem(f.custom_metadata)
            if problem:
                raise bad_request(f"invalid custom_metadata: {problem}")

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            name, accessor, custom = f.name, f.mount_accessor, f.custom_metadata
            if f.id:
                alias = index.alias(f.id)
                if alias is None:
                    raise bad_request("invalid alias ID provided")
                if custom is None:
                    custom = alias.custom_metadata
                if not (accessor or name or canonical) and f.custom_metadata is None:
                    return Change(), Response()  # nothing to change
                name, accessor = name or alias.name, accessor or alias.mount_accessor
                return _update(index, table, alias, canonical, name, accessor, custom or {})
            if not accessor or not name:
                raise bad_request("'id' or 'mount_accessor' and 'name' must be provided")
            if accessor not in table:
                raise bad_request(f'invalid mount accessor "{accessor}"')
            existing = index.alias_by_factors(accessor, name)
            if existing is not None:
                return _update(index, table, existing, canonical, name, accessor, custom or {})
            return _create(index, ns, canonical, name, accessor, custom or {})

        return op

    def _create(
        index: IdentityIndex,
        ns: Namespace,
        canonical: str,
        name: str,
        accessor: str,
        custom: dict[str, str],
    ) -> tuple[Change, Response]:
        stamp = now()
        if canonical:
            found = index.entities.get(canonical)
            if found is None:
                raise bad_request("invalid canonical ID")
            entity = copy(found)
        else:
            entity = Entity(
                id=new_id(),
                name=generated_name(index, "entity", ns.id),
                namespace_id=ns.id,
                creation_time=stamp,
            )
        if any(a.mount_accessor == accessor for a in entity.aliases):
            raise bad_request("Alias already exists for requested entity and mount accessor")
        alias = Alias(
            id=new_id(),
            canonical_id=entity.id,
            mount_accessor=accessor,
            name=name,
            namespace_id=ns.id,
            custom_metadata=custom,
            creation_time=stamp,
            last_update_time=stamp,
        )
        entity.aliases.append(alias)
        entity.last_update_time = stamp
        data = {"id": alias.id, "canonical_id": entity.id}
        return Change(entities=[entity]), Response(data=data)

    def _update(
        index: IdentityIndex,
        table: dict[str, MountEntry],
        alias: Alias,
        canonical: str,
        name: str,
        accessor: str,
        custom: dict[str, str],
    ) -> tuple[Change, Response]:
        same_custom = (custom or {}) == (alias.custom_metadata or {})
        if (
            name == alias.name
            and accessor == alias.mount_accessor
            and canonical in ("", alias.canonical_id)
            and same_custom
        ):
            return Change(), Response()
        owner = index.entity_of_alias(alias.id)
        if owner is None:
            raise bad_request("given alias is not associated with an entity")
        current = copy(owner)
        if (
            accessor != alias.mount_accessor
            and canonical in ("", alias.canonical_id)
            and any(a.mount_accessor == accessor for a in current.aliases)
        ):
            raise bad_request(
                "Alias cannot be updated as the entity already has an alias for the "
                "given 'mount_accessor' "
            )
        moved = copy(alias)
        if name != alias.name or accessor != alias.mount_accessor or not same_custom:
            if accessor not in table:
                raise bad_request(f'invalid mount accessor "{accessor}"')
            other = index.alias_by_factors(accessor, name)
            if other is not None and other.id != alias.id:
                raise bad_request(
                    "alias with combination of mount accessor and name already exists"
                )
            moved.name, moved.mount_accessor, moved.custom_metadata = name, accessor, custom
        moved.last_update_time = now()
        current.aliases = [a for a in current.aliases if a.id != alias.id]
        change = Change()
        if canonical and canonical != alias.canonical_id:
            found = index.entities.get(canonical)
            if found is None:
                raise bad_request("given 'canonical_id' is not associated with an entity")
            target = copy(found)
            if any(a.mount_accessor == moved.mount_accessor for a in target.aliases):
                raise bad_request(
                    "Alias cannot be updated as the given entity already has an alias for "
                    "this mount "
                )
            moved.canonical_id = target.id
            target.aliases.append(moved)
            change.entities = [current, target]
        else:
            current.aliases = [moved if a.id == alias.id else a for a in owner.aliases]
            change.entities = [current]
        return change, Response(data={"id": moved.id, "canonical_id": moved.canonical_id})

    async def upsert(req: Request, f: AliasFields) -> Response:
        table = await views.mounts_with(b.core, req.namespace, f.mount_accessor)
        return await b.store.transact(write_op(req, f, table))

    async def read(req: Request, f: AliasFields) -> Response:
        index = await b.store.fresh()
        alias = index.alias(f.id)
        if alias is None:
            raise not_found()
        return Response(data=views.alias_view(alias, views.mounts(b.core, req.namespace)))

    async def delete(req: Request, f: AliasFields) -> Response:
        def op(index: IdentityIndex) -> tuple[Change, Response]:
            owner = index.entity_of_alias(f.id)
            if owner is None:
                return Change(), Response()
            entity = copy(owner)
            entity.aliases = [a for a in entity.aliases if a.id != f.id]
            entity.last_update_time = now()
            return Change(entities=[entity]), Response()

        return await b.store.transact(op)

    async def list_ids(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        return alias_listing(index.aliases(), views.mounts(b.core, req.namespace))

    r = Operation
    return [
        Path(
            "entity-alias",
            write(upsert, "Create or update an alias"),
            AliasFields,
            synopsis="Create a new alias (or update one by id, or by mount and name).",
        ),
        Path(
            "entity-alias/id/",
            {Op.LIST: r(list_ids, "List alias ids")},
            synopsis="List all the alias IDs.",
        ),
        Path(
            "entity-alias/id/{id}",
            {
                **write(upsert, "Update the alias"),
                Op.READ: r(read, "Read the alias"),
                Op.DELETE: r(delete, "Delete the alias"),
            },
            AliasFields,
            synopsis="Update, read or delete an alias ID.",
        ),
    ]


def alias_listing(aliases: list[Alias], known: dict[str, tuple[str, str]]) -> Response:
    aliases = sorted(aliases, key=lambda a: a.id)
    info: dict[str, Any] = {}
    for a in aliases:
        entry: dict[str, Any] = {
            "name": a.name,
            "canonical_id": a.canonical_id,
            "mount_accessor": a.mount_accessor,
            "custom_metadata": a.custom_metadata,
            "metadata": a.metadata,
            "local": a.local,
        }
        if a.mount_accessor in known:
            entry["mount_type"], entry["mount_path"] = known[a.mount_accessor]
        info[a.id] = entry
    return listing([a.id for a in aliases], info)
