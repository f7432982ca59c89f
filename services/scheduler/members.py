"""The mesh's own view of its scheduler servers (what Nomad's Serf members and Raft peers
answer): every replica writes a presence record `member.<replica>` into the leader bucket every
few seconds; records older than three periods are gone. The leader is the lease holder."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec
import nats.js.errors
import structlog

log = structlog.get_logger("scheduler.members")

PREFIX = "member."
LEADER_KEY = "leader"
RPC_PORT = 4647  # Nomad's server RPC port: what status/peers and raft answer
SERF_PORT = 4648
READS = 3  # listings tried before a list without this replica is believed


class Member(msgspec.Struct, kw_only=True):
    id: str
    name: str
    addr: str  # host the replica advertises
    region: str = "global"
    datacenter: str = "dc1"
    started: float = 0.0
    seen: float = 0.0


_dec = msgspec.json.Decoder(Member)
_lease = msgspec.json.Decoder(dict[str, Any])


def rpc_addr(host: str) -> str:
    return f"{host}:{RPC_PORT}"


def fresh(members: list[Member], now: float, period: float) -> list[Member]:
    return sorted((m for m in members if now - m.seen <= 3 * period), key=lambda m: m.name)


class Membership:
    def __init__(self, kv: Any, me: Member, period: float = 5.0) -> None:
        self.kv = kv
        self.me = me
        self.period = period
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.me.started = self.me.started or time.time()
        await self._announce()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        task, self._task = self._task, None  # the loop checks it: a cancel may be swallowed
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5)
        with contextlib.suppress(Exception):
            await self.kv.delete(PREFIX + self.me.id)

    async def _announce(self) -> None:
        self.me.seen = time.time()
        await self.kv.put(PREFIX + self.me.id, msgspec.json.encode(self.me))

    async def _loop(self) -> None:
        while self._task is not None:
            await asyncio.sleep(self.period)
            try:
                await self._announce()
            except Exception as exc:  # the bus may be down for a while: try again
                log.warning("member announce failed", error=str(exc))

    async def members(self) -> list[Member]:
        """The fresh members. nats-py's key listing (an ordered consumer and its pending count)
        can come back empty or short under load; a list without this replica, which announced
        itself within the last period, is such a read: read again."""
        found: list[Member] = []
        for _ in range(READS):
            found = await self._read_members()
            if self._task is None or any(m.id == self.me.id for m in found):
                break
        return found

    async def _read_members(self) -> list[Member]:
        try:
            keys = await self.kv.keys()
        except nats.js.errors.NoKeysError:
            keys = []
        out: list[Member] = []
        for key in keys:
            if not key.startswith(PREFIX):
                continue
            with contextlib.suppress(Exception):
                entry = await self.kv.get(key)
                if entry.value:
                    out.append(_dec.decode(entry.value))
        return fresh(out, time.time(), self.period)

    async def leader_id(self) -> str:
        try:
            entry = await self.kv.get(LEADER_KEY)
            return str(_lease.decode(entry.value or b"{}").get("holder", ""))
        except Exception:
            return ""

    async def forget(self, name: str) -> bool:
        """force-leave: drop a member's record (a live replica announces itself again)."""
        for m in await self.members():
            if m.name == name or m.id == name:
                await self.kv.delete(PREFIX + m.id)
                return True
        return False
