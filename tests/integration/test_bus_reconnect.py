"""After nats-server is killed and restarted on its store (what `trellis dev`'s supervisor
does), a service's ordered consumers (KV watchers, replicated-log followers) resume at once
from the next sequence they had not seen, instead of after nats-py's missed-heartbeat check."""

from __future__ import annotations

import asyncio
from pathlib import Path

from shared.bus import Bus
from shared.localnet import free_port
from tests.conftest import start_nats


async def test_ordered_consumers_resume_right_after_a_nats_restart(tmp_path: Path) -> None:
    port = free_port()
    proc, url, _ = start_nats(str(tmp_path), port=port)
    bus = await Bus.connect(url, "reconnect-test")
    try:
        js = bus.nc.jetstream()
        await js.add_stream(name="RESUME", subjects=["resume.>"])
        await js.publish("resume.a", b"1")
        seen: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

        async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
            await seen.put((msg.metadata.sequence.stream, msg.data))

        # A long idle heartbeat: nats-py alone would not notice the lost consumer for minutes.
        await js.subscribe("resume.>", cb=on_msg, ordered_consumer=True, idle_heartbeat=60.0)
        assert await asyncio.wait_for(seen.get(), 5) == (1, b"1")

        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        bus.reconnect_hooks.append(on_reconnect)
        proc.kill()
        proc.wait()
        proc, _, _ = start_nats(str(tmp_path), port=port)
        await asyncio.wait_for(reconnected.wait(), 15)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:  # JetStream may take a moment to load the stream from disk
            try:
                await js.publish("resume.b", b"2", timeout=1)
                break
            except Exception:
                assert loop.time() < deadline
                await asyncio.sleep(0.1)
        # Delivered once, in order, well before any heartbeat check could have fired.
        assert await asyncio.wait_for(seen.get(), 5) == (2, b"2")
        assert seen.empty()
    finally:
        await bus.close()
        proc.kill()
        proc.wait()
