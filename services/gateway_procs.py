"""How many gateway processes (and secrets replicas) a node runs and what the supervisor calls
them. The work per request of either is one event loop's: one process saturates one core
(issue 14), so `trellis dev` runs one of each per CPU it may use, up to two; the gateways share
each listener port (SO_REUSEPORT, services/port_guard.py), the secrets replicas one queue
group on the bus."""

from __future__ import annotations

import os

# Beyond two, the gateways take cores the services behind them need on a small machine.
DEV_DEFAULT_MAX = 2


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def dev_default() -> int:
    return max(1, min(DEV_DEFAULT_MAX, usable_cpus()))


def names(count: int, kind: str = "gateway") -> list[str]:
    """The children's names, "gateway", "gateway#2", ...: each supervised on its own, with
    its own log file and instance id."""
    return [kind, *(f"{kind}#{i}" for i in range(2, count + 1))]


def env(count: int) -> dict[str, str]:
    """What tells each gateway process whether it shares its ports (services/gateway/main.py)."""
    return {"TRELLIS_GATEWAY_PROCESSES": str(count)}
