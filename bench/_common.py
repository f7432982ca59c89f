"""What the benchmarks share: start `trellis dev` on free ports, and drive a closed-loop HTTP
load with a fixed number of concurrent clients for a fixed time, reporting rate and latency."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from services.dev_launch import popen_dev, stop_process
from shared.localnet import free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Dev:
    secrets: str
    workspace: str
    scheduler: str
    root_token: str
    proc: subprocess.Popen[str]
    nats_url: str = ""
    cluster: str = "trellis"
    data_dir: str = ""  # credentials and keys of the cluster (services/dev_nats.py)
    # Each gateway process's own /metrics (the banner's "Gateways:" line).
    gateway_metrics: tuple[str, ...] = ()


@contextlib.contextmanager
def trellis_dev(*extra: str) -> Iterator[Dev]:
    ports = [free_port() for _ in range(3)]
    data = tempfile.mkdtemp(prefix="trellis-bench-")
    # Its log goes to a file in the data dir, so a start that fails can say why.
    log_path = Path(data) / "dev-stderr.log"
    with log_path.open("w") as log_file:
        proc = popen_dev(
            ports,
            "--data-dir",
            data,
            *extra,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    token = ""
    nats_url = ""
    gateway_metrics: tuple[str, ...] = ()
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.match(r"Root Token: (\S+)", line)
        if m:
            token = m.group(1)
        m = re.match(r"NATS:\s+(\S+)", line)
        if m:
            nats_url = m.group(1)
        if line.startswith("Gateways:"):
            gateway_metrics = tuple(re.findall(r"http://\S+/metrics", line))
        if line.startswith("Press Ctrl-C") or time.monotonic() > deadline:
            break
    if not token:
        proc.kill()
        proc.wait()
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit("trellis dev did not start; its last log lines:\n" + "\n".join(tail))
    try:
        yield Dev(
            f"http://127.0.0.1:{ports[0]}",
            f"http://127.0.0.1:{ports[1]}",
            f"http://127.0.0.1:{ports[2]}",
            token,
            proc,
            nats_url,
            data_dir=data,
            gateway_metrics=gateway_metrics,
        )
    finally:
        stop_process(proc, signal.SIGINT, 30)


@dataclass
class Result:
    name: str
    concurrency: int
    count: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        if not self.latencies:
            return 0.0
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000


async def closed_loop(
    name: str,
    concurrency: int,
    seconds: float,
    call: Callable[[aiohttp.ClientSession, int], Awaitable[bool]],
) -> Result:
    """`concurrency` clients each send a request as soon as the last one is answered."""
    lat: list[float] = []
    errors = 0
    count = 0
    stop_at = time.perf_counter() + seconds
    conn = aiohttp.TCPConnector(limit=concurrency * 2)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def client(i: int) -> None:
            nonlocal errors, count
            n = 0
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                ok = await call(session, i * 1_000_000 + n)
                lat.append(time.perf_counter() - t0)
                n += 1
                count += 1
                if not ok:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return Result(name, concurrency, count, errors, elapsed, lat)


def report(results: list[Result], baseline: dict[int, Result]) -> None:
    print(
        f"{'case':<18}{'clients':>8}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'vs echo':>9}"
    )
    for r in results:
        base = baseline.get(r.concurrency)
        ratio = r.rate / base.rate if base and base.rate else 0.0
        print(
            f"{r.name:<18}{r.concurrency:>8}{r.rate:>10.0f}{r.pct(50):>9.2f}{r.pct(99):>9.2f}"
            f"{r.errors:>8}{ratio:>9.2f}"
        )
