"""KV v2 version bookkeeping: the max_versions window, deletion times, metadata views."""

from __future__ import annotations

from services.secrets.engines.kv.records import Config, KeyRecord, VersionRecord
from services.secrets.engines.kv.timestamps import NS
from services.secrets.engines.kv.versions import (
    RECORD_INLINE_BUDGET,
    VERSION_INLINE_MAX,
    add_version,
    deletion_time,
    fits_inline,
    is_deleted,
    key_metadata,
    max_versions,
    readable,
    version_metadata,
)


def fresh() -> KeyRecord:
    return KeyRecord(created=1, updated=1)


def test_oldest_stays_zero_until_the_window_is_full_then_slides() -> None:
    key, config = fresh(), Config(max_versions=3)
    dropped_all = []
    for i in range(1, 6):
        number, dropped = add_version(key, config, i * NS, f"b{i}", None)
        assert number == i
        dropped_all += dropped
        if i < 3:
            assert key.oldest == 0  # Vault shows 0 until the first slide
    assert key.current == 5
    assert key.oldest == 3
    assert sorted(key.versions) == [3, 4, 5]
    assert dropped_all == ["b1", "b2"]


def test_default_window_is_ten() -> None:
    key = fresh()
    for i in range(1, 13):
        add_version(key, Config(), i, f"b{i}", None)
    assert sorted(key.versions) == list(range(3, 13))
    assert key.oldest == 3


def test_lowering_max_versions_prunes_several_at_the_next_write() -> None:
    key = fresh()
    for i in range(1, 6):
        add_version(key, Config(), i, f"b{i}", None)
    key.max_versions = 2
    _, dropped = add_version(key, Config(), 6, "b6", None)
    assert sorted(key.versions) == [5, 6]
    assert sorted(dropped) == ["b1", "b2", "b3", "b4"]
    assert key.oldest == 5


def test_destroyed_versions_have_no_blob_to_drop() -> None:
    key = fresh()
    add_version(key, Config(max_versions=1), 1, "b1", None)
    key.versions[1].destroyed, key.versions[1].blob = True, ""
    _, dropped = add_version(key, Config(max_versions=1), 2, "b2", None)
    assert dropped == [] and list(key.versions) == [2]


def test_max_versions_precedence() -> None:
    assert max_versions(KeyRecord(created=0, updated=0), Config()) == 10
    assert max_versions(KeyRecord(created=0, updated=0), Config(max_versions=4)) == 4
    assert (
        max_versions(KeyRecord(created=0, updated=0, max_versions=7), Config(max_versions=4)) == 7
    )


def test_add_version_inlines_latest_data_and_times() -> None:
    key = fresh()
    add_version(key, Config(), 5, "b1", b'{"a":1}')
    assert key.latest == b'{"a":1}' and key.updated == 5 and key.created == 1
    add_version(key, Config(), 6, "b2", None)  # too large to inline: no stale copy kept
    assert key.latest is None


def test_a_version_without_a_blob_keeps_its_data_in_the_record() -> None:
    key = fresh()
    for i in range(1, 4):
        _, dropped = add_version(key, Config(max_versions=2), i, "", b'{"n":%d}' % i)
        assert dropped == []  # nothing to purge when the data went with the record
    assert key.latest is None
    assert {n: v.data for n, v in key.versions.items()} == {2: b'{"n":2}', 3: b'{"n":3}'}
    assert all(v.blob == "" for v in key.versions.values())


def test_fits_inline_bounds_each_version_and_the_record() -> None:
    key = fresh()
    assert not fits_inline(key, VERSION_INLINE_MAX + 1)
    while fits_inline(key, VERSION_INLINE_MAX):
        add_version(key, Config(max_versions=100), 1, "", b"x" * VERSION_INLINE_MAX)
    held = sum(len(v.data or b"") for v in key.versions.values())
    assert RECORD_INLINE_BUDGET - VERSION_INLINE_MAX < held <= RECORD_INLINE_BUDGET


def test_deletion_time_is_the_shorter_setting_and_can_be_disabled() -> None:
    key = KeyRecord(created=0, updated=0, delete_after=60)
    assert deletion_time(100, Config(), key) == 100 + 60 * NS
    assert deletion_time(100, Config(delete_version_after=30), key) == 100 + 30 * NS
    assert deletion_time(100, Config(delete_version_after=3600), key) == 100 + 60 * NS
    assert deletion_time(100, Config(delete_version_after=-1), key) == 0
    assert deletion_time(100, Config(), KeyRecord(created=0, updated=0)) == 0


def test_a_future_deletion_time_is_not_deleted_yet() -> None:
    v = VersionRecord(created=1, deleted=100)
    assert not is_deleted(v, 99) and readable(v, 99)
    assert is_deleted(v, 100) and not readable(v, 100)
    assert not readable(VersionRecord(created=1, destroyed=True), 5)


def test_metadata_views() -> None:
    key = KeyRecord(created=NS, updated=2 * NS, custom={"owner": "me"})
    add_version(key, Config(), 2 * NS, "b1", None)
    meta = version_metadata(key, 1, key.versions[1])
    assert meta == {
        "created_time": "1970-01-01T00:00:02Z",
        "deletion_time": "",
        "destroyed": False,
        "custom_metadata": {"owner": "me"},
        "version": 1,
    }
    full = key_metadata(key)
    assert set(full) == {
        "cas_required",
        "created_time",
        "current_metadata_version",
        "current_version",
        "custom_metadata",
        "delete_version_after",
        "max_versions",
        "metadata_cas_required",
        "oldest_version",
        "updated_time",
        "versions",
    }
    assert full["versions"] == {
        "1": {"created_time": "1970-01-01T00:00:02Z", "deletion_time": "", "destroyed": False}
    }
    assert full["delete_version_after"] == "0s"
