"""Serves data keys to the services that encrypt at rest outside the barrier (see
shared/datakeys.py): each named key is created once, kept in the barrier, and handed out only
sealed to the requester's one-time X25519 key, and only to a genuine replica of the service the
key belongs to (403 otherwise). A sealed replica refuses (503)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import structlog

from shared import subjects
from shared.cluster_identity import load_identity
from shared.datakeys import (
    KEY_BYTES,
    DataKeyReply,
    DataKeyRequest,
    RequestChecker,
    RequestRefused,
    seal_for,
)
from shared.errors import ServiceError
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from shared.bus import CallContext

log = structlog.get_logger("datakeys")

PREFIX = "core/datakeys/"
# Which keys exist is fixed by the services that use them, not by requesters.
NAME_RE = re.compile(r"^(workspace/(state|variables)|scheduler/variables)$")


async def data_key(core: Core, name: str) -> bytes:
    """The key named `name`, created on first use (two replicas racing agree on one)."""
    view = core.barrier.view("")
    path = PREFIX + name
    current = await view.get(path)
    if current is not None:
        return current
    try:
        await view.create(path, os.urandom(KEY_BYTES))
        log.info("data key created", name=name)
    except CasConflict:
        pass  # another replica won the race: use its key
    stored = await view.get(path)
    assert stored is not None
    return stored


async def serve(core: Core) -> None:
    # Only a genuine replica of the service a key belongs to gets it (shared/datakeys.py).
    checker = RequestChecker(load_identity(core.settings).public_key, core.settings.cluster_name)

    async def on_request(msg: DataKeyRequest, _ctx: CallContext) -> DataKeyReply:
        if not NAME_RE.fullmatch(msg.name):
            raise ServiceError(400, "unknown data key name")
        if len(msg.public_key) != 32:
            raise ServiceError(400, "public_key must be a 32-byte X25519 key")
        try:
            checker.check(msg)
        except RequestRefused as exc:
            log.warning("data key request refused", name=msg.name, reason=str(exc))
            raise ServiceError(403, str(exc)) from None
        if core.sealed:
            raise ServiceError(503, "the secrets service is sealed")
        return seal_for(msg, await data_key(core, msg.name))

    await core.bus.serve(
        subjects.DATA_KEY.on(core.settings.cluster_name),
        on_request,
        DataKeyRequest,
        queue=subjects.DATA_KEY.queue,
    )
