"""A short blocking-query drill through `trellis drill blocking`'s entry point: the ordinary
load idle, then with 1,000 blocking queries waiting; every query is still waiting when the load
ends, none is answered early, and the report carries latency and memory figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.drill.base import DrillOptions
from services.drill.blocking import run_blocking
from services.drill.report import format_report

pytestmark = [pytest.mark.nats, pytest.mark.timeout(240)]


async def test_flood_of_blocking_queries_leaves_ordinary_requests_alone(tmp_path: Path) -> None:
    opts = DrillOptions(
        duration=3,  # per phase: hundreds of requests each, enough for their p99
        clients=4,
        services=("gateway", "secrets", "scheduler"),
        workdir=str(tmp_path),
        quiet=True,
    )
    report = await run_blocking(opts, waiters=1000)
    figures = report["blocking"]
    assert figures["still_waiting"] >= 1000
    assert figures["answered_early"] == {}
    assert report["unexplained_errors"] == 0, report["unexplained_examples"]
    assert report["total"]["errors"] == {}
    assert figures["idle_p99_ms"] > 0 and figures["flood_p99_ms"] > 0
    # Every ordinary request stayed well under the 2 s the issue allows.
    assert figures["flood_p99_ms"] < 2000, figures
    assert set(figures["bytes_per_waiter"]) == {"gateway", "scheduler"}
    text = format_report(report)
    assert "per waiter" in text and "p99 x" in text


def test_drill_blocking_is_a_cli_choice() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "drill", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "blocking" in out and "--waiters" in out
