"""The process supervisor behind `trellis dev` and `trellis server`: starts children, restarts
one that crashes (exponential backoff, giving up after repeated crashes of one child), and on
SIGTERM or SIGINT stops intake (gateways first), drains, stops every child and NATS last,
within a stop timeout. It also works as PID 1 in a container: explicit signal handlers (the
kernel drops signals PID 1 has no handler for) and reaping of orphaned grandchildren."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from services.restarts import RestartPolicy
from shared import cpu_affinity, start_gate
from shared.localnet import free_port, http_json

# Kubernetes gives a pod 30 s between SIGTERM and SIGKILL; finish well inside it.
STOP_TIMEOUT = 25.0
PRIVATE_DIR = 0o700
TRAVERSE_DIR = 0o711  # others may pass through, never list
PRIVATE_FILE = 0o600
_PR_SET_CHILD_SUBREAPER = 36


def restrict_umask() -> None:
    """Everything this process and its children create (data dir, logs, the JetStream store
    nats-server writes, keys) is private to the owner from the moment it exists."""
    os.umask(0o077)


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) as 0700; tighten it if it already existed."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    path.chmod(PRIVATE_DIR)
    return path


def open_private(path: Path, mode: str = "ab") -> IO[bytes]:
    """Open for appending, created 0600 (no window between create and chmod)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    return os.fdopen(fd, mode)


def write_private(path: Path, data: str) -> None:
    with open_private(path, "wb") as out:
        out.write(data.encode())


