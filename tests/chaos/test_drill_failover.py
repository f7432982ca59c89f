"""A short NATS failover drill: 3 nodes, R3 KV and streams, sync_interval: always; the leader
of the secrets KV stream is killed under write load. No acknowledged write is lost, writes
resume without the dead node, and the report carries the stall."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.drill.base import DrillOptions
from services.drill.failover import run_failover

pytestmark = [pytest.mark.nats, pytest.mark.timeout(150)]


async def test_leader_kill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    opts = DrillOptions(
        duration=24,
        clients=6,
        services=("gateway", "secrets", "workspace", "scheduler"),
        workdir=str(tmp_path),
    )
    # Each phase ends once 30 KV writes were acknowledged in it: the node comes back as soon as
    # the survivors took writes (at most 14 s down), the load ends once writes reach it again.
    report = await run_failover(opts, down=14.0, writes=30)
    assert {"stall", "killed_leader", "new_leader", "acked_writes", "lost_writes"} <= set(report)
    assert report["killed_leader"] in {"n1", "n2", "n3"}
    assert report["acked_writes"] > 100
    assert report["lost_writes"] == 0, report["lost_examples"]
    # Writes resumed on the two survivors, before the dead node came back.
    assert 0 < report["stall"]["seconds"] < report["down_seconds"], report["stall"]
    statuses = set(report["total"]["errors"])
    assert statuses <= {"503", "504"}, report["total"]["errors"]
    assert report["unexplained_errors"] == 0, report["unexplained_examples"]
