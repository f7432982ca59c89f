"""`trellis server --config FILE` runs a non-dev node from a config file, and `trellis run`
runs one service with its health endpoints."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from services.dev_launch import stop_process
from tests.conftest import free_port
from tests.integration.test_gateway_tls import self_signed
from tests.procs import ROOT, server_config, start_server, until, wait_http

pytestmark = pytest.mark.e2e


def test_server_from_config_file(nats_url: str, tmp_path: Path) -> None:
    cfg, ports = server_config(nats_url, tmp_path)
    # A certificate and key for one listener only: it serves HTTPS, the others plain HTTP.
    cert, key = self_signed(tmp_path)
    with cfg.open("a") as f:
        f.write(f"workspace_tls:\n  cert_file: {cert}\n  key_file: {key}\n")
    proc = start_server(cfg)
    try:
        base = f"http://127.0.0.1:{ports[0]}"
        wait_http(base + "/v1/sys/health", ok=(501,))
        r = requests.post(
            base + "/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}, timeout=30
        )
        assert r.status_code == 200
        r = requests.post(base + "/v1/sys/unseal", json={"key": r.json()["keys"][0]}, timeout=30)
        assert r.json()["sealed"] is False
        assert requests.get(base + "/readyz", timeout=5).status_code == 200
        workspace = f"https://localhost:{ports[1]}/api/v2/ping"

        def ping() -> bool:
            with contextlib.suppress(requests.RequestException):
                return requests.get(workspace, verify=str(cert), timeout=5).status_code == 204
            return False

        until(ping, what="the workspace API over HTTPS with the configured certificate")
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(workspace, timeout=30)  # not a certificate the system trusts
        with pytest.raises(requests.RequestException):
            requests.get(f"http://127.0.0.1:{ports[1]}/api/v2/ping", timeout=30)
    finally:
        assert stop_process(proc, signal.SIGINT, 40) == 0


def test_run_one_service_serves_health(nats_url: str, tmp_path: Path) -> None:
    health = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            "secrets",
            "--nats-url",
            nats_url,
            "--insecure-bus",
            "--health-addr",
            f"127.0.0.1:{health}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{health}/readyz")
        assert requests.get(f"http://127.0.0.1:{health}/healthz", timeout=5).status_code == 200
        metrics = requests.get(f"http://127.0.0.1:{health}/metrics", timeout=5).text
        assert "process_cpu_seconds_total" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
