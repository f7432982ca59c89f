"""sys/remount/status/{migration_id}: the outcome of a mount move. OpenBao moves mounts in the
background and its CLI polls this path; Trellis moves them before answering, so the record it
keeps says "success" at once, but `bao secrets move` still needs the id and the status path."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import msgspec

from services.secrets.errors import not_found
from services.secrets.framework.path import Op, Operation, Path
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.core import Core

PREFIX = "core/remount-migrations/"
KEEP_SECONDS = 24 * 3600


class Migration(msgspec.Struct, kw_only=True):
    source_mount: str
    target_mount: str
    status: str
    created: float = 0.0


class StatusFields(msgspec.Struct, kw_only=True):
    migration_id: str = ""


def _store(core: Core, req: Request) -> BarrierView:
    return core.namespaces.view(req.namespace).sub(PREFIX)


def _mount(path: str) -> str:
    return path.strip("/") + "/"


async def record(core: Core, req: Request, source: str, target: str) -> Response:
    """Keep the finished move under a fresh id and answer as OpenBao's sys/remount does."""
    migration_id = str(uuid.uuid4())
    entry = Migration(
        source_mount=_mount(source),
        target_mount=_mount(target),
        status="success",
        created=time.time(),
    )
    store = _store(core, req)
    await store.put_obj(migration_id, entry)
    await _forget_old(store, entry.created)
    return Response(data={"migration_id": migration_id}, data_at_top=True)


async def _forget_old(store: BarrierView, now: float) -> None:
    """Moves are rare and their status is read right after: keep a day of records."""
    for key in await store.list():
        old = await store.get_obj(key, Migration)
        if old is not None and old.created < now - KEEP_SECONDS:
            await store.delete(key)


def paths(core: Core) -> list[Path]:
    async def status(req: Request, f: StatusFields) -> Response:
        entry = await _store(core, req).get_obj(f.migration_id, Migration)
        if entry is None:
            raise not_found()
        info = {
            "source_mount": entry.source_mount,
            "target_mount": entry.target_mount,
            "status": entry.status,
        }
        return Response(data={"migration_id": f.migration_id, "migration_info": info})

    return [
        Path(
            "remount/status/{migration_id}",
            {Op.READ: Operation(status, "Status of a mount move")},
            StatusFields,
            synopsis="The status of a mount move started by sys/remount.",
        )
    ]
