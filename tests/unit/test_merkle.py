"""The Merkle index: roots agree exactly when contents agree; diffs name the right buckets."""

from __future__ import annotations

from services.replication.merkle import BUCKETS, MerkleIndex, bucket_of, diff, root_of


def _index(items: dict[str, bytes]) -> MerkleIndex:
    idx = MerkleIndex()
    for k, v in items.items():
        idx.put(k, v)
    return idx


def test_root_depends_on_content_not_order() -> None:
    items = {f"sys.token.id.k{i}": f"ct{i}".encode() for i in range(300)}
    a = _index(items)
    b = _index(dict(reversed(list(items.items()))))
    assert a.root() == b.root()
    assert len(a.root()) == 40
    assert a.root() != MerkleIndex().root()


def test_change_delete_and_restore() -> None:
    a = _index({"k1": b"x", "k2": b"y"})
    before = a.root()
    a.put("k1", b"changed")
    assert a.root() != before
    a.put("k1", b"x")
    assert a.root() == before
    a.delete("k2")
    assert a.root() == _index({"k1": b"x"}).root()
    a.delete("missing")  # no error, no change
    assert a.root() == _index({"k1": b"x"}).root()


def test_diff_names_only_the_changed_buckets() -> None:
    items = {f"key{i}": b"v" for i in range(1000)}
    a, b = _index(items), _index(items)
    b.put("key7", b"other")
    b.delete("key8")
    b.put("new", b"n")
    changed = diff(a.bucket_hashes(), b.bucket_hashes())
    assert set(changed) == {bucket_of("key7"), bucket_of("key8"), bucket_of("new")}
    assert a.keys_in(changed) >= {"key7", "key8"}
    assert diff(a.bucket_hashes(), []) == list(range(BUCKETS))  # malformed: resync all


def test_key_level_diff_and_clear() -> None:
    a = _index({"a": b"1", "b": b"2", "c": b"3"})
    b = _index({"b": b"2", "c": b"changed", "d": b"4"})
    assert a.diff_keys(b) == (["a"], ["d"], ["c"])
    a.clear()
    assert len(a) == 0 and a.root() == root_of(MerkleIndex().bucket_hashes())


def test_keys_and_values_cannot_be_shifted_into_each_other() -> None:
    # Length prefixes: ("ab", v) and ("a", "b"+v)-like collisions give different roots.
    assert _index({"ab": b"c"}).root() != _index({"a": b"bc"}).root()
