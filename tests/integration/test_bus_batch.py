"""Micro-batched bus requests (shared/bus_batch.py) on a real nats-server: concurrent requests
travel as one message and each keeps its own semantics: a slow or parked (Deferred) request does
not hold the others' replies, errors and timeouts are per request, a batch nobody receives is
no responders, a replica killed mid-batch leaves every request in it to time out, batches
spread over the replicas of the queue group, and metrics and request ids are per request."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from prometheus_client import REGISTRY

from shared.bus import Bus, CallContext
from shared.bus_batch import BATCH_SUFFIX, items_decoder
from shared.deferred import Deferred
from shared.errors import BusTimeout, NoResponders, ServiceError

pytestmark = pytest.mark.nats

ROOT = Path(__file__).resolve().parents[2]


class Ask(msgspec.Struct):
    n: int
    mode: str = "fast"  # fast | park | fail | never


class Told(msgspec.Struct):
    n: int
    request_id: str = ""
    replica: str = ""


async def _spy(bus: Bus, subject: str) -> list[int]:
    """Sizes of the batches sent to `subject`, seen by a plain (non-queue) subscriber."""
    sizes: list[int] = []

    async def record(msg: object) -> None:
        sizes.append(len(items_decoder.decode(msg.data)))  # type: ignore[attr-defined]

    await bus.nc.subscribe(subject + BATCH_SUFFIX, cb=record)
    await bus.nc.flush()
    return sizes


async def _until(check: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def test_slow_parked_failing_and_silent_requests_do_not_hold_the_others(
    nats_url: str, unique: str
) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")
    spy = await Bus.connect(nats_url, "spy")
    release = asyncio.get_running_loop().create_future()
    silence = asyncio.Event()  # the "never" request's handler, until the test ends
    subject = f"batch.{unique}.ask"
    family = subject.split(".", 1)[-1]  # this test's own: other tests count theirs

    async def handler(msg: Ask, ctx: CallContext) -> Told | Deferred:
        if msg.mode == "park":  # a long poll: answered when `release` resolves
            return Deferred(release, lambda: _told(msg, ctx))
        if msg.mode == "fail":
            raise ServiceError(409, f"refused {msg.n}")
        if msg.mode == "never":
            await silence.wait()
        return await _told(msg, ctx)

    async def _told(msg: Ask, ctx: CallContext) -> Told:
        return Told(n=msg.n, request_id=ctx.request_id)

    before = (
        REGISTRY.get_sample_value("trellis_bus_handled_total", {"subject": family, "outcome": "ok"})
        or 0.0
    )
    try:
        await server.serve(subject, handler, Ask, queue="q", batched=True)
        sizes = await _spy(spy, subject)
        modes = ["fast", "park", "fast", "fail", "never", "fast", "park"]

        def ask(i: int, mode: str) -> asyncio.Future[Told]:
            timeout = 0.5 if mode == "never" else 10
            return asyncio.ensure_future(
                client.request(
                    subject,
                    Ask(n=i, mode=mode),
                    Told,
                    timeout=timeout,
                    request_id=f"r{i}",
                    batch=True,
                )
            )

        calls = [ask(i, m) for i, m in enumerate(modes)]
        fast = [calls[i] for i, m in enumerate(modes) if m == "fast"]
        done = await asyncio.gather(*fast)
        assert [t.n for t in done] == [0, 2, 5]
        assert [t.request_id for t in done] == ["r0", "r2", "r5"]  # headers travel per item
        with pytest.raises(ServiceError) as refused:
            await calls[3]
        assert (refused.value.code, refused.value.message) == (409, "refused 3")
        with pytest.raises(BusTimeout):
            await calls[4]
        assert not calls[1].done() and not calls[6].done()  # parked, holding nothing
        release.set_result(None)
        assert [(await calls[1]).n, (await calls[6]).n] == [1, 6]
        # The spy's callback runs in its subscription's own task: wait for it, not for a PONG.
        await _until(lambda: sum(sizes) >= len(modes))
        assert sizes == [len(modes)], "the seven requests of one iteration went as one message"
        after = REGISTRY.get_sample_value(
            "trellis_bus_handled_total", {"subject": family, "outcome": "ok"}
        )
        assert after == before + 5  # metrics per request: three fast, two parked
    finally:
        silence.set()
        for bus in (client, spy):
            await bus.close()
        await server.close()


async def test_no_responders_for_a_batch_after_one_retry(nats_url: str, unique: str) -> None:
    client = await Bus.connect(nats_url, "cli")
    try:
        started = time.monotonic()
        results = await asyncio.gather(
            *(
                client.request(f"batch.{unique}.nobody", Ask(n=i), Told, timeout=5, batch=True)
                for i in range(5)
            ),
            return_exceptions=True,
        )
        assert all(isinstance(r, NoResponders) for r in results), results
        assert 0.02 <= time.monotonic() - started < 2
    finally:
        await client.close()


_REPLICA = textwrap.dedent(
    """
    import asyncio, sys
    import msgspec
    from shared.bus import Bus

    class Ask(msgspec.Struct):
        n: int
        mode: str = "fast"

    async def main(url, subject):
        bus = await Bus.connect(url, "doomed")

        async def handler(msg, ctx):
            await bus.nc.publish(subject + ".started", str(msg.n).encode())
            await asyncio.Event().wait()

        await bus.serve(subject, handler, Ask, queue="q", batched=True)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_a_replica_killed_mid_batch_leaves_each_request_to_time_out(
    nats_url: str, unique: str
) -> None:
    subject = f"batch.{unique}.ask"
    doomed = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _REPLICA,
        nats_url,
        subject,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    client = await Bus.connect(nats_url, "cli")
    healthy: Bus | None = None
    try:
        assert doomed.stdout is not None
        assert (await asyncio.wait_for(doomed.stdout.readline(), 30)).strip() == b"ready"
        started: list[bytes] = []

        async def note(msg: object) -> None:
            started.append(msg.data)  # type: ignore[attr-defined]

        await client.nc.subscribe(subject + ".started", cb=note)
        await client.nc.flush()
        calls = [
            asyncio.ensure_future(client.request(subject, Ask(n=i), Told, timeout=3, batch=True))
            for i in range(6)
        ]
        await _until(lambda: len(started) == 6)
        doomed.send_signal(signal.SIGKILL)
        await asyncio.wait_for(doomed.wait(), 10)
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, BusTimeout) for r in results), results

        # A surviving replica takes the next requests.
        healthy = await Bus.connect(nats_url, "healthy")

        async def answer(msg: Ask, _ctx: CallContext) -> Told:
            return Told(n=msg.n)

        await healthy.serve(subject, answer, Ask, queue="q", batched=True)
        told = await asyncio.gather(
            *(client.request(subject, Ask(n=i), Told, timeout=5, batch=True) for i in range(6))
        )
        assert [t.n for t in told] == list(range(6))
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await asyncio.wait_for(doomed.wait(), 10)
        await client.close()
        if healthy is not None:
            await healthy.close()


