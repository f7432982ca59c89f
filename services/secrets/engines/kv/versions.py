"""Pure version bookkeeping of a KV v2 key: adding a version, pruning past max_versions,
deletion times, and the JSON views of version metadata."""

from __future__ import annotations

from typing import Any

from services.secrets.engines.kv.records import Config, KeyRecord, VersionRecord
from services.secrets.engines.kv.timestamps import NS, optional_rfc3339, rfc3339
from services.secrets.framework.durations import format_duration

DEFAULT_MAX_VERSIONS = 10
# Small versions are kept in the key record itself, so writing one is a single storage write;
# the budget bounds the record, which every read and write of the key carries.
VERSION_INLINE_MAX = 4 * 1024
RECORD_INLINE_BUDGET = 16 * 1024


def max_versions(key: KeyRecord, config: Config) -> int:
    """The key's own setting, else the mount's, else 10."""
    if key.max_versions > 0:
        return key.max_versions
    if config.max_versions > 0:
        return config.max_versions
    return DEFAULT_MAX_VERSIONS


def deletion_time(created: int, config: Config, key: KeyRecord) -> int:
    """When a new version will read as deleted: the shorter of the mount's and the key's
    delete_version_after; never when both are unset or the mount disables it (negative)."""
    if config.delete_version_after < 0:
        return 0
    afters = [d for d in (config.delete_version_after, key.delete_after) if d > 0]
    return created + min(afters) * NS if afters else 0


def fits_inline(key: KeyRecord, size: int) -> bool:
    """Whether a new version of `size` bytes can be kept in the record."""
    if size > VERSION_INLINE_MAX:
        return False
    held = sum(len(v.data) for v in key.versions.values() if v.data is not None)
    return held + size <= RECORD_INLINE_BUDGET


def add_version(
    key: KeyRecord, config: Config, now: int, blob: str, data: bytes | None
) -> tuple[int, list[str]]:
    """Append a version and slide the window of kept versions. The version's data is in the
    entry `blob` (and copied as the latest data when `data` is given), or, when `blob` is "",
    kept in the record as `data`. Returns (new version number, blob ids no longer referenced).

    The window follows Vault: `oldest` stays 0 until the key first holds max_versions versions,
    then it is the oldest version kept."""
    if not blob and data is None:
        raise ValueError("a version needs a blob or its data")
    key.current += 1
    key.versions[key.current] = VersionRecord(
        created=now,
        deleted=deletion_time(now, config, key),
        blob=blob,
        data=None if blob else data,
    )
    key.updated = now
    key.latest = data if blob else None
    keep = max_versions(key, config)
    dropped: list[str] = []
    if key.current - key.oldest >= keep:
        last_dropped = key.current - keep
        for n in [n for n in key.versions if n <= last_dropped]:
            gone = key.versions.pop(n)
            if gone.blob:
                dropped.append(gone.blob)
        key.oldest = last_dropped + 1
    return key.current, dropped


def is_deleted(version: VersionRecord, now: int) -> bool:
    return bool(version.deleted) and version.deleted <= now


def readable(version: VersionRecord, now: int) -> bool:
    return not version.destroyed and not is_deleted(version, now)


def version_json(version: VersionRecord) -> dict[str, Any]:
    return {
        "created_time": rfc3339(version.created),
        "deletion_time": optional_rfc3339(version.deleted),
        "destroyed": version.destroyed,
    }


def version_metadata(key: KeyRecord, number: int, version: VersionRecord) -> dict[str, Any]:
    """The `metadata` block of a read, a write and a subkeys answer."""
    return {**version_json(version), "custom_metadata": key.custom or None, "version": number}


def key_metadata(key: KeyRecord) -> dict[str, Any]:
    """The answer of GET metadata/<path>."""
    return {
        "cas_required": key.cas_required,
        "created_time": rfc3339(key.created),
        "current_version": key.current,
        "current_metadata_version": key.metadata_version,
        "custom_metadata": key.custom or None,
        "delete_version_after": format_duration(key.delete_after),
        "max_versions": key.max_versions,
        "metadata_cas_required": key.metadata_cas_required,
        "oldest_version": key.oldest,
        "updated_time": rfc3339(key.updated),
        "versions": {str(n): version_json(v) for n, v in sorted(key.versions.items())},
    }
