"""Which part of the secrets cluster identity each process holds, from its settings."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from shared.cluster_identity import (
    IdentityError,
    insecure_identity,
    load_identity,
    new_cluster_key,
    write_crypto_key,
)
from shared.settings import Settings


def test_roles_get_only_their_part(tmp_path: Path) -> None:
    full = new_cluster_key(tmp_path / "cluster.key")
    assert stat.S_IMODE((tmp_path / "cluster.key").stat().st_mode) == 0o600
    write_crypto_key(tmp_path / "crypto.key", full)
    secrets = load_identity(Settings(cluster_key_file=str(tmp_path / "cluster.key")))
    assert secrets.signing_key is not None and secrets.replica_key == full.replica_key
    crypto = load_identity(
        Settings(crypto_key_file=str(tmp_path / "crypto.key"), cluster_public_key=full.public_b64)
    )
    assert crypto.crypto_key == full.crypto_key
    assert crypto.signing_key is None and crypto.replica_key is None and crypto.ticket_key is None
    gateway = load_identity(Settings(cluster_public_key=full.public_b64))
    assert gateway.public_b64 == full.public_b64 and gateway.signing_key is None
    # The derived keys differ from each other: one leaked purpose opens no other.
    assert len({full.replica_key, full.ticket_key, full.crypto_key}) == 3
    # Made once: a second call reads the same key.
    assert new_cluster_key(tmp_path / "cluster.key").public_b64 == full.public_b64


def test_no_identity_is_an_error_unless_the_bus_is_declared_insecure(tmp_path: Path) -> None:
    with pytest.raises(IdentityError, match="--insecure-bus"):
        load_identity(Settings())
    a = load_identity(Settings(insecure_bus=True, cluster_name="x"))
    assert a.insecure and a.public_b64 == insecure_identity("x").public_b64
    assert a.public_b64 != insecure_identity("y").public_b64
    bad = tmp_path / "bad.key"
    bad.write_text("not base64!")
    with pytest.raises(IdentityError, match="not base64"):
        load_identity(Settings(cluster_key_file=str(bad)))
    with pytest.raises(IdentityError, match="cannot read"):
        load_identity(Settings(cluster_key_file=str(tmp_path / "missing")))
