"""sys/tools/random and sys/tools/hash: random bytes and digests, as Vault's general tools."""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core

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


class RandomFields(msgspec.Struct, kw_only=True):
    urlbytes: Annotated[str, desc("number of bytes, in the URL")] = ""
    bytes: Annotated[int, desc("number of bytes to return (default 32)")] = 32
    format: Annotated[str, desc("hex or base64 (default)")] = "base64"
    source: Annotated[str, desc("platform (default), seal or all")] = "platform"


class HashFields(msgspec.Struct, kw_only=True):
    input: Annotated[str, desc("base64-encoded input data")] = ""
    algorithm: Annotated[str, desc("sha2-256 (default), sha2-224/384/512, sha3-*")] = "sha2-256"
    urlalgorithm: Annotated[str, desc("the algorithm, in the URL")] = ""
    format: Annotated[str, desc("hex (default) or base64")] = "hex"


def _encode(raw: bytes, fmt: str) -> str:
    if fmt == "hex":
        return raw.hex()
    if fmt == "base64":
        return base64.b64encode(raw).decode()
    raise bad_request(f'unsupported encoding format {fmt}; must be "hex" or "base64"')


def random_bytes(f: RandomFields) -> str:
    count = f.bytes
    if f.urlbytes:
        try:
            count = int(f.urlbytes)
        except ValueError:
            raise bad_request(f"error parsing url-set byte count: {f.urlbytes!r}") from None
    if f.source not in SOURCES:
        raise bad_request(f'unsupported entropy source {f.source!r}; must be "platform" or "seal"')
    if count < 1:
        raise bad_request('"bytes" cannot be less than 1')
    if count > MAX_RANDOM_BYTES:
        raise bad_request(f'"bytes" should be less than {MAX_RANDOM_BYTES}')
    if f.format not in ("hex", "base64"):
        _encode(b"", f.format)
    # Every source draws from the OS generator: Trellis has no HSM-backed seal entropy.
    return _encode(secrets.token_bytes(count), f.format)


def digest(f: HashFields) -> str:
    algorithm = f.urlalgorithm or f.algorithm
    fn = HASHES.get(algorithm)
    if fn is None:
        raise bad_request(f"unsupported algorithm {algorithm}")
    if f.format not in ("hex", "base64"):
        raise bad_request(f'unsupported encoding format {f.format}; must be "hex" or "base64"')
    try:
        data = base64.b64decode(f.input, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("unable to decode input as base64") from None
    return _encode(fn(data).digest(), f.format)


def paths(core: Core) -> list[Path]:
    async def rand(req: Request, f: RandomFields) -> Response:
        # A URL segment that is not a number names the source (tools/random/seal/16).
        if f.urlbytes and not f.urlbytes.isdigit() and f.urlbytes in SOURCES:
            f = msgspec.structs.replace(f, source=f.urlbytes, urlbytes="")
        return Response(data={"random_bytes": random_bytes(f)})

    async def hash_(req: Request, f: HashFields) -> Response:
        return Response(data={"sum": digest(f)})

    return [
        Path(
            (
                "tools/random",
                "tools/random/{source}/{urlbytes}",
                "tools/random/{urlbytes}",
            ),
            write(rand, "Random bytes"),
            RandomFields,
            synopsis="Generate random bytes.",
        ),
        Path(
            ("tools/hash", "tools/hash/{urlalgorithm}"),
            write(hash_, "Hash data"),
            HashFields,
            synopsis="Hash base64-encoded data.",
        ),
    ]
