"""A pytest plugin for hvac's own integration tests that points their server manager at
`trellis dev` instead of `vault server -config=vault-tls.hcl` (loaded by bench/hvac_suite.py
with `-p hvac_trellis_plugin`; it imports nothing from Trellis, whose `tests` package would
shadow hvac's).

hvac starts one server per test class, then initialises it (5 shares, threshold 3) and
unseals it. `trellis dev` initialises and unseals itself (one share) before its listener opens,
so `initialize` adopts the root token it prints and rekeys its share into 5 (threshold 3), and
the dev server's `secret/` mount is removed; everything else in hvac's harness and tests runs
unmodified. The listener is plain HTTP: hvac's
client certificate and CA are simply unused."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import requests

ROOT = Path(os.environ["HVAC_TRELLIS_ROOT"])
START_TIMEOUT = 180.0  # trellis dev on a busy 2-core machine
STOP_TIMEOUT = 40.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(manager: Any, **_: Any) -> None:
    from tests.utils import create_client

    ports = [_free_port() for _ in range(3)]
    data = tempfile.mkdtemp(prefix="hvac-trellis-")
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "dev",
        "--services",
        "crypto",
        "--data-dir",
        data,
        "--secrets-addr",
        f"127.0.0.1:{ports[0]}",
        "--workspace-addr",
        f"127.0.0.1:{ports[1]}",
        "--scheduler-addr",
        f"127.0.0.1:{ports[2]}",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # so a stuck stop can take the whole group down
    )
    found: dict[str, str] = {}
    deadline = time.monotonic() + START_TIMEOUT
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.match(r"(Unseal Key|Root Token): (\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
        if line.startswith("Press Ctrl-C") or time.monotonic() > deadline:
            break
    manager._trellis = (proc, data)
    if "Root Token" not in found:
        _stop(manager)
        raise RuntimeError("trellis dev did not start")
    manager._trellis_url = f"http://127.0.0.1:{ports[0]}"
    manager._trellis_found = found
    # hvac's server is `vault server` with its own config, not a dev server: no `secret/` KV v2
    # mount (its tests mount a KV v1 `secret/` when there is none).
    gone = requests.delete(
        f"{manager._trellis_url}/v1/sys/mounts/secret",
        headers={"X-Vault-Token": found["Root Token"]},
        timeout=30,
    )
    gone.raise_for_status()
    if manager.client is None:
        manager.client = create_client(url=manager._trellis_url)


def _stop(manager: Any) -> None:
    manager.client = None
    proc, data = getattr(manager, "_trellis", (None, ""))
    manager._trellis = (None, "")
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    shutil.rmtree(data, ignore_errors=True)


def _initialize(manager: Any) -> None:
    found = manager._trellis_found
    manager.root_token = manager.client.token = found["Root Token"]
    # hvac initialises with 5 shares and a threshold of 3: rekey dev's single share to that.
    url = manager._trellis_url
    started = requests.put(
        f"{url}/v1/sys/rekey/init", json={"secret_shares": 5, "secret_threshold": 3}, timeout=30
    )
    started.raise_for_status()
    done = requests.put(
        f"{url}/v1/sys/rekey/update",
        json={"key": found["Unseal Key"], "nonce": started.json()["nonce"]},
        timeout=30,
    )
    done.raise_for_status()
    manager.keys = done.json()["keys"]


def _addresses(manager: Any) -> list[str]:
    return [manager._trellis_url]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from tests.utils.server_manager import ServerManager

    ServerManager.start_vault = _start
    ServerManager.stop = _stop
    ServerManager.initialize = _initialize
    ServerManager.get_active_vault_addresses = _addresses
