"""The system backend, mounted at `sys/` in every namespace."""

from __future__ import annotations

from services.secrets.framework.backend import Backend
from services.secrets.framework.path import Path
from services.secrets.system import (
    audit_paths,
    generate_root_paths,
    host_info_paths,
    introspection_paths,
    lease_paths,
    managed_key_paths,
    metrics_paths,
    mount_paths,
    namespace_paths,
    password_policy_paths,
    plugin_paths,
    policy_paths,
    readiness_paths,
    rekey_paths,
    remount_status_paths,
    replication_paths,
    rotate_paths,
    seal_paths,
    tools_paths,
    version_history_paths,
    wrapping_paths,
)

# Each module contributes `paths(core) -> list[Path]`; later issues add their own modules here.
MODULES = [
    seal_paths,
    mount_paths,
    policy_paths,
    namespace_paths,
    lease_paths,
    wrapping_paths,
    introspection_paths,
]
# Password policies, the plugin catalog and managed keys (issue 4).
MODULES += [password_policy_paths, plugin_paths, managed_key_paths]
# DR replication (issue 5).
MODULES += [replication_paths]
# sys/tools, which the CLI reaches through `bao write sys/tools/...` (issue 11).
MODULES += [tools_paths, remount_status_paths]
# Key ceremonies: keyring rotation and rekeying (issue 21).
MODULES += [rotate_paths, rekey_paths]
# sys/metrics, Vault's telemetry endpoint (issue 21).
MODULES += [metrics_paths]
# sys/audit and sys/audit-hash as OpenBao answers them without API-managed devices.
MODULES += [audit_paths]
# What the secrets listener's readiness probe asks of the services behind (issue 20).
MODULES += [readiness_paths]
# sys/version-history and sys/host-info, which `bao version-history` and operators read.
MODULES += [version_history_paths, host_info_paths]
# A root token from the unseal key shares (`bao operator generate-root`).
MODULES += [generate_root_paths]


class SystemBackend(Backend):
    type_name = "system"
    help_text = "The system backend: control, policy and debugging endpoints."

    def build_paths(self) -> list[Path]:
        out: list[Path] = []
        for module in MODULES:
            out += module.paths(self.core)
        return out
