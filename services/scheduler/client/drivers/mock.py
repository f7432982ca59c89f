"""The mock driver (Nomad's mock_driver): `run_for`, `exit_code`, `start_error`. No process;
used by tests and by simulated fleets of thousands of nodes."""

from __future__ import annotations

import asyncio
from typing import Any

from services.scheduler.client.drivers.base import DriverError, ExitResult
from services.scheduler.client.taskdir import RunAs
from services.scheduler.durations import DurationError, to_nanos


class _MockHandle:
    pid = None

    def __init__(self, run_for: float, exit_code: int) -> None:
        self._exit_code = exit_code
        self._killed = asyncio.Event()
        self._run_for = run_for

    async def wait(self) -> ExitResult:
        if self._run_for <= 0:
            # run_for 0: run until killed, like a service
            await self._killed.wait()
            return ExitResult(exit_code=0, signal=15)
        try:
            await asyncio.wait_for(self._killed.wait(), self._run_for)
            return ExitResult(exit_code=0, signal=15)
        except TimeoutError:
            return ExitResult(exit_code=self._exit_code)

    async def kill(self, signal_name: str, grace: float) -> None:
        self._killed.set()

    def signal(self, name: str) -> None:
        """As Nomad's mock driver: a running task takes any signal and carries on (the task
        runner records it as a "Signaling" event); there is no process to send it to."""


class MockDriver:
    name = "mock"
    needs_dirs = False  # no process, no files: simulated fleets stay cheap

    async def start(
        self,
        task: dict[str, Any],
        config: dict[str, Any],
        env: dict[str, str],
        task_dir: str,
        run_as: RunAs | None = None,
    ) -> _MockHandle:
        if config.get("start_error"):
            raise DriverError(str(config["start_error"]))
        try:
            run_for = to_nanos(config.get("run_for", 0)) / 1e9
        except DurationError as exc:
            raise DriverError(f"invalid run_for: {exc}") from None
        try:
            code = int(config.get("exit_code", 0))
        except (TypeError, ValueError):
            raise DriverError("invalid exit_code") from None
        return _MockHandle(run_for, code)
