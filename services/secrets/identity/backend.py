"""The identity backend: mounted at `identity/` in every namespace, like `sys/` and
`cubbyhole/`, and never removable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.secrets.framework.backend import Backend
from services.secrets.identity.alias_paths import alias_paths
from services.secrets.identity.entity_paths import entity_paths
from services.secrets.identity.group_paths import group_paths
from services.secrets.identity.lookup_paths import lookup_paths
from services.secrets.identity.oidc import OidcIssuer
from services.secrets.identity.store import IdentityStore

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry
    from services.secrets.framework.path import Path


class IdentityBackend(Backend):
    type_name = "identity"
    help_text = "Entities, their aliases on auth mounts, and groups of entities."

    def __init__(self, core: object, mount: MountEntry | None, storage: BarrierView) -> None:
        namespace_id = mount.namespace_id if mount is not None else "root"

        async def announce() -> None:
            await self.core.broadcast_invalidate(f"identity:{namespace_id}")

        self.store = IdentityStore(storage, announce)
        super().__init__(core, mount, storage)

    def build_paths(self) -> list[Path]:
        return [
            *entity_paths(self),
            *alias_paths(self),
            *group_paths(self),
            *lookup_paths(self),
            *OidcIssuer(self).paths(),
        ]
