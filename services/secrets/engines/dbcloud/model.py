"""Stored config and roles of the dbcloud engine, and the rules a role must follow. Pure."""

from __future__ import annotations

import ipaddress

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.durations import format_duration

DEFAULT_API_URL = "https://cloud.mongodb.com"

# Keys scoped to an organization take ORG_* roles; keys scoped to a project take GROUP_*
# roles (the provider calls projects "groups").
ORG_PREFIX = "ORG_"
PROJECT_PREFIX = "GROUP_"


class Config(msgspec.Struct, kw_only=True):
    public_key: str
    private_key: str
    api_url: str = DEFAULT_API_URL


class Role(msgspec.Struct, kw_only=True):
    name: str
    organization_id: str = ""
    project_id: str = ""
    roles: list[str] = []
    ip_addresses: list[str] = []
    cidr_blocks: list[str] = []
    ttl: int = 0
    max_ttl: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "organization_id": self.organization_id,
            "project_id": self.project_id,
            "roles": self.roles,
            "ip_addresses": self.ip_addresses,
            "cidr_blocks": self.cidr_blocks,
            "ttl": format_duration(self.ttl),
            "max_ttl": format_duration(self.max_ttl),
        }


def validate(role: Role) -> None:
    """A 400 naming the first problem of a role."""
    if bool(role.organization_id) == bool(role.project_id):
        raise bad_request("exactly one of organization_id and project_id is required")
    if not role.roles:
        raise bad_request("at least one role is required in 'roles'")
    prefix, scope = (
        (ORG_PREFIX, "an organization") if role.organization_id else (PROJECT_PREFIX, "a project")
    )
    wrong = [r for r in role.roles if not r.startswith(prefix) or r == prefix]
    if wrong:
        raise bad_request(
            f"roles not valid for {scope}: {', '.join(wrong)} "
            f"(roles for {scope} start with {prefix})"
        )
    if role.ip_addresses and role.cidr_blocks:
        raise bad_request("ip_addresses and cidr_blocks are mutually exclusive")
    for ip in role.ip_addresses:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise bad_request(f"invalid IP address in ip_addresses: {ip!r}") from None
    for block in role.cidr_blocks:
        try:
            ipaddress.ip_network(block, strict=False)
        except ValueError:
            raise bad_request(f"invalid CIDR block in cidr_blocks: {block!r}") from None
    if role.ttl < 0 or role.max_ttl < 0:
        raise bad_request("ttl and max_ttl cannot be negative")
    if role.ttl and role.max_ttl and role.ttl > role.max_ttl:
        raise bad_request("ttl cannot be greater than max_ttl")
