"""The X.509 name-constraint fields a CA certificate request carries from the PKI engine to the
crypto workers (both sides name them alike)."""

from __future__ import annotations

NAME_CONSTRAINT_FIELDS = (
    "permitted_dns_domains",
    "excluded_dns_domains",
    "permitted_ip_ranges",
    "excluded_ip_ranges",
    "permitted_email_addresses",
    "excluded_email_addresses",
    "permitted_uri_domains",
    "excluded_uri_domains",
)
