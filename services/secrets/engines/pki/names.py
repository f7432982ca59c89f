"""Name policy: which common names and subject alternative names a role allows.

Pure functions over a role; the issue and sign paths run every requested name through here
before any crypto work, and one disallowed name rejects the whole request.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from services.secrets.errors import bad_request
from services.secrets.globs import glob

if TYPE_CHECKING:
    from services.secrets.engines.pki.roles import Role

_LABEL = r"([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]*[A-Za-z0-9])"
HOSTNAME = re.compile(rf"^({_LABEL}\.)*{_LABEL}\.?$")
_OID = re.compile(r"^[0-2](\.(0|[1-9][0-9]*))+$")
LOCAL_NAMES = ("localhost", "localdomain")


glob_match = glob  # one implementation of Vault's glob for PKI and the auth methods


def to_ascii(name: str) -> str | None:
    try:
        return name.encode("idna").decode() if not name.isascii() else name
    except UnicodeError:
        return None


def valid_hostname(name: str) -> bool:
    """A DNS name, allowing one RFC 6125 wildcard in the left-most label."""
    # Memoised for names of DNS length (an issue checks its CN up to three times); a longer one
    # is checked afresh so the cache cannot be filled with huge strings.
    return _hostname_check(name) if len(name) > 255 else _cached_hostname_check(name)


def _hostname_check(name: str) -> bool:
    ascii_name = to_ascii(name)
    if ascii_name is None or not ascii_name:
        return False
    labels = ascii_name.split(".")
    first = labels[0]
    if "*" in first:
        if first.count("*") > 1 or len(labels) < 2:
            return False
        if first == "*":
            ascii_name = ".".join(labels[1:])
        else:
            ascii_name = ".".join([first.replace("*", "x"), *labels[1:]])
    return bool(HOSTNAME.match(ascii_name))


_cached_hostname_check = functools.lru_cache(maxsize=4096)(_hostname_check)


def name_allowed(role: Role, name: str) -> bool:
    """May a DNS name or email address appear on a certificate of this role?"""
    is_email = "@" in name
    host = name
    if is_email:
        local, _, host = name.rpartition("@")
        if not local or not host:
            return False
    is_wildcard = "*" in host.split(".")[0]
    if is_wildcard and (is_email or not role.allow_wildcard_certificates):
        return False
    if role.enforce_hostnames and not valid_hostname(host):
        return False
    if role.allow_any_name:
        return True
    low = host.lower()
    if role.allow_localhost and low in LOCAL_NAMES:
        return True
    for allowed in role.allowed_domains:
        domain = allowed.strip().lower()
        if not domain:
            continue
        if role.allow_bare_domains and low == domain:
            return True
        if role.allow_subdomains and low.endswith("." + domain):
            return True
        if role.allow_glob_domains and "*" in domain and glob_match(domain, low):
            return True
    return False


def cn_allowed(role: Role, cn: str) -> bool:
    checks = [v.strip().lower() for v in role.cn_validations if v.strip()]
    if checks == ["disabled"]:
        return True
    if not name_allowed(role, cn):
        return False
    if not checks:
        return True
    return ("email" in checks) if "@" in cn else ("hostname" in checks)


def split_names(names: list[str]) -> tuple[list[str], list[str]]:
    """alt_names -> (DNS names, email addresses)."""
    dns = [n for n in names if "@" not in n]
    return dns, [n for n in names if "@" in n]


def dedup(values: list[str]) -> list[str]:
    seen: set[str] = set()
    return [v for v in values if v and not (v in seen or seen.add(v))]


def check_names(role: Role, cn: str, dns: list[str], emails: list[str]) -> None:
    if cn and not cn_allowed(role, cn):
        raise bad_request(f"common name {cn} not allowed by this role")
    for name in dns:
        if not name_allowed(role, name):
            raise bad_request(f"subject alternate name {name} not allowed by this role")
    for name in emails:
        if not name_allowed(role, name):
            raise bad_request(f"email address {name} not allowed by this role")


def check_ips(role: Role | None, ips: list[str]) -> list[str]:
    if ips and role is not None and not role.allow_ip_sans:
        raise bad_request(
            "IP Subject Alternative Names are not allowed in this role, but "
            f"were provided: {', '.join(ips)}"
        )
    out = []
    for ip in ips:
        try:
            out.append(str(ipaddress.ip_address(ip.strip())))
        except ValueError:
            raise bad_request(f"the value {ip!r} is not a valid IP address") from None
    return out


def check_uris(role: Role | None, uris: list[str]) -> list[str]:
    for uri in uris:
        parsed = urlparse(uri)
        if not parsed.scheme or not (parsed.netloc or parsed.path):
            raise bad_request(f"the value {uri!r} is not a valid URI")
    if role is None or not uris:
        return uris
    if not role.allowed_uri_sans:
        raise bad_request(
            "URI Subject Alternative Names are not allowed in this role, but "
            f"were provided: {', '.join(uris)}"
        )
    for uri in uris:
        if not any(glob_match(p.strip(), uri) for p in role.allowed_uri_sans if p.strip()):
            raise bad_request(f"URI Subject Alternative Name {uri} not allowed by this role")
    return uris


def parse_other_san(entry: str) -> tuple[str, str]:
    oid, sep, rest = entry.partition(";")
    kind, sep2, value = rest.partition(":")
    if not sep or not sep2 or not _OID.match(oid.strip()):
        raise bad_request(f"invalid other_sans entry {entry!r}: expected <oid>;UTF8:<value>")
    if kind.strip().upper() not in ("UTF8", "UTF-8"):
        raise bad_request(f"invalid other_sans entry {entry!r}: only the UTF8 type is supported")
    return oid.strip(), value


def check_other_sans(role: Role | None, entries: list[str]) -> list[str]:
    out = []
    allowed = [a.strip() for a in role.allowed_other_sans if a.strip()] if role else ["*"]
    for entry in entries:
        oid, value = parse_other_san(entry)
        out.append(f"{oid};UTF8:{value}")
        if allowed == ["*"]:
            continue
        ok = False
        for rule in allowed:
            if rule == "*":
                ok = True
                break
            r_oid, r_value = parse_other_san(rule)
            if r_oid == oid and glob_match(r_value, value):
                ok = True
                break
        if not ok:
            raise bad_request(f"other SAN {value} not allowed for OID {oid} by this role")
    return out


def check_globs(allowed: list[str], values: list[str], what: str) -> None:
    for v in values:
        if not any(glob_match(p.strip(), v) for p in allowed if p.strip()):
            raise bad_request(f"{what} {v} not allowed by this role")
