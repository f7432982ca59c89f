"""Settings: defaults, file, environment, in that order of strength."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from shared.settings import load_settings


def test_file_then_env(tmp_path: Path) -> None:
    cfg = tmp_path / "t.yaml"
    cfg.write_text("replicas: 3\nseal:\n  type: static\n  key: abc\nlog_json: false\n")
    s = load_settings(
        cfg, env={"TRELLIS_REPLICAS": "5", "TRELLIS_SEAL__KEY": "xyz", "TRELLIS_UNRELATED": "1"}
    )
    assert s.replicas == 5 and s.seal.type == "static" and s.seal.key == "xyz"
    assert s.log_json is False and s.secrets_addr == "127.0.0.1:8200"


def test_unknown_key_in_file_is_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "t.yaml"
    cfg.write_text("replcas: 3\n")
    with pytest.raises(msgspec.ValidationError):
        load_settings(cfg, env={})
