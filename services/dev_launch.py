"""Starting and stopping a `trellis dev` subprocess on chosen local ports: what the drills, the
benchmarks and the end-to-end tests share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def dev_argv(ports: Sequence[int], *extra: str) -> list[str]:
    """`trellis dev` (and `extra`) with its secrets, workspace and scheduler APIs on `ports`."""
    secrets, workspace, scheduler = ports
    return [
        sys.executable,
        "-m",
        "services.cli",
        "dev",
        "--secrets-addr",
        f"127.0.0.1:{secrets}",
        "--workspace-addr",
        f"127.0.0.1:{workspace}",
        "--scheduler-addr",
        f"127.0.0.1:{scheduler}",
        *extra,
    ]


def popen_dev(
    ports: Sequence[int], *extra: str, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen[Any]:
    """Start `trellis dev` from the source tree (`popen`: where its output goes, text mode)."""
    return subprocess.Popen(
        dev_argv(ports, *extra),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        **popen,
    )


def stop_process(
    proc: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 40.0
) -> int:
    """Send `sig` and wait up to `timeout` seconds, then kill; the exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
