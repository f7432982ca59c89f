"""`trellis dev --tls` readies Terraform: the CLI config it writes and the organization it
creates, on a first start and on a start that reuses a data dir (the organization exists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services import dev_terraform


def _answer(monkeypatch: pytest.MonkeyPatch, code: int, body: Any) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def fake(method: str, url: str, body_: Any = None, token: str = "", **_: Any) -> Any:
        calls.append((url, body_["data"]["attributes"]["name"]))
        return code, body

    monkeypatch.setattr(dev_terraform, "http_json", fake)
    return calls


def test_writes_the_cli_config_and_creates_the_org(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _answer(monkeypatch, 201, {"data": {}})
    path = dev_terraform.prepare("127.0.0.1:18800", "tok-123", tmp_path)
    assert path.read_text() == 'credentials "localhost:18800" {\n  token = "tok-123"\n}\n'
    assert path.stat().st_mode & 0o777 == 0o600
    assert calls == [("https://localhost:18800/api/v2/organizations", dev_terraform.ORG)]
    assert "Terraform CLI config: " + str(path) in dev_terraform.banner(path)
    assert dev_terraform.banner(None) == ""


def test_a_kept_data_dir_already_has_the_org(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = {"errors": [{"status": "422", "detail": "Name has already been taken"}]}
    _answer(monkeypatch, 422, taken)
    (tmp_path / dev_terraform.CONFIG).write_text(
        'credentials "localhost:1" {\n  token = "old"\n}\n'
    )
    path = dev_terraform.prepare("127.0.0.1:18800", "new-tok", tmp_path)
    assert '"localhost:18800"' in path.read_text() and '"new-tok"' in path.read_text()
    assert "old" not in path.read_text()


def test_any_other_refusal_stops_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answer(monkeypatch, 401, {"errors": [{"status": "401"}]})
    with pytest.raises(SystemExit, match="creating the organization"):
        dev_terraform.prepare("127.0.0.1:18800", "tok", tmp_path)
