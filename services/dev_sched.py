"""`trellis dev` runs its process tree (nats-server, gateways, services, crypto workers) under
SCHED_BATCH, Linux's policy for throughput work: the same CPU share as SCHED_OTHER, but a task
woken up never preempts the one running. A request crosses four or five of these processes on a
laptop's few cores; without it, each hand-off over loopback preempted the sender mid-batch (about
one involuntary switch per request in the gateways), so each process got fewer requests per
turn and spent more CPU on each (docs/performance.md, "Idle cores under load"). Only `trellis
dev` asks for it: a `trellis server` deployment keeps its scheduler's defaults."""

from __future__ import annotations

import os


def batch_scheduling() -> bool:
    """Put the calling thread under SCHED_BATCH, so that every process it starts afterwards
    inherits the policy; False where the platform or a sandbox refuses (nothing changes)."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True
