"""Certificate lifetimes: requested ttl or not_after, the role's and the mount's limits, and the
issuer's own expiry (`leaf_not_after_behavior`). Pure arithmetic on unix seconds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.secrets.engines.pki.pem import parse_time, rfc3339, short_duration
from services.secrets.errors import bad_request

if TYPE_CHECKING:
    from services.secrets.engines.pki.models import IssuerEntry


def validity(
    *,
    now: int,
    ttl: int,
    not_after: str,
    default_ttl: int,
    max_ttl: int,
    not_before_duration: int,
    limit_name: str,
    warnings: list[str] | None = None,
) -> tuple[int, int]:
    """(not_before, not_after). A ttl beyond `max_ttl` is capped to it, with a warning in
    OpenBao's words (`warnings`); without a list to warn in, it is refused. An explicit
    not_after is taken as asked (Vault's rule), subject only to the issuer's expiry."""
    if ttl and not_after:
        raise bad_request("either ttl or not_after should be provided, not both")
    if ttl < 0:
        raise bad_request("ttl must not be negative")
    if not_before_duration < 0:
        raise bad_request("not_before_duration must not be negative")
    if not_after:
        end = parse_time(not_after, "not_after")
        if end <= now:
            raise bad_request(f"not_after {not_after} is in the past")
    else:
        if ttl and ttl > max_ttl and warnings is not None:
            warnings.append(
                f"TTL {go_duration(ttl)!r} is longer than permitted maxTTL "
                f"{go_duration(max_ttl)!r}, so maxTTL is being used".replace("'", '"')
            )
        elif ttl and ttl > max_ttl:
            raise bad_request(
                f"requested ttl of {short_duration(ttl)} exceeds the "
                f"{limit_name} of {short_duration(max_ttl)}"
            )
        end = now + min(ttl or default_ttl or max_ttl, max_ttl)
    return now - not_before_duration, end


def go_duration(seconds: int) -> str:
    """Go's time.Duration text, which OpenBao's warnings quote: 8760h0m0s, 5m0s, 45s."""
    h, rem = divmod(max(seconds, 0), 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    return f"{m}m{sec}s" if m else f"{sec}s"


def limit_to_issuer(not_after: int, issuer: IssuerEntry, behavior: str | None = None) -> int:
    """Apply the issuer's leaf_not_after_behavior when a certificate would outlive it."""
    if not issuer.not_after or not_after <= issuer.not_after:
        return not_after
    mode = behavior or issuer.leaf_not_after_behavior
    if mode == "permit":
        return not_after
    if mode == "truncate":
        return issuer.not_after
    raise bad_request(
        f"cannot satisfy request, as TTL would result in notAfter of "
        f"{rfc3339(not_after)} that is beyond the expiration of the CA "
        f"certificate at {rfc3339(issuer.not_after)}"
    )
