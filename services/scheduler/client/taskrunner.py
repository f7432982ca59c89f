"""Run one task: start it with its driver, restart it per the RestartPolicy, record Nomad's task
events and state, kill it on request."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import structlog

from services.scheduler.client import events as ev
from services.scheduler.client.beneath import write_file
from services.scheduler.client.drivers import Driver, DriverError, ExitResult, TaskHandle
from services.scheduler.client.secrets_hook import Fetch, SecretsError, SecretsHook, needs_hook
from services.scheduler.client.taskdir import (
    RunAs,
    TaskUsers,
    UserError,
    build_task_dir,
    resolve_user,
)
from services.scheduler.client.taskenv import TaskDirs
from shared.errors import ServiceError

log = structlog.get_logger("scheduler.client.task")


def template_poll() -> float:
    """Seconds between reads of a template's secrets (TRELLIS_TEMPLATE_POLL_INTERVAL)."""
    try:
        return max(0.2, float(os.environ.get("TRELLIS_TEMPLATE_POLL_INTERVAL", "3")))
    except ValueError:
        return 3.0


MAX_EVENTS = 10  # Nomad keeps the last 10 events per task
# Beyond the kill timeout: a process being started, or SIGKILLed and reaped, also ends in time.
KILL_SLACK = 15.0
USER = "User requested restart"


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
        payload: bytes = b"",
        fetch: Fetch | None = None,
        alloc_id: str = "",
        users: TaskUsers = TaskUsers(),
    ) -> None:
        self.task = task
        self.users = users
        self.payload = payload
        self.fetch = fetch
        self.alloc_id = alloc_id
        self.hook: SecretsHook | None = None
        self._watch: asyncio.Task[None] | None = None
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
        self._restart_asked = False

    def emit(self, e: dict[str, Any]) -> None:
        self.state["Events"] = [*self.state["Events"], e][-MAX_EVENTS:]
        self.on_change()

    def start(self) -> None:
        self.emit(ev.event(*ev.RECEIVED))
        self._task = asyncio.create_task(self._run())
        self._task.add_done_callback(self._after_run)

    def _after_run(self, task: asyncio.Task[None]) -> None:
        """A bug in the runner must fail the task, never leave it pending for ever."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("task runner failed", task=self.task.get("Name"), exc_info=exc)
        self.emit(
            ev.event(
                "Driver Failure",
                f"task runner failed: {type(exc).__name__}",
                driver_error=type(exc).__name__,
                fails_task=True,
            )
        )
        self._finish(failed=True)

    @property
    def dead(self) -> bool:
        return self.state["State"] == "dead"

    def _setup(self) -> bool:
        """Nomad's task dir hook: the task's user and its private directories."""
        if self.driver is None or not getattr(self.driver, "needs_dirs", False):
            return True
        try:
            self.run_as = resolve_user(str(self.task.get("User") or ""), self.users)
            build_task_dir(self.dirs, self.run_as)
            self._write_payload()
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

    async def _secrets(self) -> bool:
        """Token and templates before the first start; then a watcher for changes."""
        if not needs_hook(self.task) or not getattr(self.driver, "needs_dirs", False):
            return True
        if self.fetch is None:
            return self._secrets_failed("the client cannot reach the scheduler for secrets")
        try:
            self.hook = SecretsHook(
                self.task,
                self.task_dir,
                self.fetch,
                self.alloc_id,
                self.run_as.uid,
                self.run_as.gid,
            )
            self.env.update(await self.hook.prestart(self.env))
        except (SecretsError, ServiceError, OSError) as exc:
            msg = exc.message if isinstance(exc, ServiceError) else str(exc)
            return self._secrets_failed(msg)
        self._watch = asyncio.create_task(self._watch_secrets())
        return True

    def _secrets_failed(self, msg: str) -> bool:
        self.emit(
            ev.event(
                "Setup Failure", f"failed to setup task: {msg}", setup_error=msg, fails_task=True
            )
        )
        return False

    async def _watch_secrets(self) -> None:
        assert self.hook is not None
        while not self._kill.is_set() and not self.dead:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kill.wait(), template_poll())
            if self._kill.is_set() or self.dead:
                return
            try:
                changed = await self.hook.poll(self.env)
            except Exception as exc:  # the secrets service is away: keep the old rendering
                log.warning("template refresh failed", task=self.task.get("Name"), error=str(exc))
                continue
            if not changed:
                continue
            for t in changed:
                if t.env:
                    self.env.update(self.hook.env_from(self.hook.rendered))
            modes = {t.change_mode for t in changed}
            self.emit(ev.event("Template", "Template re-rendered"))
            if "restart" in modes:
                await self.restart()
            elif "signal" in modes:
                for t in changed:
                    if t.change_mode == "signal":
                        self.signal(t.change_signal or "SIGHUP")

    def _write_payload(self) -> None:
        """A dispatched job's payload into local/<dispatch_payload.file> (0600, the task's)."""
        name = str((self.task.get("DispatchPayload") or {}).get("File") or "")
        if not name or not self.payload:
            return
        rel = os.path.normpath(name)
        if rel.startswith("..") or os.path.isabs(rel):
            raise UserError(f"dispatch_payload file {name!r} escapes the task's local dir")
        # Through no symlink the task planted in its own dir (a restart writes it again).
        who = self.run_as
        write_file(
            self.dirs.task, os.path.join("local", rel), self.payload, 0o600, who.uid, who.gid
        )

    async def _run(self) -> None:
        self.emit(ev.event(*ev.SETUP))
        if not self._setup() or not await self._secrets():
            self._finish(failed=True)
            return
        policy = self.task.get("RestartPolicy") or {}
        while not self._kill.is_set():
            result = await self._attempt()
            if self._kill.is_set() or result is None:
                break
            if self._restart_asked:
                # A user restart is not a failure: no restart-policy accounting, no delay.
                self._restart_asked = False
                self.state["Restarts"] += 1
                self.state["LastRestart"] = ev.rfc3339()
                self.emit(ev.event("Restarting", "Task restarting in 0s", restart_reason=USER))
                continue
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
        if self._kill.is_set():
            # Killed while starting: kill() found no handle, so the new process is ours to end.
            await self.handle.kill(self.task.get("KillSignal") or "SIGTERM", self.kill_timeout)
            return None
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

    async def restart(self) -> bool:
        """Nomad's alloc restart: stop the running process and start it again in place."""
        if self.dead or self.handle is None or self.state["State"] != "running":
            return False
        self._restart_asked = True
        self.emit(ev.event("Restart Signaled", USER))
        await self.handle.kill(self.task.get("KillSignal") or "SIGTERM", self.kill_timeout)
        return True

    def signal(self, name: str) -> bool:
        """Send `name` to the running task (raw_exec: its process group)."""
        send = getattr(self.handle, "signal", None)
        if self.dead or send is None or self.state["State"] != "running":
            return False
        self.emit(ev.event("Signaling", f"Task being sent signal {name}", task_signal=name))
        send(name)
        return True

    @property
    def kill_timeout(self) -> float:
        """Seconds between KillSignal and SIGKILL (the task's kill_timeout, Nomad's 5 s)."""
        return int(self.task.get("KillTimeout") or 5_000_000_000) / 1e9

    async def kill(self, reason: str = "") -> None:
        if self.dead:
            return
        self._kill.set()
        if self._watch is not None:
            self._watch.cancel()
        timeout = self.kill_timeout
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
            # The runner sees the kill flag and ends (killing a process it was still starting);
            # asyncio.wait never waits on a cancelled task that refuses to finish.
            await asyncio.wait([self._task], timeout=timeout + KILL_SLACK)
            if not self._task.done():
                log.warning("task runner did not stop in time", task=self.task.get("Name"))
                self._task.cancel()
        self.emit(ev.event("Killed", "Task successfully killed"))
        self._finish(failed=self.state["Failed"])
