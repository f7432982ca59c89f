"""Drill reports: the fields every drill reports, the text rendering, and the scaling analysis."""

from __future__ import annotations

import io
import json

from services.drill.faults import FaultEvent
from services.drill.ledger import Ledger, Verification
from services.drill.progress import Progress
from services.drill.report import build_report, format_report
from services.drill.scaling import analyse, scale_step
from services.drill.stats import Sample

FIELDS = {
    "drill",
    "seconds",
    "total",
    "by_op",
    "phases",
    "fault_window",
    "faults",
    "unexplained_errors",
    "acked_writes",
    "lost_writes",
    "by_kind",
}


def test_report_fields_and_text() -> None:
    samples = [Sample(float(i), i + 0.01, "kv_write", 200) for i in range(10)]
    samples.append(Sample(4.0, 9.0, "kv_write", 504))
    ledger = Ledger()
    for i in range(10):
        ledger.ack("kv", f"k{i}", i, i + 0.01)
    v = Verification()
    for w in ledger:
        v.record(w, True)
    events = [FaultEvent(4.5, "kill", "secrets#1"), FaultEvent(5.5, "restart", "secrets#1", 7.0)]
    report = build_report(
        "chaos", samples, v, events, seconds=10.0, fault_window=(4.0, 7.0), extra={"x": 1}
    )
    assert set(report) >= FIELDS
    assert report["unexplained_errors"] == 0 and report["lost_writes"] == 0
    assert report["phases"]["during"]["errors"] == {"504": 1}
    assert report["x"] == 1
    json.dumps(report)  # --json must be able to print it
    text = format_report(report)
    assert "lost: 0" in text and "during" in text and "kill secrets#1" in text


def test_scaling_names_the_bottleneck() -> None:
    steps = [
        scale_step(1, 1000, 2.0, 20.0, {"gateway": 1.0, "secrets": 3.0, "nats-server": 0.5}),
        scale_step(2, 1600, 2.0, 25.0, {"gateway": 1.5, "secrets": 4.8, "nats-server": 0.8}),
    ]
    assert steps[1]["cpu_ms_per_req"]["secrets"] == 3.0
    out = analyse(steps, cores=2)
    assert out["bottleneck_service"] == "secrets"
    assert out["saturated"] is True  # 3.55 cores busy of 2: CPU-bound
    assert "secrets" in out["next_core"] and "1.60x" in out["next_core"]
    idle = analyse([scale_step(1, 100, 10.0, 5.0, {"gateway": 0.2, "secrets": 0.3})], cores=2)
    assert idle["saturated"] is False and "idle" in idle["next_core"]
    text = format_report(
        {**build_report("scale", [], Verification(), [], seconds=1.0), "scale": out}
    )
    assert "bottleneck: secrets" in text


def test_progress_plain_lines_when_not_a_tty() -> None:
    buf = io.StringIO()
    p = Progress(stream=buf, every=60.0)
    p.update("one")
    p.update("two")  # throttled
    p.update("three", force=True)
    p.step("done")
    assert buf.getvalue().splitlines() == ["one", "three", "==> done"]
