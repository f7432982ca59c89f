"""The gateway listener's own CPU per request, without sockets, NATS or services: the real
secrets listener (`runner_for` + `create_app`) fed requests through its protocol, the bus call
answered by a stub and sys/health answered from a set state. What remains is the HTTP side:
parsing, the listener's handler, response writing.

    python bench/gateway_http.py [--path /v1/sys/health] [--parser both|llhttp|python]

Prints µs of CPU a request, lowest and median of the rounds (one request at a time on one
connection, parsers interleaved round by round)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp.http_parser import HttpRequestParserPy
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import services.gateway.any_method as any_method
import services.gateway.app as gateway_app
from services.cli import _use_uvloop
from services.gateway.apis import SECRETS
from services.gateway.local_status import LocalStatus
from shared.logging import configure_logging
from shared.messages import HttpRequest, HttpResponse
from shared.secrets_state import SecretsState
from shared.settings import Settings

PARSERS = {"llhttp": any_method.SwitchingParser, "python": HttpRequestParserPy}
KV_READ = (
    b'{"request_id":"x","lease_id":"","renewable":false,"lease_duration":0,"data":{"data":'
    b'{"foo":"bar"},"metadata":{"created_time":"2026-11-26T00:00:00Z","version":1}},'
    b'"wrap_info":null,"warnings":null,"auth":null}'
)


class _Service:
    """Answers every forwarded request at once, as a KV read would be answered."""

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        return HttpResponse(status=200, body=KV_READ, headers={"Content-Type": "application/json"})


class _Transport(asyncio.Transport):
    """Collects what the listener writes; `written` resolves at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.written: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8200)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        if self.written is not None and not self.written.done():
            self.written.set_result(None)

    def writelines(self, lines: Any) -> None:
        self.write(b"")

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def _listener() -> Any:
    gateway_app.service_channel = lambda *a, **k: _Service()  # type: ignore[assignment]
    bus = types.SimpleNamespace(max_payload=64 << 20, nc=types.SimpleNamespace(is_connected=True))
    local = LocalStatus(Ed25519PrivateKey.generate().public_key(), "bench")
    # One replica that reports an unsealed node for good.
    state = SecretsState(initialized=True, sealed=False)
    local._states = {"bench": (state, time.monotonic() + 1e9, 0)}
    local._settle(time.monotonic())
    listener = gateway_app.create_app(
        SECRETS,
        bus,
        Settings(),
        {"ready": True},
        None,
        local,  # type: ignore[arg-type]
    )
    runner = any_method.runner_for(listener, SECRETS, access_log=None, shutdown_timeout=1)
    await runner.setup()
    return runner


async def _round(runner: Any, parser: type, request: bytes, n: int) -> float:
    """µs of CPU a request over `n` requests on one new connection."""
    any_method.SwitchingParser = parser  # type: ignore[misc]
    protocol = runner.server()
    transport = _Transport()
    protocol.connection_made(transport)
    loop = asyncio.get_running_loop()

    async def one() -> None:
        transport.written = loop.create_future()
        protocol.data_received(request)
        await transport.written
        await asyncio.sleep(0)  # the handler's bookkeeping after the write

    for _ in range(50):
        await one()
    start = time.process_time()
    for _ in range(n):
        await one()
    spent = time.process_time() - start
    protocol.connection_lost(None)
    return spent / n * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default="/v1/sys/health")
    ap.add_argument("--parser", choices=["both", *PARSERS], default="both")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    configure_logging(json=True, level="info")
    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: 127.0.0.1:8200\r\n"
        "X-Vault-Token: s.abcdefghijklmnopqrstuvwx\r\nUser-Agent: wrk\r\n\r\n"
    ).encode()
    chosen = list(PARSERS) if args.parser == "both" else [args.parser]
    runner = await _listener()
    spent: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(args.rounds):
        for name in chosen:
            spent[name].append(await _round(runner, PARSERS[name], request, args.requests))
    for name in chosen:
        print(
            f"{args.path} {name:6}: {min(spent[name]):6.1f} µs lowest, "
            f"{statistics.median(spent[name]):6.1f} µs median a request"
        )
    await runner.cleanup()


if __name__ == "__main__":
    _use_uvloop()  # as the gateway runs
    asyncio.run(main())
