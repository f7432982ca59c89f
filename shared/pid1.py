"""`trellis run` as PID 1 of a container: a minimal init, as tini does. PID 1 inherits every
orphan of its PID namespace and must reap them (or they stay zombies), and the kernel drops any
signal PID 1 has no handler for. So PID 1 starts the service as its only child, forwards the
stop signals to it, reaps every process that exits, and exits with the service's status.
The service itself keeps its own child handling (asyncio's watcher) to itself."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

# Set in the service's environment, so that it does not become an init of its own.
INIT_CHILD = "TRELLIS_PID1_CHILD"
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def should_be_init() -> bool:
    return os.getpid() == 1 and not os.environ.get(INIT_CHILD)


def run_as_init(argv: list[str]) -> int:
    """Run `argv` as the only child; its exit status (128 + signal when killed)."""
    child = subprocess.Popen(argv, env={**os.environ, INIT_CHILD: "1"})

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.wait()  # any child: the service, or an orphan to reap
        except ChildProcessError:
            return 1
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code
