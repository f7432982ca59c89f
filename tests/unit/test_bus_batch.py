"""The micro-batching of bus requests (shared/bus_batch.py) without NATS: the framing, how a
loop iteration's requests become bounded batches, how replies and no-responders statuses find
their requests, and how a replica's answers to one requester go out together."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats.errors
import pytest

from shared import bus_batch
from shared.bus_batch import Answer, BatchClient, Item, ReplyBatcher, chunks
from shared.settings import load_settings


@dataclass
class FakeMsg:
    subject: str
    data: bytes = b""
    headers: dict[str, str] | None = None


@dataclass
class FakeNats:
    """Records publishes; `max_payload` as a server would announce it."""

    max_payload: int = 1 << 20
    published: list[tuple[str, bytes, str]] = field(default_factory=list)
    subscribed: list[str] = field(default_factory=list)
    cb: Any = None

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str, cb: Any) -> None:
        self.subscribed.append(subject)
        self.cb = cb

    def publish_nowait(self, subject: str, payload: bytes, reply: str = "") -> None:
        self.published.append((subject, payload, reply))


def sent_items(payload: bytes) -> list[Item]:
    return bus_batch.items_decoder.decode(payload)


def test_framing_round_trips_in_a_few_bytes() -> None:
    items = [Item(1, b"a"), Item(2, b"b", {"Trellis-Request-Id": "r"})]
    assert sent_items(bus_batch.encode(items)) == items
    answers = [Answer(7, b"x"), Answer(8, b"y", True)]
    decoded = msgspec.msgpack.decode(bus_batch.encode(answers), type=list[Answer])
    assert decoded == answers
    # Framing is a few bytes an item: list and array headers, id, bin header, nil headers.
    assert len(bus_batch.encode([Item(1, b"")])) == 1 + 1 + 1 + 2 + 1


def test_chunks_bound_items_and_bytes() -> None:
    entries = [(b"x" * 10, None, i) for i in range(20)]
    assert [len(c) for c in chunks(entries, 1 << 20, 8)] == [8, 8, 4]
    big = [(b"x" * 400, None, i) for i in range(5)]
    # Two items of 400 bytes (plus framing) fit under 1000, a third does not.
    assert chunks(big, 1000, 8) == [[0, 1], [2, 3], [4]]
    # An item larger than the limit still goes, alone.
    assert chunks([(b"x" * 5000, None, "a"), (b"y", None, "b")], 1000, 8) == [["a"], ["b"]]
    hdrs = {"k" * 300: "v" * 300}
    assert chunks([(b"", hdrs, 1), (b"", hdrs, 2)], 1000, 8) == [[1], [2]]


async def _answer_all(nc: FakeNats) -> None:
    """What a replica would send back for every batch published."""
    for _subject, payload, reply in nc.published:
        answers = [Answer(i.id, i.data.upper()) for i in sent_items(payload)]
        await nc.cb(FakeMsg(reply, bus_batch.encode(answers)))


async def _until(check: Any, seconds: float = 2.0) -> None:
    deadline = time.monotonic() + seconds
    for _ in itertools.count():
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(0.001)


async def test_one_iteration_becomes_bounded_batches_per_subject() -> None:
    nc = FakeNats()
    client = BatchClient(nc, max_batch=4)  # type: ignore[arg-type]
    calls = [
        asyncio.ensure_future(client.request(subject, f"m{i}".encode(), timeout=5))
        for i, subject in enumerate(["s.batch"] * 6 + ["t.batch"])
    ]
    await _until(lambda: len(nc.published) == 3)
    assert nc.subscribed == ["_INBOX.test.*"]
    assert [(s, len(sent_items(p))) for s, p, _ in nc.published] == [
        ("s.batch", 4),
        ("s.batch", 2),
        ("t.batch", 1),
    ]
    replies = {r for _, _, r in nc.published}
    assert len(replies) == 3 and all(r.startswith("_INBOX.test.") for r in replies)
    await _answer_all(nc)
    answers = await asyncio.gather(*calls)
    assert [a.data for a in answers] == [f"M{i}".encode() for i in range(7)]
    assert not client._pending and not client._batches


async def test_a_lone_request_goes_at_once_and_later_ones_in_a_new_batch() -> None:
    nc = FakeNats()
    client = BatchClient(nc)  # type: ignore[arg-type]
    first = asyncio.ensure_future(client.request("s.batch", b"a", timeout=5))
    await _until(lambda: len(nc.published) == 1)
    second = asyncio.ensure_future(client.request("s.batch", b"b", timeout=5))
    await _until(lambda: len(nc.published) == 2)
    await _answer_all(nc)
    assert (await first).data == b"A" and (await second).data == b"B"


async def test_answers_from_one_message_settle_items_of_several_batches() -> None:
    nc = FakeNats()
    client = BatchClient(nc, max_batch=1)  # type: ignore[arg-type]
    calls = [asyncio.ensure_future(client.request("s.batch", b"x", timeout=5)) for _ in range(3)]
    await _until(lambda: len(nc.published) == 3)
    ids = [sent_items(p)[0].id for _, p, _ in nc.published]
    last_reply = nc.published[-1][2]
    err = Answer(ids[2], b"e", error=True)
    await nc.cb(
        FakeMsg(last_reply, bus_batch.encode([Answer(ids[0], b"0"), Answer(ids[1], b"1"), err]))
    )
    assert [(a.data, a.error) for a in await asyncio.gather(*calls)] == [
        (b"0", False),
        (b"1", False),
        (b"e", True),
    ]


async def test_each_item_times_out_on_its_own() -> None:
    nc = FakeNats()
    client = BatchClient(nc)  # type: ignore[arg-type]
    quick = asyncio.ensure_future(client.request("s.batch", b"q", timeout=0.05))
    patient = asyncio.ensure_future(client.request("s.batch", b"p", timeout=5))
    await _until(lambda: len(nc.published) == 1)
    with pytest.raises(nats.errors.TimeoutError):
        await quick
    assert not patient.done()
    await _answer_all(nc)
    assert (await patient).data == b"P"


async def test_one_batch_timer_still_fails_each_item_at_its_own_deadline() -> None:
    nc = FakeNats()
    client = BatchClient(nc)  # type: ignore[arg-type]
    started = time.monotonic()
    quick = asyncio.ensure_future(client.request("s.batch", b"q", timeout=0.05))
    later = asyncio.ensure_future(client.request("s.batch", b"l", timeout=0.3))
    await _until(lambda: len(nc.published) == 1)
    with pytest.raises(nats.errors.TimeoutError):
        await quick
    assert not later.done()
    with pytest.raises(nats.errors.TimeoutError):
        await later
    assert time.monotonic() - started >= 0.3
    assert not client._pending and not client._batches


async def test_no_responders_fails_the_batch_and_each_item_retries_once() -> None:
    nc = FakeNats()
    client = BatchClient(nc)  # type: ignore[arg-type]
    status = {"Status": "503"}
    calls = [asyncio.ensure_future(client.request("s.batch", b"x", timeout=5)) for _ in range(3)]
    await _until(lambda: len(nc.published) == 1)
    await nc.cb(FakeMsg(nc.published[0][2], b"", status))
    # The retry: the three again, together, after the pause.
    await _until(lambda: len(nc.published) == 2)
    assert len(sent_items(nc.published[1][1])) == 3
    await nc.cb(FakeMsg(nc.published[1][2], b"", status))
    for call in calls:
        with pytest.raises(nats.errors.NoRespondersError):
            await call
    assert not client._pending and not client._batches


async def test_a_status_for_another_batch_leaves_these_items_alone() -> None:
    nc = FakeNats()
    client = BatchClient(nc)  # type: ignore[arg-type]
    call = asyncio.ensure_future(client.request("s.batch", b"x", timeout=5))
    await _until(lambda: len(nc.published) == 1)
    await nc.cb(FakeMsg("_INBOX.test.999", b"", {"Status": "503"}))
    await nc.cb(FakeMsg("_INBOX.test.1", b"not msgpack of answers \xc1"))
    assert not call.done()
    await _answer_all(nc)
    assert (await call).data == b"X"


async def test_replies_for_one_requester_go_out_together() -> None:
    nc = FakeNats()
    replies = ReplyBatcher(nc, max_batch=3)  # type: ignore[arg-type]
    replies.add("_INBOX.gw1.1", Answer(1, b"a"))
    replies.add("_INBOX.gw1.2", Answer(2, b"b"))
    replies.add("_INBOX.gw2.5", Answer(9, b"c"))
    for i in range(3, 7):
        replies.add("_INBOX.gw1.2", Answer(i, b"d"))
    await replies.close()
    out = [
        (s, [a.id for a in msgspec.msgpack.decode(p, type=list[Answer])])
        for s, p, _ in nc.published
    ]
    assert out == [
        ("_INBOX.gw1.2", [1, 2, 3]),
        ("_INBOX.gw1.2", [4, 5, 6]),
        ("_INBOX.gw2.5", [9]),
    ]
    replies.add("_INBOX.gw1.3", Answer(10, b"e"))
    await replies.close()
    assert nc.published[-1][0] == "_INBOX.gw1.3"


def test_batching_is_the_default_and_can_be_switched_off() -> None:
    assert load_settings(env={}).bus_batch is True
    assert load_settings(env={"TRELLIS_BUS_BATCH": "false"}).bus_batch is False
