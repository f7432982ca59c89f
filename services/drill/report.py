"""Build a drill report (a plain dict, so `--json` prints it as is) and render it as text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from services.drill.faults import FaultEvent, unexplained_errors
from services.drill.ledger import Verification
from services.drill.stats import PHASES, Sample, by_phase, summarise


def build_report(
    drill: str,
    samples: Sequence[Sample],
    verification: Verification,
    events: list[FaultEvent],
    *,
    seconds: float,
    fault_window: tuple[float | None, float | None] = (None, None),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    start, end = fault_window
    bad = unexplained_errors(samples, events)
    report: dict[str, Any] = {
        "drill": drill,
        "seconds": round(seconds, 2),
        "total": summarise(samples, seconds),
        "by_op": {op: summarise(s for s in samples if s.op == op) for op in _ops(samples)},
        "phases": by_phase(samples, start, end),
        "fault_window": [_r(start), _r(end)],
        "faults": [e.as_dict() for e in events],
        "unexplained_errors": len(bad),
        "unexplained_examples": [
            {"op": s.op, "status": s.status, "start": _r(s.start)} for s in bad[:10]
        ],
        **verification.as_dict(),
    }
    report.update(extra or {})
    return report


def _ops(samples: Sequence[Sample]) -> list[str]:
    return sorted({s.op for s in samples})


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _errors(e: dict[str, int]) -> str:
    return ", ".join(f"{k}x{v}" for k, v in e.items()) or "none"


def format_report(report: dict[str, Any]) -> str:
    """The human-readable report printed at the end of a drill."""
    t = report["total"]
    lines = [
        f"drill {report['drill']}: {t['requests']} requests in {report['seconds']}s "
        f"({t.get('rps', 0)}/s), errors: {_errors(t['errors'])}",
        f"{'phase':<8}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}  errors",
    ]
    for p in PHASES:
        ph = report["phases"][p]
        if ph["requests"]:
            lines.append(
                f"{p:<8}{ph['requests']:>10}{ph['p50_ms']:>10}{ph['p99_ms']:>10}  "
                f"{_errors(ph['errors'])}"
            )
    lines.append(f"{'op':<14}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}  errors")
    for op, s in report["by_op"].items():
        lines.append(
            f"{op:<14}{s['requests']:>10}{s['p50_ms']:>10}{s['p99_ms']:>10}  {_errors(s['errors'])}"
        )
    if report["faults"]:
        shown = ", ".join(f"{f['at']}s {f['action']} {f['target']}" for f in report["faults"][:12])
        more = len(report["faults"]) - 12
        lines.append(
            f"faults ({len(report['faults'])}): {shown}" + (f", +{more}" if more > 0 else "")
        )
    lines.append(
        f"acknowledged writes re-read: {report['acked_writes']}, lost: {report['lost_writes']}"
        + (f" ({', '.join(report['lost_examples'])})" if report["lost_writes"] else "")
        + (
            f", not readable before the deadline: {report['unverified_writes']}"
            if report.get("unverified_writes")
            else ""
        )
    )
    lines.append(
        f"errors not explained by a fault (not 503/504 while a replica was down): "
        f"{report['unexplained_errors']}"
    )
    for ex in report["unexplained_examples"]:
        lines.append(f"  unexplained: {ex['op']} status {ex['status']} at {ex['start']}s")
    if "stall" in report:
        st = report["stall"]
        lines.append(f"longest write stall: {st['seconds']}s (from {st['from']}s)")
    for line in report.get("notes", []):
        lines.append(f"note: {line}")
    if "scale" in report:
        lines.extend(format_scale(report["scale"]))
    return "\n".join(lines)


def format_scale(scale: dict[str, Any]) -> list[str]:
    w = {s: max(len(s), 10) for s in scale["services"]}
    lines = ["", "CPU ms per request:"]
    lines.append("replicas  req/s  p99 ms  " + "  ".join(f"{s:>{w[s]}}" for s in w))
    for step in scale["steps"]:
        cells = "  ".join(f"{step['cpu_ms_per_req'].get(s, 0):>{w[s]}.3f}" for s in w)
        lines.append(f"{step['replicas']:>8}{step['rps']:>7.0f}{step['p99_ms']:>8.1f}  {cells}")
    lines.append(f"bottleneck: {scale['bottleneck']}")
    lines.append(f"next core: {scale['next_core']}")
    return lines


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False)
