"""sys/metrics: the secrets process's Prometheus registry plus the secrets gauges, as Prometheus
text (`?format=prometheus`) or as Vault's JSON summary (go-metrics' Gauges, Counters, Samples).
A token is required unless `unauthenticated_metrics_access` is set, as Vault's telemetry
stanza says."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import msgspec
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import Op, Operation, Path
from services.secrets.framework.request import RawResponse, Request, Response
from shared.metrics_summary import Families, summary

if TYPE_CHECKING:
    from services.secrets.core.core import Core

PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsFields(msgspec.Struct, kw_only=True):
    format: Annotated[str, desc("prometheus, or empty for JSON")] = ""


def secrets_families(core: Core) -> list[Metric]:
    """Gauges under Vault's metric names, from this replica's state (no storage reads)."""
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float, **labels: str) -> None:
        g = GaugeMetricFamily(name, doc, labels=list(labels))
        g.add_metric(list(labels.values()), value)
        out.append(g)

    gauge("vault_core_unsealed", "1 when this replica is unsealed", 0 if core.sealed else 1)
    ring = core.barrier.keyring
    if ring is not None:
        gauge("vault_barrier_key_term", "the active barrier key term", ring.active_term)
        gauge(
            "vault_barrier_key_encryptions",
            "values encrypted under the active term by this replica",
            ring.encryptions,
        )
    logical = auth = 0
    for table in core.tables.values():
        for entry in table.entries.values():
            if entry.is_auth:
                auth += 1
            else:
                logical += 1
    families = [
        ("vault_core_mount_table_num_entries", "mounts", logical, "logical"),
        ("vault_core_mount_table_num_entries_auth", "auth methods", auth, "auth"),
    ]
    for name, doc, value, kind in families:
        gauge(name, doc, value, type=kind)
    return out


def paths(core: Core) -> list[Path]:
    async def metrics(req: Request, f: MetricsFields) -> Response:
        fmt = f.format.strip().lower()
        if fmt == "prometheus":
            own = CollectorRegistry(auto_describe=False)
            own.register(Families(secrets_families(core)))  # type: ignore[arg-type]
            body = generate_latest(REGISTRY) + generate_latest(own)
            return Response(raw=RawResponse(status=200, body=body, content_type=PROM_TYPE))
        if fmt not in ("", "json"):
            raise bad_request(f'unknown format "{f.format}": use "prometheus" or leave it out')
        families = list(REGISTRY.collect()) + secrets_families(core)
        body = json.dumps(summary(families)).encode()
        return Response(raw=RawResponse(status=200, body=body))

    unauth = core.settings.unauthenticated_metrics_access
    return [
        Path(
            "metrics",
            {Op.READ: Operation(metrics, "Telemetry", unauthenticated=unauth)},
            MetricsFields,
            synopsis="The service's metrics, as Prometheus text or Vault's JSON summary.",
        )
    ]
