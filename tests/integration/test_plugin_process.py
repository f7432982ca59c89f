"""The example plugin as a process on a real bus: it answers hello with its paths and exits
when its stdin (held by the Trellis replica that started it) closes."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import msgspec
import nats
import nats.errors
import pytest

from shared.plugin_sdk import (
    ENV_NATS_URL,
    ENV_SUBJECT,
    Hello,
    PluginCall,
    PluginInfo,
    PluginReply,
    call_subject,
    hello_subject,
)

pytestmark = pytest.mark.nats

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "trellis-echo-kv"
REPO = str(Path(__file__).resolve().parents[2])


async def test_plugin_answers_and_exits_when_stdin_closes(nats_url: str, unique: str) -> None:
    prefix = f"{unique}.plugin.x"
    env = {**os.environ, ENV_NATS_URL: nats_url, ENV_SUBJECT: prefix, "PYTHONPATH": REPO}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), stdin=asyncio.subprocess.PIPE, env=env
    )
    nc = await nats.connect(nats_url)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                msg = await nc.request(hello_subject(prefix), msgspec.msgpack.encode(Hello()), 0.5)
                break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                assert time.monotonic() < deadline, "the plugin never said hello"
                await asyncio.sleep(0.05)
        info = msgspec.msgpack.decode(msg.data, type=PluginInfo)
        assert info.name == "echo-kv" and info.secret_types == ["example"]
        assert {p.template for p in info.paths} == {"kv/{key*}", "echo", "lease/{name}"}

        call = PluginCall(op="update", path="echo", template="echo", data={"a": 1})
        msg = await nc.request(call_subject(prefix), msgspec.msgpack.encode(call), 5)
        reply = msgspec.msgpack.decode(msg.data, type=PluginReply)
        assert reply.data is not None and reply.data["echo"] == {"a": 1}

        assert proc.stdin is not None
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await nc.close()
