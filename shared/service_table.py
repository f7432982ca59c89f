"""The services `trellis run <service>` knows, by name, and where each lives: data only, so
that a command that runs none of them (`trellis dev`, the supervisor) need not import them."""

from __future__ import annotations

# service name -> "module:Class"; each class takes (bus, settings) and has start/stop/ready.
SERVICES: dict[str, str] = {
    "gateway": "services.gateway.main:Gateway",
    "secrets": "services.secrets.service:SecretsService",
    "crypto": "services.crypto.service:CryptoService",
    "replication": "services.replication.service:ReplicationService",
    "workspace": "services.workspace.service:WorkspaceService",
    "scheduler": "services.scheduler.service:SchedulerService",
    "client": "services.scheduler.client.service:ClientService",
}
