"""`trellis dev --tls` plumbing: the environment it hands the gateway reaches every listener's
TLS settings, key files are private from their first byte, and the banner names the CA."""

from __future__ import annotations

import argparse
from pathlib import Path

from services import dev_tls
from shared.settings import load_settings


def test_env_configures_every_listener(tmp_path: Path) -> None:
    tls = dev_tls.DevTls(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "key.pem")
    settings = load_settings(env=tls.env())
    for name in ("secrets", "workspace", "scheduler"):
        listener = getattr(settings, f"{name}_tls")
        assert listener.cert_file == str(tmp_path / "server.pem")
        assert listener.key_file == str(tmp_path / "key.pem")
    assert load_settings(env={}).workspace_tls.cert_file == ""  # plain HTTP by default


def test_private_files_and_banner(tmp_path: Path) -> None:
    path = tmp_path / "server-key.pem"
    path.write_text("old")
    path.chmod(0o644)
    dev_tls._write_private(path, b"new key")
    assert path.read_bytes() == b"new key" and path.stat().st_mode & 0o777 == 0o600
    on, off = argparse.Namespace(tls=True), argparse.Namespace(tls=False)
    assert dev_tls.banner(on, tmp_path) == f"CA certificate: {tmp_path / 'tls' / 'ca.pem'}\n"
    assert dev_tls.banner(off, tmp_path) == ""
    assert (dev_tls.scheme(on), dev_tls.scheme(off)) == ("https", "http")
