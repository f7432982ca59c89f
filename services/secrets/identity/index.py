"""The identity records of one namespace in memory, indexed the ways the API looks them up.

Pure: no storage here. The store (store.py) fills it from storage and keeps it in step with
every acknowledged write. Names match case-insensitively, as Vault's do by default.
"""

from __future__ import annotations

from services.secrets.identity.model import Alias, Entity, Group


def _factor(mount_accessor: str, name: str) -> tuple[str, str]:
    return mount_accessor, name.lower()


class IdentityIndex:
    def __init__(self) -> None:
        self.entities: dict[str, Entity] = {}
        self.groups: dict[str, Group] = {}
        self._entity_names: dict[str, str] = {}
        self._alias_entity: dict[str, str] = {}  # alias id -> entity id
        self._alias_factors: dict[tuple[str, str], str] = {}  # (accessor, name) -> alias id
        self._group_names: dict[str, str] = {}
        self._group_alias: dict[str, str] = {}  # group alias id -> group id
        self._group_alias_factors: dict[tuple[str, str], str] = {}
        self._entity_groups: dict[str, set[str]] = {}  # entity id -> groups listing it
        self._parents: dict[str, set[str]] = {}  # group id -> groups listing it as member

    # ---- entities -------------------------------------------------------------------------
    def put_entity(self, entity: Entity) -> None:
        self.drop_entity(entity.id)
        self.entities[entity.id] = entity
        self._entity_names[entity.name.lower()] = entity.id
        for alias in entity.aliases:
            self._alias_entity[alias.id] = entity.id
            self._alias_factors[_factor(alias.mount_accessor, alias.name)] = alias.id

    def drop_entity(self, entity_id: str) -> None:
        old = self.entities.pop(entity_id, None)
        if old is None:
            return
        if self._entity_names.get(old.name.lower()) == entity_id:
            del self._entity_names[old.name.lower()]
        for alias in old.aliases:
            if self._alias_entity.get(alias.id) == entity_id:
                del self._alias_entity[alias.id]
            key = _factor(alias.mount_accessor, alias.name)
            if self._alias_factors.get(key) == alias.id:
                del self._alias_factors[key]

    def entity_by_name(self, name: str) -> Entity | None:
        eid = self._entity_names.get(name.lower())
        return self.entities.get(eid) if eid else None

    def entity_of_alias(self, alias_id: str) -> Entity | None:
        eid = self._alias_entity.get(alias_id)
        return self.entities.get(eid) if eid else None

    def alias(self, alias_id: str) -> Alias | None:
        entity = self.entity_of_alias(alias_id)
        if entity is None:
            return None
        return next((a for a in entity.aliases if a.id == alias_id), None)

    def alias_by_factors(self, mount_accessor: str, name: str) -> Alias | None:
        aid = self._alias_factors.get(_factor(mount_accessor, name))
        return self.alias(aid) if aid else None

    def aliases(self) -> list[Alias]:
        return [a for e in self.entities.values() for a in e.aliases]

    # ---- groups ---------------------------------------------------------------------------
    def put_group(self, group: Group) -> None:
        self.drop_group(group.id)
        self.groups[group.id] = group
        self._group_names[group.name.lower()] = group.id
        if group.alias is not None:
            self._group_alias[group.alias.id] = group.id
            key = _factor(group.alias.mount_accessor, group.alias.name)
            self._group_alias_factors[key] = group.alias.id
        for eid in group.member_entity_ids or ():
            self._entity_groups.setdefault(eid, set()).add(group.id)
        for gid in group.member_group_ids or ():
            self._parents.setdefault(gid, set()).add(group.id)

    def drop_group(self, group_id: str) -> None:
        old = self.groups.pop(group_id, None)
        if old is None:
            return
        if self._group_names.get(old.name.lower()) == group_id:
            del self._group_names[old.name.lower()]
        if old.alias is not None:
            self._group_alias.pop(old.alias.id, None)
            key = _factor(old.alias.mount_accessor, old.alias.name)
            if self._group_alias_factors.get(key) == old.alias.id:
                del self._group_alias_factors[key]
        for eid in old.member_entity_ids or ():
            self._entity_groups.get(eid, set()).discard(group_id)
        for gid in old.member_group_ids or ():
            self._parents.get(gid, set()).discard(group_id)

    def group_by_name(self, name: str) -> Group | None:
        gid = self._group_names.get(name.lower())
        return self.groups.get(gid) if gid else None

    def group_of_alias(self, alias_id: str) -> Group | None:
        gid = self._group_alias.get(alias_id)
        return self.groups.get(gid) if gid else None

    def group_alias_by_factors(self, mount_accessor: str, name: str) -> Alias | None:
        aid = self._group_alias_factors.get(_factor(mount_accessor, name))
        group = self.group_of_alias(aid) if aid else None
        return group.alias if group is not None else None

    def group_aliases(self) -> list[Alias]:
        return [g.alias for g in self.groups.values() if g.alias is not None]

    def groups_with_entity(self, entity_id: str) -> list[Group]:
        ids = self._entity_groups.get(entity_id, set())
        return [self.groups[g] for g in sorted(ids) if g in self.groups]

    def parents(self, group_id: str) -> list[Group]:
        ids = self._parents.get(group_id, set())
        return [self.groups[g] for g in sorted(ids) if g in self.groups]
