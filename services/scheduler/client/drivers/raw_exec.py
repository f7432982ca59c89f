"""raw_exec: run the command as a real child process in its own session, so stopping the task
signals the whole process group; KillSignal first, SIGKILL after KillTimeout. The child gets
exactly the environment the client built for it (services/scheduler/client/taskenv.py), never
the agent's, and runs as the task's `user` when the agent is root."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from services.scheduler.client.drivers.base import DriverError, ExitResult
from services.scheduler.client.taskdir import RunAs


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


def _open_log(path: str) -> Any:
    # 0600 from creation: a task's output may hold what it printed of its secrets.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab")


def _open_logs(task_dir: str) -> tuple[Any, Any]:
    try:
        out = _open_log(os.path.join(task_dir, "stdout.log"))
    except OSError as exc:
        raise DriverError(f"failed to open task logs: {exc.strerror}") from None
    try:
        return out, _open_log(os.path.join(task_dir, "stderr.log"))
    except OSError as exc:
        out.close()
        raise DriverError(f"failed to open task logs: {exc.strerror}") from None


class RawExecDriver:
    name = "raw_exec"
    needs_dirs = True  # a real process: the client builds its task dir first

    async def start(
        self,
        task: dict[str, Any],
        config: dict[str, Any],
        env: dict[str, str],
        task_dir: str,
        run_as: RunAs | None = None,
    ) -> _ProcHandle:
        command = config.get("command")
        if not isinstance(command, str) or not command:
            raise DriverError("failed to create executor: missing command")
        args = config.get("args") or []
        if not isinstance(args, list):
            raise DriverError("args must be a list of strings")
        os.makedirs(task_dir, mode=0o700, exist_ok=True)
        who = run_as or RunAs()
        identity: dict[str, Any] = {}
        if who.uid is not None:
            identity = {"user": who.uid, "group": who.gid, "extra_groups": list(who.groups)}
        stdout, stderr = _open_logs(task_dir)
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *[str(a) for a in args],
                cwd=task_dir,
                env=dict(env),  # exactly what was built for the task; nothing inherited
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                **identity,
            )
        except OSError as exc:
            raise DriverError(f"failed to launch command with executor: {exc}") from None
        finally:
            stdout.close()
            stderr.close()
        return _ProcHandle(proc)
