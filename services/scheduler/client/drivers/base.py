"""The driver interface the task runner uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from services.scheduler.client.taskdir import RunAs


class DriverError(Exception):
    """The task could not be started (a Driver Failure event)."""


@dataclass(slots=True)
class ExitResult:
    exit_code: int = 0
    signal: int = 0
    err: str = ""

    @property
    def successful(self) -> bool:
        return self.exit_code == 0 and self.signal == 0 and not self.err


class TaskHandle(Protocol):
    pid: int | None

    async def wait(self) -> ExitResult: ...
    async def kill(self, signal_name: str, grace: float) -> None: ...


class Driver(Protocol):
    name: str
    needs_dirs: bool  # the client builds the task's directories before starting it

    async def start(
        self,
        task: dict[str, Any],
        config: dict[str, Any],
        env: dict[str, str],
        task_dir: str,
        run_as: RunAs | None = None,
    ) -> TaskHandle: ...
