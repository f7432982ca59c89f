"""One request/reply over nats-py's response multiplexer, without the per-call overhead of
`Client.request`: that validates the subject twice, reads the OS random source for two extra
token bytes, and waits through `asyncio.wait_for` (a wrapper task's worth of futures and
callbacks). Here: one NUID token (unique per connection already), one future, one timer.

It uses the client's own mux (`_resp_sub_prefix`, `_resp_map`, the `_INBOX.<nuid>.*`
subscription `_request_sub_callback` resolves), so replies route exactly as for
`Client.request`, and it raises the same errors: NoRespondersError when the server answers
that nobody listens, TimeoutError after `timeout`.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

_STATUS = "Status"
_NO_RESPONDERS = "503"


def _expire(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(nats.errors.TimeoutError())


# nats-server can answer "no responders" to a request sent just after another connection's
# SUB + flush (measured: about 1 in 100 with a fresh subscriber, never twice in a row): one
# retry after this pause tells a subscriber not yet visible from a service that has none.
NOBODY_RETRY = 0.025


async def request(
    nc: Client,
    subject: str,
    payload: bytes,
    *,
    timeout: float,
    headers: dict[str, str] | None = None,
) -> Msg:
    """Publish `payload` to `subject` and return the first reply."""
    started = time.monotonic()
    try:
        return await _request_once(nc, subject, payload, timeout=timeout, headers=headers)
    except nats.errors.NoRespondersError:
        left = timeout - (time.monotonic() - started) - NOBODY_RETRY
        if left <= 0:
            raise
        await asyncio.sleep(NOBODY_RETRY)
        return await _request_once(nc, subject, payload, timeout=left, headers=headers)


async def _request_once(
    nc: Client,
    subject: str,
    payload: bytes,
    *,
    timeout: float,
    headers: dict[str, str] | None,
) -> Msg:
    if nc._resp_sub_prefix is None:
        await nc._init_request_sub()
    prefix = nc._resp_sub_prefix
    assert prefix is not None
    token = nc._nuid.next().decode()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Msg] = loop.create_future()
    nc._resp_map[token] = future
    timer = loop.call_later(timeout, _expire, future)
    try:
        await nc.publish(subject, payload, reply=prefix.decode() + token, headers=headers)
        msg = await future
    finally:
        timer.cancel()
        nc._resp_map.pop(token, None)
    if msg.headers and msg.headers.get(_STATUS) == _NO_RESPONDERS:
        raise nats.errors.NoRespondersError
    return msg
