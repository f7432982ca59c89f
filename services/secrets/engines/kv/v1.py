"""KV version 1: one JSON object per path, no history. A `ttl` (or `lease`) key in the data is
returned as the read's lease_duration, a hint to re-read; no lease is created."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.engines.kv.store import V1
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.durations import parse_duration
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend


class V1Path(msgspec.Struct, kw_only=True):
    path: str = ""


def lease_hint(data: dict[str, Any], default: int) -> int:
    """Seconds from the entry's `ttl` (or `lease`) key; the mount default when absent or
    unreadable, as Vault does."""
    raw = data.get("ttl", data.get("lease"))
    if raw is None:
        return default
    try:
        seconds = parse_duration(raw)
    except ValueError:
        return default
    return seconds if seconds > 0 else default


def folder(path: str) -> str:
    return path if not path or path.endswith("/") else path + "/"


def paths(backend: KVBackend) -> list[Path]:
    view = backend.storage

    async def exists(_req: Request, f: V1Path) -> bool:
        return await view.get(V1 + f.path) is not None

    async def read(_req: Request, f: V1Path) -> Response:
        raw = await view.get(V1 + f.path)
        if raw is None:
            raise not_found()
        data = msgspec.json.decode(raw)
        mount = backend.mount
        default, _ = backend.core.tokens.ttl_limits(
            mount.config.default_lease_ttl if mount else 0, 0
        )
        return Response(data=data, extra={"lease_duration": lease_hint(data, default)})

    async def put(req: Request, f: V1Path) -> Response:
        if not req.data:
            raise bad_request("missing data fields")
        if f.path.endswith("/"):
            raise bad_request("a key cannot end in '/'")
        await view.put(V1 + f.path, msgspec.json.encode(req.data))
        return Response()

    async def delete(_req: Request, f: V1Path) -> Response:
        await view.delete(V1 + f.path)
        return Response()

    async def listing(_req: Request, f: V1Path) -> Response:
        keys = await view.list(V1 + folder(f.path))
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def list_root(req: Request, _: NoFields) -> Response:
        return await listing(req, V1Path())

    return [
        Path(
            "",
            {Op.LIST: Operation(list_root, "List the top-level keys")},
            synopsis="List the secrets at the root of the mount.",
        ),
        Path(
            "{path*}",
            {
                Op.READ: Operation(read, "Read a secret"),
                **write(put, "Create or replace a secret"),
                Op.DELETE: Operation(delete, "Delete a secret"),
                Op.LIST: Operation(listing, "List the keys below a folder"),
            },
            V1Path,
            exists=exists,
            arbitrary_input=True,
            synopsis="Pass-through secret storage: any JSON object, stored encrypted.",
            description="A `ttl` key in the data is returned as the read's lease_duration.",
        ),
    ]
