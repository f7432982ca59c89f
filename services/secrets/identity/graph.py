"""Group membership over the index: which groups an entity is in (directly or through member
groups), the policies it gets from them, and whether a membership change makes a cycle."""

from __future__ import annotations

from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import Group


def entity_groups(index: IdentityIndex, entity_id: str) -> tuple[list[Group], list[Group]]:
    """(direct, inherited): the groups listing the entity, and every group above those through
    member_group_ids (a group's policies apply to the members of its member groups)."""
    direct = index.groups_with_entity(entity_id)
    seen = {g.id for g in direct}
    inherited: list[Group] = []
    stack = list(direct)
    while stack:
        for parent in index.parents(stack.pop().id):
            if parent.id not in seen:
                seen.add(parent.id)
                inherited.append(parent)
                stack.append(parent)
    return direct, inherited


def identity_policies(index: IdentityIndex, entity_id: str) -> list[str]:
    """The entity's own policies and those of all its groups, de-duplicated, sorted."""
    entity = index.entities.get(entity_id)
    if entity is None:
        return []
    direct, inherited = entity_groups(index, entity_id)
    out = set(entity.policies)
    for group in (*direct, *inherited):
        out.update(group.policies or ())
    return sorted(out)


def creates_cycle(index: IdentityIndex, group_id: str, member_id: str) -> bool:
    """Whether making `member_id` a member of `group_id` closes a loop: true when `group_id`
    is `member_id` itself or one of its (transitive) member groups."""
    stack, seen = [member_id], set()
    while stack:
        gid = stack.pop()
        if gid == group_id:
            return True
        if gid in seen:
            continue
        seen.add(gid)
        group = index.groups.get(gid)
        if group is not None:
            stack.extend(group.member_group_ids or ())
    return False
