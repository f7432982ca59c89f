"""A flood of blocking queries: N scheduler queries (`/v1/jobs?index=<far future>&wait=...`)
held open by a separate process, so that the process measuring ordinary requests shares no
event loop with them; plus what the blocking drill and bench/blocking.py report about it:
resident memory per process and per waiter.

The holder runs as `python -m services.drill.flood <url> <count> <wait> <index> [token]`:
it opens the queries (staggered, a burst of thousands of SYNs at once only measures the
kernel's backlog) and keeps them open until its stdin closes; then it prints one JSON line:
how many it opened, the statuses of those answered before that (none should be, for a far
index), and the wall-clock times of the first and last answer (for a wake-up measurement).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import select
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
FAR_INDEX = 999_999_999  # an index the log never reaches in a drill: only the wait ends it
ALL_ANSWERED = "all_answered"
BURST = 250  # queries started together, then a short pause


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children_by_service(parent: int) -> dict[str, int]:
    """`trellis dev`'s children by service name (`... services.cli run <name>`)."""
    out: dict[str, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"run" in argv:
            name = argv[argv.index(b"run") + 1].decode()
            out.setdefault(name, int(stat.parent.name))
    return out


def in_flight(scheduler: str, metrics: Sequence[str] = ()) -> int:
    """Scheduler requests the gateway is waiting on (its Prometheus gauge); -1 if unreadable.
    `metrics`: each gateway process's own /metrics (its health address), summed; with several
    processes sharing the listener, the listener's /metrics counts only the one that took it."""
    total = 0
    for url in metrics or [f"{scheduler}/metrics"]:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return -1
        for line in text.splitlines():
            if line.startswith('trellis_gateway_in_flight{api="scheduler"}'):
                total += int(float(line.rsplit(" ", 1)[1]))
    return total if metrics else total - 1  # less the listener's own /metrics request


class Flood:
    """The holder process, seen from the drill or the bench."""

    def __init__(
        self,
        scheduler: str,
        count: int,
        wait: str = "10m",
        token: str = "",
        index: int = FAR_INDEX,
        metrics: Sequence[str] = (),
    ) -> None:
        self.scheduler = scheduler
        self.metrics = metrics
        self.count = count
        self.wait = wait
        self.index = index
        self.token = token
        self.proc: subprocess.Popen[str] | None = None
        self.opened_in = 0.0
        self.result: dict[str, Any] = {}

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.drill.flood",
                self.scheduler,
                str(self.count),
                self.wait,
                str(self.index),
                self.token,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def wait_open(self, baseline: int, timeout: float = 180.0) -> float:
        """Block until the gateway holds every query (its in-flight gauge); returns seconds."""
        started = time.monotonic()
        deadline = started + timeout
        while in_flight(self.scheduler, self.metrics) < baseline + self.count:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError("the blocking-query holder exited early")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {in_flight(self.scheduler, self.metrics) - baseline} of {self.count} "
                    f"blocking queries open after {timeout:.0f}s"
                )
            time.sleep(0.2)
        self.opened_in = time.monotonic() - started
        return self.opened_in

    def wait_answered(self, timeout: float = 300.0) -> None:
        """Block until the holder says every one of its queries has been answered."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not readable:
                raise TimeoutError(f"blocking queries still open after {timeout:.0f}s")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the blocking-query holder exited early")
            if json.loads(line).get(ALL_ANSWERED):
                return

    def stop(self) -> dict[str, Any]:
        """Close the queries; returns {"opened": n, "answered": {status: count}}."""
        if self.proc is None:
            return {}
        with contextlib.suppress(Exception):
            out, _ = self.proc.communicate("", timeout=60)
            self.result = json.loads(out.strip().splitlines()[-1])
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.result


def per_waiter(before: dict[str, int], after: dict[str, int], waiters: int) -> dict[str, int]:
    """Bytes of resident memory each held query costs each process."""
    return {k: max(0, after.get(k, 0) - before.get(k, 0)) // max(waiters, 1) for k in before}


async def settle(base: str, limit: float, timeout: float = 120.0) -> float:
    """Seconds until five node lists in a row answer within `limit`: the scheduler has worked
    through the flood's arrivals (each is read once, then parked) and only holds them now."""
    started = time.perf_counter()
    streak = 0
    async with aiohttp.ClientSession() as session:
        while streak < 5:
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"the scheduler did not settle in {timeout:.0f}s")
            t0 = time.perf_counter()
            async with session.get(f"{base}/v1/nodes") as r:
                await r.read()
            streak = streak + 1 if time.perf_counter() - t0 <= limit else 0
    return time.perf_counter() - started


# --- the holder process --------------------------------------------------------------------


async def _hold(scheduler: str, count: int, wait: str, index: int, token: str) -> dict[str, Any]:
    answered: Counter[str] = Counter()
    opened = 0
    headers = {"X-Nomad-Token": token} if token else {}
    url = f"{scheduler}/v1/jobs?index={index}&wait={wait}"
    times: list[float] = []
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, connect=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def one() -> None:
            nonlocal opened
            opened += 1
            try:
                async with session.get(url, headers=headers) as r:
                    await r.read()
                    answered[str(r.status)] += 1
                    times.append(time.time())
            except aiohttp.ClientError as exc:
                answered[type(exc).__name__] += 1

        tasks = []
        for i in range(count):
            tasks.append(asyncio.create_task(one()))
            if i % BURST == BURST - 1:
                await asyncio.sleep(0.05)  # pacing the opening burst, not waiting for a result
        loop = asyncio.get_running_loop()
        # Hold until the parent closes our stdin; say so at once if every query is answered.
        everyone = asyncio.gather(*tasks, return_exceptions=True)
        stdin_closed = loop.run_in_executor(None, sys.stdin.read)
        finished, _ = await asyncio.wait(
            {everyone, stdin_closed}, return_when=asyncio.FIRST_COMPLETED
        )
        if everyone in finished:
            print(json.dumps({ALL_ANSWERED: True}), flush=True)
            await stdin_closed
        for t in tasks:
            t.cancel()
        await everyone
    return {
        "opened": opened,
        "answered": dict(answered),
        "first_answer": min(times, default=0.0),
        "last_answer": max(times, default=0.0),
    }


def main(argv: list[str]) -> None:
    scheduler, count, wait, index = argv[0], int(argv[1]), argv[2], int(argv[3])
    token = argv[4] if len(argv) > 4 else ""
    # One descriptor per held query.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(json.dumps(asyncio.run(_hold(scheduler, count, wait, index, token))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