async def test_batches_spread_over_the_replicas(nats_url: str, unique: str) -> None:
    subject = f"batch.{unique}.ask"
    replicas = [await Bus.connect(nats_url, f"r{i}") for i in range(2)]
    client = await Bus.connect(nats_url, "cli")
    try:
        for i, bus in enumerate(replicas):

            async def answer(msg: Ask, _ctx: CallContext, name: str = f"r{i}") -> Told:
                return Told(n=msg.n, replica=name)

            await bus.serve(subject, answer, Ask, queue="q", batched=True)
        seen: set[str] = set()
        # 32 at once are at least four batches; ten rounds make one replica taking all
        # of them (2 ** -39) impossible in practice.
        for _ in range(10):
            told = await asyncio.gather(
                *(client.request(subject, Ask(n=i), Told, timeout=5, batch=True) for i in range(32))
            )
            assert [t.n for t in told] == list(range(32))
            seen |= {t.replica for t in told}
        assert seen == {"r0", "r1"}
    finally:
        await client.close()
        for bus in replicas:
            await bus.close()


async def test_close_answers_the_batch_items_in_flight(nats_url: str, unique: str) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")
    started = asyncio.Event()

    async def slow(msg: Ask, _ctx: CallContext) -> Told:
        started.set()
        await asyncio.sleep(0.3)
        return Told(n=msg.n)

    try:
        await server.serve(f"batch.{unique}.slow", slow, Ask, batched=True)
        calls = [
            asyncio.ensure_future(
                client.request(f"batch.{unique}.slow", Ask(n=i), Told, timeout=5, batch=True)
            )
            for i in range(3)
        ]
        await started.wait()
        await server.close()
        assert [(await c).n for c in calls] == [0, 1, 2]
    finally:
        await client.close()
