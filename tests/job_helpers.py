"""Nomad jobs for the tests that run real tasks on a `trellis dev` client node (dc1): the job
document of one group holding one task, waiting for a batch job's allocation to finish, a
Python its task user can run and what a task printed."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import nomad
import requests

from shared.task_python import task_python as _task_python
from tests.procs import until


def task_python() -> str:
    """A Python interpreter the client's task user can execute: a root client agent runs a
    task naming no `user` as `nobody`, who cannot reach pyenv's under /root."""
    return _task_python()


def node_data_dir() -> str:
    """A data dir for an extra client agent whose tasks run as its task user: under /tmp and
    traversable (0711), since pytest's tmp dirs sit in a private (0700) base dir. The caller
    removes it."""
    path = tempfile.mkdtemp(prefix="trellis-node-")
    os.chmod(path, 0o711)
    return path


def task_log(scheduler: str, token: str, alloc_id: str, task: str, kind: str = "stdout") -> str:
    """What a task wrote to its stdout (or stderr), read through the logs API: a task reports
    there, as its user cannot write into the test's (root-owned) tmp dir."""
    r = requests.get(
        f"{scheduler}/v1/client/fs/logs/{alloc_id}",
        params={"task": task, "type": kind, "plain": "true", "origin": "start"},
        headers={"X-Nomad-Token": token},
        timeout=30,
    )
    r.raise_for_status()
    return r.text


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
