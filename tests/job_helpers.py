"""Nomad jobs for the tests that run real tasks on a `trellis dev` client node (dc1): the job
document of one group holding one task, and waiting for a batch job's allocation to finish."""

from __future__ import annotations

from typing import Any

import nomad

from tests.procs import until


def one_task_job(
    job_id: str,
    task: dict[str, Any],
    *,
    kind: str = "batch",
    group: str = "g",
    count: int = 1,
    group_extra: dict[str, Any] | None = None,
    **job_extra: Any,
) -> dict[str, Any]:
    """The job (what goes under "Job") `job_id` in dc1: one group of `count` running `task`."""
    return {
        "ID": job_id,
        "Name": job_id,
        "Type": kind,
        "Datacenters": ["dc1"],
        **job_extra,
        "TaskGroups": [{"Name": group, "Count": count, **(group_extra or {}), "Tasks": [task]}],
    }


def raw_exec_task(name: str, command: str, *args: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"command": command}
    if args:
        config["args"] = list(args)
    return {"Name": name, "Driver": "raw_exec", "Config": config, **extra}


def finished_alloc(client: nomad.Nomad, job_id: str, timeout: float = 90.0) -> dict[str, Any]:
    """The first allocation of `job_id` that completed or failed (the states seen, on timeout)."""

    def finished() -> Any:
        allocs = client.job.get_allocations(job_id)
        finished.__doc__ = repr([(a["ClientStatus"], a.get("TaskStates")) for a in allocs])
        done = [a for a in allocs if a["ClientStatus"] in ("complete", "failed")]
        return done[0] if done else None

    return until(finished, timeout, f"{job_id} finished")
