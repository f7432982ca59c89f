"""External group membership as logins report it (Vault's group aliases): a login through an
auth method that names the user's groups (jwt/oidc `groups_claim`) makes the entity a member
of each external group whose alias on that mount has one of those names, and no longer a member
of the external groups of that mount it did not name. Groups are never created by a login."""

from __future__ import annotations

from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import EXTERNAL
from services.secrets.identity.store import Change, IdentityStore


def _memberships(
    index: IdentityIndex, accessor: str, entity_id: str, names: list[str]
) -> tuple[set[str], set[str]]:
    """(the external groups the login names, those of the mount the entity is in now)."""
    wanted = set()
    for name in names:
        alias = index.group_alias_by_factors(accessor, name)
        group = index.group_of_alias(alias.id) if alias is not None else None
        if group is not None and group.type == EXTERNAL:
            wanted.add(group.id)
    current = {
        g.id
        for g in index.groups_with_entity(entity_id)
        if g.type == EXTERNAL and g.alias is not None and g.alias.mount_accessor == accessor
    }
    return wanted, current


def _sync(index: IdentityIndex, accessor: str, entity_id: str, names: list[str]) -> Change:
    wanted, current = _memberships(index, accessor, entity_id, names)
    change = Change()
    for gid in wanted - current:
        group = change.edit_group(index.groups[gid])
        group.member_entity_ids = [*(group.member_entity_ids or []), entity_id]
    for gid in current - wanted:
        group = change.edit_group(index.groups[gid])
        group.member_entity_ids = [e for e in group.member_entity_ids or [] if e != entity_id]
    return change


async def sync_external_groups(
    store: IdentityStore, index: IdentityIndex, accessor: str, entity_id: str, names: list[str]
) -> IdentityIndex:
    """The index with the entity in exactly the external groups of `accessor` that `names`
    reach; writes only when the membership changes."""
    wanted, current = _memberships(index, accessor, entity_id, names)
    if wanted == current:
        return index
    await store.transact(lambda ix: (_sync(ix, accessor, entity_id, names), None))
    return store.index
