"""Scheduled rotation of the identity token issuer's named keys: the expiry leader (one replica,
services/secrets/core/expiration.py) rotates every key past its rotation time, in every
namespace, so that rotation never waits for a request and no request ever writes for it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog

from services.secrets.errors import SecretsError
from services.secrets.identity.access import MOUNT_PATH
from services.secrets.identity.oidc_store import OidcStore

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("identity")

# Seconds between passes (each lists every namespace's keys). Rotation periods are at least a
# minute, so a key rotates at most this late.
CHECK_SECONDS = 10.0
_next_check: dict[int, float] = {}


async def rotate_due_keys(core: Core) -> None:
    now = time.monotonic()
    if now < _next_check.get(id(core), 0.0):
        return
    _next_check[id(core)] = now + CHECK_SECONDS
    for ns in list(core.namespaces.by_id.values()):
        backend = core.table(ns).backends.get(MOUNT_PATH)
        if backend is None:
            continue
        try:
            rotated = await OidcStore(backend.storage, core).rotate_due()
        except SecretsError as exc:  # no crypto worker now, say: the next pass tries again
            log.warning("identity token key rotation failed", error=exc.message)
            continue
        if rotated:
            log.info("identity token keys rotated", namespace=ns.path or "root", keys=rotated)
