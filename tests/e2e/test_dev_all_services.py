"""`trellis dev` with every service: the three APIs answer, the dev client node (dc1) is up, a
raw_exec job runs on it, and the dev root token is the workspace site admin."""

from __future__ import annotations

import pytest
import requests

from tests.job_helpers import one_task_job, raw_exec_task
from tests.procs import dev, until

pytestmark = pytest.mark.e2e


def test_every_api_through_dev() -> None:
    with dev("--root-token", "dev-root") as d:
        assert requests.get(d.secrets + "/v1/sys/health", timeout=10).status_code == 200
        # The banner comes before the workspace service is up: it answers once it is.
        until(
            lambda: (
                requests.get(d.workspace + "/api/v2/ping", timeout=10).status_code in (200, 204)
            ),
            what="the workspace API",
        )
        auth = {"Authorization": "Bearer dev-root", "Content-Type": "application/vnd.api+json"}
        r = requests.post(
            d.workspace + "/api/v2/organizations",
            headers=auth,
            timeout=10,
            json={
                "data": {
                    "type": "organizations",
                    "attributes": {"name": "acme", "email": "ops@acme.test"},
                }
            },
        )
        assert r.status_code == 201, r.text
        nodes = until(
            lambda: [
                n
                for n in requests.get(d.scheduler + "/v1/nodes", timeout=10).json()
                if n["Status"] == "ready"
            ]
        )
        assert nodes[0]["Datacenter"] == "dc1"
        task = raw_exec_task("t", "/bin/sh", "-c", "exit 0")
        job = {"Job": one_task_job("hello", task)}
        r = requests.post(d.scheduler + "/v1/jobs", json=job, timeout=10)
        assert r.status_code == 200, r.text

        def complete():  # type: ignore[no-untyped-def]
            allocs = requests.get(d.scheduler + "/v1/job/hello/allocations", timeout=10).json()
            return allocs and all(a["ClientStatus"] == "complete" for a in allocs)

        until(complete)
