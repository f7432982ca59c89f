"""Run one task: start it with its driver, restart it per the RestartPolicy, record Nomad's task
events and state, kill it on request."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from services.scheduler.client import events as ev
from services.scheduler.client.drivers import Driver, DriverError, ExitResult, TaskHandle
from services.scheduler.client.taskdir import RunAs, UserError, build_task_dir, resolve_user
from services.scheduler.client.taskenv import TaskDirs

MAX_EVENTS = 10  # Nomad keeps the last 10 events per task


class TaskRunner:
    def __init__(
        self,
        task: dict[str, Any],
        driver: Driver | None,
        *,
        batch: bool,
        config: dict[str, Any],
        env: dict[str, str],
        dirs: TaskDirs,
        on_change: Callable[[], None],
    ) -> None:
        self.task = task
        self.driver = driver
        self.batch = batch
        self.config = config
        self.env = env
        self.dirs = dirs
        self.task_dir = dirs.task
        self.run_as = RunAs()
        self.on_change = on_change
        self.state = ev.task_state()
        self.handle: TaskHandle | None = None
        self._kill = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._restart_times: list[float] = []

    def emit(self, e: dict[str, Any]) -> None:
        self.state["Events"] = [*self.state["Events"], e][-MAX_EVENTS:]
        self.on_change()

    def start(self) -> None:
        self.emit(ev.event(*ev.RECEIVED))
        self._task = asyncio.create_task(self._run())

    @property
    def dead(self) -> bool:
        return self.state["State"] == "dead"

    def _setup(self) -> bool:
        """Nomad's task dir hook: the task's user and its private directories."""
        if self.driver is None or not getattr(self.driver, "needs_dirs", False):
            return True
        try:
            self.run_as = resolve_user(str(self.task.get("User") or ""))
            build_task_dir(self.dirs, self.run_as)
        except (UserError, OSError) as exc:
            msg = str(exc) if isinstance(exc, UserError) else f"{exc.strerror}: {exc.filename}"
            self.emit(
                ev.event(
                    "Setup Failure",
                    f"failed to setup task: {msg}",
                    setup_error=msg,
                    fails_task=True,
                )
            )
            return False
        return True

    async def _run(self) -> None:
        self.emit(ev.event(*ev.SETUP))
        if not self._setup():
            self._finish(failed=True)
            return
        policy = self.task.get("RestartPolicy") or {}
        while not self._kill.is_set():
            result = await self._attempt()
            if self._kill.is_set() or result is None:
                break
            if self.batch and result.successful:
                self._finish(failed=False)
                return
            delay = self._next_restart(policy, result)
            if delay is None:
                self._finish(failed=not result.successful or not self.batch)
                return
            self.state["Restarts"] += 1
            self.state["LastRestart"] = ev.rfc3339()
            self.state["State"] = "pending"
            self.emit(ev.restarting(delay, "Restart within policy"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kill.wait(), delay / 1e9)
        self._finish(failed=self.state["Failed"])

    async def _attempt(self) -> ExitResult | None:
        if self.driver is None:
            self.emit(
                ev.event(
                    "Driver Failure",
                    "missing drivers",
                    driver_error="missing drivers",
                    fails_task=True,
                )
            )
            self.state["Failed"] = True
            return None
        try:
            self.handle = await self.driver.start(
                self.task, self.config, self.env, self.task_dir, self.run_as
            )
        except DriverError as exc:
            self.emit(ev.event("Driver Failure", str(exc), driver_error=str(exc)))
            return ExitResult(exit_code=1, err=str(exc))
        self.state["State"] = "running"
        if self.state["StartedAt"] == ev.ZERO_TIME:
            self.state["StartedAt"] = ev.rfc3339()
        self.emit(ev.event(*ev.STARTED))
        result = await self.handle.wait()
        if not self._kill.is_set():
            self.emit(ev.terminated(result.exit_code, result.signal))
        return result

    def _next_restart(self, policy: dict[str, Any], result: ExitResult) -> int | None:
        """Delay (ns) before restarting, or None when the policy says stop."""
        attempts = int(policy.get("Attempts") or 0)
        interval = int(policy.get("Interval") or 0) / 1e9
        delay = int(policy.get("Delay") or 0)
        mode = policy.get("Mode") or "fail"
        now = time.monotonic()
        self._restart_times = [t for t in self._restart_times if not interval or now - t < interval]
        if len(self._restart_times) >= attempts:
            if mode == "delay" and interval:
                self._restart_times = []
                return int(interval * 1e9)
            self.emit(ev.not_restarting(attempts, int(interval * 1e9), mode))
            self.state["Failed"] = True
            return None
        self._restart_times.append(now)
        return delay

    def _finish(self, *, failed: bool) -> None:
        if self.state["State"] == "dead":
            return
        self.state["State"] = "dead"
        self.state["Failed"] = failed
        self.state["FinishedAt"] = ev.rfc3339()
        self.on_change()

    async def kill(self, reason: str = "") -> None:
        if self.dead:
            return
        self._kill.set()
        timeout = int(self.task.get("KillTimeout") or 5_000_000_000) / 1e9
        self.emit(
            ev.event(
                "Killing",
                f"Sent interrupt. Waiting {timeout:g}s before force killing",
                kill_timeout=int(timeout * 1e9),
            )
        )
        if self.handle is not None:
            await self.handle.kill(self.task.get("KillSignal") or "SIGTERM", timeout)
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, timeout + 1)
        self.emit(ev.event("Killed", "Task successfully killed"))
        self._finish(failed=self.state["Failed"])
