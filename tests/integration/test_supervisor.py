"""The supervisor with real (tiny) child processes: a crashing child is restarted with backoff
and the supervisor gives up after repeated crashes; stop() ends every child within the stop
timeout (SIGKILL for one that ignores SIGTERM) and sweeps their process groups; logs are
created 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from services.restarts import RestartPolicy
from services.supervisor import Supervisor
from shared import start_gate
from tests.procs import alive, until

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


# A child behind a start gate (shared/start_gate.py): once released, it says what its
# environment holds.
GATED = (
    "import os; from shared.start_gate import wait_at_gate; wait_at_gate(); "
    "print('started', os.environ.get('GATE_VALUE'), flush=True)"
)


def test_a_gated_child_waits_until_released_with_its_env(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, dict(os.environ), interrupt_on_signal=False)
    child = sup.spawn("gated", [PY, "-c", GATED], gated=True)
    log = tmp_path / "gated.log"
    try:
        # Held at the gate: blocked reading its end of the pipe, not started.
        until(lambda: "pipe" in _wchan(child.proc.pid), 30, "the child to wait at its gate")
        assert "started" not in log.read_text() and child.alive()
        sup.release(child, {"GATE_VALUE": "v1"})
        until(lambda: "started v1" in log.read_text(), 30, "the released child to start")
        # Its restarts get the released environment, and no gate.
        assert child.env["GATE_VALUE"] == "v1" and child.gate is None
    finally:
        sup.stop()


def test_stop_before_release_ends_a_gated_child_unstarted(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, dict(os.environ), interrupt_on_signal=False)
    child = sup.spawn("gated", [PY, "-c", GATED], gated=True)
    log = tmp_path / "gated.log"
    until(lambda: "pipe" in _wchan(child.proc.pid), 30, "the child to wait at its gate")
    sup.stop()
    assert child.proc.poll() is not None
    assert "started" not in log.read_text()


def _wchan(pid: int) -> str:
    """Where in the kernel the process waits ("anon_pipe_read": reading a pipe)."""
    return Path(f"/proc/{pid}/wchan").read_text()


def test_an_environment_copied_from_a_gated_child_holds_no_gate(tmp_path: Path) -> None:
    """A process started with a gated child's environment (as read from /proc) starts at once:
    the descriptor the variable names is not its pipe."""
    sup = Supervisor(tmp_path, dict(os.environ), interrupt_on_signal=False)
    child = sup.spawn("gated", [PY, "-c", GATED], gated=True)
    try:
        until(lambda: "pipe" in _wchan(child.proc.pid), 30, "the child to wait at its gate")
        raw = Path(f"/proc/{child.proc.pid}/environ").read_bytes()
        copied = dict(i.decode().split("=", 1) for i in raw.split(b"\0") if b"=" in i)
        assert start_gate.GATE_ENV in copied
        out = subprocess.run(
            [PY, "-c", GATED],
            env={**copied, "GATE_VALUE": "copied"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.stdout.strip() == "started copied", out
    finally:
        sup.stop()


def _masks(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()]


def test_a_kind_with_cpus_runs_pinned_threads_and_restarts_included(tmp_path: Path) -> None:
    usable = os.sched_getaffinity(0)
    cpu = frozenset({min(usable)})
    sup = Supervisor(tmp_path, dict(os.environ), interrupt_on_signal=False)
    sup.affinity = {"secrets": cpu}
    # Threads started at once, as nats-server's runtime and uvloop's do.
    script = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print('up', flush=True); time.sleep(60)"
    )
    pinned = sup.spawn("secrets#2", [PY, "-c", script])
    free = sup.spawn("workspace", [PY, "-c", script])
    try:
        until(lambda: "up" in pinned.log.read_text() and "up" in free.log.read_text())
        masks = _masks(pinned.proc.pid)
        assert len(masks) == 4 and all(m == cpu for m in masks), masks
        assert all(m == usable for m in _masks(free.proc.pid))
        pinned.proc.kill()
        pinned.proc.wait()
        sup._restart(pinned)
        until(lambda: pinned.log.read_text().count("up") == 2)
        assert all(m == cpu for m in _masks(pinned.proc.pid))
    finally:
        sup.stop()


def _trellis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "services.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_trellis_dev_refuses_a_bad_cpu_affinity_before_starting_anything(tmp_path: Path) -> None:
    got = _trellis("dev", "--cpu-affinity", "secrets=999", "--data-dir", str(tmp_path))
    assert got.returncode != 0
    assert "--cpu-affinity: secrets: CPUs [999] are not usable here" in got.stderr
    assert not (tmp_path / "logs").exists()


def test_trellis_server_refuses_a_bad_cpu_affinity_before_starting_anything(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "trellis.yaml"
    # No NATS at that address: the setting is refused before anything is reached.
    cfg.write_text('nats_url: nats://127.0.0.1:1\ncpu_affinity: "gateway=0-x"\n')
    got = _trellis("server", "--config", str(cfg))
    assert got.returncode != 0
    assert "cpu_affinity: not a CPU list: '0-x'" in got.stderr
