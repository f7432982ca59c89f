"""Metrics families as go-metrics' JSON summary (what Vault and Nomad answer without
`format=prometheus`), and a collector that serves a fixed list of families. One implementation
for the secrets and scheduler APIs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from prometheus_client.core import Metric


class Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def summary(families: list[Metric]) -> dict[str, Any]:
    """go-metrics' in-memory summary, the JSON Vault answers without a format."""
    gauges: list[dict[str, Any]] = []
    counters: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for fam in families:
        if fam.type in ("histogram", "summary"):
            sums = {
                tuple(sorted(s.labels.items())): s.value
                for s in fam.samples
                if s.name.endswith("_sum")
            }
            for s in fam.samples:
                if s.name.endswith("_count"):
                    total = sums.get(tuple(sorted(s.labels.items())), 0.0)
                    samples.append(
                        {
                            "Name": fam.name,
                            "Count": int(s.value),
                            "Sum": total,
                            "Mean": total / s.value if s.value else 0.0,
                            "Labels": dict(s.labels),
                        }
                    )
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            if fam.type == "counter":
                counters.append(
                    {"Name": s.name, "Count": 1, "Sum": s.value, "Labels": dict(s.labels)}
                )
            else:
                gauges.append({"Name": s.name, "Value": s.value, "Labels": dict(s.labels)})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
    return {
        "Timestamp": now,
        "Gauges": gauges,
        "Counters": counters,
        "Samples": samples,
        "Points": [],
    }
