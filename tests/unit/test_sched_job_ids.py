"""Job IDs with slashes (dispatched and periodic children) address their endpoints as in Nomad:
a known sub-resource at the end names the endpoint, the rest after `job/` is the ID."""

from __future__ import annotations

from services.scheduler.api import jobs, lifecycle
from services.scheduler.api.router import job_segments, match


def test_a_child_job_id_keeps_its_slash() -> None:
    assert job_segments(["job", "batch", "dispatch-1-ab12"]) == ["job", "batch/dispatch-1-ab12"]
    assert job_segments(["job", "batch", "dispatch-1-ab12", "allocations"]) == [
        "job",
        "batch/dispatch-1-ab12",
        "allocations",
    ]
    assert job_segments(["job", "a", "b", "periodic", "force"]) == [
        "job",
        "a/b",
        "periodic",
        "force",
    ]


def test_plain_ids_and_other_paths_are_unchanged() -> None:
    assert job_segments(["job", "web"]) == ["job", "web"]
    assert job_segments(["job", "web", "plan"]) == ["job", "web", "plan"]
    assert job_segments(["jobs", "parse"]) == ["jobs", "parse"]
    assert job_segments(["job", "web", "periodic", "force"]) == ["job", "web", "periodic", "force"]


def test_the_router_reaches_the_child_endpoints() -> None:
    found = match(job_segments(["job", "batch", "dispatch-9", "allocations"]))
    assert found is not None
    methods, args = found
    assert methods["GET"] is jobs.allocations and args == ["batch/dispatch-9"]
    found = match(job_segments(["job", "batch", "dispatch-9"]))
    assert found is not None and found[0]["GET"] is jobs.read and found[1] == ["batch/dispatch-9"]
    found = match(job_segments(["job", "cron", "periodic", "force"]))
    assert found is not None and found[0]["POST"] is lifecycle.periodic_force
