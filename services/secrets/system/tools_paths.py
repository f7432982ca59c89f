"""sys/tools/random and sys/tools/hash: random bytes and digests, as Vault's general tools."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets import tools
from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.tools import SOURCES, url_count

if TYPE_CHECKING:
    from services.secrets.core.core import Core


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


def random_bytes(f: RandomFields) -> str:
    count = url_count(f.urlbytes) if f.urlbytes else f.bytes
    return tools.random_bytes(count, f.format, f.source)


def digest(f: HashFields) -> str:
    algorithm = f.urlalgorithm or f.algorithm
    tools.check_hash(algorithm, f.format)
    try:
        data = base64.b64decode(f.input, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("unable to decode input as base64") from None
    return tools.hash_sum(data, algorithm, f.format)


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
