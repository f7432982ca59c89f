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
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.api_session import SessionClient, serve_api  # noqa: E402
from shared.bus import Bus, CallContext  # noqa: E402
from shared.cluster_identity import ClusterIdentity  # noqa: E402
from shared.localnet import free_port  # noqa: E402
from shared.messages import HttpRequest, HttpResponse  # noqa: E402
from shared.nats_binary import find_nats_server  # noqa: E402
from shared.service_identity import derive_service_key  # noqa: E402
from shared.subjects import API_SECRETS  # noqa: E402

SEED = b"bench-bus-batch-seed-0123456789a"
CLUSTER = "bench"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


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
    await client.call(env, timeout=5)
    print("ready", flush=True)
    sys.stdin.readline()
    done = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await client.call(env, timeout=5)
            done += 1

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    print(done, flush=True)


def run(url: str, nats_pid: int, concurrency: int, seconds: float, batch: bool) -> None:
    me = [sys.executable, __file__]
    rep = subprocess.Popen([*me, "replica", url], stdout=subprocess.PIPE, text=True)
    assert rep.stdout is not None
    rep.stdout.readline()
    args = [*me, "requester", url, str(concurrency), str(seconds), "1" if batch else "0"]
    req = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert req.stdout is not None and req.stdin is not None
    req.stdout.readline()
    pids = {"requester": req.pid, "replica": rep.pid, "nats": nats_pid}
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    req.stdin.write("go\n")
    req.stdin.flush()
    done = int(req.stdout.readline())
    after = {k: cpu_seconds(p) for k, p in pids.items()}
    req.wait()
    rep.kill()
    rep.wait()
    ms = {k: 1000 * (after[k] - before[k]) / max(done, 1) for k in pids}
    split = "  ".join(f"{k} {v:.3f}" for k, v in ms.items())
    print(
        f"batch {'on ' if batch else 'off'}  {done / seconds:7.0f} req/s  CPU ms/request: "
        f"{split}  total {sum(ms.values()):.3f}",
        flush=True,
    )


def wait_listening(port: int, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


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
    binary = find_nats_server()
    assert binary, "nats-server not found"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        nats = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(port), "-sd", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_listening(port)
            url = f"nats://127.0.0.1:{port}"
            for _ in range(args.rounds):
                for batch in (False, True):
                    run(url, nats.pid, args.concurrency, args.seconds, batch)
        finally:
            nats.terminate()
            nats.wait()


if __name__ == "__main__":
    main()
