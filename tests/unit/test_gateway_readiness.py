"""A listener's readiness probe: any answer below 500 from the service behind it is ready (a
sealed secrets service must stay reachable); no replica or a timeout is not; a burst of
probes costs one bus request."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.gateway.readiness import BEHIND, NEEDED, NEEDS, PROBES, ServiceProbe
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


def _secrets_probe(health: int, behind: HttpResponse) -> tuple[ServiceProbe, list[HttpRequest]]:
    sent: list[HttpRequest] = []

    async def send(env: HttpRequest, timeout: float) -> HttpResponse:
        sent.append(env)
        return HttpResponse(status=health) if env.path == "/v1/sys/health" else behind

    return ServiceProbe("secrets", send), sent


def _behind(ready: bool) -> HttpResponse:
    crypto = {"name": "crypto", "ready": ready}
    body = json.dumps({"ready": ready, "services": [crypto]}).encode()
    return HttpResponse(status=200 if ready else 503, body=body)


async def test_secrets_asks_health_so_that_sealed_counts_as_answering() -> None:
    probe, sent = _secrets_probe(204, _behind(True))
    got = await probe.check()
    assert got["ready"] is True and got["behind"] == [{"name": "crypto", "ready": True}]
    assert sent[0].path == "/v1/sys/health" and "sealedcode=204" in sent[0].query
    assert sent[1].path == BEHIND["secrets"][0]


@pytest.mark.parametrize(
    "behind",
    [_behind(False), HttpResponse(status=503, body=b"<html>"), HttpResponse(status=200, body=b"")],
)
async def test_secrets_is_unready_while_what_it_relies_on_is_down(behind: HttpResponse) -> None:
    probe, _ = _secrets_probe(200, behind)
    got = await probe.check()
    assert got["ready"] is False and got["behind"] and not got["behind"][0]["ready"]


async def test_a_secrets_replica_without_the_readiness_path_reports_nothing_behind() -> None:
    probe, _ = _secrets_probe(200, HttpResponse(status=404))
    got = await probe.check()
    assert got["ready"] is True and got["behind"] == []


async def test_a_burst_costs_one_request() -> None:
    probe, sent = _probe("scheduler", 200)
    results = await asyncio.gather(*(probe.check() for _ in range(50)))
    assert all(r["ready"] for r in results)
    assert len(sent) == 1
    await probe.check()  # cached for a moment
    assert len(sent) == 1


@pytest.mark.parametrize(
    ("status", "ready", "error"),
    [
        (200, True, None),
        (503, False, "sealed"),
        (501, False, "not initialized"),
        (472, False, None),
    ],
)
async def test_a_needed_secrets_service_must_be_unsealed(
    status: int, ready: bool, error: str | None
) -> None:
    sent: list[HttpRequest] = []

    async def send(env: HttpRequest, timeout: float) -> HttpResponse:
        sent.append(env)
        return HttpResponse(status=status)

    got = await ServiceProbe("secrets", send, needed=True).check()
    assert got["ready"] is ready and got.get("error") == error and got["status"] == status
    # Asked once, for health alone: what lies behind the secrets service is not needed here.
    assert [(e.path, e.query) for e in sent] == [NEEDED["secrets"]]
    assert "secrets" in NEEDS["workspace"] and "secrets" in NEEDS["scheduler"]
