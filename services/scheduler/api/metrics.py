"""GET /v1/metrics: the process's Prometheus metrics plus the scheduler's gauges, as Prometheus
text (`?format=prometheus`) or as Nomad's JSON summary (Gauges, Counters, Samples)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from services.scheduler.api.context import ApiContext
from services.scheduler.api.http import Request, bad, ok
from services.scheduler.state.tables import TERMINAL_EVAL
from shared.messages import HttpResponse
from shared.metrics_summary import Families, summary

PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def scheduler_families(ctx: ApiContext) -> list[Metric]:
    """Gauges under Nomad's metric names, computed from the replica's state."""
    t = ctx.t
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float) -> None:
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], value)
        out.append(g)

    jobs = Counter(j.get("Status", "pending") for j in t.jobs.values())
    for status in ("pending", "running", "dead"):
        gauge(f"nomad_nomad_job_status_{status}", f"jobs {status}", jobs.get(status, 0))
    allocs = Counter(a.get("ClientStatus", "pending") for a in t.allocs.values())
    for status in ("pending", "running", "complete", "failed", "lost"):
        gauge(f"nomad_nomad_allocs_{status}", f"allocations {status}", allocs.get(status, 0))
    evals = [e for e in t.evals.values() if e["Status"] not in TERMINAL_EVAL]
    gauge("nomad_nomad_broker_total_unacked", "evaluations not yet complete", len(evals))
    gauge(
        "nomad_nomad_blocked_evals_total_blocked",
        "blocked evaluations",
        sum(1 for e in evals if e["Status"] == "blocked"),
    )
    nodes = Counter(n.get("Status", "") for n in t.nodes.values())
    for status in ("ready", "down", "initializing"):
        gauge(f"nomad_nomad_nodes_{status}", f"client nodes {status}", nodes.get(status, 0))
    gauge("nomad_nomad_variables_total", "variables stored", len(t.variables))
    gauge("nomad_raft_appliedIndex", "last applied log index", ctx.replog.applied_index)
    return out


def _registry(ctx: ApiContext) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Families(scheduler_families(ctx)))  # type: ignore[arg-type]
    return reg


async def metrics(ctx: ApiContext, req: Request) -> Any:
    fmt = req.q("format")
    if fmt == "prometheus":
        body = generate_latest(REGISTRY) + generate_latest(_registry(ctx))
        return HttpResponse(status=200, headers={"Content-Type": PROM_TYPE}, body=body)
    if fmt not in ("", "json"):
        raise bad(f'unsupported metrics format "{fmt}": use "prometheus" or leave it out')
    families = list(REGISTRY.collect()) + scheduler_families(ctx)
    return ok(summary(families))
