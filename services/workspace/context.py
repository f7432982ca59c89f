"""What a handler gets: the parsed request, the caller, the state to read and `write` to
append to the log. Lookups here apply the permission model, so a resource the caller may not
see is a 404 exactly like one that does not exist."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from services.workspace import permissions as perms
from services.workspace.blobs import BlobStore
from services.workspace.jsonapi import ApiError, not_found
from services.workspace.model import Organization, Workspace
from services.workspace.permissions import Caller, OrgAccess
from services.workspace.query import Page
from services.workspace.sealing import STATE_KEY, Keys, unseal
from services.workspace.state import WorkspaceState
from shared.messages import HttpRequest
from shared.replog import ApplyError

_enc = msgspec.msgpack.Encoder()


class Log(Protocol):
    async def append(self, type: str, payload: bytes) -> tuple[int, Any]: ...
    async def barrier(self) -> int: ...


@dataclass
class Req:
    http: HttpRequest
    params: dict[str, str]
    query: dict[str, str]
    state: WorkspaceState
    log: Log
    caller: Caller | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Encryption at rest (states, outputs, variables) and the store of sealed state files.
    keys: Keys | None = None
    blobs: BlobStore | None = None

    @property
    def key_store(self) -> Keys:
        if self.keys is None:
            raise ApiError(503, "this replica has no access to encryption keys")
        return self.keys

    @property
    def blob_store(self) -> BlobStore:
        if self.blobs is None:
            raise ApiError(503, "this replica has no state store")
        return self.blobs

    async def open_blob(self, name: str, aad: str, what: str) -> bytes:
        """A stored file sealed under the state key: 404 when missing, 500 when it does not
        authenticate."""
        blob = await self.blob_store.get(name)
        if blob is None:
            raise not_found(what)
        key = await self.key_store.get(STATE_KEY)
        try:
            return unseal(key, blob, aad)
        except ValueError:
            raise ApiError(500, f"the stored {what} does not authenticate") from None

    @property
    def who(self) -> Caller:
        assert self.caller is not None  # routes marked public never call this
        return self.caller

    async def write(self, op: str, payload: dict[str, Any]) -> Any:
        """Append one op and return apply's result; apply's refusal becomes the API error."""
        try:
            _, result = await self.log.append(op, _enc.encode(payload))
        except ApplyError as exc:
            raise ApiError(exc.code, exc.message) from None
        return result

    # --- permission-aware lookups ---

    def org(self, name: str) -> tuple[Organization, OrgAccess]:
        org = self.state.org_named(name)
        if org is None:
            raise not_found("organization")
        acc = perms.org_access(self.state, self.who, org)
        if not acc.member:
            raise not_found("organization")
        return org, acc

    def org_by_id(self, org_id: str) -> tuple[Organization, OrgAccess]:
        org = self.state.orgs.get(org_id)
        if org is None:
            raise not_found("organization")
        return self.org(org.name)

    def require(self, acc: OrgAccess, flag: str, what: str) -> None:
        if not acc.can(flag):
            raise not_found(what)  # forbidden looks like absent

    def ws_caps(self, ws: Workspace) -> frozenset[str]:
        return perms.workspace_caps(self.state, self.who, ws)

    def workspace(self, ws_id: str, need: str = "read-runs") -> tuple[Workspace, frozenset[str]]:
        ws = self.state.workspaces.get(ws_id)
        if ws is None:
            raise not_found("workspace")
        caps = self.ws_caps(ws)
        if "read-runs" not in caps or need not in caps:
            raise not_found("workspace")
        return ws, caps

    def workspace_named(
        self, org_name: str, name: str, need: str = "read-runs"
    ) -> tuple[Workspace, frozenset[str]]:
        org = self.state.org_named(org_name)
        ws = self.state.workspace_named(org.id, name) if org else None
        if ws is None:
            raise not_found("workspace")
        return self.workspace(ws.id, need)

    def workspace_filtered(self, need: str) -> Workspace:
        """The workspace a list names by filter[organization][name] and filter[workspace][name]
        (both required)."""
        ws_name = self.query.get("filter[workspace][name]")
        org_name = self.query.get("filter[organization][name]")
        if not ws_name or not org_name:
            raise ApiError(
                400,
                "filter[workspace][name] and filter[organization][name] are required",
                title="invalid filter",
            )
        return self.workspace_named(org_name, ws_name, need)[0]

    # --- list helpers ---

    def page(self) -> Page:
        return Page.from_query(self.query)

    def list_doc(
        self, items: list[Any], render: Any, *, included: list[Any] | None = None
    ) -> dict[str, Any]:
        """A paginated list document: `render` turns each item of the page into a resource."""
        page = self.page()
        path = self.http.path  # still URL-encoded, as the client sent it
        doc: dict[str, Any] = {
            "data": [render(x) for x in page.slice(items)],
            "links": page.links(path, self.query, len(items)),
            "meta": {"pagination": page.meta(len(items))},
        }
        if included is not None:
            doc["included"] = included
        return doc
