"""The mount table of a namespace: which backend serves which path prefix, with its config."""

from __future__ import annotations

import secrets
import uuid
from typing import TYPE_CHECKING

import msgspec

from services.secrets.errors import bad_request

if TYPE_CHECKING:
    from services.secrets.framework.backend import Backend

DEFAULT_LEASE_TTL = 32 * 24 * 3600
MAX_LEASE_TTL = 32 * 24 * 3600


class MountConfig(msgspec.Struct, kw_only=True):
    default_lease_ttl: int = 0
    max_lease_ttl: int = 0
    force_no_cache: bool = False
    audit_non_hmac_request_keys: list[str] = []
    audit_non_hmac_response_keys: list[str] = []
    listing_visibility: str = ""
    passthrough_request_headers: list[str] = []
    allowed_response_headers: list[str] = []
    allowed_managed_keys: list[str] = []
    token_type: str = ""
    plugin_version: str = ""


class MountEntry(msgspec.Struct, kw_only=True):
    path: str  # with trailing slash, relative to the namespace ("secret/", "auth/userpass/")
    type: str
    description: str = ""
    uuid: str = ""
    accessor: str = ""
    config: MountConfig = msgspec.field(default_factory=MountConfig)
    options: dict[str, str] = {}
    local: bool = False
    seal_wrap: bool = False
    external_entropy_access: bool = False
    plugin_version: str = ""
    running_sha256: str = ""
    namespace_id: str = "root"

    @property
    def is_auth(self) -> bool:
        return self.path.startswith("auth/")

    def storage_prefix(self) -> str:
        return f"{'auth' if self.is_auth else 'logical'}/{self.uuid}/"


class MountTableDoc(msgspec.Struct):
    entries: list[MountEntry] = []


def new_entry(path: str, type_: str, **kw: object) -> MountEntry:
    path = path.strip("/") + "/"
    if path == "/":
        raise bad_request("a mount path is required")
    prefix = type_.replace("-", "_")
    return MountEntry(
        path=path,
        type=type_,
        uuid=str(uuid.uuid4()),
        accessor=f"{prefix}_{secrets.token_hex(4)}",
        **kw,
    )  # type: ignore[arg-type]


class MountTable:
    """Mounts of one namespace with their live backend instances, found by longest prefix."""

    def __init__(self) -> None:
        self.entries: dict[str, MountEntry] = {}
        self.backends: dict[str, Backend] = {}
        # Mount paths by their first segment, longest first: a request's first segment picks the
        # few mounts that can hold it.
        self._by_head: dict[str, list[str]] = {}
        # Revisions of the stored mount and auth tables this table was built from.
        self.revisions: tuple[int, int] = (0, 0)
        # Bumped by every change in place, so what was read off the table can tell it is stale.
        self.generation = 0

    def set(self, entry: MountEntry, backend: Backend) -> None:
        self.entries[entry.path] = entry
        self.backends[entry.path] = backend
        self._index()

    def remove(self, path: str) -> Backend | None:
        self.entries.pop(path, None)
        backend = self.backends.pop(path, None)
        self._index()
        return backend

    def _index(self) -> None:
        by_head: dict[str, list[str]] = {}
        for mp in sorted(self.entries, key=len, reverse=True):
            by_head.setdefault(mp.partition("/")[0], []).append(mp)
        self._by_head = by_head
        self.generation += 1

    def match(self, path: str) -> MountEntry | None:
        """The mount whose path is the longest prefix of `path` (a mount path matches with or
        without its trailing slash)."""
        for mp in self._by_head.get(path.partition("/")[0], ()):
            if path.startswith(mp) or path == mp[:-1]:
                return self.entries[mp]
        return None

    def conflicts(self, path: str) -> str | None:
        for mp in self.entries:
            if path.startswith(mp) or mp.startswith(path):
                return mp
        return None
