"""deploy/nats/secure.conf and `trellis dev`'s generated nats.conf come from one permission
table (shared/nats_permissions.py): the checked-in file must be that table, rendered."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from services import dev_nats
from shared.nats_permissions import USERS, authorization_block, render_secure_conf, subjects_for
from shared.subjects import ALL

ROOT = Path(__file__).resolve().parents[2]


def test_secure_conf_is_the_table() -> None:
    text = (ROOT / "deploy/nats/secure.conf").read_text()
    assert text == render_secure_conf(), "regenerate: python -m shared.nats_permissions"
    refs = {u: f"$TRELLIS_NATS_{u.upper()}_PASSWORD" for u in USERS}
    assert authorization_block("trellis", refs) in text


def test_k8s_nats_uses_the_table() -> None:
    refs = {u: f"$TRELLIS_NATS_{u.upper()}_PASSWORD" for u in USERS}
    assert authorization_block("trellis", refs) in (ROOT / "k8s/nats/nats.conf").read_text()


def test_only_secrets_replicas_see_seal_traffic_and_key_material() -> None:
    seal = [s.on("trellis") for s in ALL if s.name.startswith("secrets.seal")]
    for user in USERS:
        subscribe = subjects_for(user, "trellis").subscribe
        sees = any(p in ("trellis.secrets.>", ">") or p in seal for p in subscribe)
        assert sees == (user == "secrets"), user
    # The gateway may not publish seal traffic or crypto commands.
    gw = subjects_for("gateway", "trellis").publish
    assert not any(p.startswith(("trellis.secrets", "trellis.crypto")) for p in gw)


def test_dev_files_are_private_and_per_user(tmp_path: Path) -> None:
    bus = dev_nats.prepare(tmp_path, "c1", own_nats=True, insecure=False)
    conf = (tmp_path / "nats.conf").read_text()
    assert "c1.api.>" in conf and "trellis.api" not in conf
    for user, path in bus.creds.items():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["user"] == user
    for name in ("nats.conf", "cluster.key", "crypto.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    # Each child gets its own credentials file, and only secrets/replication the cluster key.
    assert bus.env_for("gateway")["TRELLIS_NATS_CREDENTIALS_FILE"].endswith("gateway.json")
    assert "TRELLIS_CLUSTER_KEY_FILE" not in bus.env_for("gateway")
    assert "TRELLIS_CLUSTER_KEY_FILE" not in bus.env_for("crypto")
    assert "TRELLIS_CRYPTO_KEY_FILE" in bus.env_for("crypto")
    assert "TRELLIS_CLUSTER_KEY_FILE" in bus.env_for("secrets")
    # Called again (a restart): the same credentials and keys.
    again = dev_nats.prepare(tmp_path, "c1", own_nats=True, insecure=False)
    assert again.creds == bus.creds and again.identity.public_b64 == bus.identity.public_b64
    assert dev_nats.configured_cluster(tmp_path) == "c1"
