"""identity/entity*: create, read, update, delete, list, batch-delete and merge entities."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import CommaList, KVPairs
from services.secrets.framework.listing import listing
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import RawResponse, Request, Response
from services.secrets.identity import views
from services.secrets.identity.access import generated_name
from services.secrets.identity.merge import MergeError, merge
from services.secrets.identity.model import Entity, copy, dedupe, metadata_problem, new_id, now
from services.secrets.identity.store import Change, StoreOp

if TYPE_CHECKING:
    from services.secrets.identity.backend import IdentityBackend
    from services.secrets.identity.index import IdentityIndex


class EntityFields(msgspec.Struct, kw_only=True):
    id: str | None = None
    name: str | None = None
    metadata: KVPairs | None = None
    policies: CommaList | None = None
    disabled: bool | None = None


class BatchDeleteFields(msgspec.Struct, kw_only=True):
    entity_ids: CommaList = []


class MergeFields(msgspec.Struct, kw_only=True):
    from_entity_ids: CommaList = []
    to_entity_id: str = ""
    force: bool = False
    conflicting_alias_ids_to_keep: CommaList = []


def without_entity(index: IdentityIndex, entity: Entity, change: Change) -> None:
    """Delete `entity` (its aliases go with it) and take it out of the groups listing it."""
    change.drop_entities.append(entity.id)
    for group in index.groups_with_entity(entity.id):
        edited = change.edit_group(group)
        edited.member_entity_ids = [m for m in edited.member_entity_ids or () if m != entity.id]


def entity_paths(b: IdentityBackend) -> list[Path]:
    def upsert_op(req: Request, f: EntityFields) -> StoreOp[Response]:
        ns = req.namespace

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            entity: Entity | None = None
            if f.id:
                found = index.entities.get(f.id)
                if found is None:
                    raise bad_request("entity not found from id")
                entity = copy(found)
            if f.name:
                named = index.entity_by_name(f.name)
                if named is not None and entity is None:
                    entity = copy(named)
                elif named is not None and entity is not None and named.id != entity.id:
                    raise bad_request("entity name is already in use")
            created = entity is None
            stamp = now()
            if entity is None:
                entity = Entity(id=new_id(), name="", namespace_id=ns.id, creation_time=stamp)
            if f.name:
                entity.name = f.name
            if f.policies is not None:
                entity.policies = dedupe(f.policies, lower=True)
            if "root" in entity.policies:
                raise bad_request("policies cannot contain root")
            if f.disabled is not None:
                entity.disabled = f.disabled
            if f.metadata is not None:
                problem = metadata_problem(f.metadata)
                if problem:
                    raise bad_request(f"failed to parse metadata: {problem}")
                entity.metadata = f.metadata
            if not entity.name:
                entity.name = generated_name(index, "entity", ns.id)
            entity.last_update_time = stamp
            resp = Response()
            if created:
                ids = [a.id for a in entity.aliases] or None
                resp = Response(data={"id": entity.id, "name": entity.name, "aliases": ids})
            return Change(entities=[entity]), resp

        return op

    async def upsert(req: Request, f: EntityFields) -> Response:
        return await b.store.transact(upsert_op(req, f))

    async def read_by_id(req: Request, f: EntityFields) -> Response:
        index = await b.store.fresh()
        entity = index.entities.get(f.id or "")
        return _read(req, index, entity)

    async def read_by_name(req: Request, f: EntityFields) -> Response:
        index = await b.store.fresh()
        return _read(req, index, index.entity_by_name(f.name or ""))

    def _read(req: Request, index: IdentityIndex, entity: Entity | None) -> Response:
        if entity is None:
            raise not_found()
        known = views.mounts(b.core, req.namespace)
        return Response(data=views.entity_view(index, entity, known))

    async def delete_where(find: Any) -> Response:
        def op(index: IdentityIndex) -> tuple[Change, Response]:
            change = Change()
            entity = find(index)
            if entity is not None:
                without_entity(index, entity, change)
            return change, Response()

        return await b.store.transact(op)

    async def delete_by_id(req: Request, f: EntityFields) -> Response:
        return await delete_where(lambda ix: ix.entities.get(f.id or ""))

    async def delete_by_name(req: Request, f: EntityFields) -> Response:
        return await delete_where(lambda ix: ix.entity_by_name(f.name or ""))

    async def batch_delete(req: Request, f: BatchDeleteFields) -> Response:
        if not f.entity_ids:
            raise bad_request("missing entity ids to delete")

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            change = Change()
            for eid in dict.fromkeys(f.entity_ids):
                entity = index.entities.get(eid)
                if entity is not None:
                    without_entity(index, entity, change)
            return change, Response()

        return await b.store.transact(op)

    async def list_ids(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        known = views.mounts(b.core, req.namespace)
        entities = sorted(index.entities.values(), key=lambda e: e.id)
        info: dict[str, Any] = {}
        for e in entities:
            entry: dict[str, Any] = {"name": e.name}
            if e.aliases:
                entry["aliases"] = []
                for a in e.aliases:
                    brief = {"id": a.id, "name": a.name, "mount_accessor": a.mount_accessor}
                    if a.mount_accessor in known:
                        brief["mount_type"], brief["mount_path"] = known[a.mount_accessor]
                    entry["aliases"].append(brief)
            info[e.id] = entry
        return listing([e.id for e in entities], info)

    async def list_names(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        return listing([e.name for e in sorted(index.entities.values(), key=lambda e: e.id)])

    async def merge_entities(req: Request, f: MergeFields) -> Response:
        if not f.to_entity_id:
            raise bad_request("missing entity id to merge to")
        if not f.from_entity_ids:
            raise bad_request("missing entity ids to merge from")
        known = views.mounts(b.core, req.namespace)

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            try:
                out = merge(
                    index, f.to_entity_id, f.from_entity_ids, f.conflicting_alias_ids_to_keep, known
                )
            except MergeError as exc:
                body: dict[str, Any] = {"errors": [str(exc)]}
                if exc.clashes:
                    body["data"] = exc.clashes
                raw = RawResponse(status=400, body=msgspec.json.encode(body))
                return Change(), Response(raw=raw)
            out.entity.last_update_time = now()
            change = Change(entities=[out.entity], groups=out.groups, drop_entities=out.deleted)
            return change, Response()

        return await b.store.transact(op)

    r = Operation
    by_fields = write(upsert, "Update the entity")
    return [
        Path(
            "entity",
            write(upsert, "Create or update an entity"),
            EntityFields,
            synopsis="Create a new entity (or update one named by id or name).",
        ),
        Path(
            "entity/batch-delete",
            write(batch_delete, "Delete entities"),
            BatchDeleteFields,
            synopsis="Delete all of the entities provided.",
        ),
        Path(
            "entity/merge",
            write(merge_entities, "Merge entities"),
            MergeFields,
            synopsis="Merge two or more entities together.",
        ),
        Path(
            "entity/id/",
            {Op.LIST: r(list_ids, "List entity ids")},
            synopsis="List all the entity IDs.",
        ),
        Path(
            "entity/name/",
            {Op.LIST: r(list_names, "List entity names")},
            synopsis="List all the entity names.",
        ),
        Path(
            "entity/id/{id}",
            {**by_fields, Op.READ: r(read_by_id, "Read"), Op.DELETE: r(delete_by_id, "Delete")},
            EntityFields,
            synopsis="Update, read or delete an entity using its ID.",
        ),
        Path(
            "entity/name/{name*}",
            {**by_fields, Op.READ: r(read_by_name, "Read"), Op.DELETE: r(delete_by_name, "Delete")},
            EntityFields,
            synopsis="Update, read or delete an entity using its name.",
        ),
    ]
