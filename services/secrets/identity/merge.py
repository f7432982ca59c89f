"""Merging entities (identity/entity/merge): the aliases, merged ids and group memberships of
the `from` entities move to the `to` entity, and the `from` entities are deleted.

Two aliases on the same auth mount cannot both stay on one entity: without
`conflicting_alias_ids_to_keep` such a clash is refused (with the clashing aliases listed);
with it, the alias named there stays and the other is dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import Entity, Group, copy


class MergeError(Exception):
    def __init__(self, message: str, clashes: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.clashes = clashes or []


@dataclass
class Merged:
    entity: Entity
    deleted: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)


def merge(
    index: IdentityIndex,
    to_id: str,
    from_ids: list[str],
    keep: list[str],
    mount_info: dict[str, tuple[str, str]],
) -> Merged:
    """`mount_info` maps a mount accessor to (type, path), for the clash report."""
    target = index.entities.get(to_id)
    if target is None:
        raise MergeError("entity id to merge to is invalid")
    if len(from_ids) > 1 and len(keep) > 1:
        raise MergeError(
            "aliases conflicts cannot be resolved with multiple from entity ids - "
            "merge one entity at a time"
        )
    sources: list[Entity] = []
    for fid in dict.fromkeys(from_ids):
        if fid == to_id:
            raise MergeError("to_entity_id should not be present in from_entity_ids")
        source = index.entities.get(fid)
        if source is None:
            raise MergeError("entity id to merge from is invalid")
        if source.namespace_id != target.namespace_id:
            raise MergeError("entity id to merge from does not belong to this namespace")
        sources.append(copy(source))
    if not keep:
        _refuse_clashes(target, sources, mount_info)

    to = copy(target)
    out = Merged(entity=to)
    changed: dict[str, Group] = {}
    for source in sources:
        for alias in source.aliases:
            clash = next((a for a in to.aliases if a.mount_accessor == alias.mount_accessor), None)
            if clash is not None:
                if clash.id in keep:
                    continue  # the target's alias stays; this one goes with its entity
                if alias.id not in keep:
                    raise MergeError(
                        "conflicting mount accessors in following alias IDs and neither were "
                        f"present in conflicting_alias_ids_to_keep: {alias.id}, {clash.id}"
                    )
                to.aliases = [a for a in to.aliases if a.id != clash.id]
            alias.canonical_id = to.id
            alias.merged_from_canonical_ids = [*(alias.merged_from_canonical_ids or ()), source.id]
            to.aliases.append(alias)
        to.merged_entity_ids = [
            *(to.merged_entity_ids or ()),
            *(source.merged_entity_ids or ()),
            source.id,
        ]
        for group in index.groups_with_entity(source.id):
            edited = changed.get(group.id) or copy(group)
            members = [m for m in edited.member_entity_ids or () if m != source.id]
            if to.id not in members:
                members.append(to.id)
            edited.member_entity_ids = members
            changed[group.id] = edited
        out.deleted.append(source.id)
    out.groups = list(changed.values())
    return out


def _refuse_clashes(
    target: Entity, sources: list[Entity], mount_info: dict[str, tuple[str, str]]
) -> None:
    owner: dict[str, str] = {}  # mount accessor -> the source entity holding it
    lines: list[str] = []
    clashes: list[dict[str, Any]] = []
    for source in sources:
        for alias in source.aliases:
            holder = owner.setdefault(alias.mount_accessor, source.id)
            if holder != source.id:
                raise MergeError(
                    f"mount accessor {alias.mount_accessor} found in multiple fromEntities, "
                    "merge should be done with one fromEntity at a time"
                )
            for mine in target.aliases:
                if mine.mount_accessor != alias.mount_accessor:
                    continue
                lines.append(
                    f"mountAccessor: {mine.mount_accessor}, toEntity ID: {target.id}, "
                    f"fromEntity ID: {source.id}, conflicting toEntity alias ID: {mine.id}, "
                    f"conflicting fromEntity alias ID: {alias.id}"
                )
                for entity, a in ((target, mine), (source, alias)):
                    mtype, mpath = mount_info.get(a.mount_accessor, ("", ""))
                    clashes.append(
                        {
                            "alias": a.name,
                            "entity": entity.name,
                            "entity_id": entity.id,
                            "mount": mtype,
                            "mount_path": mpath,
                        }
                    )
    if lines:
        head = (
            "toEntity and at least one fromEntity have aliases with the same mount accessor, "
            "repeat the merge request specifying exactly one fromEntity, clashes: "
        )
        # Worded as Go's multierror list, which OpenBao answers verbatim.
        items = "".join(f"\t* {line}\n" for line in (head, *lines))
        raise MergeError(f"{len(lines) + 1} errors occurred:\n{items}\n", clashes)
