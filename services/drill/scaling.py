"""Pure analysis of the scaling drill: CPU per request per service at each replica count, the
bottleneck, and where the next core would go."""

from __future__ import annotations

from typing import Any

LOADGEN = "load-generator"


def scale_step(
    replicas: int, requests: int, seconds: float, p99_ms: float, cpu: dict[str, float]
) -> dict[str, Any]:
    """One step: throughput, and CPU ms per request and cores busy for each service."""
    return {
        "replicas": replicas,
        "requests": requests,
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "p99_ms": p99_ms,
        "cpu_ms_per_req": {
            s: round(c * 1000 / requests, 3) if requests else 0.0 for s, c in cpu.items()
        },
        "cores_busy": {s: round(c / seconds, 2) if seconds else 0.0 for s, c in cpu.items()},
    }


def analyse(steps: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """The bottleneck is the service that costs the most CPU per request at the largest step:
    with every replica count the same, it is what saturates first. The next core goes to it,
    unless the machine is already out of cores (then the extra core buys most for it anyway,
    but only a second machine lifts the ceiling)."""
    services = sorted({s for st in steps for s in st["cpu_ms_per_req"]})
    if not steps:
        return {"services": services, "steps": [], "bottleneck": "n/a", "next_core": "n/a"}
    last = steps[-1]
    # The load generator shares the cores but is not part of Trellis: reported, never named.
    ranked = sorted(
        (s for s in services if s != LOADGEN),
        key=lambda s: last["cpu_ms_per_req"].get(s, 0.0),
        reverse=True,
    )
    top = ranked[0]
    busy = sum(last["cores_busy"].values())
    share = last["cpu_ms_per_req"][top] / max(sum(last["cpu_ms_per_req"].values()), 1e-9)
    speedup = last["rps"] / steps[0]["rps"] if steps[0]["rps"] else 0.0
    bottleneck = (
        f"{top} ({last['cpu_ms_per_req'][top]:.3f} CPU ms/request, {share:.0%} of all CPU per "
        f"request; runner-up {ranked[1] if len(ranked) > 1 else '-'})"
    )
    saturated = busy >= 0.85 * cores
    next_core = (
        f"{top}: {busy:.2f} of {cores} cores busy at {last['replicas']} replicas "
        f"({speedup:.2f}x the 1-replica throughput); "
        + (
            "the machine is CPU-bound, so more replicas only share the same cores; the next "
            f"core buys about {1000 / max(last['cpu_ms_per_req'][top], 1e-9):.0f} req/s of "
            f"{top} capacity"
            if saturated
            else "cores are still idle, so the limit is latency/concurrency, not CPU: raise "
            "--clients before adding cores"
        )
    )
    return {
        "services": services,
        "steps": steps,
        "bottleneck": bottleneck,
        "bottleneck_service": top,
        "cores": cores,
        "saturated": saturated,
        "next_core": next_core,
    }
