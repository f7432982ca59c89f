"""Run one allocation: its tasks side by side, the allocation's ClientStatus derived from task
states, deployment health from task states (MinHealthyTime, HealthyDeadline), stop on demand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from services.scheduler.client.drivers import Driver
from services.scheduler.client.events import rfc3339
from services.scheduler.client.taskdir import (
    RunAs,
    TaskUsers,
    UserError,
    build_alloc_dir,
    resolve_user,
)
from services.scheduler.client.taskenv import JobInfo, TaskDirs, build_task_env, interpolate
from services.scheduler.client.taskrunner import TaskRunner


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
        job: JobInfo | None = None,
        fetch: Any = None,
        users: TaskUsers = TaskUsers(),
    ) -> None:
        self.alloc = alloc
        self.users = users
        self.group = group
        self.node = node
        self.on_update = on_update
        self.data_dir = data_dir
        self.job = job or JobInfo(id=alloc["JobID"])
        self.alloc_dir = os.path.join(data_dir, "alloc", alloc["ID"])
        self.batch = job_type in ("batch", "sysbatch")
        self.health: bool | None = None
        self.stopping = False
        self._health_task: asyncio.Task[None] | None = None
        self._stop: asyncio.Future[None] | None = None
        self._last_status = ""
        self.tasks: dict[str, TaskRunner] = {}
        for task in group.get("Tasks") or []:
            dirs = TaskDirs(self.alloc_dir, os.path.join(self.alloc_dir, task["Name"]))
            env = build_task_env(
                alloc=alloc, job=self.job, group=group, task=task, node=node, dirs=dirs
            )
            config = interpolate(task.get("Config") or {}, env, node)
            self.tasks[task["Name"]] = TaskRunner(
                task,
                drivers.get(task.get("Driver", "")),
                batch=self.batch,
                config=config,
                env=env,
                dirs=dirs,
                on_change=self._changed,
                payload=self.job.payload,
                fetch=fetch,
                alloc_id=alloc["ID"],
                users=users,
            )

    def _shared_owner(self) -> RunAs | None:
        """The shared alloc/ dir belongs to the tasks' user when they all run as one (those
        naming no `user` run as the client's default task user)."""
        users = {str(t.get("User") or "") for t in self.group.get("Tasks") or []}
        if len(users) != 1:
            return None
        try:
            owner = resolve_user(users.pop(), self.users)
        except UserError:
            return None  # the task's own setup reports it
        return owner if owner.uid is not None else None

    def start(self) -> None:
        if any(getattr(tr.driver, "needs_dirs", False) for tr in self.tasks.values()):
            # On failure each task's own setup fails and says why.
            with contextlib.suppress(OSError):
                build_alloc_dir(
                    self.data_dir, TaskDirs(self.alloc_dir, self.alloc_dir), self._shared_owner()
                )
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
        """Kill the tasks. Every caller (the scheduler's stop, the agent's shutdown) returns only
        once they are dead; a caller that is cancelled leaves the kill running."""
        if self._stop is None:
            self.stopping = True
            self._stop = asyncio.ensure_future(self._kill_all())
        await asyncio.shield(self._stop)

    async def _kill_all(self) -> None:
        await asyncio.gather(*(tr.kill() for tr in self.tasks.values()), return_exceptions=True)
        if self._health_task is not None:
            self._health_task.cancel()  # its loop also ends on `stopping`
            await asyncio.wait([self._health_task], timeout=1.0)
        self._changed()


def _describe(status: str) -> str:
    return {
        "pending": "No tasks have started",
        "running": "Tasks are running",
        "complete": "All tasks have completed",
        "failed": "Failed tasks",
    }.get(status, "")
