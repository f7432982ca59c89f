"""KV v2 `config`: the mount-wide max_versions (0 means 10), cas_required and
delete_version_after (negative: disabled for every key)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.core.barrier import CasConflict
from services.secrets.engines.kv import inputs
from services.secrets.engines.kv.store import MAX_ATTEMPTS, backoff, busy
from services.secrets.framework.durations import format_duration
from services.secrets.framework.fields import Duration, desc
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend


class ConfigFields(msgspec.Struct, kw_only=True):
    max_versions: Annotated[int, desc("versions kept per key; 0 means 10")] | None = None
    cas_required: Annotated[bool, desc("every write must give options.cas")] | None = None
    delete_version_after: (
        Annotated[Duration, desc("versions read as deleted after this; negative disables")] | None
    ) = None
    metadata_cas_required: (
        Annotated[bool, desc("every metadata write must give metadata_cas")] | None
    ) = None


def paths(backend: KVBackend) -> list[Path]:
    store = backend.store

    async def read(_req: Request, _f: ConfigFields) -> Response:
        config = await store.get_config()
        return Response(
            data={
                "cas_required": config.cas_required,
                "delete_version_after": format_duration(config.delete_version_after),
                "max_versions": config.max_versions,
                "metadata_cas_required": config.metadata_cas_required,
            }
        )

    async def put(_req: Request, f: ConfigFields) -> Response:
        inputs.check_settings(f.max_versions, f.delete_version_after, negative_delete_after=True)
        settings = (f.max_versions, f.cas_required, f.delete_version_after, f.metadata_cas_required)
        if all(v is None for v in settings):
            return Response()
        for attempt in range(MAX_ATTEMPTS):
            config, revision = await store.get_config_entry()
            if f.max_versions is not None:
                config.max_versions = f.max_versions
            if f.cas_required is not None:
                config.cas_required = f.cas_required
            if f.delete_version_after is not None:
                config.delete_version_after = f.delete_version_after
            if f.metadata_cas_required is not None:
                config.metadata_cas_required = f.metadata_cas_required
            try:
                await store.put_config(config, revision)
                return Response()
            except CasConflict:
                await backoff(attempt)
        raise busy()

    return [
        Path(
            "config",
            {
                Op.READ: Operation(read, "Read the mount's KV settings"),
                **write(put, "Change the mount's KV settings"),
            },
            ConfigFields,
            synopsis="Settings applied to every key of the mount.",
        )
    ]
