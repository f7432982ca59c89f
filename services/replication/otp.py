"""The one-time-pad encoding of a generated token, as Vault's generate-root and DR
operation-token flows use it: the OTP is base62 with the token's length, and
`encoded_token = base64 (standard alphabet, no padding) of (otp XOR token)`."""

from __future__ import annotations

import base64
import secrets
import string

_B62 = string.ascii_letters + string.digits


def new_otp(length: int) -> str:
    return "".join(secrets.choice(_B62) for _ in range(length))


def _xor(a: bytes, b: bytes) -> bytes:
    if len(a) != len(b):
        raise ValueError("the OTP and the token must have the same length")
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def encode(token: str, otp: str) -> str:
    return base64.b64encode(_xor(token.encode(), otp.encode())).decode().rstrip("=")


def decode(encoded: str, otp: str) -> str:
    """What `vault operator generate-root -decode` does: the client side of `encode`."""
    raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4))
    return _xor(raw, otp.encode()).decode()
