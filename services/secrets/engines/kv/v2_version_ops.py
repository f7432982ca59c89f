"""KV v2 `delete/`, `undelete/` and `destroy/<path>` with `{"versions": [..]}`: soft-delete,
restore, or permanently remove chosen versions. Unknown versions are skipped, as in Vault."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.engines.kv import inputs
from services.secrets.engines.kv.records import KeyRecord, VersionRecord
from services.secrets.engines.kv.store import Plan
from services.secrets.engines.kv.timestamps import now_ns
from services.secrets.engines.kv.versions import is_deleted
from services.secrets.framework.fields import CommaList, desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend


class VersionsFields(msgspec.Struct, kw_only=True):
    path: str
    versions: Annotated[CommaList, desc('version numbers: [1, 2] or "1,2"')] = []


# Each operation changes one version in place and returns whether it changed anything.
Apply = Callable[[KeyRecord, int, VersionRecord, int], bool]


def soft_delete(_key: KeyRecord, _n: int, v: VersionRecord, now: int) -> bool:
    if v.destroyed or is_deleted(v, now):
        return False
    v.deleted = now
    return True


def undelete(_key: KeyRecord, _n: int, v: VersionRecord, _now: int) -> bool:
    if v.destroyed or not v.deleted:
        return False
    v.deleted = 0
    return True


def destroy(key: KeyRecord, n: int, v: VersionRecord, _now: int) -> bool:
    if v.destroyed:
        return False
    v.destroyed = True
    v.data = None
    if n == key.current:
        key.latest = None  # the inline copy goes with the version
    return True


def paths(backend: KVBackend) -> list[Path]:
    store = backend.store

    def handler(apply: Apply) -> Callable[[Request, VersionsFields], Awaitable[Response]]:
        async def run(_req: Request, f: VersionsFields) -> Response:
            wanted = inputs.version_list(f.versions)

            async def change(key: KeyRecord | None) -> Plan:
                if key is None:
                    return Plan(None)
                now = now_ns()
                changed = False
                dropped: list[str] = []
                for n in wanted:
                    v = key.versions.get(n)
                    if v is None:
                        continue
                    blob = v.blob
                    if apply(key, n, v, now):
                        changed = True
                        if v.destroyed and blob:
                            v.blob = ""
                            dropped.append(blob)
                return Plan(key if changed else None, drop=dropped)

            await store.mutate(f.path, change)
            return Response()

        return run

    out = []
    for name, apply, summary in (
        ("delete", soft_delete, "Soft-delete versions (undelete restores them)"),
        ("undelete", undelete, "Restore soft-deleted versions"),
        ("destroy", destroy, "Permanently remove the data of versions"),
    ):
        out.append(
            Path(
                f"{name}/{{path*}}",
                write(handler(apply), summary),
                VersionsFields,
                synopsis=summary + ".",
            )
        )
    return out
