"""The KV backend: version 1 or 2 by the mount's `options.version`; a tune from 1 to 2 upgrades
the stored data when the mount is next initialised."""

from __future__ import annotations

from typing import Any

from services.secrets.core.barrier import BarrierView
from services.secrets.core.mounts import MountEntry
from services.secrets.engines.kv import (
    upgrade,
    v1,
    v2_config,
    v2_data,
    v2_metadata,
    v2_subkeys,
    v2_version_ops,
)
from services.secrets.engines.kv.store import KVStore
from services.secrets.framework.backend import Backend
from services.secrets.framework.path import Path


class KVBackend(Backend):
    type_name = "kv"
    help_text = (
        "Key/value secret storage. Version 1 keeps one value per path; version 2 "
        "keeps versions with metadata, check-and-set and soft deletes."
    )

    def __init__(self, core: Any, mount: MountEntry | None, storage: BarrierView) -> None:
        self.store = KVStore(storage)
        super().__init__(core, mount, storage)

    @property
    def version(self) -> int:
        options = self.mount.options if self.mount is not None else {}
        return 2 if str(options.get("version", "1")).strip() == "2" else 1

    def build_paths(self) -> list[Path]:
        if self.version == 1:
            return v1.paths(self)
        return [
            *v2_config.paths(self),
            *v2_data.paths(self),
            *v2_metadata.paths(self),
            *v2_version_ops.paths(self),
            *v2_subkeys.paths(self),
        ]

    async def initialize(self) -> None:
        # A tune may have changed the version since __init__ built the paths.
        self.paths = self.build_paths()
        if self.version == 2:
            await upgrade.upgrade(self.store)
