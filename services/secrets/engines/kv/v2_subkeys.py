"""KV v2 `subkeys/<path>`: the keys of a version's data with the values replaced by null."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.engines.kv.subkeys import subkeys
from services.secrets.engines.kv.v2_data import read_version
from services.secrets.engines.kv.versions import version_metadata
from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import Op, Operation, Path
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend


class SubkeysFields(msgspec.Struct, kw_only=True):
    path: str
    version: Annotated[int, desc("version to read; 0 = the current one")] = 0
    depth: Annotated[int, desc("deepest level returned; 0 = no limit")] = 0


def paths(backend: KVBackend) -> list[Path]:
    store = backend.store

    async def read(_req: Request, f: SubkeysFields) -> Response:
        if f.version < 0:
            raise bad_request(f"invalid version {f.version}: versions start at 1")
        if f.depth < 0:
            raise bad_request("depth cannot be negative")
        found = await read_version(store, f.path, f.version, body="subkeys")
        if isinstance(found, Response):
            return found
        key, number, raw = found
        data = msgspec.json.decode(raw)
        return Response(
            data={
                "subkeys": subkeys(data if isinstance(data, dict) else {}, f.depth),
                "metadata": version_metadata(key, number, key.versions[number]),
            }
        )

    return [
        Path(
            "subkeys/{path*}",
            {Op.READ: Operation(read, "Read the structure of a version")},
            SubkeysFields,
            synopsis="A secret's keys without its values.",
        )
    ]
