"""Running a sequence against both servers and summing up: the match figure and the
differences, each either documented (allowed) or not."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from tests.conformance.allowlist import Allowed
from tests.conformance.replay import Difference, Target, compare
from tests.conformance.steps import Step


@dataclass
class Report:
    compared: int = 0
    matched: int = 0
    differences: list[Difference] = field(default_factory=list)
    undocumented: list[Difference] = field(default_factory=list)
    used: set[Allowed] = field(default_factory=set)
    setup_failures: list[str] = field(default_factory=list)
    # Steps OpenBao answered with a 5xx: not compared (Trellis answered them with a 4xx).
    oracle_errors: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.matched / self.compared if self.compared else 0.0

    def summary(self) -> str:
        lines = [
            f"conformance: {self.matched}/{self.compared} steps match "
            f"({100 * self.ratio:.1f}%), {len(self.differences)} differences, "
            f"{len(self.undocumented)} undocumented, "
            f"{len(self.oracle_errors)} not compared (OpenBao answered 5xx)"
        ]
        lines += [f"  ORACLE 5xx {e}" for e in self.oracle_errors]
        lines += [f"  UNDOCUMENTED {d.step} {d.kind} {d.detail}" for d in self.undocumented]
        lines += [f"  SETUP {s}" for s in self.setup_failures]
        return "\n".join(lines)


def stale(allowed: list[Allowed], report: Report, steps: list[Step]) -> list[Allowed]:
    """Documented differences of these steps that no longer occur. A row about steps another
    suite replays (the transit suite's, the main suite's) is that suite's to check."""
    ids = [s.id for s in steps]
    return [
        a
        for a in allowed
        if a not in report.used and any(fnmatch.fnmatchcase(i, a.step) for i in ids)
    ]


def replay(bao: Target, trellis: Target, steps: list[Step], allowed: list[Allowed]) -> Report:
    report = Report()
    for step in steps:
        try:
            a, b = bao.run(step), trellis.run(step)
        except AssertionError as exc:  # a value to save is missing: later steps would lie
            report.setup_failures.append(str(exc))
            continue
        if not step.compare:
            if a.status >= 400 or b.status >= 400:
                report.setup_failures.append(
                    f"{step.id}: openbao {a.status}, trellis {b.status} {b.body}"
                )
            continue
        if a.status >= 500:
            # OpenBao failed (a bug of the oracle): nothing to match, but Trellis must still
            # answer a client mistake with a 4xx, never a 5xx of its own.
            # Each such step is a documented `oracle` row, so the page names every one.
            report.oracle_errors.append(f"{step.id}: openbao {a.status}, trellis {b.status}")
            d = Difference(step.id, "oracle", f"{a.status} != {b.status}")
            rule = next((r for r in allowed if r.covers(d.step, d.kind, d.detail)), None)
            if not 400 <= b.status < 500:
                report.undocumented.append(Difference(step.id, "status", d.detail))
            elif rule is None:
                report.undocumented.append(d)
            else:
                report.used.add(rule)
            continue
        report.compared += 1
        diffs = compare(step, a, b)
        if not diffs:
            report.matched += 1
        for d in diffs:
            report.differences.append(d)
            rule = next((r for r in allowed if r.covers(d.step, d.kind, d.detail)), None)
            if rule is None:
                report.undocumented.append(d)
            else:
                report.used.add(rule)
    return report
