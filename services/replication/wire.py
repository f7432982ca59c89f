"""Frames on the cluster channel: a 4-byte big-endian length, then one msgpack-encoded frame.

secondary -> primary: Hello, then Ack after each batch and heartbeat.
primary -> secondary: Welcome or Reject; in sync mode SyncStart, Batch..., SyncEnd; then Batch and
Heartbeat for as long as the connection lives.
"""

from __future__ import annotations

import asyncio

import msgspec

MAX_FRAME = 96 * 1024 * 1024  # one 32 MB value, base and framing, with room to spare


class Hello(msgspec.Struct, tag="hello", kw_only=True):
    secondary_id: str
    secret: bytes
    node_id: str
    cluster_id: str
    # A probe only checks (and activates) the credential; enable does it before wiping.
    probe: bool = False
    epoch: str = ""  # the primary WAL this secondary last streamed from
    last_remote_wal: int = 0
    buckets: list[bytes] = []  # Merkle bucket hashes of the secondary's storage
    api_addr: str = ""


class Welcome(msgspec.Struct, tag="welcome", kw_only=True):
    cluster_id: str
    epoch: str
    last_wal: int
    sync: bool  # a Merkle sync comes first; else streaming resumes after `start`
    start: int = 0
    api_addr: str = ""


class Reject(msgspec.Struct, tag="reject", kw_only=True):
    code: int
    reason: str


class SyncStart(msgspec.Struct, tag="sync", kw_only=True):
    buckets: list[int]
    upto: int


class SyncEnd(msgspec.Struct, tag="sync_end", kw_only=True):
    upto: int


class WalEntry(msgspec.Struct, array_like=True):
    seq: int
    key: str  # the raw KV key (as the stream subject names it)
    value: bytes
    op: str = ""  # "", "DEL" or "PURGE"


class Batch(msgspec.Struct, tag="batch", kw_only=True):
    entries: list[WalEntry]


class Heartbeat(msgspec.Struct, tag="hb", kw_only=True):
    last_wal: int
    time: float


class Ack(msgspec.Struct, tag="ack", kw_only=True):
    last_remote_wal: int
    merkle_root: str = ""


Frame = Hello | Welcome | Reject | SyncStart | SyncEnd | Batch | Heartbeat | Ack

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(Frame)


class ChannelClosed(Exception):
    """The peer went away or sent something that is not a frame."""


async def send(writer: asyncio.StreamWriter, frame: Frame) -> None:
    body = _enc.encode(frame)
    writer.write(len(body).to_bytes(4, "big") + body)
    await writer.drain()


async def recv(reader: asyncio.StreamReader) -> Frame:
    try:
        head = await reader.readexactly(4)
        size = int.from_bytes(head, "big")
        if size > MAX_FRAME:
            raise ChannelClosed(f"frame of {size} bytes is too large")
        return _dec.decode(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
        raise ChannelClosed(str(exc) or type(exc).__name__) from None
    except msgspec.DecodeError as exc:
        raise ChannelClosed(f"bad frame: {exc}") from None
