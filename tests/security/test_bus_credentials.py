"""Issue 19 (6): the bus admits no one without credentials. `trellis dev`'s NATS refuses an
anonymous client; `trellis server`, `trellis run` and `trellis dev --nats-url` refuse to start
on a NATS that admits anonymous clients unless given `--insecure-bus`."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shared.localnet import free_port
from tests.procs import ROOT
from tests.security.bus_clients import DevBusTarget, connect_as

pytestmark = pytest.mark.e2e

REFUSAL = "admits clients without credentials"


def test_dev_nats_refuses_anonymous_clients(bus_target: DevBusTarget) -> None:
    t = bus_target

    async def probe() -> None:
        with pytest.raises(Exception):  # noqa: B017 - nats-py words the refusal variously
            nc = await connect_as(t.nats_url)
            try:  # if CONNECT was taken, a round trip shows the authorization error
                await nc.flush(timeout=5)
            finally:
                await nc.close()
        # The same server admits a service with its own credentials from the data dir.
        nc = await connect_as(t.nats_url, *t.creds("gateway"))
        assert nc.is_connected
        await nc.close()

    asyncio.run(probe())
    users = sorted(p.name for p in (t.data_dir / "nats-users").iterdir())
    assert "secrets.json" in users and "gateway.json" in users
    for path in [*(t.data_dir / "nats-users").iterdir(), t.data_dir / "nats.conf"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_server_refuses_an_open_nats(nats_url: str, tmp_path: Path) -> None:
    """The session's nats-server admits anyone: every entry point refuses it."""
    port = free_port()
    cfg = tmp_path / "trellis.yaml"
    cfg.write_text(
        f"nats_url: {nats_url}\n"
        f"cluster_name: open{port}\n"
        f"secrets_addr: 127.0.0.1:{port}\n"
        f"workspace_addr: 127.0.0.1:{free_port()}\n"
        f"scheduler_addr: 127.0.0.1:{free_port()}\n"
    )
    server = _run(["server", "--config", str(cfg)])
    assert server.returncode != 0 and REFUSAL in server.stderr, server.stderr[-2000:]
    run = _run(["run", "gateway", "--nats-url", nats_url, "--health-addr", f"127.0.0.1:{port}"])
    assert run.returncode != 0 and REFUSAL in run.stderr, run.stderr[-2000:]
    ports = [str(free_port()) for _ in range(3)]
    dev = _run(
        [
            "dev",
            "--nats-url",
            nats_url,
            "--data-dir",
            str(tmp_path / "dev"),
            "--secrets-addr",
            f"127.0.0.1:{ports[0]}",
            "--workspace-addr",
            f"127.0.0.1:{ports[1]}",
            "--scheduler-addr",
            f"127.0.0.1:{ports[2]}",
            "--cluster-name",
            f"open{ports[0]}",
        ]
    )
    assert dev.returncode != 0 and REFUSAL in dev.stderr + dev.stdout, dev.stderr[-2000:]
