"""The differential suite: every step against the real OpenBao dev server and `trellis dev`,
compared by status code and response keys. A difference not listed in docs/compatibility.md
fails, and so does a listed one that no longer occurs."""

from __future__ import annotations

import uuid

import pytest

from tests.conformance import (
    allowlist,
    cases_auth,
    cases_ceremonies,
    cases_engines,
    cases_kv,
    cases_misc,
    cases_sys,
)
from tests.conformance.conftest import SUMMARIES
from tests.conformance.replay import Target
from tests.conformance.report import replay, stale
from tests.openbao import OpenBao
from tests.procs import DevProcess

pytestmark = pytest.mark.e2e

GOAL = 0.95
CASES = [cases_sys, cases_auth, cases_kv, cases_misc, cases_engines, cases_ceremonies]


def test_openbao_and_trellis_answer_alike(openbao: OpenBao, trellis: DevProcess) -> None:
    u = uuid.uuid4().hex[:6]
    steps = [step for module in CASES for step in module.steps(u)]
    allowed = allowlist.load()
    report = replay(
        Target("openbao", openbao.addr, openbao.token),
        Target("trellis", trellis.secrets, trellis.root_token),
        steps,
        allowed,
    )
    gone = stale(allowed, report, steps)
    SUMMARIES.append(report.summary())
    print(report.summary())
    assert not report.setup_failures, report.summary()
    assert not report.undocumented, report.summary()
    assert not gone, "documented differences that no longer occur (update the doc):\n" + "\n".join(
        f"  {a.step} {a.kind} {a.detail}" for a in gone
    )
    assert report.ratio >= GOAL, report.summary()
