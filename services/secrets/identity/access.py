"""The identity store as the rest of the service sees it: the entity behind a token (for
identity tokens' claims), the policies a token gets from its entity and groups, and the
entity a login is linked to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.secrets.errors import permission_denied
from services.secrets.identity import graph
from services.secrets.identity.external_groups import sync_external_groups
from services.secrets.identity.model import Alias, Entity, copy, new_id, now
from services.secrets.identity.store import Change, IdentityStore

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.namespaces import Namespace
    from services.secrets.core.tokens import TokenEntry
    from services.secrets.identity.index import IdentityIndex

MOUNT_PATH = "identity/"


def store_of(core: Core, ns: Namespace) -> IdentityStore | None:
    backend = core.table(ns).backends.get(MOUNT_PATH)
    return getattr(backend, "store", None)


def invalidated(core: Core, namespace_id: str) -> None:
    """Another replica changed this namespace's identity records."""
    ns = core.namespaces.by_id.get(namespace_id)
    store = store_of(core, ns) if ns is not None else None
    if store is not None:
        store.invalidate()


@dataclass(frozen=True)
class EntityView:
    """An entity as token claims need it."""

    id: str
    name: str
    namespace_id: str
    metadata: dict[str, str]
    disabled: bool
    group_ids: list[str]  # direct and inherited
    group_names: list[str]
    aliases: list[Alias]


async def _find(core: Core, ns: Namespace, entity_id: str) -> tuple[IdentityIndex, Entity] | None:
    store = store_of(core, ns)
    if store is None or not entity_id:
        return None
    index = await store.cached()
    entity = index.entities.get(entity_id)
    if entity is None:
        index = await store.fresh()  # created on another replica a moment ago?
        entity = index.entities.get(entity_id)
    return (index, entity) if entity is not None else None


async def read_entity(core: Core, ns: Namespace, entity_id: str) -> EntityView | None:
    """The entity `entity_id` of namespace `ns` with its groups, or None."""
    found = await _find(core, ns, entity_id)
    if found is None:
        return None
    index, entity = found
    direct, inherited = graph.entity_groups(index, entity.id)
    groups = [*direct, *inherited]
    return EntityView(
        id=entity.id,
        name=entity.name,
        namespace_id=entity.namespace_id,
        metadata=dict(entity.metadata or {}),
        disabled=entity.disabled,
        group_ids=[g.id for g in groups],
        group_names=[g.name for g in groups],
        aliases=[copy(a) for a in entity.aliases],
    )


async def entity_policies(core: Core, ns: Namespace, entity_id: str) -> list[str]:
    """The policies an entity holds itself and through its groups ([] if there is none)."""
    found = await _find(core, ns, entity_id)
    return graph.identity_policies(found[0], entity_id) if found is not None else []


async def token_identity_policies(core: Core, ns: Namespace, token: TokenEntry) -> list[str]:
    """The policies a token holds through its entity and the entity's groups, read now (so a
    policy added to a group applies to tokens already issued). A token whose entity is
    disabled or gone is refused, as Vault does."""
    found = await _find(core, ns, token.entity_id)
    if found is None or found[1].disabled:
        raise permission_denied()
    return graph.identity_policies(found[0], token.entity_id)


async def link_login(
    core: Core,
    ns: Namespace,
    mount_accessor: str,
    alias_name: str,
    metadata: dict[str, str],
    group_aliases: list[str] | None = None,
) -> tuple[str, list[str]]:
    """The entity of a login through `mount_accessor` as `alias_name`, created with its alias
    on first login, in the external groups `group_aliases` name (when the method reports
    groups): (entity id, its identity policies). A disabled entity cannot log in."""
    store = store_of(core, ns)
    if store is None:
        return "", []
    index = await store.cached()
    alias = index.alias_by_factors(mount_accessor, alias_name)
    if alias is None or (alias.metadata or {}) != metadata:
        alias = await store.transact(
            lambda ix: _link_for_login(ix, ns, mount_accessor, alias_name, metadata)
        )
        index = store.index
    entity = index.entity_of_alias(alias.id)
    if entity is None or entity.disabled:
        raise permission_denied()
    if group_aliases is not None:
        index = await sync_external_groups(store, index, mount_accessor, entity.id, group_aliases)
    return entity.id, graph.identity_policies(index, entity.id)


def _link_for_login(
    index: IdentityIndex, ns: Namespace, accessor: str, name: str, metadata: dict[str, str]
) -> tuple[Change, Alias]:
    """Create the alias (and its entity), or bring the alias's metadata up to date with what
    the auth method reports now, as Vault does on each login."""
    stamp = now()
    existing = index.alias_by_factors(accessor, name)
    if existing is not None:
        owner = index.entity_of_alias(existing.id)
        if owner is None or (existing.metadata or {}) == metadata:
            return Change(), existing  # another replica did it first
        entity = copy(owner)
        for alias in entity.aliases:
            if alias.id == existing.id:
                alias.metadata, alias.last_update_time = dict(metadata) or None, stamp
        return Change(entities=[entity]), existing
    entity = Entity(
        id=new_id(),
        name=generated_name(index, "entity", ns.id),
        namespace_id=ns.id,
        creation_time=stamp,
        last_update_time=stamp,
    )
    alias = Alias(
        id=new_id(),
        canonical_id=entity.id,
        mount_accessor=accessor,
        name=name,
        namespace_id=ns.id,
        metadata=dict(metadata) or None,
        creation_time=stamp,
        last_update_time=stamp,
    )
    entity.aliases = [alias]
    return Change(entities=[entity]), alias


def generated_name(index: IdentityIndex, kind: str, namespace_id: str) -> str:
    """`entity_<8 hex>.<namespace id>` / `group_...` as OpenBao names unnamed ones."""
    while True:
        name = f"{kind}_{new_id()[:8]}.{namespace_id}"
        taken = index.entity_by_name(name) if kind == "entity" else index.group_by_name(name)
        if taken is None:
            return name
