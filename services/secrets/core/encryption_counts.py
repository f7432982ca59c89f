"""The barrier's encryptions under the active key term, counted across every replica.

Each replica counts its own encryptions (a local integer: no write per encryption). Vault's
standbys forward writes to the active node, whose count is the cluster's; Trellis's replicas all
write, so `sys/key-status` and automatic rotation ask the other live replicas for their counts
and add them. The live replicas are those whose signed state (shared/secrets_state.py) arrived
within STALE seconds and says unsealed; the question and the answers travel sealed with the
replica key, as every control message between replicas (a request not sealed by a replica is
not answered). A replica that does not answer within ASK_TIMEOUT is left out of the sum."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import msgspec
import structlog

from shared import subjects
from shared.control import ControlBox
from shared.secrets_state import open_record

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("secrets")

# As the gateway's (services/gateway/local_status.py): three missed heartbeats.
STALE = 3.0
ASK_TIMEOUT = 1.0


class CountRequest(msgspec.Struct, kw_only=True):
    origin: str


class CountReply(msgspec.Struct, kw_only=True):
    node: str
    term: int
    encryptions: int


class EncryptionCounts:
    def __init__(self, core: Core) -> None:
        self.core = core
        self._cluster = core.settings.cluster_name
        self._subject = subjects.SEAL_COUNT.on(self._cluster)
        key = core.seal.identity.signing_key
        assert key is not None  # SealManager refuses to start without the cluster key
        self._public = key.public_key()
        # node -> when its last unsealed state arrived
        self._peers: dict[str, float] = {}

    async def start(self) -> None:
        bus = self.core.bus

        async def on_state(msg: object) -> None:
            self.receive_state(msg.data)  # type: ignore[attr-defined]

        await bus.nc.subscribe(subjects.SECRETS_STATE.on(self._cluster), cb=on_state)
        # Not a queue group: every replica answers for itself.
        await bus.serve(self._subject, self._on_request, bytes)

    def receive_state(self, data: bytes) -> None:
        record = open_record(self._public, self._cluster, data)
        if record is None or record.node == self.core.seal.node_id:
            return
        if record.state is None or record.state.sealed:
            self._peers.pop(record.node, None)
        else:
            self._peers[record.node] = time.monotonic()

    def live_peers(self) -> set[str]:
        now = time.monotonic()
        return {node for node, seen in self._peers.items() if now - seen < STALE}

    async def _on_request(self, box: bytes, _ctx: object) -> bytes:
        msg = self.core.seal.open(self._subject, box, CountRequest)
        ring = self.core.barrier.keyring
        if msg is None or ring is None or msg.origin == self.core.seal.node_id:
            return b""
        reply = CountReply(
            node=self.core.seal.node_id, term=ring.active_term, encryptions=ring.encryptions
        )
        context = ControlBox.reply_context(self._subject, box)
        return self.core.seal.box.seal(context, msgspec.msgpack.encode(reply))

    async def total(self) -> int:
        """This replica's encryptions under the active term plus every live peer's."""
        ring = self.core.barrier.keyring
        if ring is None:
            return 0
        term, own = ring.active_term, ring.encryptions
        expected = self.live_peers()
        if not expected:
            return own
        answers = await self._ask(expected)
        return own + sum(a.encryptions for a in answers.values() if a.term == term)

    async def _ask(self, expected: set[str]) -> dict[str, CountReply]:
        seal = self.core.seal
        answers: dict[str, CountReply] = {}
        request = CountRequest(origin=seal.node_id)
        async with contextlib.aclosing(
            seal.ask_replicas(self._subject, request, CountReply, ASK_TIMEOUT)
        ) as replies:
            async for reply in replies:
                answers[reply.node] = reply
                if expected <= answers.keys():
                    return answers
        log.info(
            "encryption count: replicas did not answer", missing=len(expected - answers.keys())
        )
        return answers
