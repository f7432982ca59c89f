"""SSH roles: the write fields, the stored record, validation per key_type, and the per-type read
shapes. Pure: the handlers in role_paths.py do the storage."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from services.secrets.engines.ssh.network import parse_cidrs
from services.secrets.framework.fields import Duration, desc

OTP, DYNAMIC, CA = "otp", "dynamic", "ca"
ROLE_NAME = re.compile(r"^\w(?:[\w.-]*\w)?$")
ALGORITHM_SIGNERS = ("default", "ssh-rsa", "rsa-sha2-256", "rsa-sha2-512")
DYNAMIC_KEY_BITS = (1024, 2048)
_TEMPLATE = re.compile(r"{{.+?}}")


class RoleError(ValueError):
    """A role that cannot be stored; the message says why (a 400)."""


class RoleFields(msgspec.Struct, kw_only=True):
    name: str
    key_type: Annotated[str, desc("otp, dynamic or ca")] = ""
    key: Annotated[str, desc("name of a registered admin key (dynamic)")] = ""
    admin_user: Annotated[str, desc("admin user on the remote host (dynamic)")] = ""
    default_user: Annotated[str, desc("default username (required for otp and dynamic)")] = ""
    default_user_template: bool = False
    cidr_list: Annotated[str, desc("comma-separated CIDR blocks the role serves")] = ""
    exclude_cidr_list: str = ""
    port: Annotated[int, desc("SSH port on the target hosts")] = 22
    key_bits: Annotated[int, desc("RSA size of dynamic keys: 1024 or 2048")] = 1024
    install_script: Annotated[str, desc("script that installs and removes public keys")] = ""
    allowed_users: Annotated[str, desc("comma-separated users; '*' allows any")] = ""
    allowed_users_template: bool = False
    allowed_domains: Annotated[str, desc("domains for host certificates; '*' allows any")] = ""
    allowed_domains_template: bool = False
    key_option_specs: str = ""
    ttl: Duration = 0
    max_ttl: Duration = 0
    allowed_critical_options: str = ""
    allowed_extensions: str = ""
    default_critical_options: dict[str, Any] = {}
    default_extensions: dict[str, Any] = {}
    allow_user_certificates: bool = False
    allow_host_certificates: bool = False
    allow_bare_domains: bool = False
    allow_subdomains: bool = False
    allow_user_key_ids: bool = False
    allow_empty_principals: bool = False
    key_id_format: str = ""
    allowed_user_key_lengths: dict[str, Any] = {}
    algorithm_signer: Annotated[str, desc("default, ssh-rsa, rsa-sha2-256 or rsa-sha2-512")] = (
        "default"
    )
    not_before_duration: Duration = 30


class SSHRole(msgspec.Struct, kw_only=True):
    """The stored role; only the fields of its key_type are meaningful."""

    key_type: str
    default_user: str = ""
    default_user_template: bool = False
    cidr_list: str = ""
    exclude_cidr_list: str = ""
    port: int = 22
    allowed_users: str = ""
    # dynamic
    key: str = ""
    admin_user: str = ""
    key_bits: int = 1024
    install_script: str = ""  # empty: the built-in script
    key_option_specs: str = ""
    # ca
    allowed_users_template: bool = False
    allowed_domains: str = ""
    allowed_domains_template: bool = False
    ttl: int = 0
    max_ttl: int = 0
    allowed_critical_options: str = ""
    allowed_extensions: str = ""
    default_critical_options: dict[str, str] = {}
    default_extensions: dict[str, str] = {}
    allow_user_certificates: bool = False
    allow_host_certificates: bool = False
    allow_bare_domains: bool = False
    allow_subdomains: bool = False
    allow_user_key_ids: bool = False
    allow_empty_principals: bool = False
    key_id_format: str = ""
    allowed_user_key_lengths: dict[str, list[int]] = {}
    algorithm_signer: str = "default"
    not_before_duration: int = 30


def string_map(value: dict[str, Any], field: str) -> dict[str, str]:
    """Vault's TypeMap with string values: numbers and booleans become their text."""
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, (dict, list)):
            raise RoleError(f"{field}: the value of {k!r} must be a string")
        out[str(k)] = (
            ("true" if v else "false") if isinstance(v, bool) else "" if v is None else str(v)
        )
    return out


def key_lengths(value: dict[str, Any]) -> dict[str, list[int]]:
    """allowed_user_key_lengths values may be an integer, a list of them, or a string of them."""
    out: dict[str, list[int]] = {}
    for name, raw in value.items():
        items = (
            raw if isinstance(raw, list) else str(raw).split(",") if isinstance(raw, str) else [raw]
        )
        sizes: list[int] = []
        for item in items:
            try:
                if isinstance(item, bool):
                    raise ValueError
                sizes.append(int(str(item).strip()))
            except ValueError:
                raise RoleError(
                    f"error processing allowed_user_key_lengths: {name!r} has "
                    f"the non-integer size {item!r}"
                ) from None
        out[str(name)] = sizes
    return out


def _no_templates(enabled: bool, value: str, field: str) -> None:
    # There is no identity store to render {{identity...}} from; refuse rather than sign the
    # literal template text.
    if enabled and _TEMPLATE.search(value):
        raise RoleError(
            f"identity templates are not supported in {field}: this service has no "
            f"identity store; give literal values or set {field}_template to false"
        )


