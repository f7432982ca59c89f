"""Random bytes and digests, one operation each wherever Vault serves them: sys/tools/random
and sys/tools/hash, and a transit mount's random and hash."""

from __future__ import annotations

import base64
import hashlib
import secrets

from services.secrets.errors import bad_request

MAX_RANDOM_BYTES = 128 * 1024
SOURCES = ("platform", "seal", "all")
HASHES = {
    "sha2-224": hashlib.sha224,
    "sha2-256": hashlib.sha256,
    "sha2-384": hashlib.sha384,
    "sha2-512": hashlib.sha512,
    "sha3-224": hashlib.sha3_224,
    "sha3-256": hashlib.sha3_256,
    "sha3-384": hashlib.sha3_384,
    "sha3-512": hashlib.sha3_512,
}


def _check_format(fmt: str) -> None:
    if fmt not in ("hex", "base64"):
        raise bad_request(f'unsupported encoding format {fmt}; must be "hex" or "base64"')


def encode(raw: bytes, fmt: str) -> str:
    _check_format(fmt)
    return raw.hex() if fmt == "hex" else base64.b64encode(raw).decode()


def url_count(urlbytes: str) -> int:
    """A byte count given in the URL."""
    try:
        return int(urlbytes)
    except ValueError:
        raise bad_request(f"error parsing url-set byte count: {urlbytes!r}") from None


def random_bytes(count: int, fmt: str, source: str = "platform") -> str:
    """`count` random bytes, hex or base64. Every source draws from the OS generator: Trellis
    has no HSM-backed seal entropy."""
    if source not in SOURCES:
        raise bad_request(f'unsupported entropy source {source!r}; must be "platform" or "seal"')
    if count < 1:
        raise bad_request('"bytes" cannot be less than 1')
    if count > MAX_RANDOM_BYTES:
        raise bad_request(f'"bytes" should be less than {MAX_RANDOM_BYTES}')
    _check_format(fmt)
    return encode(secrets.token_bytes(count), fmt)


def check_hash(algorithm: str, fmt: str) -> None:
    if algorithm not in HASHES:
        raise bad_request(f"unsupported algorithm {algorithm}")
    _check_format(fmt)


def hash_sum(data: bytes, algorithm: str, fmt: str) -> str:
    """The digest of `data` with `algorithm` (one of HASHES), hex or base64."""
    check_hash(algorithm, fmt)
    return encode(HASHES[algorithm](data).digest(), fmt)
