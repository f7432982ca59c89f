"""Vault's common `token_*` parameters of auth methods (its tokenutil): the request fields, the
stored form, validation, the read view, the AuthSpec a login returns, and CIDR helpers."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.request import AuthSpec, Request

# The core issues service tokens only; "default" means the mount's default, which is service.
TOKEN_TYPES = ("default", "service", "default-service", "batch", "default-batch")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TokenParams(msgspec.Struct, kw_only=True):
    """What an auth method stores about the tokens its logins create."""

    token_policies: list[str] = []
    token_ttl: int = 0
    token_max_ttl: int = 0
    token_explicit_max_ttl: int = 0
    token_period: int = 0
    token_num_uses: int = 0
    token_bound_cidrs: list[str] = []
    token_no_default_policy: bool = False
    token_type: str = "default"


class TokenInput(msgspec.Struct, kw_only=True):
    """The `token_*` request fields; `None` means "not given" so an update keeps the value."""

    token_policies: Annotated[CommaList, desc("policies of the login tokens")] | None = None
    token_ttl: Annotated[Duration, desc("initial TTL of the login tokens")] | None = None
    token_max_ttl: Annotated[Duration, desc("maximum lifetime of the login tokens")] | None = None
    token_explicit_max_ttl: Annotated[Duration, desc("hard cap on token lifetime")] | None = None
    token_period: Annotated[Duration, desc("makes the login tokens periodic")] | None = None
    token_num_uses: Annotated[int, desc("uses per token; 0 means unlimited")] | None = None
    token_bound_cidrs: Annotated[CommaList, desc("CIDRs allowed to log in")] | None = None
    token_no_default_policy: Annotated[bool, desc("leave out the default policy")] | None = None
    token_type: (
        Annotated[str, desc("default, service, batch, default-service or default-batch")] | None
    ) = None


TOKEN_FIELDS = tuple(f.name for f in msgspec.structs.fields(TokenParams))


def sanitize_policies(values: list[str]) -> list[str]:
    """Trimmed, lowercased, deduplicated and sorted, as Vault's policyutil does."""
    out = sorted({v.strip().lower() for v in values if v.strip()})
    return ["root"] if "root" in out else out


def parse_network(text: str) -> Network:
    """A CIDR block or a bare address (a /32 or /128)."""
    return ipaddress.ip_network(text.strip(), strict=False)


def parse_cidrs(values: list[str], field: str) -> list[str]:
    """Validated CIDR blocks, as given (Vault echoes them back unchanged)."""
    out: list[str] = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            parse_network(text)
        except ValueError:
            raise bad_request(f"invalid CIDR block {text!r} in {field!r}") from None
        out.append(text)
    return out


def addr_allowed(remote_addr: str, cidrs: list[str]) -> bool:
    """Whether the caller's address lies in one of `cidrs` (no CIDRs: everyone may)."""
    if not cidrs:
        return True
    try:
        addr = ipaddress.ip_address(remote_addr.strip().strip("[]"))
    except ValueError:
        return False  # an unknown source cannot satisfy a restriction
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:a.b.c.d is a.b.c.d, as Go's net.IPNet sees it
    for cidr in cidrs:
        try:
            if addr in parse_network(cidr):
                return True
        except ValueError:
            continue
    return False


def cidrs_subset(inner: list[str], outer: list[str]) -> bool:
    """Every block of `inner` lies inside some block of `outer` (empty `outer`: anything)."""
    if not outer:
        return True
    outs = [parse_network(c) for c in outer]
    for cidr in inner:
        net = parse_network(cidr)
        if not any(net.version == o.version and net.subnet_of(o) for o in outs):  # type: ignore[arg-type]
            return False
    return True


def take_deprecated(
    inp: TokenInput, aliases: dict[str, tuple[str, Any]]
) -> tuple[set[str], set[str]]:
    """Fold deprecated fields (`policies`, `ttl`, `period` ...) into their `token_*` names.

    `aliases` maps the old name to (new name, value or None). Returns (old names used, old names
    superseded because the new one was given by itself): a read echoes the old names in use."""
    used: set[str] = set()
    dropped: set[str] = set()
    for old, (new, value) in aliases.items():
        given_new = getattr(inp, new) is not None
        if value is None:
            if given_new:
                dropped.add(old)
            continue
        if given_new:
            raise bad_request(f"cannot specify both {old!r} and {new!r}")
        setattr(inp, new, value)
        used.add(old)
    return used, dropped


def apply_token_input(current: TokenParams, inp: TokenInput) -> dict[str, Any]:
    """The token fields `inp` changes, validated against the result; raises 400s."""
    changes: dict[str, Any] = {}
    if inp.token_policies is not None:
        changes["token_policies"] = sanitize_policies(inp.token_policies)
    for name in ("token_ttl", "token_max_ttl", "token_explicit_max_ttl", "token_period"):
        value = getattr(inp, name)
        if value is not None:
            if value < 0:
                raise bad_request(f"{name!r} cannot be negative")
            changes[name] = value
    if inp.token_num_uses is not None:
        if inp.token_num_uses < 0:
            raise bad_request("'token_num_uses' cannot be negative")
        changes["token_num_uses"] = inp.token_num_uses
    if inp.token_bound_cidrs is not None:
        changes["token_bound_cidrs"] = parse_cidrs(inp.token_bound_cidrs, "token_bound_cidrs")
    if inp.token_no_default_policy is not None:
        changes["token_no_default_policy"] = inp.token_no_default_policy
    if inp.token_type is not None:
        kind = inp.token_type.strip().lower() or "default"
        if kind not in TOKEN_TYPES:
            raise bad_request(f"invalid 'token_type' value {inp.token_type!r}")
        changes["token_type"] = kind
    ttl = changes.get("token_ttl", current.token_ttl)
    max_ttl = changes.get("token_max_ttl", current.token_max_ttl)
    if ttl and max_ttl and ttl > max_ttl:
        raise bad_request("'token_ttl' cannot be greater than 'token_max_ttl'")
    return changes


def token_data(params: TokenParams) -> dict[str, Any]:
    """The `token_*` part of a read (durations in seconds)."""
    return {name: getattr(params, name) for name in TOKEN_FIELDS}


def login_auth(
    params: TokenParams,
    req: Request,
    *,
    display_name: str,
    metadata: dict[str, str],
    internal: dict[str, Any] | None = None,
    bound_cidrs: list[str] | None = None,
) -> AuthSpec:
    """The AuthSpec of a successful login; the core turns it into a token (and applies the
    mount's limits)."""
    return AuthSpec(
        policies=list(params.token_policies),
        display_name=display_name,
        metadata=metadata,
        ttl=params.token_ttl,
        max_ttl=params.token_max_ttl,
        explicit_max_ttl=params.token_explicit_max_ttl,
        period=params.token_period,
        num_uses=params.token_num_uses,
        no_default_policy=params.token_no_default_policy,
        token_type=params.token_type,
        internal=internal or {},
        bound_cidrs=list(params.token_bound_cidrs if bound_cidrs is None else bound_cidrs),
    )
