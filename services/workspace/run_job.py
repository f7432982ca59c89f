"""The scheduler job of a run's plan or apply, pure. The spec holds nothing secret: the task
gets its run token and the variables by redeeming a one-time ticket (useless once redeemed,
and the workspace service refuses it after the phase started), never through the job's env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.workspace import runner_task
from shared.task_python import task_python

# The runner travels in the job as a script (standard library only): the task runs as the
# client's unprivileged task user, who may not read this service's tree (e.g. under /root).
RUNNER_SOURCE = Path(runner_task.__file__).read_text()


KILL_TIMEOUT_NS = 120 * 10**9
TASK = "terraform"


def job_id(run_id: str, phase: str) -> str:
    return f"trellis-{run_id}-{phase}"


def job_spec(
    run_id: str,
    phase: str,
    *,
    api_url: str,
    ticket: str,
    terraform: str,
    datacenter: str,
    ca_pem: str = "",
    python: str = "",
) -> dict[str, Any]:
    env = {
        "TRELLIS_RUN_API": api_url,
        "TRELLIS_RUN_ID": run_id,
        "TRELLIS_RUN_PHASE": phase,
        "TRELLIS_RUN_TICKET": ticket,
        "TRELLIS_TERRAFORM": terraform,
    }
    if ca_pem:
        env["TRELLIS_RUN_CA_PEM"] = ca_pem  # a public certificate: what to trust
    jid = job_id(run_id, phase)
    return {
        "Job": {
            "ID": jid,
            "Name": jid,
            "Type": "batch",
            "Datacenters": [datacenter],
            "Meta": {"trellis-run": run_id, "trellis-phase": phase},
            "TaskGroups": [
                {
                    "Name": "run",
                    "Count": 1,
                    # A plan or apply runs once: never again on its own (an apply twice would
                    # change infrastructure twice); a failure errors the run.
                    "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
                    "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
                    "Tasks": [
                        {
                            "Name": TASK,
                            "Driver": "raw_exec",
                            "Config": {
                                "command": python or task_python(),
                                "args": ["-c", RUNNER_SOURCE],
                            },
                            "Env": env,
                            # A cancel stops the job: SIGINT to the task's process group, as
                            # Ctrl-C in a terminal (providers ignore it, terraform stops
                            # gracefully), and this long to save the state before SIGKILL.
                            "KillSignal": "SIGINT",
                            "KillTimeout": KILL_TIMEOUT_NS,
                            "Resources": {"CPU": 100, "MemoryMB": 256},
                        }
                    ],
                }
            ],
        }
    }


def verdict(allocs: list[dict[str, Any]], phase: str) -> str | None:
    """Why the phase's job ended without the task reporting, or None while it may still.
    `allocs` is the scheduler's allocation list of the job."""
    for a in allocs:
        status = a.get("ClientStatus")
        node = a.get("NodeName") or a.get("NodeID") or "?"
        if status == "lost":
            return (
                f"the client node {node} running the {phase} was lost; the {phase} did not finish"
            )
        if status == "failed":
            code = _exit_code(a)
            why = f" (exit code {code})" if code is not None else ""
            return f"the {phase} task on client node {node} died before the {phase} finished{why}"
        if status == "complete":
            return f"the {phase} task on client node {node} exited without reporting a result"
    return None


def _exit_code(alloc: dict[str, Any]) -> int | None:
    for state in (alloc.get("TaskStates") or {}).values():
        for ev in reversed(state.get("Events") or []):
            if ev.get("Type") == "Terminated":
                code = ev.get("ExitCode")
                return code if isinstance(code, int) else None
    return None
