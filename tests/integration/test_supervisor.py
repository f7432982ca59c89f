"""The supervisor with real (tiny) child processes: a crashing child is restarted with backoff
and the supervisor gives up after repeated crashes; stop() ends every child within the stop
timeout (SIGKILL for one that ignores SIGTERM) and sweeps their process groups; logs are
created 0600."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from services.restarts import RestartPolicy
from services.supervisor import Supervisor
from tests.procs import alive

PY = sys.executable


def test_a_crashing_child_is_restarted_then_given_up_on(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, dict(os.environ), interrupt_on_signal=False)
    child = sup.spawn("flaky", [PY, "-c", "import sys; sys.exit(3)"])
    child.policy = RestartPolicy(base=0.05, window=30.0, limit=3)
    started = time.monotonic()
    assert sup.supervise() == 1
    # Two restarts (after 0.05 s and 0.1 s), then the third crash within the window ends it.
    assert child.restarts == 2
    assert time.monotonic() - started < 10
    said = (tmp_path / "supervisor.log").read_text()
    assert said.count("flaky exited with 3") == 3
    assert "flaky restarted" in said and "giving up" in said
    for log in tmp_path.iterdir():
        assert stat.S_IMODE(log.stat().st_mode) == 0o600, log
    sup.stop()


def test_stop_ends_every_child_and_their_groups(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, dict(os.environ), stop_timeout=3.0, interrupt_on_signal=False)
    stubborn = sup.spawn(
        "stubborn",
        [
            PY,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(60)",
        ],
    )
    # A service with a worker of its own (same process group), like crypto --processes 2.
    parent = sup.spawn(
        "parent",
        [
            PY,
            "-c",
            "import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)",
        ],
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (tmp_path / "parent.log").read_text().strip() and (
            tmp_path / "stubborn.log"
        ).read_text().strip():
            break
        time.sleep(0.05)
    worker = int((tmp_path / "parent.log").read_text().split()[0])
    assert alive(worker)
    started = time.monotonic()
    sup.stop()
    assert time.monotonic() - started < 3.0 + 6
    assert stubborn.proc.returncode is not None and parent.proc.returncode is not None
    deadline = time.monotonic() + 5
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker), "a child's worker outlived the supervisor's stop"
    assert "stubborn did not stop in time" in (tmp_path / "supervisor.log").read_text()
