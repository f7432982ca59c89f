"""Group membership logic of the identity store: direct and inherited groups, the policies an
entity gets through them, and cycle refusal."""

from __future__ import annotations

from services.secrets.identity import graph
from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import Alias, Entity, Group


def _index(groups: list[Group], entities: list[Entity]) -> IdentityIndex:
    index = IdentityIndex()
    for e in entities:
        index.put_entity(e)
    for g in groups:
        index.put_group(g)
    return index


def test_policies_come_from_direct_and_inherited_groups() -> None:
    # top lists mid as a member group, mid lists low, low lists the entity.
    ent = Entity(id="e1", name="alice", policies=["own"])
    low = Group(id="g-low", name="low", policies=["p-low"], member_entity_ids=["e1"])
    mid = Group(id="g-mid", name="mid", policies=["p-mid"], member_group_ids=["g-low"])
    top = Group(id="g-top", name="top", policies=["p-top", "p-mid"], member_group_ids=["g-mid"])
    other = Group(id="g-x", name="x", policies=["p-x"], member_entity_ids=["someone-else"])
    index = _index([low, mid, top, other], [ent])

    direct, inherited = graph.entity_groups(index, "e1")
    assert [g.id for g in direct] == ["g-low"]
    assert sorted(g.id for g in inherited) == ["g-mid", "g-top"]
    assert graph.identity_policies(index, "e1") == ["own", "p-low", "p-mid", "p-top"]
    assert graph.identity_policies(index, "unknown") == []


def test_membership_change_updates_inheritance() -> None:
    ent = Entity(id="e1", name="alice")
    low = Group(id="g-low", name="low", policies=["p-low"], member_entity_ids=["e1"])
    top = Group(id="g-top", name="top", policies=["p-top"], member_group_ids=["g-low"])
    index = _index([low, top], [ent])
    assert graph.identity_policies(index, "e1") == ["p-low", "p-top"]
    index.put_group(Group(id="g-top", name="top", policies=["p-top"], member_group_ids=[]))
    assert graph.identity_policies(index, "e1") == ["p-low"]
    index.drop_group("g-low")
    assert graph.identity_policies(index, "e1") == []


def test_cycles_are_detected() -> None:
    a = Group(id="a", name="a", member_group_ids=["b"])
    b = Group(id="b", name="b", member_group_ids=["c"])
    c = Group(id="c", name="c")
    index = _index([a, b, c], [])
    assert graph.creates_cycle(index, "c", "a")  # a > b > c > a
    assert graph.creates_cycle(index, "a", "a")
    assert not graph.creates_cycle(index, "a", "c")  # already below, no loop
    assert not graph.creates_cycle(index, "c", "fresh")


def test_index_finds_aliases_and_names_case_insensitively() -> None:
    alias = Alias(id="al1", canonical_id="e1", mount_accessor="auth_userpass_1", name="Bob")
    index = _index([], [Entity(id="e1", name="Robert", aliases=[alias])])
    assert index.entity_by_name("robert") is not None
    assert index.alias_by_factors("auth_userpass_1", "bob") is not None
    assert index.alias_by_factors("auth_other", "bob") is None
    index.put_entity(Entity(id="e1", name="Rob", aliases=[]))
    assert index.entity_by_name("robert") is None
    assert index.alias("al1") is None and index.alias_by_factors("auth_userpass_1", "bob") is None
