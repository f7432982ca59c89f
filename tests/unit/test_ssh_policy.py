"""The SSH engine's pure rules: role validation and read shapes, what a ca role lets into a
certificate, and which IPs an otp or dynamic role serves."""

from __future__ import annotations

from typing import Any

import pytest

from services.secrets.engines.ssh import signing
from services.secrets.engines.ssh.network import parse_ip, role_allows_ip
from services.secrets.engines.ssh.roles import RoleFields, SSHRole, build_role, read_shape
from services.secrets.framework.fields import decode_fields


def _role(**kw: Any) -> SSHRole:
    fields, _ = decode_fields(RoleFields, kw, {"name": "r"})
    assert isinstance(fields, RoleFields)
    return build_role(fields)


def _ca(**kw: Any) -> SSHRole:
    return _role(key_type="ca", allow_user_certificates=True, **kw)


def _plan(role: SSHRole, **kw: Any) -> dict[str, Any]:
    return signing.plan(
        role,
        signing.SignInput(**kw),
        role_name="r",
        display_name="root",
        mount_default=3600,
        mount_max=7200,
        now=1_000_000,
    )


HVAC_CREATE_ROLE = {
    # What hvac's ssh.create_role sends for a ca role with two fields set.
    "key": "",
    "admin_user": "",
    "default_user": "alice",
    "cidr_list": "",
    "exclude_cidr_list": "",
    "port": 22,
    "key_type": "ca",
    "key_bits": 1024,
    "install_script": "",
    "allowed_users": "alice",
    "allowed_users_template": "",
    "allowed_domains": "",
    "key_option_specs": "",
    "ttl": "",
    "max_ttl": "",
    "allowed_critical_options": "",
    "allowed_extensions": "",
    "default_critical_options": None,
    "default_extensions": None,
    "allow_user_certificates": True,
    "allow_host_certificates": False,
    "allow_bare_domains": False,
    "allow_subdomains": False,
    "allow_user_key_ids": False,
    "key_id_format": "",
    "allowed_user_key_lengths": None,
    "algorithm_signer": "",
}


