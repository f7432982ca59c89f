"""A nats-py client that hands our hottest subscriptions their messages straight from its read
loop: plain nats-py puts every message in a per-subscription asyncio.Queue for a task that awaits
the callback, which costs a Msg object, a queue put and a task wake-up per message.

A subscription registered with `deliver_inline` gets each message as one plain function call
`(subject, reply, data, headers)` in the read loop, so the function must not block or await: it
parses and hands work on (the bus starts handler tasks, the batch client resolves futures). The
request multiplexer behind shared/nats_request.py is delivered the same way. Every other
subscription (JetStream, broadcasts) keeps nats-py's own delivery.

`publish_nowait` is the sending side's counterpart, for loop callbacks that send a batch: the
checks and PUB command of `publish`, queued for nats-py's flusher task without the chain of
coroutines (and the task to run them) an awaited `publish` costs.

Written against nats-py 2.16 (pinned in pyproject.toml): it overrides `_process_msg`,
`_init_request_sub` and `_send_ping` (a flush's PING goes after what is pending, not ahead of
it) and queues for the flusher as `_send_publish` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nats import errors
from nats.aio.client import Client as NatsClient
from nats.aio.client import _validate_subject
from nats.aio.subscription import Subscription
from nats.protocol.command import pub_cmd

Deliver = Callable[[str, str, bytes, dict[str, str] | None], None]
RawDeliver = Callable[[str, str, bytes, bytes | None], None]


class InlineClient(NatsClient):
    def __init__(self) -> None:
        super().__init__()
        self._inline: dict[int, Deliver] = {}
        self._raw: dict[int, RawDeliver] = {}
        self._resp_prefix_len = 0

    async def _send_ping(self, future: asyncio.Future[Any] | None = None) -> None:
        # nats-py writes a PING straight to the socket, ahead of commands still queued for its
        # flusher task: a flush() right after a subscribe() could then come back before the
        # server read the SUB (a message sent meanwhile finds no subscriber). Write them first.
        if self.is_connected and self._pending_data_size and self._transport is not None:
            self._transport.writelines(self._pending)
            self._pending = []
            self._pending_data_size = 0
        await super()._send_ping(future)

    def deliver_inline(self, sub: Subscription, deliver: Deliver) -> None:
        """From now on `sub`'s messages go to `deliver`, not to its callback."""
        self._inline[sub._id] = deliver

    def deliver_raw(self, sub: Subscription, deliver: RawDeliver) -> None:
        """As `deliver_inline`, with the header block as received and unparsed (empty or None:
        none), for a subscriber that needs at most a glance at it (nats-py parses in Python)."""
        self._raw[sub._id] = deliver

    async def _init_request_sub(self) -> None:
        await super()._init_request_sub()
        prefix = self._resp_sub_prefix
        assert prefix is not None
        for sid, sub in self._subs.items():
            if sub.subject.encode() == prefix + b"*":
                self._resp_prefix_len = len(prefix)
                self._inline[sid] = self._resolve_request
                return

    def _resolve_request(
        self, subject: str, reply: str, data: bytes, headers: dict[str, str] | None
    ) -> None:
        future = self._resp_map.get(subject[self._resp_prefix_len :])
        if future is not None and not future.done():
            future.set_result(
                self.msg_class(
                    _client=self, subject=subject, reply=reply, data=data, headers=headers
                )
            )

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        deliver = self._inline.get(sid)
        if deliver is None:
            raw = self._raw.get(sid)
            if raw is None:
                await super()._process_msg(sid, subject, reply, data, headers)
            elif sid not in self._subs:
                del self._raw[sid]
            else:
                self.stats["in_msgs"] += 1
                self.stats["in_bytes"] += len(data)
                try:
                    raw(subject.decode(), reply.decode(), data, headers)
                except Exception as exc:
                    await self._error_cb(exc)
            return
        if sid not in self._subs:  # unsubscribed: forget it, as nats-py drops its messages
            del self._inline[sid]
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        hdrs = await self._process_headers(headers) if headers else None
        try:
            deliver(subject.decode(), reply.decode(), data, hdrs)
        except Exception as exc:  # as nats-py reports a failing callback
            await self._error_cb(exc)

    def publish_nowait(self, subject: str, payload: bytes, reply: str = "") -> None:
        """`publish` without awaiting: the same checks and errors; the flusher writes it with
        whatever else is pending, on the next loop iteration."""
        if not self._skip_subject_validation:
            _validate_subject(subject)
            if reply:
                _validate_subject(reply)
        if not subject:
            raise errors.BadSubjectError
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        size = len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or size + self._pending_data_size > self._max_pending_size
        ):
            raise errors.OutboundBufferLimitError  # nothing may be buffered while reconnecting
        if size > self._max_payload:
            raise errors.MaxPayloadError
        cmd = pub_cmd(subject, reply, payload)
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        self._pending.append(cmd)
        self._pending_data_size += len(cmd)
        if not self.is_connected or self._transport is None:
            return  # sent with the rest of the buffer once reconnected
        if self._flusher_task is None or self._flusher_task.done():
            self._transport.writelines(self._pending)  # as nats-py does without its flusher
            self._pending = []
            self._pending_data_size = 0
        elif self._flush_queue is not None and self._flush_queue.empty():
            self._flush_queue.put_nowait(asyncio.get_running_loop().create_future())
