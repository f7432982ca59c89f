"""Run one allocation: its tasks side by side, the allocation's ClientStatus derived from task
states, deployment health from task states (MinHealthyTime, HealthyDeadline), stop on demand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

from services.scheduler.client.drivers import Driver
from services.scheduler.client.events import rfc3339
from services.scheduler.client.taskrunner import TaskRunner

_VAR = re.compile(r"\$\{([^}]+)\}")


def interpolate(value: Any, env: dict[str, str], node: dict[str, Any]) -> Any:
    """Runtime interpolation the job parser left for the client: NOMAD_*, env, node, attr."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            key = m.group(1).strip()
            if key in env:
                return env[key]
            if key.startswith("env."):
                return env.get(key[4:], "")
            if key == "node.unique.id":
                return node.get("ID", "")
            if key == "node.unique.name":
                return node.get("Name", "")
            if key == "node.datacenter":
                return node.get("Datacenter", "")
            if key.startswith("attr."):
                return str((node.get("Attributes") or {}).get(key[5:], ""))
            if key.startswith("meta."):
                return str((node.get("Meta") or {}).get(key[5:], ""))
            return m.group(0)

        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [interpolate(v, env, node) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env, node) for k, v in value.items()}
    return value


class AllocRunner:
    def __init__(
        self,
        alloc: dict[str, Any],
        group: dict[str, Any],
        job_type: str,
        node: dict[str, Any],
        drivers: dict[str, Driver],
        data_dir: str,
        on_update: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.alloc = alloc
        self.group = group
        self.node = node
        self.on_update = on_update
        self.alloc_dir = os.path.join(data_dir, "alloc", alloc["ID"])
        self.batch = job_type in ("batch", "sysbatch")
        self.health: bool | None = None
        self.stopping = False
        self._health_task: asyncio.Task[None] | None = None
        self._last_status = ""
        self.tasks: dict[str, TaskRunner] = {}
        name = alloc.get("Name", "")
        idx = name[name.rfind("[") + 1 : -1] if name.endswith("]") else "0"
        for task in group.get("Tasks") or []:
            task_dir = os.path.join(self.alloc_dir, task["Name"])
            env = {
                "NOMAD_ALLOC_ID": alloc["ID"],
                "NOMAD_ALLOC_NAME": name,
                "NOMAD_ALLOC_INDEX": idx,
                "NOMAD_JOB_ID": alloc["JobID"],
                "NOMAD_JOB_NAME": alloc["JobID"],
                "NOMAD_GROUP_NAME": alloc["TaskGroup"],
                "NOMAD_TASK_NAME": task["Name"],
                "NOMAD_NAMESPACE": alloc["Namespace"],
                "NOMAD_DC": node.get("Datacenter", ""),
                "NOMAD_REGION": "global",
                "NOMAD_ALLOC_DIR": os.path.join(self.alloc_dir, "alloc"),
                "NOMAD_TASK_DIR": os.path.join(task_dir, "local"),
                "NOMAD_CPU_LIMIT": str((task.get("Resources") or {}).get("CPU", 0)),
                "NOMAD_MEMORY_LIMIT": str((task.get("Resources") or {}).get("MemoryMB", 0)),
            }
            env.update(
                {k: str(interpolate(v, env, node)) for k, v in (task.get("Env") or {}).items()}
            )
            config = interpolate(task.get("Config") or {}, env, node)
            self.tasks[task["Name"]] = TaskRunner(
                task,
                drivers.get(task.get("Driver", "")),
                batch=self.batch,
                config=config,
                env=env,
                task_dir=task_dir,
                on_change=self._changed,
            )

    def start(self) -> None:
        for tr in self.tasks.values():
            tr.start()
        if self.alloc.get("DeploymentID"):
            self._health_task = asyncio.create_task(self._watch_health())
        self._changed()

    def client_status(self) -> str:
        states = [tr.state for tr in self.tasks.values()]
        if not states:
            return "complete"
        if all(s["State"] == "dead" for s in states):
            return "failed" if any(s["Failed"] for s in states) else "complete"
        if any(s["State"] == "pending" for s in states) and not any(
            s["State"] == "running" for s in states
        ):
            return "pending"
        return "running"

    def _changed(self) -> None:
        status = self.client_status()
        update: dict[str, Any] = {
            "ID": self.alloc["ID"],
            "ClientStatus": status,
            "ClientDescription": _describe(status),
            "TaskStates": {name: dict(tr.state) for name, tr in self.tasks.items()},
        }
        if self.health is not None:
            update["DeploymentStatus"] = {
                "Healthy": self.health,
                "Timestamp": rfc3339(),
                "Canary": bool((self.alloc.get("DeploymentStatus") or {}).get("Canary")),
            }
        self._last_status = status
        self.on_update(self.alloc["ID"], update)

    async def _watch_health(self) -> None:
        """task_states health: every task running for MinHealthyTime before the deadline."""
        update = self.group.get("Update") or {}
        min_healthy = int(update.get("MinHealthyTime") or 0) / 1e9
        deadline = time.monotonic() + (int(update.get("HealthyDeadline") or 300e9) / 1e9)
        running_since: float | None = None
        while self.health is None and not self.stopping:
            now = time.monotonic()
            states = [tr.state for tr in self.tasks.values()]
            if any(s["State"] == "dead" and s["Failed"] for s in states) or now > deadline:
                self.health = False
            elif all(s["State"] == "running" for s in states):
                running_since = running_since or now
                if now - running_since >= min_healthy:
                    self.health = True
            elif self.batch and all(s["State"] == "dead" for s in states):
                self.health = True
            else:
                running_since = None
            if self.health is not None:
                self._changed()
                return
            await asyncio.sleep(min(0.1, max(min_healthy / 4, 0.02)))

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        await asyncio.gather(*(tr.kill() for tr in self.tasks.values()), return_exceptions=True)
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._health_task
        self._changed()


def _describe(status: str) -> str:
    return {
        "pending": "No tasks have started",
        "running": "Tasks are running",
        "complete": "All tasks have completed",
        "failed": "Failed tasks",
    }.get(status, "")
