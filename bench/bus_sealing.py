"""What the end-to-end encryption of the API hop costs: the same envelope round trip (a KV
read's request with its token, a small reply) over one nats-server, sealed
(shared/api_session.py: SessionClient to serve_api, as the gateway and a secrets replica talk)
and plain (the same HttpRequest/HttpResponse with Bus.request to Bus.serve, no session), both
micro-batched (shared/bus_batch.py) as in production. One replica process, one requester
process keeping `--concurrency` calls in flight.

    python bench/bus_sealing.py --seconds 3 --concurrency 16 --rounds 2

Prints requests/s and CPU ms per request of requester, replica and nats-server for each mode,
then the difference: the CPU the sealing adds to each request, to set against a forwarded
request's whole cost (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._bus_pair import closed_loop, describe, measure, nats_server  # noqa: E402
from shared.api_session import SessionClient, serve_api  # noqa: E402
from shared.bus import Bus, CallContext  # noqa: E402
from shared.cluster_identity import ClusterIdentity  # noqa: E402
from shared.messages import HttpRequest, HttpResponse  # noqa: E402
from shared.service_identity import derive_service_key  # noqa: E402
from shared.subjects import API_SECRETS  # noqa: E402

SEED = b"bench-bus-sealing-seed-012345678"
CLUSTER = "bench"
PLAIN = "bench.plain.secrets"
BODY = b'{"data":{"data":{"password":"' + b"p" * 32 + b'"},"metadata":{"version":1}}}'


async def handler(_req: HttpRequest, _ctx: CallContext) -> HttpResponse:
    return HttpResponse(status=200, body=BODY)


async def replica(url: str) -> None:
    bus = await Bus.connect(url, "replica")
    key = derive_service_key(ClusterIdentity.from_seed(SEED), "secrets")
    await serve_api(bus, key, CLUSTER, API_SECRETS, handler, concurrency=256)
    await bus.serve(PLAIN, handler, HttpRequest, queue="plain", concurrency=256, batched=True)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def requester(url: str, concurrency: int, seconds: float, sealed: bool) -> None:
    bus = await Bus.connect(url, "requester")
    identity = ClusterIdentity.from_seed(SEED)
    client = SessionClient(
        bus, CLUSTER, "secrets", API_SECRETS.on(CLUSTER), identity.public_key, batch=True
    )
    env = HttpRequest(
        method="GET",
        path="/v1/secret/data/app",
        headers={"x-vault-token": "hvs." + "t" * 24},
    )

    async def once() -> None:
        if sealed:
            await client.call(env, timeout=5)
        else:
            await bus.request(PLAIN, env, HttpResponse, timeout=5, batch=True)

    await closed_loop(once, concurrency, seconds)  # the handshake (sealed) is not counted


def run(url: str, nats_pid: int, concurrency: int, seconds: float, sealed: bool) -> float:
    """One measurement; returns the total CPU ms per request."""
    rate, ms = measure(__file__, url, nats_pid, concurrency, seconds, sealed)
    print(describe("sealed" if sealed else "plain ", rate, ms), flush=True)
    return sum(ms.values())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "replica":
        asyncio.run(replica(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "requester":
        url, conc, secs, sealed = sys.argv[2:6]
        asyncio.run(requester(url, int(conc), float(secs), sealed == "1"))
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with nats_server() as (url, nats_pid):
        for _ in range(args.rounds):
            plain = run(url, nats_pid, args.concurrency, args.seconds, sealed=False)
            sealed = run(url, nats_pid, args.concurrency, args.seconds, sealed=True)
            print(f"  sealing adds {sealed - plain:+.3f} CPU ms per request", flush=True)


if __name__ == "__main__":
    main()
