"""Merging entities: aliases, merged ids and group memberships move to the target; aliases on
the same mount clash unless one is named in conflicting_alias_ids_to_keep."""

from __future__ import annotations

import pytest

from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.merge import MergeError, merge
from services.secrets.identity.model import Alias, Entity, Group


def _alias(aid: str, owner: str, accessor: str) -> Alias:
    return Alias(id=aid, canonical_id=owner, mount_accessor=accessor, name=f"n-{aid}")


def _index() -> IdentityIndex:
    index = IdentityIndex()
    index.put_entity(Entity(id="to", name="to", aliases=[_alias("a-to", "to", "acc1")]))
    index.put_entity(
        Entity(
            id="from1",
            name="from1",
            aliases=[_alias("a-f1", "from1", "acc2")],
            merged_entity_ids=["older"],
        )
    )
    index.put_entity(Entity(id="from2", name="from2", aliases=[_alias("a-f2", "from2", "acc1")]))
    index.put_group(Group(id="g", name="g", member_entity_ids=["from1", "other"]))
    return index


def test_merge_moves_aliases_groups_and_ids() -> None:
    index = _index()
    out = merge(index, "to", ["from1"], [], {})
    assert out.deleted == ["from1"]
    assert [a.id for a in out.entity.aliases] == ["a-to", "a-f1"]
    moved = out.entity.aliases[1]
    assert moved.canonical_id == "to" and moved.merged_from_canonical_ids == ["from1"]
    assert out.entity.merged_entity_ids == ["older", "from1"]
    assert [g.member_entity_ids for g in out.groups] == [["other", "to"]]
    # The index itself is untouched until the store commits the change.
    assert index.entities["to"].aliases[0].id == "a-to" and len(index.entities["to"].aliases) == 1
    assert index.groups["g"].member_entity_ids == ["from1", "other"]


def test_clash_on_one_mount_is_refused_with_details() -> None:
    with pytest.raises(MergeError) as err:
        merge(_index(), "to", ["from2"], [], {"acc1": ("userpass", "auth/userpass/")})
    assert "same mount accessor" in str(err.value)
    assert {c["entity_id"] for c in err.value.clashes} == {"to", "from2"}
    assert all(c["mount_path"] == "auth/userpass/" for c in err.value.clashes)


@pytest.mark.parametrize(("keep", "expected"), [("a-f2", ["a-f2"]), ("a-to", ["a-to"])])
def test_conflicting_alias_ids_to_keep_decides(keep: str, expected: list[str]) -> None:
    out = merge(_index(), "to", ["from2"], [keep], {})
    assert [a.id for a in out.entity.aliases] == expected


def test_keep_naming_neither_alias_is_refused() -> None:
    with pytest.raises(MergeError, match="neither were present"):
        merge(_index(), "to", ["from2"], ["unrelated"], {})


@pytest.mark.parametrize(
    ("to", "sources", "message"),
    [
        ("nope", ["from1"], "merge to is invalid"),
        ("to", ["to"], "should not be present"),
        ("to", ["nope"], "merge from is invalid"),
    ],
)
def test_invalid_ids(to: str, sources: list[str], message: str) -> None:
    with pytest.raises(MergeError, match=message):
        merge(_index(), to, sources, [], {})
