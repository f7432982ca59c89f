"""A TCP fault proxy (netem is not available on this kernel): forwards connections to an
upstream and, switched at runtime, adds latency, drops traffic (a black hole: bytes are read
and discarded, so peers see a stall, not an error), or resets every open connection."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from dataclasses import dataclass, field


@dataclass
class Faults:
    latency: float = 0.0  # seconds added to every chunk, each direction
    jitter: float = 0.0
    blackhole: bool = False  # swallow bytes in both directions
    refuse: bool = False  # reset new connections at once


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    host: str = "127.0.0.1"
    port: int = 0
    faults: Faults = field(default_factory=Faults)
    _server: asyncio.Server | None = None
    _conns: set[asyncio.StreamWriter] = field(default_factory=set)
    connections: int = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.reset_all()
        if self._server is not None:
            await self._server.wait_closed()

    def clear(self) -> None:
        self.faults = Faults()

    def reset_all(self) -> int:
        """RST (not FIN) every open connection, as a crashed middlebox would."""
        n = 0
        for w in list(self._conns):
            _reset(w)
            n += 1
        self._conns.clear()
        return n

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.faults.refuse:
            _reset(writer)
            return
        try:
            up_r, up_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            _reset(writer)
            return
        self.connections += 1
        self._conns.update((writer, up_w))
        try:
            await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        except asyncio.CancelledError:
            # The proxy is shutting down: this connection task is the top of its own stack,
            # and asyncio's stream callback would log the cancel as an error.
            pass
        finally:
            for w in (writer, up_w):
                self._conns.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                f = self.faults
                if f.latency or f.jitter:
                    await asyncio.sleep(f.latency + random.uniform(0, f.jitter))
                if self.faults.blackhole:
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # SO_LINGER with a zero timeout makes close() send RST.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
