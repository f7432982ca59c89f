"""IP and CIDR checks for OTP and dynamic roles (which hosts a role may hand credentials for)."""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_cidrs(text: str, field: str) -> list[Network]:
    """A comma-separated CIDR list; raises ValueError naming the bad entry."""
    out: list[Network] = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"failed to validate {field}: {item!r} is not a CIDR block") from None
    return out


def parse_ip(text: str) -> Address:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"invalid IP address {text!r}") from None


def contains(cidrs: str, ip: Address) -> bool:
    return any(ip in net for net in parse_cidrs(cidrs, "cidr_list") if net.version == ip.version)


def role_allows_ip(
    ip: Address, cidr_list: str, exclude_cidr_list: str, *, zero_address: bool
) -> bool:
    """A zero-address role serves every IP (its CIDR blocks are ignored); otherwise the IP must
    be in cidr_list and not in exclude_cidr_list."""
    if zero_address:
        return True
    return contains(cidr_list, ip) and not contains(exclude_cidr_list, ip)
