"""How the identity API shows entities, aliases and groups (OpenBao's field names and shapes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.secrets.identity import graph

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.mounts import MountEntry
    from services.secrets.core.namespaces import Namespace
    from services.secrets.identity.index import IdentityIndex
    from services.secrets.identity.model import Alias, Entity, Group


def _by_accessor(core: Core, ns: Namespace) -> dict[str, MountEntry]:
    return {m.accessor: m for m in core.table(ns).entries.values()}


async def mounts_with(core: Core, ns: Namespace, accessor: str) -> dict[str, MountEntry]:
    """Mount accessor -> mount of the namespace; the table is re-read once if `accessor` is
    not in it (a mount made on another replica a moment ago)."""
    table = _by_accessor(core, ns)
    if accessor and accessor not in table and await core.refresh_if_stale(ns):
        table = _by_accessor(core, ns)
    return table


def mounts(core: Core, ns: Namespace) -> dict[str, tuple[str, str]]:
    """Mount accessor -> (type, path) of the namespace's mounts."""
    return {m.accessor: (m.type, m.path) for m in core.table(ns).entries.values()}


def _with_mount(out: dict[str, Any], accessor: str, known: dict[str, tuple[str, str]]) -> None:
    if accessor in known:
        out["mount_type"], out["mount_path"] = known[accessor]


def alias_view(alias: Alias, known: dict[str, tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": alias.id,
        "canonical_id": alias.canonical_id,
        "mount_accessor": alias.mount_accessor,
        "metadata": alias.metadata,
        "custom_metadata": alias.custom_metadata,
        "name": alias.name,
        "merged_from_canonical_ids": alias.merged_from_canonical_ids,
        "namespace_id": alias.namespace_id,
        "local": alias.local,
        "creation_time": alias.creation_time,
        "last_update_time": alias.last_update_time,
    }
    _with_mount(out, alias.mount_accessor, known)
    return out


def entity_view(
    index: IdentityIndex, entity: Entity, known: dict[str, tuple[str, str]]
) -> dict[str, Any]:
    direct, inherited = graph.entity_groups(index, entity.id)
    aliases = []
    for alias in entity.aliases:
        view = alias_view(alias, known)
        del view["namespace_id"]
        aliases.append(view)
    return {
        "id": entity.id,
        "name": entity.name,
        "metadata": entity.metadata,
        "merged_entity_ids": entity.merged_entity_ids,
        "policies": entity.policies,
        "disabled": entity.disabled,
        "namespace_id": entity.namespace_id,
        "creation_time": entity.creation_time,
        "last_update_time": entity.last_update_time,
        "aliases": aliases,
        "direct_group_ids": [g.id for g in direct],
        "inherited_group_ids": [g.id for g in inherited],
        "group_ids": [g.id for g in (*direct, *inherited)],
    }


def group_view(
    index: IdentityIndex, group: Group, known: dict[str, tuple[str, str]]
) -> dict[str, Any]:
    alias: dict[str, Any] = {}
    if group.alias is not None:
        alias = alias_view(group.alias, known)
        for gone in ("namespace_id", "local", "custom_metadata"):
            del alias[gone]
    parents = [g.id for g in index.parents(group.id)]
    return {
        "id": group.id,
        "name": group.name,
        "policies": group.policies,
        "member_entity_ids": group.member_entity_ids or None,
        "member_group_ids": group.member_group_ids or None,
        "parent_group_ids": parents or None,
        "metadata": group.metadata,
        "creation_time": group.creation_time,
        "last_update_time": group.last_update_time,
        "modify_index": group.modify_index,
        "type": group.type,
        "namespace_id": group.namespace_id,
        "alias": alias,
    }
