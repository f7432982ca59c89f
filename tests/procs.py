"""Trellis processes for end-to-end and chaos tests: real `trellis` subprocesses."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class DevProcess:
    proc: subprocess.Popen[str]
    secrets: str
    workspace: str
    scheduler: str
    root_token: str
    unseal_key: str
    output: list[str]
    ca_file: str = ""  # `--tls`: the dev CA clients must trust

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_dev(*args: str, timeout: float = 120.0) -> DevProcess:
    """Start `trellis dev` and wait for its banner."""
    ports = [free_port() for _ in range(3)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "dev",
            "--secrets-addr",
            f"127.0.0.1:{ports[0]}",
            "--workspace-addr",
            f"127.0.0.1:{ports[1]}",
            "--scheduler-addr",
            f"127.0.0.1:{ports[2]}",
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out: list[str] = []
    token = key = ca = ""
    # The banner says http:// or https:// (`--tls`); default to what the ports imply.
    urls = {
        name: f"http://127.0.0.1:{port}"
        for name, port in zip(("Secrets", "Workspace", "Scheduler"), ports, strict=True)
    }
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        if m := re.match(r"Root Token: (\S+)", line):
            token = m.group(1)
        if m := re.match(r"Unseal Key: (\S+)", line):
            key = m.group(1)
        if m := re.match(r"(Secrets|Workspace|Scheduler) API:\s+(\S+)", line):
            urls[m.group(1)] = m.group(2)
        if m := re.match(r"CA certificate: (\S+)", line):
            ca = m.group(1)
        if line.startswith("Press Ctrl-C") or time.monotonic() > deadline:
            break
    if not token:
        proc.kill()
        raise AssertionError("trellis dev did not start:\n" + "".join(out))
    return DevProcess(
        proc, urls["Secrets"], urls["Workspace"], urls["Scheduler"], token, key, out, ca
    )


@contextlib.contextmanager
def dev(*args: str) -> Iterator[DevProcess]:
    d = start_dev(*args)
    try:
        yield d
    finally:
        d.stop()


def spawn_service(
    name: str, nats_url: str, cluster: str, log_dir: Path, **env: str
) -> subprocess.Popen[bytes]:
    log = open(log_dir / f"{name}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            name,
            "--health-addr",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRELLIS_NATS_URL": nats_url,
            "TRELLIS_CLUSTER_NAME": cluster,
            "TRELLIS_LOG_JSON": "false",
            # The session's NATS admits anyone; the cluster key is the name-derived one.
            "TRELLIS_INSECURE_BUS": "true",
            **env,
        },
    )


def wait_http(url: str, timeout: float = 60.0, ok: tuple[int, ...] = (200,)) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=2).status_code in ok:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready in {timeout}s")
