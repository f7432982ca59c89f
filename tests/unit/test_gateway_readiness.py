"""A listener's readiness probe: any answer below 500 from the service behind it is ready (a
sealed secrets service must stay reachable); no replica or a timeout is not; a burst of
probes costs one bus request."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway.readiness import PROBES, ServiceProbe
from shared.errors import BusTimeout, NoResponders
from shared.messages import HttpRequest, HttpResponse


def _probe(api: str, outcome: object) -> tuple[ServiceProbe, list[HttpRequest]]:
    sent: list[HttpRequest] = []

    async def send(env: HttpRequest, timeout: float) -> HttpResponse:
        sent.append(env)
        await asyncio.sleep(0.01)
        if isinstance(outcome, Exception):
            raise outcome
        assert isinstance(outcome, int)
        return HttpResponse(status=outcome)

    return ServiceProbe(api, send), sent


@pytest.mark.parametrize(
    ("outcome", "ready"),
    [
        (200, True),
        (204, True),
        (403, True),
        (500, False),
        (NoResponders("x"), False),
        (BusTimeout("x", 2.0), False),
        (RuntimeError("channel broke"), False),
    ],
)
async def test_outcomes(outcome: object, ready: bool) -> None:
    probe, sent = _probe("workspace", outcome)
    got = await probe.check()
    assert got["ready"] is ready and got["name"] == "workspace"
    assert sent[0].path == PROBES["workspace"][0]


async def test_secrets_asks_health_so_that_sealed_counts_as_answering() -> None:
    probe, sent = _probe("secrets", 204)
    assert (await probe.check())["ready"] is True
    assert sent[0].path == "/v1/sys/health" and "sealedcode=204" in sent[0].query


async def test_a_burst_costs_one_request() -> None:
    probe, sent = _probe("scheduler", 200)
    results = await asyncio.gather(*(probe.check() for _ in range(50)))
    assert all(r["ready"] for r in results)
    assert len(sent) == 1
    await probe.check()  # cached for a moment
    assert len(sent) == 1
