"""The SSH engine's backend: its path table, assembled from the role, credential and CA modules,
and the bridge to the crypto workers that do its key work."""

from __future__ import annotations

from typing import Any

from services.crypto.client import crypto_call
from services.secrets.engines.ssh import ca_paths, creds_paths, role_paths
from services.secrets.engines.ssh.store import SSHStore
from services.secrets.framework.backend import Backend
from services.secrets.framework.path import Path


class SSHBackend(Backend):
    type_name = "ssh"
    help_text = (
        "The SSH engine hands out SSH credentials: one-time passwords (otp roles), RSA keys "
        "installed on the target host for the lease's lifetime (dynamic roles), and OpenSSH "
        "certificates signed by the mount's CA (ca roles, sign/ and issue/)."
    )

    def build_paths(self) -> list[Path]:
        self.store = SSHStore(self.storage)
        return [*role_paths.paths(self), *creds_paths.paths(self), *ca_paths.paths(self)]

    async def crypto(self, op: str, args: dict[str, Any]) -> Any:
        """Key generation, parsing and signing run on a crypto worker, off this event loop;
        the worker's refusals come back as 400s with its message."""
        return await crypto_call(self.core.bus, self.core.settings.cluster_name, op, args)
