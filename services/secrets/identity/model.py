"""What the identity store keeps: entities with their aliases, and groups with their alias.

As in Vault, an entity's aliases live inside the entity record and an external group's alias
inside the group record, so one stored record changes per operation in the common cases.
Unlike Vault, a group stores its member groups (Vault stores each member's parent ids); the
parents are derived in memory, which keeps a membership change to one record.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)

INTERNAL = "internal"
EXTERNAL = "external"


def now() -> str:
    """RFC 3339 with sub-second digits, as Vault prints identity timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_id() -> str:
    return str(uuid.uuid4())


class Alias(msgspec.Struct, kw_only=True):
    id: str
    canonical_id: str
    mount_accessor: str
    name: str
    namespace_id: str = "root"
    metadata: dict[str, str] | None = None
    custom_metadata: dict[str, str] | None = None
    merged_from_canonical_ids: list[str] | None = None
    creation_time: str = ""
    last_update_time: str = ""
    local: bool = False


class Entity(msgspec.Struct, kw_only=True):
    id: str
    name: str
    namespace_id: str = "root"
    metadata: dict[str, str] | None = None
    policies: list[str] = []
    disabled: bool = False
    aliases: list[Alias] = []
    merged_entity_ids: list[str] | None = None
    creation_time: str = ""
    last_update_time: str = ""


class Group(msgspec.Struct, kw_only=True):
    id: str
    name: str
    type: str = INTERNAL
    namespace_id: str = "root"
    metadata: dict[str, str] | None = None
    policies: list[str] | None = None
    member_entity_ids: list[str] | None = None
    member_group_ids: list[str] | None = None
    alias: Alias | None = None
    creation_time: str = ""
    last_update_time: str = ""
    modify_index: int = 0


def copy(obj: T) -> T:
    """A deep copy, so an operation edits its own objects and the index stays as stored
    until the write is acknowledged."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=type(obj))


def dedupe(items: list[str], *, lower: bool = False) -> list[str]:
    """Order-keeping de-duplication (Vault's RemoveDuplicates sorts; order does not matter to
    any reader, and keeping it makes reads echo what was written)."""
    seen: dict[str, None] = {}
    for item in items:
        item = item.strip().lower() if lower else item.strip()
        if item:
            seen.setdefault(item, None)
    return list(seen)


_META_KEY = re.compile(r"[a-zA-Z0-9=/+_-]+")


def metadata_problem(meta: dict[str, str] | None) -> str:
    """Why `meta` is not acceptable identity metadata ("" if it is), with Vault's limits."""
    meta = meta or {}
    if len(meta) > 64:
        return "metadata cannot contain more than 64 key/value pairs"
    for key, value in meta.items():
        if not key:
            return "metadata key cannot be blank"
        if not _META_KEY.fullmatch(key):
            return f"metadata key {key!r} contains invalid characters"
        if len(key) > 128:
            return f"metadata key {key!r} is too long (limit: 128 characters)"
        if key.startswith("vault-"):
            return 'metadata key prefix "vault-" is reserved for internal use'
        if len(value) > 512:
            return f"metadata value of {key!r} is too long (limit: 512 characters)"
    return ""
