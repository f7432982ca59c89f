"""Builtin backend types by name, imported on first use. Auth methods are mounted under `auth/`;
secrets engines anywhere else. External plugins are looked up in the plugin catalog instead."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.secrets.framework.backend import Backend

SECRET_ENGINES: dict[str, str] = {
    "kv": "services.secrets.engines.kv.backend:KVBackend",
    # Vault's old name for KV; mounted as `generic` it is version 1 unless options say 2.
    "generic": "services.secrets.engines.kv.backend:KVBackend",
    "cubbyhole": "services.secrets.engines.cubbyhole:CubbyholeBackend",
    "system": "services.secrets.system.backend:SystemBackend",
    "pki": "services.secrets.engines.pki.backend:PKIBackend",
    "dbcloud": "services.secrets.engines.dbcloud.backend:DbCloudBackend",
    "ssh": "services.secrets.engines.ssh.backend:SSHBackend",
    "transit": "services.secrets.engines.transit.backend:TransitBackend",
    "identity": "services.secrets.identity.backend:IdentityBackend",
}

AUTH_METHODS: dict[str, str] = {
    "token": "services.secrets.auth.token:TokenBackend",
    "userpass": "services.secrets.auth.userpass:UserpassBackend",
    "approle": "services.secrets.auth.approle:AppRoleBackend",
    "cert": "services.secrets.auth.cert:CertBackend",
    "kubernetes": "services.secrets.auth.kubernetes:KubernetesBackend",
    # Vault's vault-plugin-auth-jwt: one backend under either name.
    "jwt": "services.secrets.auth.jwt:JwtBackend",
    "oidc": "services.secrets.auth.jwt:JwtBackend",
}


def backend_class(type_name: str, *, auth: bool) -> type[Backend] | None:
    ref = (AUTH_METHODS if auth else SECRET_ENGINES).get(type_name)
    if ref is None:
        return None
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
