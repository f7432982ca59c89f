"""Per-service keys (shared/service_identity.py): one certified key per service, a file that
holds only that service's key, and no way for one service to pass for another."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature

from shared.cluster_identity import ClusterIdentity, IdentityError, insecure_identity
from shared.service_identity import (
    derive_service_key,
    load_service_key,
    read_service_key,
    verify_service,
    write_service_key,
)
from shared.settings import Settings

IDENTITY = ClusterIdentity.from_seed(os.urandom(32))


def test_each_service_has_its_own_certified_key() -> None:
    keys = {s: derive_service_key(IDENTITY, s) for s in ("secrets", "workspace", "scheduler")}
    assert len({k.public for k in keys.values()}) == 3
    assert len({k.ticket_key for k in keys.values()}) == 3
    # The secrets service's key is the cluster key; its tickets are the cluster's.
    assert keys["secrets"].seed == IDENTITY.signing_key.private_bytes_raw()  # type: ignore[union-attr]
    assert keys["secrets"].ticket_key == IDENTITY.ticket_key
    for name, key in keys.items():
        verify_service(IDENTITY.public_key, name, key.public, key.certificate)
        for other in keys:
            if other != name:
                with pytest.raises(InvalidSignature):
                    verify_service(IDENTITY.public_key, other, key.public, key.certificate)
    foreign = ClusterIdentity.from_seed(os.urandom(32))
    with pytest.raises(InvalidSignature):
        verify_service(foreign.public_key, "workspace", keys["workspace"].public, b"\0" * 64)


def test_a_service_key_file_holds_that_service_only(tmp_path: Path) -> None:
    key = derive_service_key(IDENTITY, "workspace")
    path = tmp_path / "workspace.key"
    write_service_key(path, key)
    assert path.stat().st_mode & 0o777 == 0o600
    again = read_service_key(path, "workspace")
    assert again.public == key.public and again.ticket_key == key.ticket_key
    assert IDENTITY.signing_key.private_bytes_raw() not in path.read_bytes()  # type: ignore[union-attr]
    with pytest.raises(IdentityError, match="is for 'workspace'"):
        read_service_key(path, "scheduler")
    path.write_text("{not json")
    with pytest.raises(IdentityError, match="malformed"):
        read_service_key(path, "workspace")


def test_load_order(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.key"
    write_service_key(path, derive_service_key(IDENTITY, "scheduler"))
    own = load_service_key(Settings(service_key_file=str(path)), "scheduler")
    assert own.public == derive_service_key(IDENTITY, "scheduler").public
    insecure = load_service_key(Settings(cluster_name="x", insecure_bus=True), "workspace")
    assert insecure.public == derive_service_key(insecure_identity("x"), "workspace").public
    with pytest.raises(IdentityError, match="no workspace service identity"):
        load_service_key(Settings(), "workspace")
