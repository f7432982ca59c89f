"""The harness of the bus micro-benchmarks (bench/bus_batch.py, bench/bus_sealing.py): one
nats-server, a replica process and a requester process that keeps calls in flight in a closed
loop, and the CPU each of the three spends per request. The benchmark script is re-run as its
own `replica` and `requester` subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from shared.localnet import free_port
from shared.nats_binary import find_nats_server

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


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


@contextlib.contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """A throwaway nats-server with JetStream: its URL and pid."""
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
            yield f"nats://127.0.0.1:{port}", nats.pid
        finally:
            nats.terminate()
            nats.wait()


async def closed_loop(
    call: Callable[[], Awaitable[object]], concurrency: int, seconds: float
) -> None:
    """The requester's side: say ready, start on a line from stdin, keep `concurrency` calls
    in flight for `seconds`, print how many completed."""
    await call()  # connection set-up and any handshake are not counted
    print("ready", flush=True)
    sys.stdin.readline()
    done = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await call()
            done += 1

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    print(done, flush=True)


def measure(
    script: str, url: str, nats_pid: int, concurrency: int, seconds: float, flag: bool
) -> tuple[float, dict[str, float]]:
    """One run of `script`'s replica and requester (`flag` passed as "1"/"0"): requests per
    second and CPU ms per request of requester, replica and nats-server."""
    me = [sys.executable, script]
    rep = subprocess.Popen([*me, "replica", url], stdout=subprocess.PIPE, text=True)
    assert rep.stdout is not None
    rep.stdout.readline()
    args = [*me, "requester", url, str(concurrency), str(seconds), "1" if flag else "0"]
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
    return done / seconds, {k: 1000 * (after[k] - before[k]) / max(done, 1) for k in pids}


def describe(label: str, rate: float, ms: dict[str, float]) -> str:
    split = "  ".join(f"{k} {v:.3f}" for k, v in ms.items())
    return f"{label}  {rate:7.0f} req/s  CPU ms/request: {split}  total {sum(ms.values()):.3f}"
