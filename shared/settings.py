"""Typed settings: defaults, overridden by a config file (YAML or JSON), overridden by
environment variables `TRELLIS_<FIELD>` (nested fields joined with `__`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import yaml


class SealSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # "shamir": unseal with key shares; "static": auto-unseal with `key` (base64, 32 bytes).
    type: str = "shamir"
    key: str = ""


class ListenerTls(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """PEM files for one HTTPS listener; both empty means plain HTTP."""

    cert_file: str = ""
    key_file: str = ""
    # Vault's tls_client_ca_file: ask clients for a certificate issued by these CAs (for the
    # cert auth method); empty: no client certificate is requested.
    client_ca_file: str = ""


class KmsLibrary(msgspec.Struct, kw_only=True):
    name: str
    library: str


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    nats_url: str = "nats://127.0.0.1:4222"
    # This service's NATS identity (deploy/nats/secure.conf gives each service its own user and
    # subject permissions) and TLS material; empty means none.
    nats_user: str = ""
    nats_password: str = ""
    nats_tls_ca: str = ""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    # A 0600 JSON file {"user": ..., "password": ...}: preferred over nats_user/nats_password,
    # so the secret is not in the environment.
    nats_credentials_file: str = ""
    # Allow a NATS that admits anonymous clients, and the name-derived cluster key when none
    # is configured (shared/cluster_identity.py): throwaway clusters only.
    insecure_bus: bool = False
    # The secrets cluster identity: the key file (secrets, replication), the pinned public key
    # (gateway, crypto) and the crypto workers' channel key file (docs/bus-security.md).
    cluster_key_file: str = ""
    cluster_public_key: str = ""
    crypto_key_file: str = ""
    # A workspace or scheduler process's own key and certificate (shared/service_identity.py).
    service_key_file: str = ""
    # The NATS credentials file handed to plugin processes (a user limited to plugin subjects).
    plugin_nats_credentials_file: str = ""
    # JetStream replica count for buckets and streams: 1 in dev, 3 on a cluster.
    replicas: int = 1
    # Names buckets and streams, so two clusters can share one NATS in tests.
    cluster_name: str = "trellis"
    secrets_addr: str = "127.0.0.1:8200"
    workspace_addr: str = "127.0.0.1:8800"
    scheduler_addr: str = "127.0.0.1:4646"
    # Gateway processes `trellis server` runs on this node, sharing each listener port
    # (SO_REUSEPORT; more than one gateway event loop uses more than one core).
    gateway_processes: int = 1
    # Secrets replicas `trellis server` runs on this node (one queue group on the bus; a
    # replica's event loop uses one core).
    secrets_processes: int = 1
    # Crypto worker processes `trellis server` runs on this node (each runs one op at a time:
    # RSA key generation for PKI issue uses one core per worker).
    crypto_processes: int = 1
    # The CPUs each kind of process `trellis server` starts runs on: "off", "auto" or
    # "kind=cpus;..." (shared/cpu_affinity.py; `trellis dev --cpu-affinity`).
    cpu_affinity: str = "off"
    # Certificate and key per listener (trellis dev --tls issues them from its own PKI).
    secrets_tls: ListenerTls = msgspec.field(default_factory=ListenerTls)
    workspace_tls: ListenerTls = msgspec.field(default_factory=ListenerTls)
    scheduler_tls: ListenerTls = msgspec.field(default_factory=ListenerTls)
    # The address clients reach the secrets API at (wrapping tokens, DR activation).
    api_addr: str = ""
    # Where the DR primary's replication service listens for secondaries (TLS).
    cluster_addr: str = "127.0.0.1:8201"
    max_request_bytes: int = 32 * 1024 * 1024
    request_timeout: float = 90.0
    require_request_header: bool = False
    # sys/metrics without a token (Vault's telemetry unauthenticated_metrics_access).
    unauthenticated_metrics_access: bool = False
    log_json: bool = True
    log_level: str = "info"
    seal: SealSettings = msgspec.field(default_factory=SealSettings)
    plugin_directory: str = ""
    kms_library: list[KmsLibrary] = []
    concurrency: int = 256
    # The gateway micro-batches API envelopes to the services (shared/bus_batch.py);
    # TRELLIS_BUS_BATCH=false sends each alone, for comparison.
    bus_batch: bool = True
    # A per-replica read cache of the secrets storage, exact only with one NATS server
    # (shared/storage_feed.py): on by default in `trellis dev`, off unless set in a config;
    # it stays off on a NATS cluster either way.
    storage_cache: bool = False
    # This node's local data dir (Nomad's data_dir): the scheduler keeps its acl-bootstrap-reset
    # file in <data_dir>/scheduler, the client node its identity and task dirs in <data_dir>/client.
    data_dir: str = ""
    # Who a root client agent runs tasks as (Nomad's exec driver): a task naming no `user` as
    # client_task_user (TRELLIS_CLIENT_TASK_USER); a uid-0 user only when
    # client_allow_root_tasks (TRELLIS_CLIENT_ALLOW_ROOT_TASKS) is true. An agent that is not
    # root cannot switch users: its tasks run as itself.
    client_task_user: str = "nobody"
    client_allow_root_tasks: bool = False
    # Scheduler ACLs (TRELLIS_SCHEDULER_ACL) and a management token from the configuration
    # (TRELLIS_SCHEDULER_MANAGEMENT_TOKEN), which counts as the ACL bootstrap.
    scheduler_acl: bool = False
    scheduler_management_token: str = ""
    # Remote runs (services/workspace/executor.py): the workspace API's address as clients and
    # run tasks reach it (empty: derived from workspace_addr and workspace_tls), the terraform
    # binary a run task executes, the CA certificate run tasks trust, the datacenter their
    # jobs go to, and the workspace service's own scheduler ACL token (empty without ACLs).
    workspace_public_url: str = ""
    runner_terraform: str = "terraform"
    runner_ca_file: str = ""
    runner_datacenter: str = "dc1"
    runner_scheduler_token: str = ""


def _coerce(value: str) -> Any:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def _apply_env(raw: dict[str, Any], env: dict[str, str]) -> None:
    for name, value in env.items():
        if not name.startswith("TRELLIS_"):
            continue
        parts = name[len("TRELLIS_") :].lower().split("__")
        target = raw
        for p in parts[:-1]:
            target = target.setdefault(p, {})
        target[parts[-1]] = _coerce(value)


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    raw: dict[str, Any] = {}
    if path:
        text = Path(path).read_text()
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
    known = {f.name for f in msgspec.structs.fields(Settings)}
    _apply_env(
        raw,
        {
            k: v
            for k, v in (os.environ if env is None else env).items()
            if k.startswith("TRELLIS_") and k[len("TRELLIS_") :].lower().split("__")[0] in known
        },
    )
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return msgspec.convert(raw, Settings, strict=False)
