"""What KV keeps in storage (always behind the barrier): the v2 per-key record, the mount config.
msgpack because the records are never read by people and version data rides inside as bytes."""

from __future__ import annotations

import msgspec


class VersionRecord(msgspec.Struct, omit_defaults=True):
    created: int  # ns since the epoch
    deleted: int = 0  # ns; 0 = not deleted; may lie in the future (delete_version_after)
    destroyed: bool = False
    blob: str = ""  # id of the storage entry that holds this version's data, if it has one
    data: bytes | None = None  # the JSON data itself when small enough to keep in the record


class KeyRecord(msgspec.Struct, omit_defaults=True):
    """A key's metadata and its versions. The record is the unit of check-and-set: every change
    to a key is one CAS update of this record, so concurrent writers never lose a version."""

    created: int
    updated: int
    current: int = 0
    oldest: int = 0
    max_versions: int = 0
    cas_required: bool = False
    delete_after: int = 0  # seconds; 0 = use the mount's
    custom: dict[str, str] | None = None
    # OpenBao's check-and-set on metadata: bumped by every metadata write.
    metadata_version: int = 0
    metadata_cas_required: bool = False
    versions: dict[int, VersionRecord] = {}
    # A copy of the current version's JSON data when that version lives in a blob, so reading
    # the latest version costs one get.
    latest: bytes | None = None


class Config(msgspec.Struct, omit_defaults=True):
    max_versions: int = 0  # 0 means 10
    cas_required: bool = False
    delete_version_after: int = 0  # seconds; 0 = off, negative = off for every key
    metadata_cas_required: bool = False


_enc = msgspec.msgpack.Encoder()
_key_dec = msgspec.msgpack.Decoder(KeyRecord)
_config_dec = msgspec.msgpack.Decoder(Config)


def encode(record: KeyRecord | Config) -> bytes:
    return _enc.encode(record)


def decode_key(raw: bytes) -> KeyRecord:
    return _key_dec.decode(raw)


def decode_config(raw: bytes) -> Config:
    return _config_dec.decode(raw)
