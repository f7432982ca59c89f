"""What a path handler receives and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from services.secrets.framework.path import Op

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry
    from services.secrets.core.namespaces import Namespace
    from services.secrets.core.tokens import TokenEntry


@dataclass
class Request:
    op: Op
    path: str  # relative to the mount
    mount_path: str  # e.g. "secret/"; "" for sys
    namespace: Namespace
    data: dict[str, Any]
    headers: dict[str, str]
    storage: BarrierView
    core: Any  # services.secrets.core.core.Core; Any avoids an import cycle in handlers
    mount: MountEntry | None = None
    token: TokenEntry | None = None
    client_token: str = ""
    request_id: str = ""
    remote_addr: str = ""
    # The TLS client certificate chain (DER, leaf first) the gateway forwarded, if any.
    client_certs: list[bytes] = field(default_factory=list)
    query: dict[str, list[str]] = field(default_factory=dict)
    # The capabilities the caller holds on this path (for handlers that decide on them).
    capabilities: frozenset[str] = frozenset()
    # What an existence check read, for the handler to reuse within the same request.
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def full_path(self) -> str:
        return self.mount_path + self.path


@dataclass
class LeaseSpec:
    """A secret with a lifetime: the lease manager stores it and revokes it on expiry."""

    ttl: int
    max_ttl: int = 0
    renewable: bool = True
    # Backend-private data needed to revoke or renew (stored encrypted with the lease).
    internal: dict[str, Any] = field(default_factory=dict)
    secret_type: str = ""


@dataclass
class AuthSpec:
    """A login result: the core creates the token from it."""

    policies: list[str]
    display_name: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    ttl: int = 0
    max_ttl: int = 0
    # A hard cap on the token's life, kept even for periodic tokens.
    explicit_max_ttl: int = 0
    period: int = 0
    num_uses: int = 0
    renewable: bool = True
    no_default_policy: bool = False
    token_type: str = "service"
    # Internal data the auth method needs to renew the login.
    internal: dict[str, Any] = field(default_factory=dict)
    # CIDRs the token may be used from (token_bound_cidrs); empty: anywhere.
    bound_cidrs: list[str] = field(default_factory=list)
    # The identity alias of the login (its name within the mount, and its metadata).
    alias_name: str = ""
    alias_metadata: dict[str, str] = field(default_factory=dict)
    # The names of the user's groups on the mount, for methods that report them (jwt/oidc
    # groups_claim): they set the entity's external group membership. None: not reported.
    group_aliases: list[str] | None = None


@dataclass
class RawResponse:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class Response:
    data: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    lease: LeaseSpec | None = None
    auth: AuthSpec | dict[str, Any] | None = None
    # An explicit status (e.g. 404 with data for a deleted KV version).
    status: int | None = None
    raw: RawResponse | None = None
    # sys/mounts and a few others also copy `data` to the top level (a Vault quirk).
    data_at_top: bool = False
    # Fields of the envelope a handler sets itself (wrap_info from sys/wrapping/wrap...).
    extra: dict[str, Any] = field(default_factory=dict)


def ok(data: dict[str, Any] | None = None, **kw: Any) -> Response:
    return Response(data=data, **kw)


def no_content() -> Response:
    return Response()
