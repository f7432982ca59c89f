"""identity/group* and identity/group-alias*: internal groups (explicit members) and external
groups (membership from an auth method, named by the group's alias)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import CommaList, KVPairs
from services.secrets.framework.listing import listing
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.identity import graph, views
from services.secrets.identity.access import generated_name
from services.secrets.identity.alias_paths import alias_listing
from services.secrets.identity.model import (
    EXTERNAL,
    INTERNAL,
    Alias,
    Group,
    copy,
    dedupe,
    metadata_problem,
    new_id,
    now,
)
from services.secrets.identity.store import Change

if TYPE_CHECKING:
    from services.secrets.core.namespaces import Namespace
    from services.secrets.identity.backend import IdentityBackend
    from services.secrets.identity.index import IdentityIndex


class GroupFields(msgspec.Struct, kw_only=True):
    id: str | None = None
    name: str | None = None
    type: str | None = None
    metadata: KVPairs | None = None
    policies: CommaList | None = None
    member_group_ids: CommaList | None = None
    member_entity_ids: CommaList | None = None


class GroupAliasFields(msgspec.Struct, kw_only=True):
    id: str | None = None
    name: str = ""
    mount_accessor: str = ""
    canonical_id: str = ""


def _edit(
    index: IdentityIndex, ns: Namespace, f: GroupFields, found: Group | None
) -> tuple[Change, Response]:
    stamp = now()
    created = found is None
    group = (
        copy(found)
        if found is not None
        else Group(id=new_id(), name="", type="", namespace_id=ns.id, creation_time=stamp)
    )
    if f.policies is not None:
        group.policies = dedupe(f.policies, lower=True)
    if "root" in (group.policies or ()):
        raise bad_request("policies cannot contain root")
    if f.type is not None:
        if group.type and f.type != group.type:
            raise bad_request("group type cannot be changed")
        group.type = f.type
    group.type = group.type or INTERNAL
    if group.type not in (INTERNAL, EXTERNAL):
        raise bad_request(f'invalid group type "{group.type}"')
    if f.name:
        named = index.group_by_name(f.name)
        if named is not None and named.id != group.id:
            raise bad_request("group name is already in use")
        group.name = f.name
    if f.metadata is not None:
        problem = metadata_problem(f.metadata)
        if problem:
            raise bad_request(f"failed to parse metadata: {problem}")
        group.metadata = f.metadata
    if f.member_entity_ids is not None:
        if group.type == EXTERNAL:
            raise bad_request("member entities can't be set manually for external groups")
        members = dedupe(f.member_entity_ids)
        for eid in members:
            if eid not in index.entities:
                raise bad_request(f'invalid entity ID "{eid}"')
        group.member_entity_ids = members
    if f.member_group_ids is not None:
        if group.type == EXTERNAL:
            raise bad_request("member groups can't be set for external groups")
        members = dedupe(f.member_group_ids)
        for gid in members:
            if gid not in index.groups:
                raise bad_request(f'invalid member group ID "{gid}"')
            if gid == group.id:
                raise bad_request(f'member group ID "{gid}" is same as the ID of the group')
            if graph.creates_cycle(index, group.id, gid):
                raise bad_request(f'cyclic relationship detected for member group ID "{gid}"')
        group.member_group_ids = members
    if not group.name:
        group.name = generated_name(index, "group", ns.id)
    group.last_update_time = stamp
    group.modify_index += 1
    resp = Response(data={"id": group.id, "name": group.name}) if created else Response()
    return Change(groups=[group]), resp


def group_paths(b: IdentityBackend) -> list[Path]:
    async def register(req: Request, f: GroupFields) -> Response:
        if f.id is not None:
            return await by_id(req, f)
        if f.name:
            return await by_name(req, f)
        return await b.store.transact(lambda ix: _edit(ix, req.namespace, f, None))

    async def by_id(req: Request, f: GroupFields) -> Response:
        if not f.id:
            raise bad_request("empty group ID")

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            found = index.groups.get(f.id or "")
            if found is None:
                raise bad_request("invalid group ID")
            return _edit(index, req.namespace, f, found)

        return await b.store.transact(op)

    async def by_name(req: Request, f: GroupFields) -> Response:
        return await b.store.transact(
            lambda ix: _edit(ix, req.namespace, f, ix.group_by_name(f.name or ""))
        )

    async def show(req: Request, index: IdentityIndex, group: Group | None) -> Response:
        if group is None:
            raise not_found()
        return Response(data=views.group_view(index, group, views.mounts(b.core, req.namespace)))

    async def read_by_id(req: Request, f: GroupFields) -> Response:
        index = await b.store.fresh()
        return await show(req, index, index.groups.get(f.id or ""))

    async def read_by_name(req: Request, f: GroupFields) -> Response:
        index = await b.store.fresh()
        return await show(req, index, index.group_by_name(f.name or ""))

    async def delete_where(find: Any) -> Response:
        def op(index: IdentityIndex) -> tuple[Change, Response]:
            group = find(index)
            change = Change()
            if group is not None:
                change.drop_groups.append(group.id)
                for parent in index.parents(group.id):  # no dangling member ids
                    edited = change.edit_group(parent)
                    edited.member_group_ids = [
                        g for g in edited.member_group_ids or () if g != group.id
                    ]
            return change, Response()

        return await b.store.transact(op)

    async def delete_by_id(req: Request, f: GroupFields) -> Response:
        return await delete_where(lambda ix: ix.groups.get(f.id or ""))

    async def delete_by_name(req: Request, f: GroupFields) -> Response:
        return await delete_where(lambda ix: ix.group_by_name(f.name or ""))

    async def list_ids(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        known = views.mounts(b.core, req.namespace)
        groups = sorted(index.groups.values(), key=lambda g: g.id)
        info: dict[str, Any] = {}
        for g in groups:
            entry: dict[str, Any] = {
                "name": g.name,
                "num_member_entities": len(g.member_entity_ids or ()),
                "num_parent_groups": len(index.parents(g.id)),
            }
            if g.alias is not None:
                brief = {
                    "id": g.alias.id,
                    "name": g.alias.name,
                    "mount_accessor": g.alias.mount_accessor,
                }
                if g.alias.mount_accessor in known:
                    brief["mount_type"], brief["mount_path"] = known[g.alias.mount_accessor]
                entry["alias"] = brief
            info[g.id] = entry
        return listing([g.id for g in groups], info)

    async def list_names(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        return listing([g.name for g in sorted(index.groups.values(), key=lambda g: g.id)])

    # ---- group aliases --------------------------------------------------------------------
    async def alias_upsert(req: Request, f: GroupAliasFields) -> Response:
        ns = req.namespace
        table = await views.mounts_with(b.core, ns, f.mount_accessor)
        if f.id is not None and not f.id:
            raise bad_request("empty group alias ID")

        def op(index: IdentityIndex) -> tuple[Change, Response]:
            alias: Alias | None = None
            if f.id:
                owner = index.group_of_alias(f.id)
                if owner is None or owner.alias is None:
                    raise bad_request("invalid group alias ID")
                alias = copy(owner.alias)
            if not f.name:
                raise bad_request("missing alias name")
            if not f.mount_accessor:
                raise bad_request("missing mount_accessor")
            if (
                alias is not None
                and alias.name == f.name
                and alias.mount_accessor == f.mount_accessor
                and f.canonical_id in ("", alias.canonical_id)
            ):
                return Change(), Response()
            target: Group | None = None
            if f.canonical_id:
                target = index.groups.get(f.canonical_id)
                if target is None:
                    raise bad_request("invalid group ID given in 'canonical_id'")
                if target.type != EXTERNAL:
                    raise bad_request("alias can't be set on an internal group")
            mount = table.get(f.mount_accessor)
            if mount is None:
                raise bad_request(f'invalid mount accessor "{f.mount_accessor}"')
            if mount.local:
                raise bad_request(f'mount accessor "{f.mount_accessor}" is a local mount')
            other = index.group_alias_by_factors(f.mount_accessor, f.name)
            if other is not None and (alias is None or other.id != alias.id):
                raise bad_request("combination of mount and group alias name is already in use")
            stamp = now()
            if alias is None:
                alias = Alias(
                    id=new_id(),
                    canonical_id="",
                    mount_accessor=f.mount_accessor,
                    name=f.name,
                    namespace_id=ns.id,
                    creation_time=stamp,
                )
            alias.name, alias.mount_accessor, alias.last_update_time = (
                f.name,
                f.mount_accessor,
                stamp,
            )
            change = Change()
            previous = index.group_of_alias(alias.id)
            if previous is not None and (target is None or target.id == previous.id):
                target, previous = previous, None
            if previous is not None:
                change.edit_group(previous).alias = None
            if target is None:
                target = Group(
                    id=new_id(),
                    name=generated_name(index, "group", ns.id),
                    type=EXTERNAL,
                    namespace_id=ns.id,
                    creation_time=stamp,
                    last_update_time=stamp,
                    modify_index=1,
                )
                change.groups.append(target)
            else:
                target = change.edit_group(target)
            alias.canonical_id = target.id
            target.alias = alias
            return change, Response(data={"id": alias.id, "canonical_id": target.id})

        return await b.store.transact(op)

    async def alias_read(req: Request, f: GroupAliasFields) -> Response:
        index = await b.store.fresh()
        group = index.group_of_alias(f.id or "")
        if group is None or group.alias is None:
            raise not_found()
        return Response(data=views.alias_view(group.alias, views.mounts(b.core, req.namespace)))

    async def alias_delete(req: Request, f: GroupAliasFields) -> Response:
        def op(index: IdentityIndex) -> tuple[Change, Response]:
            group = index.group_of_alias(f.id or "")
            change = Change()
            if group is not None:
                change.edit_group(group).alias = None
            return change, Response()

        return await b.store.transact(op)

    async def alias_list(req: Request, _: NoFields) -> Response:
        index = await b.store.fresh()
        return alias_listing(index.group_aliases(), views.mounts(b.core, req.namespace))

    r = Operation
    return [
        Path(
            "group",
            write(register, "Create or update a group"),
            GroupFields,
            synopsis="Create a new group (or update one named by id or name).",
        ),
        Path(
            "group/id/",
            {Op.LIST: r(list_ids, "List group ids")},
            synopsis="List all the group IDs.",
        ),
        Path(
            "group/name/",
            {Op.LIST: r(list_names, "List group names")},
            synopsis="List all the group names.",
        ),
        Path(
            "group/id/{id}",
            {
                **write(by_id, "Update the group"),
                Op.READ: r(read_by_id, "Read the group"),
                Op.DELETE: r(delete_by_id, "Delete the group"),
            },
            GroupFields,
            synopsis="Update, read or delete an existing group using its ID.",
        ),
        Path(
            "group/name/{name*}",
            {
                **write(by_name, "Create or update the group"),
                Op.READ: r(read_by_name, "Read the group"),
                Op.DELETE: r(delete_by_name, "Delete the group"),
            },
            GroupFields,
            synopsis="Create, update, read or delete a group using its name.",
        ),
        Path(
            "group-alias",
            write(alias_upsert, "Create or update a group alias"),
            GroupAliasFields,
            synopsis="Creates a new group alias, or updates an existing one.",
        ),
        Path(
            "group-alias/id/",
            {Op.LIST: r(alias_list, "List group alias ids")},
            synopsis="List all the group alias IDs.",
        ),
        Path(
            "group-alias/id/{id}",
            {
                **write(alias_upsert, "Update the group alias"),
                Op.READ: r(alias_read, "Read the group alias"),
                Op.DELETE: r(alias_delete, "Delete the group alias"),
            },
            GroupAliasFields,
            synopsis="Update, read or delete a group alias using ID.",
        ),
    ]