def test_hvac_create_role_body_is_accepted() -> None:
    role = _role(**HVAC_CREATE_ROLE)
    assert role.key_type == "ca" and role.algorithm_signer == "default"
    assert role.default_extensions == {} and role.not_before_duration == 30


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "missing key_type"),
        ({"key_type": "x"}, "invalid key_type"),
        ({"key_type": "otp"}, "missing default_user"),
        (
            {"key_type": "otp", "default_user": "u", "cidr_list": "10.0.0.0/33"},
            "failed to validate cidr_list",
        ),
        ({"key_type": "dynamic", "default_user": "u", "admin_user": "a"}, "missing key"),
        ({"key_type": "dynamic", "default_user": "u", "key": "k"}, "missing admin_user"),
        (
            {
                "key_type": "dynamic",
                "default_user": "u",
                "key": "k",
                "admin_user": "a",
                "key_bits": 4096,
            },
            "1024 or 2048",
        ),
        ({"key_type": "ca"}, "allow_user_certificates or allow_host_certificates"),
        (
            {"key_type": "ca", "allow_user_certificates": True, "algorithm_signer": "md5"},
            "unknown algorithm_signer",
        ),
        (
            {"key_type": "ca", "allow_user_certificates": True, "ttl": "2h", "max_ttl": "1h"},
            "must be less than",
        ),
        (
            {
                "key_type": "ca",
                "allow_user_certificates": True,
                "allowed_users_template": True,
                "allowed_users": "{{identity.entity.name}}",
            },
            "identity templates are not supported",
        ),
        (
            {
                "key_type": "ca",
                "allow_user_certificates": True,
                "allowed_user_key_lengths": {"rsa": "big"},
            },
            "allowed_user_key_lengths",
        ),
    ],
)
def test_role_validation(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _role(**fields)


def test_read_shapes_per_key_type() -> None:
    otp = read_shape(_role(key_type="otp", default_user="u", cidr_list="10.0.0.0/8"), "S")
    assert set(otp) >= {"cidr_list", "default_user", "key_type", "port"}
    assert "allowed_extensions" not in otp and "admin_user" not in otp
    dyn = read_shape(
        _role(
            key_type="dynamic", default_user="u", key="k", admin_user="a", cidr_list="10.0.0.0/8"
        ),
        "SCRIPT",
    )
    assert set(dyn) >= {"admin_user", "cidr_list", "default_user", "key", "key_type", "port"}
    assert dyn["install_script"] == "SCRIPT" and dyn["key_bits"] == 1024
    ca = read_shape(_ca(default_extensions={"permit-pty": ""}, max_ttl="1h"), "S")
    assert set(ca) >= {
        "allow_bare_domains",
        "allow_host_certificates",
        "allow_subdomains",
        "allow_user_key_ids",
        "allow_user_certificates",
        "allowed_critical_options",
        "allowed_extensions",
        "default_critical_options",
        "default_extensions",
        "max_ttl",
        "ttl",
    }
    assert ca["max_ttl"] == 3600 and ca["default_extensions"] == {"permit-pty": ""}
    assert "cidr_list" not in ca and "admin_user" not in ca


def test_user_principals() -> None:
    role = _ca(allowed_users="alice,bob", default_user="alice")
    assert _plan(role)["principals"] == ["alice"]
    assert _plan(role, valid_principals=["bob", "alice", "bob"])["principals"] == ["bob", "alice"]
    with pytest.raises(ValueError, match="eve is not a valid value"):
        _plan(role, valid_principals=["eve"])
    assert _plan(_ca(allowed_users="*"), valid_principals=["anyone"])["principals"] == ["anyone"]
    with pytest.raises(ValueError, match="allows no principals"):
        _plan(_ca(allowed_users=""), valid_principals=["alice"])
    with pytest.raises(ValueError, match="no principals"):
        _plan(_ca(allowed_users="alice"))
    # A default_user outside allowed_users is not a valid principal for a ca role.
    with pytest.raises(ValueError, match="carol is not a valid value"):
        _plan(_ca(allowed_users="alice", default_user="carol"))


def test_host_principals() -> None:
    base = {
        "allow_user_certificates": False,
        "allow_host_certificates": True,
        "allowed_domains": "example.com",
    }
    bare = _role(key_type="ca", allow_bare_domains=True, **base)
    sub = _role(key_type="ca", allow_subdomains=True, **base)
    assert _plan(bare, cert_type="host", valid_principals=["example.com"])["cert_type"] == "host"
    with pytest.raises(ValueError, match=r"web\.example\.com is not a valid"):
        _plan(bare, cert_type="host", valid_principals=["web.example.com"])
    assert _plan(sub, cert_type="host", valid_principals=["a.b.example.com"])["principals"] == [
        "a.b.example.com"
    ]
    for bad in ("example.com", "badexample.com", "example.org"):
        with pytest.raises(ValueError, match="is not a valid value"):
            _plan(sub, cert_type="host", valid_principals=[bad])
    with pytest.raises(ValueError, match="cert_type 'user' is not allowed"):
        _plan(sub, valid_principals=["a.example.com"])
    with pytest.raises(ValueError, match="cert_type 'host' is not allowed"):
        _plan(_ca(allowed_users="*"), cert_type="host", valid_principals=["h"])
    with pytest.raises(ValueError, match="either 'user' or 'host'"):
        _plan(
            _role(
                key_type="ca",
                allow_user_certificates=True,
                allow_host_certificates=True,
                allowed_users="*",
            ),
            cert_type="other",
            valid_principals=["h"],
        )


def test_ttl_capping() -> None:
    role = _ca(allowed_users="*", ttl="30m", max_ttl="1h")
    p = _plan(role, valid_principals=["a"])
    assert p["ttl"] == 1800 and p["valid_before"] == 1_000_000 + 1800
    assert p["valid_after"] == 1_000_000 - 30
    assert _plan(role, valid_principals=["a"], ttl=3600)["ttl"] == 3600
    with pytest.raises(ValueError, match="ttl is larger than the maximum allowed"):
        _plan(role, valid_principals=["a"], ttl=3601)
    # Without role TTLs the mount's default and max apply; a default above max is capped.
    assert _plan(_ca(allowed_users="*"), valid_principals=["a"])["ttl"] == 3600
    capped = signing.plan(
        _ca(allowed_users="*"),
        signing.SignInput(valid_principals=["a"]),
        role_name="r",
        display_name="",
        mount_default=9000,
        mount_max=7200,
    )
    assert capped["ttl"] == 7200
    assert (
        _plan(_ca(allowed_users="*", not_before_duration="5m"), valid_principals=["a"])[
            "valid_after"
        ]
        == 1_000_000 - 300
    )


def test_key_ids() -> None:
    assert (
        _plan(_ca(allowed_users="*"), valid_principals=["a"])["key_id"]
        == "vault-root-{{public_key_hash}}"
    )
    fmt = _ca(allowed_users="*", key_id_format="{{role_name}}:{{token_display_name}}")
    assert _plan(fmt, valid_principals=["a"])["key_id"] == "r:root"
    with pytest.raises(ValueError, match="setting key_id is not allowed"):
        _plan(_ca(allowed_users="*"), valid_principals=["a"], key_id="mine")
    assert (
        _plan(
            _ca(allowed_users="*", allow_user_key_ids=True), valid_principals=["a"], key_id="mine"
        )["key_id"]
        == "mine"
    )


def test_extensions_and_critical_options() -> None:
    defaults = {
        "default_extensions": {"permit-pty": ""},
        "default_critical_options": {"force-command": "/bin/true"},
    }
    role = _ca(
        allowed_users="*",
        allowed_extensions="permit-pty,permit-X11-forwarding",
        allowed_critical_options="source-address",
        **defaults,
    )
    p = _plan(role, valid_principals=["a"])
    assert p["extensions"] == {"permit-pty": ""}
    assert p["critical_options"] == {"force-command": "/bin/true"}
    p = _plan(
        role,
        valid_principals=["a"],
        extensions={"permit-X11-forwarding": ""},
        critical_options={"source-address": "10.0.0.0/8"},
    )
    assert p["extensions"] == {"permit-X11-forwarding": ""}
    assert p["critical_options"] == {"source-address": "10.0.0.0/8"}
    with pytest.raises(ValueError, match="extensions not on the allowed list"):
        _plan(role, valid_principals=["a"], extensions={"permit-agent-forwarding": ""})
    with pytest.raises(ValueError, match="critical options not on the allowed list"):
        _plan(role, valid_principals=["a"], critical_options={"force-command": "/bin/sh"})
    # allowed_extensions unset: only the defaults; "*": anything; allowed_critical_options
    # unset: anything.
    with pytest.raises(ValueError, match="extensions not on the allowed list"):
        _plan(_ca(allowed_users="*"), valid_principals=["a"], extensions={"permit-pty": ""})
    anything = _ca(allowed_users="*", allowed_extensions="*")
    assert _plan(anything, valid_principals=["a"], extensions={"x@y": "1"})["extensions"] == {
        "x@y": "1"
    }
    assert _plan(anything, valid_principals=["a"], critical_options={"force-command": "id"})[
        "critical_options"
    ] == {"force-command": "id"}


def test_ip_rules() -> None:
    ip = parse_ip("10.1.2.3")
    assert role_allows_ip(ip, "10.0.0.0/8", "", zero_address=False)
    assert not role_allows_ip(ip, "10.0.0.0/8", "10.1.0.0/16", zero_address=False)
    assert not role_allows_ip(ip, "192.168.0.0/16", "", zero_address=False)
    assert not role_allows_ip(ip, "", "", zero_address=False)
    assert role_allows_ip(ip, "", "", zero_address=True)
    assert role_allows_ip(parse_ip("::1"), "10.0.0.0/8,::1/128", "", zero_address=False)
    with pytest.raises(ValueError, match="invalid IP address"):
        parse_ip("not-an-ip")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "missing public_key"),
        ("ssh-ed25519", "expected '<type> <base64>'"),
        ("ssh-ed25519 %%%", "invalid key data"),
        ("ssh-rsa AAAAC3NzaC1lZDI1NTE5", "the key says it is 'ssh-ed25519'"),
    ],
)
def test_garbled_public_keys_are_caught_before_role_rules(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        signing.check_public_key_text(text)
    signing.check_public_key_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhYNr0OBwO7Dz/7uNur08aQocdkzIlaDwo96t2XnxC1 me"
    )
