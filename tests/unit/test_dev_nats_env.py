"""The dev nats-server runs with one Go scheduler thread (services/dev_nats.py), unless the user
set GOMAXPROCS; no service process is given the setting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services import dev_nats
from services.supervisor import Supervisor
from shared.nats_permissions import USERS


def test_the_dev_nats_server_gets_one_scheduler_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    env = dev_nats.DevBus().per_kind_env()
    assert env["nats"] == {"GOMAXPROCS": "1"}
    assert all("GOMAXPROCS" not in env[kind] for kind in USERS)


def test_a_users_gomaxprocs_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOMAXPROCS", "3")
    assert dev_nats.DevBus().per_kind_env()["nats"] == {"GOMAXPROCS": "3"}


def test_the_supervisor_hands_it_to_the_child_named_nats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    sup = Supervisor(tmp_path, {"PATH": "/usr/bin:/bin"})
    sup.per_kind_env = dev_nats.DevBus().per_kind_env()
    show = [sys.executable, "-c", "import os; print('G=' + os.environ.get('GOMAXPROCS', '-'))"]
    nats = sup.spawn("nats", show)
    other = sup.spawn("secrets", show)
    for child in (nats, other):
        child.proc.wait(timeout=30)
    assert "G=1" in nats.log.read_text()
    assert "G=-" in other.log.read_text()
