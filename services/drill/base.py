"""What every drill shares: options, starting the cluster and the load, the progress ticker,
and turning the run into a report."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.drill.cluster import Cluster
from services.drill.faults import FaultEvent
from services.drill.load import Clock, Load, LoadConfig, create_org
from services.drill.progress import Progress
from services.drill.report import build_report

ALL_SERVICES = ("gateway", "secrets", "crypto", "workspace", "scheduler")


@dataclass
class DrillOptions:
    duration: float = 30.0
    clients: int = 16
    rate: float = 0.0
    max_requests: int = 1_000_000
    services: tuple[str, ...] = ALL_SERVICES
    interval: float = 3.0  # chaos: seconds between faults
    seed: int | None = None
    workdir: str = ""  # keep logs and data here (default: a temp dir, removed afterwards)
    quiet: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def load_config(self) -> LoadConfig:
        cfg = LoadConfig(
            clients=self.clients,
            rate=self.rate,
            duration=self.duration,
            max_requests=self.max_requests,
        )
        # Only drive the APIs whose services run in this drill.
        if "workspace" not in self.services:
            cfg.mix.pop("ws_create", None)
        if "scheduler" not in self.services:
            cfg.mix.pop("job_register", None)
        return cfg


@contextlib.contextmanager
def workdir(opts: DrillOptions, name: str) -> Iterator[Path]:
    if opts.workdir:
        path = Path(opts.workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=f"trellis-drill-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def bring_up(
    cluster: Cluster, opts: DrillOptions, replicas: dict[str, int], progress: Progress
) -> None:
    """Secrets, crypto and the gateways first; init and unseal; then workspace and scheduler,
    which need the root token as their admin token; then an organization for the load."""
    first = [s for s in ("secrets", "crypto") if s in opts.services]
    procs = [cluster.add(s) for s in first for _ in range(replicas.get(s, 1))]
    procs += [cluster.add("gateway") for _ in range(replicas.get("gateway", 1))]
    late = [s for s in ("workspace", "scheduler") if s in opts.services]
    # Started now behind start gates (shared/start_gate.py), so that their imports overlap the
    # bootstrap; let go once the root token exists.
    gated = [cluster.add(s, gated=True) for s in late for _ in range(replicas.get(s, 1))]
    cluster.wait_ready(procs)
    progress.step("initialising and unsealing the secrets service")
    cluster.init_and_unseal()
    # Every gateway process was started with the env of the first, so re-point none; the
    # workspace/scheduler replicas get the admin token base_env now holds.
    for p in gated:
        p.release({k: v for k, v in cluster.base_env().items() if k not in p.env})
    cluster.wait_ready(gated)


def new_load(cluster: Cluster, opts: DrillOptions, clock: Clock) -> Load:
    load = Load(list(cluster.gateways.values()), cluster.token, clock, opts.load_config())
    if "workspace" in opts.services:
        load.org = f"drill-{uuid.uuid4().hex[:6]}"
        create_org(next(iter(cluster.gateways.values())), cluster.token, load.org)
    return load


async def ticker(load: Load, progress: Progress, label: Any, stop: asyncio.Event) -> None:
    """Refresh the progress line until `stop`; `label` is a callable for a changing phase."""
    while not stop.is_set():
        progress.update(load.progress_line(label() if callable(label) else label))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def finish(
    name: str,
    load: Load,
    events: list[FaultEvent],
    progress: Progress,
    window: tuple[float | None, float | None],
    extra: dict[str, Any] | None = None,
    cluster: Cluster | None = None,
) -> dict[str, Any]:
    progress.step(f"re-reading {len(load.ledger)} acknowledged writes")
    verification = await load.verify()
    extra = {**(extra or {})}
    if cluster is not None and cluster.restart_log:
        extra.setdefault("notes", []).extend(cluster.restart_log)
    seconds = max((s.end for s in load.samples), default=0.0) - min(
        (s.start for s in load.samples), default=0.0
    )
    return build_report(
        name, load.samples, verification, events, seconds=seconds, fault_window=window, extra=extra
    )