def build_role(f: RoleFields) -> SSHRole:
    """Validate the write and build the record (a write replaces the whole role, as in Vault)."""
    if not ROLE_NAME.match(f.name):
        raise RoleError(f"invalid role name {f.name!r}: use letters, digits, '_', '-' and '.'")
    key_type = f.key_type.strip().lower()
    if not key_type:
        raise RoleError("missing key_type: use otp, dynamic or ca")
    parse_cidrs(f.cidr_list, "cidr_list")
    parse_cidrs(f.exclude_cidr_list, "exclude_cidr_list")
    port = f.port or 22
    if not 0 < port < 65536:
        raise RoleError(f"invalid port {f.port}")
    common: dict[str, Any] = {
        "default_user": f.default_user,
        "cidr_list": f.cidr_list,
        "exclude_cidr_list": f.exclude_cidr_list,
        "port": port,
        "allowed_users": f.allowed_users,
    }
    if key_type == OTP:
        if not f.default_user:
            raise RoleError("missing default_user")
        return SSHRole(key_type=OTP, **common)
    if key_type == DYNAMIC:
        if not f.default_user:
            raise RoleError("missing default_user")
        if not f.key:
            raise RoleError("missing key: the name of a key registered at keys/<name>")
        if not f.admin_user:
            raise RoleError("missing admin_user")
        bits = f.key_bits or 1024
        if bits not in DYNAMIC_KEY_BITS:
            raise RoleError(f"invalid key_bits {f.key_bits}: dynamic keys are 1024 or 2048 bits")
        return SSHRole(
            key_type=DYNAMIC,
            key=f.key,
            admin_user=f.admin_user,
            key_bits=bits,
            install_script=f.install_script,
            key_option_specs=f.key_option_specs,
            **common,
        )
    if key_type == CA:
        return _ca_role(f, common)
    raise RoleError(f"invalid key_type {f.key_type!r}: use otp, dynamic or ca")


def _ca_role(f: RoleFields, common: dict[str, Any]) -> SSHRole:
    if not f.allow_user_certificates and not f.allow_host_certificates:
        raise RoleError("either allow_user_certificates or allow_host_certificates must be true")
    signer = f.algorithm_signer.strip() or "default"
    if signer not in ALGORITHM_SIGNERS:
        raise RoleError(
            f"unknown algorithm_signer {f.algorithm_signer!r}: use {', '.join(ALGORITHM_SIGNERS)}"
        )
    if f.ttl < 0 or f.max_ttl < 0 or f.not_before_duration < 0:
        raise RoleError("ttl, max_ttl and not_before_duration cannot be negative")
    if f.ttl and f.max_ttl and f.ttl > f.max_ttl:
        raise RoleError('"ttl" value must be less than "max_ttl" when both are specified')
    _no_templates(f.allowed_users_template, f.allowed_users, "allowed_users")
    _no_templates(f.default_user_template, f.default_user, "default_user")
    _no_templates(f.allowed_domains_template, f.allowed_domains, "allowed_domains")
    return SSHRole(
        key_type=CA,
        **common,
        default_user_template=f.default_user_template,
        allowed_users_template=f.allowed_users_template,
        allowed_domains=f.allowed_domains,
        allowed_domains_template=f.allowed_domains_template,
        ttl=f.ttl,
        max_ttl=f.max_ttl,
        allowed_critical_options=f.allowed_critical_options,
        allowed_extensions=f.allowed_extensions,
        default_critical_options=string_map(f.default_critical_options, "default_critical_options"),
        default_extensions=string_map(f.default_extensions, "default_extensions"),
        allow_user_certificates=f.allow_user_certificates,
        allow_host_certificates=f.allow_host_certificates,
        allow_bare_domains=f.allow_bare_domains,
        allow_subdomains=f.allow_subdomains,
        allow_user_key_ids=f.allow_user_key_ids,
        allow_empty_principals=f.allow_empty_principals,
        key_id_format=f.key_id_format,
        allowed_user_key_lengths=key_lengths(f.allowed_user_key_lengths),
        algorithm_signer=signer,
        not_before_duration=f.not_before_duration,
    )


def read_shape(role: SSHRole, builtin_script: str) -> dict[str, Any]:
    """What GET roles/<name> shows: only the fields of the role's key_type."""
    if role.key_type == OTP:
        return {
            "key_type": OTP,
            "default_user": role.default_user,
            "cidr_list": role.cidr_list,
            "exclude_cidr_list": role.exclude_cidr_list,
            "port": role.port,
            "allowed_users": role.allowed_users,
        }
    if role.key_type == DYNAMIC:
        return {
            "key_type": DYNAMIC,
            "key": role.key,
            "admin_user": role.admin_user,
            "default_user": role.default_user,
            "cidr_list": role.cidr_list,
            "exclude_cidr_list": role.exclude_cidr_list,
            "port": role.port,
            "key_bits": role.key_bits,
            "allowed_users": role.allowed_users,
            "key_option_specs": role.key_option_specs,
            "install_script": role.install_script or builtin_script,
        }
    return {
        "key_type": CA,
        "allowed_users": role.allowed_users,
        "allowed_users_template": role.allowed_users_template,
        "allowed_domains": role.allowed_domains,
        "allowed_domains_template": role.allowed_domains_template,
        "default_user": role.default_user,
        "default_user_template": role.default_user_template,
        "ttl": role.ttl,
        "max_ttl": role.max_ttl,
        "allowed_critical_options": role.allowed_critical_options,
        "allowed_extensions": role.allowed_extensions,
        "allow_user_certificates": role.allow_user_certificates,
        "allow_host_certificates": role.allow_host_certificates,
        "allow_bare_domains": role.allow_bare_domains,
        "allow_subdomains": role.allow_subdomains,
        "allow_user_key_ids": role.allow_user_key_ids,
        "allow_empty_principals": role.allow_empty_principals,
        "key_id_format": role.key_id_format,
        "default_critical_options": role.default_critical_options,
        "default_extensions": role.default_extensions,
        "allowed_user_key_lengths": role.allowed_user_key_lengths,
        "algorithm_signer": role.algorithm_signer,
        "not_before_duration": role.not_before_duration,
    }
