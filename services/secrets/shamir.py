"""Shamir secret sharing over GF(2^8), in the share format Vault and OpenBao use for unseal keys.

Every byte of the secret is the constant term of its own random polynomial of degree
threshold-1 over GF(2^8) with the AES reduction polynomial x^8+x^4+x^3+x+1. A share is the
polynomial values at one x coordinate followed by that x as a single trailing byte, so a
32-byte key gives 33-byte shares. Combining is Lagrange interpolation at x=0.

Arithmetic on secret bytes is done with `bytes.translate` over a precomputed multiplication row:
every byte goes through the same table lookup, with no branch that depends on its value. Branches
only ever look at the x coordinates, which are public.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from functools import cache

__all__ = ["MAX_PARTS", "combine", "split"]

MAX_PARTS = 255  # x must be a nonzero byte: x=0 would hand out the secret itself

_AES_POLY = 0x11B  # x^8 + x^4 + x^3 + x + 1
_GENERATOR = 0x03  # 0x02 is not a generator of the multiplicative group in this field; 0x03 is


def _build_tables() -> tuple[bytes, bytes]:
    """exp[i] = g^i for i in 0..509 (doubled so log[a]+log[b] needs no modulo); log[g^i] = i."""
    exp = bytearray(510)
    log = bytearray(256)
    value = 1
    for i in range(255):
        exp[i] = value
        log[value] = i
        # Multiply by 0x03 = (value * 2) xor value, reducing when the product overflows 8 bits.
        doubled = value << 1
        if doubled & 0x100:
            doubled ^= _AES_POLY
        value = doubled ^ value
    exp[255:510] = exp[0:255]
    return bytes(exp), bytes(log)


_EXP, _LOG = _build_tables()


@cache
def _mul_row(c: int) -> bytes:
    """The 256-byte translation table b -> c*b; at most 256 rows ever exist (64 KiB)."""
    if c == 0:
        return bytes(256)
    log_c = _LOG[c]
    return bytes([0, *(_EXP[log_c + _LOG[b]] for b in range(1, 256))])


def _mul(a: int, b: int) -> int:
    return _mul_row(a)[b]


def _inv(a: int) -> int:
    # Only ever called on public values (products of x differences), never on secret bytes.
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^8)")
    return _EXP[255 - _LOG[a]]


def _xor(a: bytes, b: bytes) -> bytes:
    """Addition in GF(2^8), for whole byte strings of equal length at once."""
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def split(secret: bytes, parts: int, threshold: int) -> list[bytes]:
    """Split `secret` into `parts` shares, any `threshold` of which recover it.

    Callers that want a single share (parts == 1) must skip splitting themselves, as Vault does:
    a threshold of 1 would make every share equal to the secret.
    """
    secret = bytes(secret)
    if not secret:
        raise ValueError("cannot split an empty secret")
    if threshold < 2:
        raise ValueError(f"threshold must be at least 2, got {threshold}")
    if parts < threshold:
        raise ValueError(f"parts ({parts}) cannot be less than threshold ({threshold})")
    if parts > MAX_PARTS:
        raise ValueError(f"parts cannot exceed {MAX_PARTS}, got {parts}")

    # Coefficient k of every byte's polynomial, stored as one byte string per k: the constant
    # term is the secret; the others are uniformly random (a zero top term is harmless).
    coeffs = [secret, *(secrets.token_bytes(len(secret)) for _ in range(threshold - 1))]
    # Distinct random x in 1..255; drawn from the OS CSPRNG so share positions leak nothing.
    xs = secrets.SystemRandom().sample(range(1, MAX_PARTS + 1), parts)

    shares: list[bytes] = []
    for x in xs:
        row = _mul_row(x)
        # Horner's rule, one byte string at a time: y = (...(c[t-1]*x + c[t-2])*x + ...) + c[0].
        y = coeffs[-1]
        for coeff in reversed(coeffs[:-1]):
            y = _xor(y.translate(row), coeff)
        shares.append(y + bytes([x]))
    return shares


def combine(shares: Sequence[bytes]) -> bytes:
    """Recover the secret from at least `threshold` shares made by `split` (or by Vault).

    Fewer shares than the threshold cannot be detected: they silently yield a wrong value, which
    is why the barrier authenticates the recovered key before trusting it.
    """
    if len(shares) < 2:
        raise ValueError(f"at least 2 shares are needed to combine, got {len(shares)}")
    blobs = [bytes(share) for share in shares]
    length = len(blobs[0])
    if any(len(blob) < 2 for blob in blobs):
        raise ValueError("shares must be at least 2 bytes long (1 value byte and the x byte)")
    if any(len(blob) != length for blob in blobs):
        raise ValueError("all shares must have the same length")
    xs = [blob[-1] for blob in blobs]
    if len(set(xs)) != len(xs):
        raise ValueError("duplicate share detected (two shares have the same x coordinate)")

    secret = 0
    for i, blob in enumerate(blobs):
        # Lagrange basis polynomial i evaluated at 0: prod over j != i of x_j / (x_j - x_i).
        # Subtraction is xor in GF(2^8); distinct x guarantee a nonzero denominator.
        numerator = 1
        denominator = 1
        for j, x_j in enumerate(xs):
            if j != i:
                numerator = _mul(numerator, x_j)
                denominator = _mul(denominator, x_j ^ xs[i])
        basis = _mul(numerator, _inv(denominator))
        secret ^= int.from_bytes(blob[:-1].translate(_mul_row(basis)), "big")
    return secret.to_bytes(length - 1, "big")
