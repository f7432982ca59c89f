"""Blocking queries through `trellis dev`: while 1,000 of them wait, ordinary scheduler requests
answer in under 2 s; a query whose wait runs out answers 200 with the current index, also when
its wait outlasts the gateway's ordinary request timeout; a write answers a waiting query at
once."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.held_queries import Held
from tests.procs import DevProcess, dev, wait_node_ready

pytestmark = pytest.mark.e2e

HELD = 1000
FAST = 2.0  # seconds an ordinary request may take while the blocking queries wait
GATEWAY_TIMEOUT = 5  # the gateway's ordinary deadline in this cluster (TRELLIS_REQUEST_TIMEOUT)


def in_flight(d: DevProcess) -> float:
    """The scheduler requests the gateway processes are waiting on (each one's own /metrics,
    on its health address: not a request to the listeners)."""
    total = 0.0
    for url in d.gateway_metrics:
        for line in requests.get(url, timeout=5).text.splitlines():
            if line.startswith('trellis_gateway_in_flight{api="scheduler"}'):
                total += float(line.rsplit(" ", 1)[1])
    return total


def current_index(d: DevProcess) -> int:
    r = requests.get(d.scheduler + "/v1/jobs", timeout=FAST)
    assert r.status_code == 200, r.text
    return int(r.headers["X-Sched-Index"])


def job(name: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock", "Config": {"run_for": "1s"}}
    return {
        "Job": {
            "ID": name,
            "Name": name,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [task]}],
        }
    }


@pytest.fixture(scope="module")
def held_cluster() -> Iterator[tuple[DevProcess, Held]]:
    old = os.environ.get("TRELLIS_REQUEST_TIMEOUT")
    os.environ["TRELLIS_REQUEST_TIMEOUT"] = str(GATEWAY_TIMEOUT)
    try:
        ctx = dev()
        d = ctx.__enter__()
    finally:
        if old is None:
            os.environ.pop("TRELLIS_REQUEST_TIMEOUT", None)
        else:
            os.environ["TRELLIS_REQUEST_TIMEOUT"] = old
    try:
        wait_node_ready(d)  # the scheduler is up: the held queries must not meet a 503
        with Held(d.scheduler, HELD) as held:
            deadline = time.monotonic() + 60
            while in_flight(d) < HELD:
                assert time.monotonic() < deadline, f"only {in_flight(d)} held"
                assert not held.answered, f"a held query was answered: {held.answered[:3]}"
                time.sleep(0.2)
            # The gateway holds them all; wait until the scheduler has also taken them all in
            # (read once each, then parked): five quick answers in a row. What is measured
            # below is the cost of holding them, not of their arrival.
            streak = 0
            while streak < 5:
                assert time.monotonic() < deadline, "the scheduler never caught up"
                took, _ = timed("GET", d.scheduler + "/v1/status/leader")
                streak = streak + 1 if took < FAST / 4 else 0
            yield d, held
            # Nothing the tests did reached index 999999999: every held query is still open.
            assert not held.answered, held.answered[:5]
    finally:
        ctx.__exit__(None, None, None)


def timed(method: str, url: str, **kw: Any) -> tuple[float, requests.Response]:
    start = time.monotonic()
    r = requests.request(method, url, timeout=30, **kw)
    return time.monotonic() - start, r


def test_ordinary_requests_stay_fast_while_1000_wait(
    held_cluster: tuple[DevProcess, Held],
) -> None:
    d, held = held_cluster
    for i in range(5):
        took, r = timed("POST", d.scheduler + "/v1/jobs", json=job(f"fast-{i}"))
        assert r.status_code == 200, r.text
        assert took < FAST, f"job register took {took:.2f}s"
        took, r = timed("GET", d.scheduler + "/v1/jobs")
        assert r.status_code == 200 and any(j["ID"] == f"fast-{i}" for j in r.json())
        assert took < FAST, f"job list took {took:.2f}s"
        took, r = timed("GET", d.scheduler + "/v1/nodes")
        assert r.status_code == 200, r.text
        assert took < FAST, f"node list took {took:.2f}s"
    # ...and meanwhile every blocking query is still waiting, none timed out at the gateway.
    assert not held.answered, held.answered[:5]
    assert in_flight(d) >= HELD


def test_expired_wait_answers_200_with_the_current_index(
    held_cluster: tuple[DevProcess, Held],
) -> None:
    d, _ = held_cluster
    index = current_index(d)
    for wait, bound in ((3.0, 3.0 * 17 / 16 + 1.5), (GATEWAY_TIMEOUT + 2.0, 7.0 * 17 / 16 + 1.5)):
        # The second wait outlasts the gateway's ordinary deadline: its deadline follows it.
        took, r = timed("GET", f"{d.scheduler}/v1/nodes?index={index + 10**6}&wait={wait:g}s")
        assert r.status_code == 200, r.text
        assert wait - 0.1 <= took <= bound, f"wait={wait}s answered after {took:.2f}s"
        now = int(requests.get(d.scheduler + "/v1/nodes", timeout=FAST).headers["X-Sched-Index"])
        assert int(r.headers["X-Sched-Index"]) <= now
        assert isinstance(r.json(), list)
    # A read of something that never appears answers as Nomad does once the wait is over.
    took, r = timed("GET", f"{d.scheduler}/v1/job/never-registered?index={index + 10**6}&wait=1s")
    assert (r.status_code, r.text) == (404, "job not found")
    assert 0.9 <= took <= 1.0 * 17 / 16 + 1.5, f"answered after {took:.2f}s"


def test_a_write_answers_a_waiting_query_at_once(
    held_cluster: tuple[DevProcess, Held],
) -> None:
    d, _ = held_cluster
    index = current_index(d)
    answer: dict[str, Any] = {}

    def poll() -> None:
        took, r = timed("GET", f"{d.scheduler}/v1/jobs?index={index}&wait=60s")
        answer.update(took=took, response=r)

    waiter = threading.Thread(target=poll)
    waiter.start()
    # The query must be parked before the write, or it would see the job at once.
    deadline = time.monotonic() + 10
    while in_flight(d) < HELD + 1:
        assert time.monotonic() < deadline, "the blocking query never reached the gateway"
        time.sleep(0.05)
    _, r = timed("POST", d.scheduler + "/v1/jobs", json=job("wakes-the-waiter"))
    assert r.status_code == 200, r.text
    waiter.join(30)
    assert not waiter.is_alive()
    resp = answer["response"]
    assert resp.status_code == 200, resp.text
    assert answer["took"] < 10, f"answered after {answer['took']:.2f}s, not at the write"
    assert int(resp.headers["X-Sched-Index"]) > index
    assert any(j["ID"] == "wakes-the-waiter" for j in resp.json())


def test_a_client_that_goes_away_frees_the_gateway(
    held_cluster: tuple[DevProcess, Held],
) -> None:
    d, _ = held_cluster
    host, port = d.scheduler.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    try:
        sock.sendall(
            f"GET /v1/jobs?index=999999999&wait=5m HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        )
        deadline = time.monotonic() + 10
        while in_flight(d) < HELD + 1:
            assert time.monotonic() < deadline, "the query never reached the gateway"
            time.sleep(0.05)
    finally:
        sock.close()
    deadline = time.monotonic() + 10
    while in_flight(d) > HELD:
        assert time.monotonic() < deadline, "the gateway still waits for a client that left"
        time.sleep(0.05)
