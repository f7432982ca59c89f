"""hmac, random, hash and cache-config."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets import tools
from services.secrets.engines.transit import symmetric as sym
from services.secrets.engines.transit.batch import batch_response, run_items
from services.secrets.engines.transit.paths_sign import HMAC_HASHES, hmac_value
from services.secrets.engines.transit.policy import Policy, TransitError
from services.secrets.errors import bad_request
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response, ok

if TYPE_CHECKING:
    from services.secrets.engines.transit.backend import TransitBackend

CACHE_CONFIG = "config/cache"


class HmacItem(msgspec.Struct, kw_only=True):
    input: str | None = None
    reference: str = ""


class HmacFields(HmacItem, kw_only=True):
    name: str
    urlalgorithm: str = ""
    algorithm: str = "sha2-256"
    key_version: int = 0
    batch_input: list[dict[str, Any]] | None = None


class RandomFields(msgspec.Struct, kw_only=True):
    source: str = ""
    urlbytes: str = ""
    bytes: int = 32
    format: str = "base64"


class HashFields(msgspec.Struct, kw_only=True):
    urlalgorithm: str = ""
    algorithm: str = "sha2-256"
    input: str | None = None
    format: str = "hex"


class CacheFields(msgspec.Struct, kw_only=True):
    size: int = 0


class CacheConfig(msgspec.Struct):
    size: int = 0


def hmac_version(p: Policy, ver: int) -> int:
    if ver == 0:
        return p.latest_version
    if ver < 0:
        raise TransitError("key version does not exist (cannot be negative)")
    if ver > p.latest_version:
        raise TransitError(f"key version does not exist; latest key version is {p.latest_version}")
    if p.min_encryption_version > 0 and ver < p.min_encryption_version:
        raise TransitError("cannot generate HMAC: version is too old (disallowed by policy)")
    return ver


def paths(b: TransitBackend) -> list[Path]:
    async def hmac(req: Request, f: HmacFields) -> Response:
        p = await b.require(f.name, "HMAC key not found")
        algorithm = f.urlalgorithm or f.algorithm
        if algorithm not in HMAC_HASHES:
            raise bad_request(f"unsupported algorithm {algorithm}")
        ver = hmac_version(p, f.key_version)

        async def one(item: HmacItem) -> dict[str, Any]:
            if item.input is None:
                raise TransitError("missing input for HMAC")
            mac = hmac_value(p, ver, algorithm, sym.b64decode(item.input, "input"))
            return {"hmac": sym.prefix(ver) + base64.b64encode(mac).decode()}

        if f.batch_input is None:
            return ok(await one(f))
        return batch_response(await run_items(f.batch_input, HmacItem, one), strict=False)

    async def random(req: Request, f: RandomFields) -> Response:
        count = f.bytes
        source = f.source or "platform"
        # `random/8` captures 8 as the source: a number there is the byte count.
        if f.source and not f.urlbytes and f.source.isdigit():
            source, count = "platform", int(f.source)
        elif f.urlbytes:
            count = tools.url_count(f.urlbytes)
        return ok({"random_bytes": tools.random_bytes(count, f.format, source)})

    async def hash_(req: Request, f: HashFields) -> Response:
        algorithm = f.urlalgorithm or f.algorithm
        tools.check_hash(algorithm, f.format)
        if f.input is None:
            raise bad_request("missing input")
        data = sym.b64decode(f.input, "input")
        return ok({"sum": tools.hash_sum(data, algorithm, f.format)})

    async def read_cache(req: Request, f: Any) -> Response:
        cfg = await b.storage.get_obj(CACHE_CONFIG, CacheConfig)
        return ok({"size": cfg.size if cfg else 0})

    async def write_cache(req: Request, f: CacheFields) -> Response:
        if f.size != 0 and f.size < 10:
            raise bad_request("size must be 0 or a value greater or equal to 10")
        await b.storage.put_obj(CACHE_CONFIG, CacheConfig(size=f.size))
        return ok({"size": f.size})

    return [
        Path(
            ("hmac/{name}", "hmac/{name}/{urlalgorithm}"),
            write(hmac, "HMAC base64 input with a named key"),
            fields=HmacFields,
            synopsis="Generate an HMAC",
        ),
        Path(
            ("random", "random/{source}", "random/{source}/{urlbytes}"),
            write(random, "Random bytes from the platform's CSPRNG"),
            fields=RandomFields,
            synopsis="Generate random bytes",
        ),
        Path(
            ("hash", "hash/{urlalgorithm}"),
            write(hash_, "Hash base64 input"),
            fields=HashFields,
            synopsis="Generate a hash sum",
        ),
        Path(
            "cache-config",
            {
                Op.READ: Operation(read_cache, "Read the key cache size"),
                **write(write_cache, "Set the key cache size"),
            },
            fields=CacheFields,
            synopsis="The transit key cache",
        ),
    ]
