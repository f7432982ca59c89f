"""sys/version-history: every Trellis version that has unsealed this cluster, when it first did,
and the version before it (Vault's, from 1.10; `bao version-history` prints it). Each version is
recorded in the barrier the first time a replica of it unseals (`record`)."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import msgspec

from services.secrets.framework.listing import listing
from services.secrets.framework.path import NoFields, Op, Operation, Path
from services.secrets.framework.request import Request, Response
from shared.storage import CasConflict
from shared.sys_status import BUILD_DATE, VERSION

if TYPE_CHECKING:
    from services.secrets.core.core import Core

PREFIX = "core/versions/"


class VersionEntry(msgspec.Struct, kw_only=True):
    version: str
    timestamp_installed: str  # RFC 3339, UTC, to the second (as Vault prints it)
    build_date: str
    installed: float = 0.0  # the same instant, finer: orders two versions of one second


async def record(core: Core) -> None:
    """Note this version in the barrier unless it is there already (every replica tries; the
    first one's time stands)."""
    now = time.time()
    entry = VersionEntry(
        version=VERSION,
        timestamp_installed=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        build_date=BUILD_DATE,
        installed=now,
    )
    # CasConflict: recorded by an earlier start, or by another replica just now.
    with contextlib.suppress(CasConflict):
        await core.barrier.view(PREFIX).create(VERSION, msgspec.json.encode(entry))


def paths(core: Core) -> list[Path]:
    async def history(req: Request, _: NoFields) -> Response:
        view = core.barrier.view(PREFIX)
        entries = [
            entry
            for key in await view.list()
            if (entry := await view.get_obj(key, VersionEntry)) is not None
        ]
        entries.sort(key=lambda e: (e.timestamp_installed, e.installed))
        info: dict[str, object] = {}
        previous: str | None = None
        for e in entries:
            info[e.version] = {
                "timestamp_installed": e.timestamp_installed,
                "build_date": e.build_date,
                # OpenBao's name for the build date (`bao version-history` prints it).
                "commit_date": e.build_date,
                "previous_version": previous,
            }
            previous = e.version
        return listing([e.version for e in entries], info)

    return [
        Path(
            ("version-history", "version-history/"),
            {Op.LIST: Operation(history, "The versions that have run this cluster")},
            synopsis="The Trellis versions that have unsealed this cluster, oldest first.",
        )
    ]
