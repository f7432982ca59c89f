"""raw_exec: run the command as a real child process in its own session, so stopping the task
signals the whole process group; KillSignal first, SIGKILL after KillTimeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from services.scheduler.client.drivers.base import DriverError, ExitResult


class _ProcHandle:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid: int | None = proc.pid

    async def wait(self) -> ExitResult:
        code = await self.proc.wait()
        if code < 0:
            return ExitResult(exit_code=0, signal=-code)
        return ExitResult(exit_code=code)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def kill(self, signal_name: str, grace: float) -> None:
        if self.proc.returncode is not None:
            return
        sig = getattr(signal, signal_name or "SIGTERM", signal.SIGTERM)
        self._signal_group(sig)
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self._signal_group(signal.SIGKILL)
            await self.proc.wait()


def _open_logs(task_dir: str) -> tuple[Any, Any]:
    try:
        return (
            open(os.path.join(task_dir, "stdout.log"), "ab"),
            open(os.path.join(task_dir, "stderr.log"), "ab"),
        )
    except OSError as exc:
        raise DriverError(f"failed to open task logs: {exc}") from None


class RawExecDriver:
    name = "raw_exec"

    async def start(
        self, task: dict[str, Any], config: dict[str, Any], env: dict[str, str], task_dir: str
    ) -> _ProcHandle:
        command = config.get("command")
        if not isinstance(command, str) or not command:
            raise DriverError("failed to create executor: missing command")
        args = config.get("args") or []
        if not isinstance(args, list):
            raise DriverError("args must be a list of strings")
        os.makedirs(task_dir, exist_ok=True)
        full_env = {**os.environ, **env}
        stdout, stderr = _open_logs(task_dir)
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *[str(a) for a in args],
                cwd=task_dir,
                env=full_env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            raise DriverError(f"failed to launch command with executor: {exc}") from None
        finally:
            stdout.close()
            stderr.close()
        return _ProcHandle(proc)
