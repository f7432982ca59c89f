"""Reading a KV bucket's stream as a write-ahead log: entries in sequence order from any index,
through an ordered push consumer (JetStream resets it by itself after a gap)."""

from __future__ import annotations

import contextlib

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from services.replication.wire import WalEntry
from shared.replog import IDLE_HEARTBEAT_SECONDS

KV_OPERATION = "KV-Operation"


class WalReader:
    def __init__(self, js: JetStreamContext, bucket: str) -> None:
        self.js = js
        self.bucket = bucket
        self.stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._sub: JetStreamContext.PushSubscription | None = None
        self.pending = 0  # messages the server still holds after the last one delivered

    async def start(self, from_seq: int) -> None:
        """Deliver entries with index >= from_seq (those still retained)."""
        if from_seq <= 1:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
        else:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=from_seq
            )
        self._sub = await self.js.subscribe(
            self._prefix + ">",
            stream=self.stream,
            ordered_consumer=True,
            config=config,
            inactive_threshold=30.0,
            idle_heartbeat=IDLE_HEARTBEAT_SECONDS,  # a lost consumer noticed in seconds
        )

    async def next_batch(self, max_entries: int = 512, wait: float = 1.0) -> list[WalEntry]:
        """Up to `max_entries` entries; waits up to `wait` seconds for the first, [] if none."""
        sub = self._sub
        assert sub is not None, "start() first"
        out: list[WalEntry] = []
        while len(out) < max_entries:
            try:
                msg = await sub.next_msg(timeout=wait)
            except (nats.errors.TimeoutError, TimeoutError):
                break
            meta = msg.metadata
            self.pending = meta.num_pending
            op = (msg.headers or {}).get(KV_OPERATION, "")
            out.append(
                WalEntry(
                    meta.sequence.stream,
                    msg.subject[len(self._prefix) :],
                    b"" if op else msg.data,
                    op,
                )
            )
            if sub.pending_msgs == 0:
                break  # hand over what is here rather than wait for more
            wait = 0.05
        return out

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
