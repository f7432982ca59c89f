"""`trellis dev`'s NATS: one user per service, their credentials in the data dir (0600), and a
nats.conf whose authorization block is the permission table of shared/nats_permissions.py.

Also the secrets cluster identity of a dev cluster (shared/cluster_identity.py): the cluster key
for secrets and replication, the crypto workers' key, and the public key the gateway pins.
Callable again on restart: existing credentials and keys are kept, the config rewritten.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from shared.cluster_identity import (
    ClusterIdentity,
    new_cluster_key,
    write_crypto_key,
    write_secret_file,
)
from shared.nats_permissions import USERS, authorization_block
from shared.service_identity import derive_service_key, write_service_key

CREDS_DIR = "nats-users"
CLUSTER_KEY = "cluster.key"
CRYPTO_KEY = "crypto.key"
CLUSTER_LINE = "# trellis cluster: "


@dataclass
class DevBus:
    """What `trellis dev` hands each child: its own NATS credentials file and its part of the
    cluster identity, never another service's."""

    creds: dict[str, Path] = field(default_factory=dict)  # user -> credentials file
    identity: ClusterIdentity | None = None
    cluster_key: Path | None = None
    crypto_key: Path | None = None
    # The workspace's and scheduler's own keys (shared/service_identity.py), one file each.
    service_keys: dict[str, Path] = field(default_factory=dict)
    insecure: bool = False

    def env_for(self, kind: str) -> dict[str, str]:
        env: dict[str, str] = {}
        if kind in self.creds:
            env["TRELLIS_NATS_CREDENTIALS_FILE"] = str(self.creds[kind])
        if self.insecure:
            env["TRELLIS_INSECURE_BUS"] = "true"
        if self.identity is not None:
            env["TRELLIS_CLUSTER_PUBLIC_KEY"] = self.identity.public_b64
        if kind in ("secrets", "replication") and self.cluster_key is not None:
            env["TRELLIS_CLUSTER_KEY_FILE"] = str(self.cluster_key)
            if "plugin" in self.creds:
                env["TRELLIS_PLUGIN_NATS_CREDENTIALS_FILE"] = str(self.creds["plugin"])
        if kind == "crypto" and self.crypto_key is not None:
            env["TRELLIS_CRYPTO_KEY_FILE"] = str(self.crypto_key)
        if kind in self.service_keys:
            env["TRELLIS_SERVICE_KEY_FILE"] = str(self.service_keys[kind])
        return env

    def per_kind_env(self) -> dict[str, dict[str, str]]:
        return {kind: self.env_for(kind) for kind in USERS} | {"nats": server_env()}


def server_env() -> dict[str, str]:
    """The dev nats-server's environment: one Go scheduler thread (GOMAXPROCS=1) unless the
    user chose otherwise. With the services' processes on the same few cores, more threads buy
    nats-server no throughput, only futex and wake-up syscalls: measured, its CPU per KV read
    drops by about a quarter (docs/performance.md, fifth round). Fsyncs still block only their
    own thread (Go hands the scheduler slot on during a syscall)."""
    return {"GOMAXPROCS": os.environ.get("GOMAXPROCS", "1")}


def credentials(data_dir: Path) -> dict[str, Path]:
    """One password per service user, generated once (0600 files in a 0700 directory)."""
    folder = data_dir / CREDS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    out: dict[str, Path] = {}
    for user in USERS:
        path = folder / f"{user}.json"
        if not path.exists():
            secret = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode()
            write_secret_file(path, json.dumps({"user": user, "password": secret}))
        out[user] = path
    return out


def read_credentials(path: Path | str) -> tuple[str, str]:
    data = json.loads(Path(path).read_text())
    return str(data["user"]), str(data["password"])


def identity(data_dir: Path) -> tuple[ClusterIdentity, Path, Path]:
    """The dev cluster's key (made once) and the crypto workers' key derived from it."""
    key_path = data_dir / CLUSTER_KEY
    ident = new_cluster_key(key_path)
    crypto_path = data_dir / CRYPTO_KEY
    write_crypto_key(crypto_path, ident)
    return ident, key_path, crypto_path


def service_keys(data_dir: Path, ident: ClusterIdentity) -> dict[str, Path]:
    """`<service>.key` (0600) for the workspace and scheduler: each process gets only its own."""
    out: dict[str, Path] = {}
    for service in ("workspace", "scheduler"):
        path = data_dir / f"{service}.key"
        write_service_key(path, derive_service_key(ident, service))
        out[service] = path
    return out


def configured_cluster(data_dir: Path) -> str:
    """The cluster name the existing nats.conf was written for ("trellis" if none)."""
    conf = data_dir / "nats.conf"
    if conf.exists():
        for line in conf.read_text().splitlines():
            if line.startswith(CLUSTER_LINE):
                return line[len(CLUSTER_LINE) :].strip()
    return "trellis"


def write_config(data_dir: Path, cluster: str, creds: dict[str, Path]) -> Path:
    """nats.conf (0600: it holds the passwords) for a single dev nats-server."""
    passwords = {user: read_credentials(path)[1] for user, path in creds.items()}
    text = (
        f"{CLUSTER_LINE}{cluster}\n"
        "max_payload: 64MB\n"
        f'jetstream {{ store_dir: "{data_dir / "jetstream"}", sync_interval: always }}\n'
        + authorization_block(cluster, passwords)
    )
    conf = data_dir / "nats.conf"
    write_secret_file(conf, text)
    return conf


def prepare(data_dir: Path, cluster: str, *, own_nats: bool, insecure: bool) -> DevBus:
    """Credentials, identity and (for our own nats-server) its config. With an external NATS
    the services take their credentials from the environment/settings instead."""
    ident, key_path, crypto_path = identity(data_dir)
    bus = DevBus(identity=ident, cluster_key=key_path, crypto_key=crypto_path, insecure=insecure)
    bus.service_keys = service_keys(data_dir, ident)
    if own_nats:
        bus.creds = credentials(data_dir)
        write_config(data_dir, cluster, bus.creds)
    return bus


def existing(data_dir: Path) -> DevBus:
    """The DevBus of a dev cluster's data dir, for tools that add processes to a running
    cluster (benchmarks, tests): the same credentials and keys the dev children got."""
    ident, key_path, crypto_path = identity(data_dir)
    bus = DevBus(identity=ident, cluster_key=key_path, crypto_key=crypto_path)
    bus.service_keys = service_keys(data_dir, ident)
    if (data_dir / CREDS_DIR).is_dir():
        bus.creds = credentials(data_dir)
    return bus
