"""Exact-byte handling of credentials: one encoding, one comparison, one whitespace rule.

Every credential an auth method checks goes through `secret_bytes` (so a lone surrogate from a
JSON body is compared, never an encoding error) and `equal` (constant time on the bytes). Only
`go_trim_space` may change a credential before it is compared, and only where the anchor trims:
it removes exactly what Go's `strings.TrimSpace` removes, so a NUL or any other control byte
always stays part of the value.
"""

from __future__ import annotations

import hmac

# Go's unicode.IsSpace: the ASCII whitespace, U+0085, U+00A0 and the Unicode space separators
# (Zs), line and paragraph separators. Python's str.strip() also removes U+001C..U+001F, which
# Go keeps; hence an explicit set.
GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def secret_bytes(value: str) -> bytes:
    """The exact bytes of a credential: UTF-8, with lone surrogates kept (never an error)."""
    return value.encode("utf-8", "surrogatepass")


def equal(a: str | bytes, b: str | bytes) -> bool:
    """Constant-time equality of two credentials on their exact bytes."""
    left = secret_bytes(a) if isinstance(a, str) else a
    right = secret_bytes(b) if isinstance(b, str) else b
    return hmac.compare_digest(left, right)


def go_trim_space(value: str) -> str:
    """`strings.TrimSpace` of Go: what Vault's approle strips from role and secret ids."""
    start, end = 0, len(value)
    while start < end and value[start] in GO_SPACE:
        start += 1
    while end > start and value[end - 1] in GO_SPACE:
        end -= 1
    return value[start:end]
