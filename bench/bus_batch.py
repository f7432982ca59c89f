"""CPU per request of the sealed API hop alone (shared/api_session.py over shared/bus.py), with
and without micro-batching (shared/bus_batch.py): one nats-server, one replica process answering
a small response, one requester process keeping `--concurrency` calls in flight.

    python bench/bus_batch.py --seconds 3 --concurrency 16

Prints requests/s and CPU ms per request of requester, replica and nats-server, batching off
then on. The requester is a closed loop in one process, so batches here are fuller than behind
the gateway under wrk: this bounds the gain, bench/vs_openbao.py measures it.
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

SEED = b"bench-bus-batch-seed-0123456789a"
CLUSTER = "bench"


async def replica(url: str) -> None:
    bus = await Bus.connect(url, "replica")
    identity = ClusterIdentity.from_seed(SEED)

    async def handler(req: HttpRequest, _ctx: CallContext) -> HttpResponse:
        return HttpResponse(status=200, body=b'{"data":{"data":{"k":"v"}}}')

    key = derive_service_key(identity, "secrets")
    await serve_api(bus, key, CLUSTER, API_SECRETS, handler, concurrency=256)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def requester(url: str, concurrency: int, seconds: float, batch: bool) -> None:
    bus = await Bus.connect(url, "requester")
    identity = ClusterIdentity.from_seed(SEED)
    client = SessionClient(
        bus, CLUSTER, "secrets", API_SECRETS.on(CLUSTER), identity.public_key, batch=batch
    )
    env = HttpRequest(method="GET", path="/v1/kv/data/x", headers={"x-vault-token": "t"})
    await closed_loop(lambda: client.call(env, timeout=5), concurrency, seconds)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "replica":
        asyncio.run(replica(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "requester":
        url, conc, secs, batch = sys.argv[2:6]
        asyncio.run(requester(url, int(conc), float(secs), batch == "1"))
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    with nats_server() as (url, nats_pid):
        for _ in range(args.rounds):
            for batch in (False, True):
                rate, ms = measure(__file__, url, nats_pid, args.concurrency, args.seconds, batch)
                print(describe(f"batch {'on ' if batch else 'off'}", rate, ms), flush=True)


if __name__ == "__main__":
    main()