def _become_subreaper() -> bool:
    """Orphaned grandchildren (workers of a crashed service) re-parent to us, so that we can
    reap them and sweep them at stop; Linux only."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _proc_is_ours() -> bool:
    """/proc shows our PID namespace (not so under `unshare --pid` without --mount-proc: then
    pid 1 in /proc is the host's init, and its children are not ours to sweep)."""
    try:
        return Path("/proc/self").resolve().name == str(os.getpid())
    except OSError:
        return False


def direct_children(pid: int) -> list[int]:
    """Pids whose parent is `pid`, from /proc (empty where /proc is absent or not ours)."""
    out: list[int] = []
    if not _proc_is_ours():
        return out
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            # The command name may hold spaces and parentheses: parse after the last ')'.
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                out.append(int(entry))
    return out


def child_role(pid: int) -> str:
    """What a process of ours runs: "nats", the service of `services.cli run <service>`, the
    command of `services.cli <command>`; "" once it is gone."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    words = [a.decode(errors="replace") for a in argv if a]
    if words and os.path.basename(words[0]) == "nats-server":
        return "nats"
    if "services.cli" in words[:-1]:
        command = words[words.index("services.cli") + 1 :]
        return command[1] if command[0] == "run" and len(command) > 1 else command[0]
    return words[0] if words else ""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    # Called (in a thread) after a restart, e.g. to unseal a restarted secrets replica.
    on_restart: Callable[[Child], None] | None = None
    restart_at: float | None = None  # a restart is due at this monotonic time
    restarts: int = 0
    gate: int | None = None  # started behind a start gate not yet released (its write end)
    health: str = ""  # host:port of its health server (/readyz)

    @property
    def kind(self) -> str:
        # "gateway#2" and "gateway-bootstrap" are gateways.
        return self.name.split("#", 1)[0].split("-", 1)[0]

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Supervisor:
    log_dir: Path
    env: dict[str, str]
    children: list[Child] = field(default_factory=list)
    inherit_output: bool = False
    stop_timeout: float = STOP_TIMEOUT
    # Environment added for one kind of child only ("secrets", "gateway", ...).
    per_kind_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # The CPUs a kind of child runs on (shared/cpu_affinity.py); absent kinds run anywhere.
    affinity: cpu_affinity.Layout = field(default_factory=dict)
    # While starting, a signal interrupts the start-up steps; afterwards it only sets flags.
    interrupt_on_signal: bool = True
    stop_signal: int = 0
    hurry: bool = False
    subreaper: bool = False
    retired: list[Child] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _stopping: bool = False

    # --- starting ------------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        argv: list[str],
        extra_env: dict[str, str] | None = None,
        *,
        gated: bool = False,
    ) -> Child:
        """Start a child; `gated`: it imports, then waits for `release` (shared/start_gate.py)."""
        # Each kind of child gets only its own credentials (services/dev_nats.py).
        kind = name.split("#", 1)[0].split("-", 1)[0]
        env = {**self.env, **self.per_kind_env.get(kind, {}), **(extra_env or {})}
        # A name for this child slot, the same across its restarts (a stable lease holder).
        env["TRELLIS_INSTANCE_ID"] = f"{name}-{self.run_id}"
        log = self.log_dir / f"{name}.log"
        if not gated:
            child = Child(name, self._popen(argv, env, log, kind=kind), log, argv, env)
        else:
            read, write, gate = start_gate.open_gate()
            try:
                proc = self._popen(
                    argv, {**env, start_gate.GATE_ENV: gate}, log, (read,), kind=kind
                )
            finally:
                os.close(read)
            child = Child(name, proc, log, argv, env, gate=write)
        self.children.append(child)
        return child

    def release(self, child: Child, extra_env: dict[str, str] | None = None) -> None:
        """Let a gated child start, with `extra_env` (kept for its restarts)."""
        child.env.update(extra_env or {})
        if child.gate is not None:
            start_gate.release(child.gate, extra_env or {})
            child.gate = None

    def _popen(
        self,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        pass_fds: tuple[int, ...] = (),
        *,
        kind: str,
    ) -> subprocess.Popen[bytes]:
        out = None if self.inherit_output else open_private(log)
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                # Its own process group: a terminal's Ctrl-C reaches only us, and a crashed
                # child's workers can be swept with its group.
                start_new_session=True,
                pass_fds=pass_fds,
            )
        finally:
            if out is not None:
                out.close()
        cpus = self.affinity.get(kind)
        if cpus:
            cpu_affinity.pin(proc.pid, cpus)
        return proc

    def service(
        self,
        name: str,
        *args: str,
        extra_env: dict[str, str] | None = None,
        gated: bool = False,
    ) -> Child:
        health = f"127.0.0.1:{free_port()}"
        child = self.spawn(
            name,
            [
                sys.executable,
                "-m",
                "services.cli",
                "run",
                name.split("#")[0],
                "--health-addr",
                health,
                *args,
            ],
            extra_env,
            gated=gated,
        )
        child.health = health
        return child

    @staticmethod
    def ready(child: Child) -> bool:
        """Its health server answers /readyz with 200 (false for a child without one, or while
        it starts)."""
        if not child.health or not child.alive():
            return False
        try:
            return http_json("GET", f"http://{child.health}/readyz", timeout=2)[0] == 200
        except (OSError, ValueError):  # not listening yet
            return False

    def retire(self, child: Child) -> None:
        """Stop a child for good without waiting for it (it is not restarted; `stop` makes
        sure it is gone)."""
        if child in self.children:
            self.children.remove(child)
        self.retired.append(child)
        with contextlib.suppress(ProcessLookupError):
            child.proc.send_signal(signal.SIGTERM)

    # --- messages ------------------------------------------------------------------------

    def note(self, text: str, child: Child | None = None) -> None:
        """Say it on stderr and in the supervisor's log (and in the child's own log, so that
        whoever reads it sees why it starts over)."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        sys.stderr.write(f"==> {text}\n")
        sys.stderr.flush()
        if self.inherit_output:
            return
        logs = [self.log_dir / "supervisor.log", *([child.log] if child else [])]
        for log in logs:
            with contextlib.suppress(OSError), open_private(log) as f:
                f.write(f"{stamp} [supervisor] {text}\n".encode())

    # --- signals -------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            if self.stop_signal:
                self.hurry = True  # a second signal: stop without waiting for drains
                return
            self.stop_signal = signum
            if self.interrupt_on_signal:
                raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        self.subreaper = _become_subreaper()

    # --- watching ------------------------------------------------------------------------

    def supervise(self) -> int:
        """Watch the children until a stop signal (0) or a child crashes too often (1)."""
        self.interrupt_on_signal = False
        if self.stop_signal:
            return 0
        while not self.stop_signal:
            self._reap_orphans()
            now = time.monotonic()
            for child in list(self.children):
                if child.restart_at is not None:
                    if now >= child.restart_at:
                        self._restart(child)
                    continue
                code = child.proc.poll()
                if code is None:
                    continue
                delay = child.policy.crashed(now)
                self._sweep_group(child)
                if delay is None:
                    self.note(
                        f"{child.name} exited with {code} {child.policy.recent} times within "
                        f"{child.policy.window:.0f}s; giving up (see {child.log})",
                        child,
                    )
                    return 1
                self.note(
                    f"{child.name} exited with {code}; restarting it in {delay:.1f}s "
                    f"(crash {child.policy.recent} within {child.policy.window:.0f}s; "
                    f"see {child.log})",
                    child,
                )
                child.restart_at = now + delay
            time.sleep(0.1)
        return 0

    def _restart(self, child: Child) -> None:
        child.restart_at = None
        child.restarts += 1
        child.proc = self._popen(child.argv, child.env, child.log, kind=child.kind)
        self.note(f"{child.name} restarted (pid {child.proc.pid}, restart {child.restarts})", child)
        if child.on_restart is not None:
            threading.Thread(
                target=self._run_hook, args=(child,), name=f"restart-{child.name}", daemon=True
            ).start()

    def _run_hook(self, child: Child) -> None:
        assert child.on_restart is not None
        try:
            child.on_restart(child)
        except Exception as exc:  # a hook failing must not take the supervisor down
            if not self.stop_signal:
                self.note(f"after restarting {child.name}: {type(exc).__name__}: {exc}")

    def _reap_orphans(self) -> None:
        """As PID 1 or a subreaper, orphans become our children: reap them (no zombies), and
        hand a child's status to its Popen when we reap one of ours by accident."""
        if not (self.subreaper or os.getpid() == 1):
            return
        ours = {c.proc.pid: c for c in [*self.children, *self.retired]}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = ours.get(pid)
            if child is not None and child.proc.returncode is None:
                child.proc.returncode = os.waitstatus_to_exitcode(status)

    @staticmethod
    def _sweep_group(child: Child) -> None:
        """A dead child's own workers (same process group) must not outlive it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)

    # --- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Gateways first (stop intake, drain in-flight requests), then every other service
        at once, NATS last; SIGKILL whatever outlives the stop timeout; then sweep orphans."""
        if self._stopping:
            return
        self._stopping = True
        self.interrupt_on_signal = False  # a signal now only hurries the stop along
        for child in self.children:
            if child.gate is not None:  # never released: it exits without starting
                start_gate.close(child.gate)
                child.gate = None
        start = time.monotonic()
        budget = self.stop_timeout
        children = [c for c in self.children if c.restart_at is None]
        gateways = [c for c in [*self.retired, *children] if c.kind == "gateway"]
        nats = [c for c in children if c.kind == "nats"]
        rest = [c for c in [*self.retired, *children] if c not in gateways and c not in nats]
        self._terminate(gateways, start + budget * 0.45)
        self._terminate(rest, start + budget * 0.85)
        self._terminate(nats, start + budget)
        for child in [*self.retired, *self.children]:
            self._sweep_group(child)
        self._sweep_orphans()

    def _terminate(self, children: list[Child], deadline: float) -> None:
        for child in children:
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        for child in children:
            while child.alive() and time.monotonic() < deadline and not self.hurry:
                self._reap_orphans()
                time.sleep(0.05)
            if child.alive():
                self.note(f"{child.name} did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(5)

    def _sweep_orphans(self) -> None:
        """Anything re-parented to us (a task a crashed client left behind) dies with us."""
        if not (self.subreaper or os.getpid() == 1):
            return
        me = os.getpid()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = direct_children(me)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 3
            while direct_children(me) and time.monotonic() < deadline:
                self._reap_orphans()
                time.sleep(0.05)
        self._reap_orphans()
