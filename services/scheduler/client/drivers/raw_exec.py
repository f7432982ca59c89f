"""raw_exec: run the command as a real child process in its own session, so stopping the task
signals the whole process group; KillSignal first, SIGKILL after KillTimeout. The child gets
exactly the environment the client built for it (services/scheduler/client/taskenv.py), never
the agent's, and runs as the task's `user` when the agent is root."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

import structlog

from services.scheduler.client.drivers.base import DriverError, ExitResult
from services.scheduler.client.logrotate import MB, RotatingWriter
from services.scheduler.client.taskdir import RunAs

log = structlog.get_logger("scheduler.client.raw_exec")

REAP_WAIT = 10.0  # seconds a SIGKILLed task may take to be reaped


class _ProcHandle:
    def __init__(self, proc: asyncio.subprocess.Process, pumps: list[asyncio.Task[None]]) -> None:
        self.proc = proc
        self.pid: int | None = proc.pid
        self.pumps = pumps

    async def wait(self) -> ExitResult:
        code = await self.proc.wait()
        # The last output reaches the files before the task counts as finished (a child the
        # task left behind may keep a pipe open: don't wait on it forever).
        if self.pumps:
            await asyncio.wait(self.pumps, timeout=2.0)
        if code < 0:
            return ExitResult(exit_code=0, signal=-code)
        return ExitResult(exit_code=code)

    def signal(self, signal_name: str) -> None:
        if self.proc.returncode is None:
            self._signal_group(getattr(signal, signal_name))

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            # No group led by the task yet (or any more): signal the process itself, so that a
            # kill is never lost while the process lives.
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
        except PermissionError:
            pass

    async def kill(self, signal_name: str, grace: float) -> None:
        if self.proc.returncode is not None:
            return
        sig = getattr(signal, signal_name or "SIGTERM", signal.SIGTERM)
        self._signal_group(sig)
        if await _exited(self.proc, grace):
            return
        self._signal_group(signal.SIGKILL)
        if not await _exited(self.proc, REAP_WAIT):
            # Unkillable (stuck in the kernel): give up rather than hang the agent's stop.
            log.warning("task process survived SIGKILL", pid=self.proc.pid)


async def _exited(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    """Whether the process exited within `timeout` (asyncio.wait: never swallows a cancel)."""
    waiter = asyncio.ensure_future(proc.wait())
    try:
        done, _ = await asyncio.wait([waiter], timeout=timeout)
    finally:
        waiter.cancel()  # a no-op once it finished
    return bool(done)


def log_config(task: dict[str, Any]) -> tuple[int, int]:
    """(max_files, max_file_size bytes) from the task's `logs` block (Nomad: 10 x 10 MB)."""
    cfg = task.get("LogConfig") or {}
    files = int(cfg.get("MaxFiles") or 10)
    size_mb = int(cfg.get("MaxFileSizeMB") or 10)
    return files, size_mb * MB


async def _pump(fd: int, writer: RotatingWriter) -> None:
    """Copy one of the task's output pipes into its rotating files until the pipe closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
    finally:
        transport.close()
        writer.close()


def _log_writers(task: dict[str, Any], task_dir: str) -> tuple[RotatingWriter, RotatingWriter]:
    log_dir = os.path.join(os.path.dirname(task_dir), "alloc", "logs")
    name = str(task.get("Name") or os.path.basename(task_dir))
    files, size = log_config(task)
    try:
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
        out = RotatingWriter(log_dir, name, "stdout", files, size)
    except OSError as exc:
        raise DriverError(f"failed to open task logs: {exc.strerror}") from None
    try:
        return out, RotatingWriter(log_dir, name, "stderr", files, size)
    except OSError as exc:
        out.close()
        raise DriverError(f"failed to open task logs: {exc.strerror}") from None


def _drop_to(who: RunAs) -> Callable[[], None]:
    """Switch the child to the task's user before exec. uvloop (the services' loop) does not
    take subprocess's user/group arguments, so the child drops its rights itself: groups
    first, then the gid, the uid last (after it, nothing could be changed back)."""
    uid, gid, groups = who.uid, who.gid, list(who.groups)

    def drop() -> None:
        os.setgroups(groups)
        if gid is not None:
            os.setgid(gid)
        assert uid is not None
        os.setuid(uid)

    return drop


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
            identity = {"preexec_fn": _drop_to(who)}
        out_w, err_w = _log_writers(task, task_dir)
        out_r, stdout = os.pipe()
        err_r, stderr = os.pipe()
        if who.uid is not None:
            for w in (out_w, err_w):
                os.fchown(w.fd, who.uid, who.gid if who.gid is not None else -1)
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
            for fd in (out_r, err_r):
                os.close(fd)
            out_w.close()
            err_w.close()
            raise DriverError(f"failed to launch command with executor: {exc}") from None
        finally:
            os.close(stdout)
            os.close(stderr)
        pumps = [
            asyncio.create_task(_pump(out_r, out_w)),
            asyncio.create_task(_pump(err_r, err_w)),
        ]
        return _ProcHandle(proc, pumps)
