"""Reads through the JetStream API (shared/storage.py, replicated buckets) after a partition
heals: every server gets the request, and the old stream leader, not yet aware of its successor,
answers too, from a copy without the writes acknowledged while it was cut off. Its answer often
arrives first (drill: tests/chaos/test_drill_partition.py). Here a fake connection plays both
servers, the stale one always first, so the race is decided the same way every time."""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
import pytest

from shared.storage import JetStreamStorage


@dataclass
class _Msg:
    subject: str
    data: bytes
    headers: dict[str, str] | None = None


class _Nuid:
    def __init__(self) -> None:
        self._n = itertools.count()

    def next(self) -> bytes:
        return f"n{next(self._n)}".encode()


@dataclass
class _Copy:
    """One server's copy of the stream: subject -> (sequence, data, headers)."""

    last: int = 0
    subjects: dict[str, tuple[int, bytes, dict[str, str]]] = field(default_factory=dict)

    def answer(self, subject: str) -> bytes:
        found = self.subjects.get(subject)
        if found is None:
            return json.dumps({"error": {"code": 404, "err_code": 10037}}).encode()
        seq, data, headers = found
        hdrs = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        message = {"seq": seq, "data": base64.b64encode(data).decode()}
        if hdrs:
            message["hdrs"] = base64.b64encode(f"NATS/1.0\r\n{hdrs}\r\n".encode()).decode()
        return json.dumps({"message": message}).encode()


class _Sub:
    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.queue: asyncio.Queue[_Msg] = asyncio.Queue()

    async def next_msg(self, timeout: float) -> _Msg:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            raise nats.errors.TimeoutError from None

    async def unsubscribe(self) -> None:
        pass


class _Cluster:
    """The connection a JetStreamStorage uses, in front of a leader and, once `cut` was called,
    an old leader that answers every read first from the copy it had when it was cut off."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.leader = _Copy()
        self.stale: _Copy | None = None
        self.leader_answers = True
        self._resp_sub_prefix = b"_INBOX.fake."
        self._nuid = _Nuid()
        self._resp_map: dict[str, asyncio.Future[_Msg]] = {}
        self._subs: dict[str, _Sub] = {}

    def cut(self) -> None:
        self.stale = copy.deepcopy(self.leader)

    async def _init_request_sub(self) -> None:
        pass

    def new_inbox(self) -> str:
        return f"_INBOX.{uuid.uuid4().hex}"

    async def subscribe(self, subject: str) -> _Sub:
        sub = self._subs[subject] = _Sub(subject)
        return sub

    def _deliver(self, reply: str, data: bytes) -> None:
        prefix = self._resp_sub_prefix.decode()
        if reply.startswith(prefix):
            future = self._resp_map.get(reply[len(prefix) :])
            if future is not None and not future.done():
                future.set_result(_Msg(reply, data))
        elif reply in self._subs:
            self._subs[reply].queue.put_nowait(_Msg(reply, data))

    async def publish(
        self, subject: str, payload: bytes, reply: str = "", headers: Any = None
    ) -> None:
        loop = asyncio.get_running_loop()
        if subject == f"$JS.API.STREAM.MSG.GET.{self.stream}":
            wanted = json.loads(payload)["last_by_subj"]
            if self.stale is not None:
                loop.call_soon(self._deliver, reply, self.stale.answer(wanted))
            if self.leader_answers:
                loop.call_later(0.005, self._deliver, reply, self.leader.answer(wanted))
            return
        # A write: the leader stores it (the old leader, cut off, never hears of it).
        self.leader.last += 1
        marker = {k: v for k, v in (headers or {}).items() if k.startswith("KV-")}
        self.leader.subjects[subject] = (self.leader.last, payload, marker)
        ack = json.dumps({"stream": self.stream, "seq": self.leader.last}).encode()
        loop.call_soon(self._deliver, reply, ack)


class _JS:
    def __init__(self, nc: _Cluster) -> None:
        self._nc = nc


def _storage(timeout: float = 2.0) -> tuple[JetStreamStorage, _Cluster]:
    bucket = f"b{uuid.uuid4().hex[:8]}"
    nc = _Cluster(f"KV_{bucket}")
    return JetStreamStorage(None, _JS(nc), bucket, timeout=timeout), nc  # type: ignore[arg-type]


async def test_acknowledged_writes_read_back_while_an_old_leader_answers_first() -> None:
    st, nc = _storage()
    first = await st.put("a/kept", b"v1")
    await st.put("a/doomed", b"x")
    await st.put("a/gone", b"x")
    nc.cut()
    # Acknowledged by the new leader while the old one was cut off.
    made = await st.put("a/new", b"fresh")
    second = await st.put("a/kept", b"v2")
    await st.delete("a/doomed")
    await st.delete("a/gone", revision=3)
    assert second > first

    got = await st.get("a/new")
    assert got is not None and (got.value, got.revision) == (b"fresh", made)
    got = await st.get("a/kept")
    assert got is not None and (got.value, got.revision) == (b"v2", second)
    assert await st.get("a/doomed") is None
    assert await st.get("a/gone") is None
    # Keys this client did not write lately take the first answer, as before.
    assert await st.get("a/never") is None


async def test_only_stale_answers_is_unavailable_not_absent() -> None:
    st, nc = _storage(timeout=0.2)
    nc.cut()
    await st.put("a/new", b"fresh")
    nc.leader_answers = False  # the new leader cannot be reached
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await st.get("a/new")


async def test_a_leader_elected_while_waiting_is_asked_again() -> None:
    st, nc = _storage(timeout=3.0)
    nc.cut()
    made = await st.put("a/new", b"fresh")
    nc.leader_answers = False  # no leader yet: only the stale copy answers

    async def elected() -> None:
        await asyncio.sleep(0.3)
        nc.leader_answers = True

    got, _ = await asyncio.gather(st.get("a/new"), elected())
    assert got is not None and (got.value, got.revision) == (b"fresh", made)
