"""The crash drill: a real `trellis dev` (its supervisor restarts what dies) under load; each
service and then nats-server is killed with SIGKILL in turn. Reports each one's time to
recovery (from the kill until the restarted process is ready and every API answers again) and
the acknowledged writes lost, which must be 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.dev_launch import popen_dev, stop_process
from services.drill.base import DrillOptions, finish, ticker, workdir
from services.drill.cluster import Gateway, http
from services.drill.faults import FaultEvent
from services.drill.load import Clock, Load, create_org
from services.drill.progress import Progress
from services.supervisor import child_role, direct_children
from shared.localnet import free_port

VICTIMS = (
    "secrets",
    "workspace",
    "scheduler",
    "crypto",
    "replication",
    "gateway",
    "client",
    "nats",
)
RECOVERY_LIMIT = 60.0  # give up waiting for one victim after this long


@dataclass
class DevSession:
    proc: subprocess.Popen[bytes]
    gateway: Gateway
    token: str
    output: Path

    def children(self, role: str) -> list[int]:
        """The live children running `role` (several gateways on a machine with 2+ CPUs)."""
        return sorted(p for p in direct_children(self.proc.pid) if child_role(p) == role)

    def stop(self) -> int:
        return stop_process(self.proc, signal.SIGTERM, 60)


def start_dev(wd: Path, timeout: float = 180.0) -> DevSession:
    ports = [free_port() for _ in range(3)]
    token = f"drill-{uuid.uuid4().hex}"
    out = wd / "dev.out"
    with open(out, "wb") as sink:
        proc = popen_dev(
            ports,
            "--data-dir",
            str(wd / "dev"),
            "--root-token",
            token,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # The gateway answers 504 for a request its killed replica never replied to, well
            # before the load's client timeout (as the drills' own clusters do).
            env={"TRELLIS_REQUEST_TIMEOUT": "5"},
        )
    session = DevSession(proc, Gateway(*(f"http://127.0.0.1:{p}" for p in ports)), token, out)
    deadline = time.monotonic() + timeout
    while b"Press Ctrl-C" not in out.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            session.stop()
            raise SystemExit("trellis dev did not start:\n" + out.read_text(errors="replace"))
        time.sleep(0.2)
    return session


def _health_addr(pid: int) -> str:
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if "--health-addr" in argv:
            return argv[argv.index("--health-addr") + 1]
    return ""


def recovered(dev: DevSession, victim: str, old_pid: int, count: int) -> bool:
    """The victim runs again (`count` processes of its role, a new one in its place, each ready
    on its own health port) and every listener is ready with the service behind it, the
    secrets service unsealed."""
    pids = dev.children(victim)
    if len(pids) != count or old_pid in pids:
        return False
    for pid in pids:
        addr = _health_addr(pid)
        if addr and http("GET", f"http://{addr}/readyz", timeout=2)[0] != 200:
            return False
    gw = dev.gateway
    for base in (gw.secrets, gw.workspace, gw.scheduler):
        if http("GET", f"{base}/readyz", timeout=3)[0] != 200:
            return False
    if http("GET", f"{gw.secrets}/v1/sys/health", timeout=3)[0] != 200:
        return False
    if victim == "crypto":  # work that only a crypto worker can do
        code, _ = http(
            "POST",
            f"{gw.secrets}/v1/drill-pki/keys/generate/internal",
            {"key_type": "ec"},
            token=dev.token,
            timeout=10,
        )
        return code == 200
    return True


def _wait_recovered(dev: DevSession, victim: str, old_pid: int, count: int) -> bool:
    deadline = time.monotonic() + RECOVERY_LIMIT
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if recovered(dev, victim, old_pid, count):
                return True
        time.sleep(0.1)
    return False


async def run_crash(opts: DrillOptions) -> dict[str, Any]:
    progress = Progress(quiet=opts.quiet)
    with workdir(opts, "crash") as wd:
        progress.step("starting trellis dev (every service under its supervisor)")
        dev = await asyncio.to_thread(start_dev, wd)
        try:
            return await _run(dev, opts, progress, wd)
        finally:
            progress.step("stopping trellis dev")
            code = await asyncio.to_thread(dev.stop)
            if code != 0:
                progress.step(f"trellis dev exited with {code}; see {dev.output}")


async def _run(dev: DevSession, opts: DrillOptions, progress: Progress, wd: Path) -> dict[str, Any]:
    code, body = http(
        "POST", f"{dev.gateway.secrets}/v1/sys/mounts/drill-pki", {"type": "pki"}, token=dev.token
    )
    if code not in (200, 204):
        raise SystemExit(f"cannot mount pki: {code} {body}")
    clock = Clock()
    load = Load([dev.gateway], dev.token, clock, opts.load_config())
    load.org = f"drill-{uuid.uuid4().hex[:6]}"
    create_org(dev.gateway, dev.token, load.org)
    events: list[FaultEvent] = []
    recovery: dict[str, float | None] = {}
    stop = asyncio.Event()
    warmup = min(5.0, max(1.0, opts.interval))

    async def faults() -> None:
        await asyncio.sleep(warmup)
        for victim in VICTIMS:
            pids = dev.children(victim)
            if not pids:
                recovery[victim] = None
                continue
            pid = pids[0]
            at = clock.now()
            os.kill(pid, signal.SIGKILL)
            progress.update(f"kill -9 {victim} (pid {pid})", force=True)
            back = await asyncio.to_thread(_wait_recovered, dev, victim, pid, len(pids))
            until = clock.now()
            events.append(FaultEvent(at, "kill", victim, until=until))
            recovery[victim] = round(until - at, 2) if back else None
            progress.update(
                f"{victim} back in {until - at:.1f}s" if back else f"{victim} NOT back",
                force=True,
            )
            await asyncio.sleep(opts.interval)
        stop.set()

    def label() -> str:
        return f"crash {events[-1].target if events else 'before'}"

    progress.step(f"load while killing {', '.join(VICTIMS)} in turn")
    tick = asyncio.create_task(ticker(load, progress, label, stop))
    # The load runs until every victim has been killed and came back (or the duration cap).
    await asyncio.gather(load.run_for(max(opts.duration, 600.0), stop), faults())
    stop.set()
    await tick
    notes = [
        f"{v}: back in {s}s" if s is not None else f"{v}: NOT back within {RECOVERY_LIMIT:.0f}s"
        for v, s in recovery.items()
    ]
    window = (events[0].at if events else None, events[-1].until if events else None)
    report = await finish(
        "crash",
        load,
        events,
        progress,
        window,
        {
            "recovery_seconds": recovery,
            "notes": notes,
            "logs": str(wd / "dev" / "logs") if opts.workdir else None,
        },
    )
    # A victim that never came back is a missed goal, like a lost write.
    report["not_recovered"] = sorted(v for v, s in recovery.items() if s is None)
    return report
