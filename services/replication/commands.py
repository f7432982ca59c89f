"""The control protocol between the secrets service's `sys/replication/dr/*` paths and the
replication service: one typed command per operation, one reply shape. The secrets side has
already authenticated the caller (ACL, sudo); DR operation tokens are checked here."""

from __future__ import annotations

from typing import Any

import msgspec

from shared.subjects import Subject

# Belongs in shared/subjects.py's catalogue; declared here until that file lists it.
DR_CONTROL = Subject(
    "replication.dr",
    "replication",
    "DrCommand",
    "DrReply",
    "DR replication control from the sys/replication/dr/* paths",
)


class Status(msgspec.Struct, tag="status"):
    pass


class EnablePrimary(msgspec.Struct, tag="enable_primary", kw_only=True):
    primary_cluster_addr: str = ""


class DemotePrimary(msgspec.Struct, tag="demote"):
    pass


class DisablePrimary(msgspec.Struct, tag="disable_primary"):
    pass


class SecondaryToken(msgspec.Struct, tag="secondary_token", kw_only=True):
    id: str
    ttl: int
    secondary_public_key: str = ""
    api_addr: str = ""


class BindToken(msgspec.Struct, tag="bind_token", kw_only=True):
    """After the secrets side wrapped the activation: sign the JWT, remember the accessor."""

    id: str
    wrapping_token: str
    wrap_accessor: str
    ttl: int
    creation_time: float
    api_addr: str = ""


class RevokeSecondary(msgspec.Struct, tag="revoke_secondary", kw_only=True):
    id: str


class GeneratePublicKey(msgspec.Struct, tag="generate_public_key"):
    pass


class EnableSecondary(msgspec.Struct, tag="enable_secondary", kw_only=True):
    token: str
    primary_api_addr: str = ""
    ca_file: str = ""
    ca_path: str = ""


class Promote(msgspec.Struct, tag="promote", kw_only=True):
    dr_operation_token: str
    primary_cluster_addr: str = ""
    force: bool = False


class DisableSecondary(msgspec.Struct, tag="disable_secondary", kw_only=True):
    dr_operation_token: str


class UpdatePrimary(msgspec.Struct, tag="update_primary", kw_only=True):
    dr_operation_token: str
    token: str
    primary_api_addr: str = ""
    ca_file: str = ""
    ca_path: str = ""


class AttemptRead(msgspec.Struct, tag="attempt_read"):
    pass


class AttemptStart(msgspec.Struct, tag="attempt_start", kw_only=True):
    pgp_key: str = ""


class AttemptCancel(msgspec.Struct, tag="attempt_cancel"):
    pass


class AttemptUpdate(msgspec.Struct, tag="attempt_update", kw_only=True):
    key: str
    nonce: str


class DeleteOperationToken(msgspec.Struct, tag="delete_op_token", kw_only=True):
    dr_operation_token: str


class Reindex(msgspec.Struct, tag="reindex", kw_only=True):
    dr_operation_token: str
    diff: bool = False
    force: bool = False
    skip_flush: bool = False


DrCommand = (
    Status
    | EnablePrimary
    | DemotePrimary
    | DisablePrimary
    | SecondaryToken
    | BindToken
    | RevokeSecondary
    | GeneratePublicKey
    | EnableSecondary
    | Promote
    | DisableSecondary
    | UpdatePrimary
    | AttemptRead
    | AttemptStart
    | AttemptCancel
    | AttemptUpdate
    | DeleteOperationToken
    | Reindex
)


class DrReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    data: dict[str, Any] | None = None
    warnings: list[str] = []
    # Promote only: the primary's unseal key, for the asking secrets replica to unseal with.
    # Travels only inside the sealed reply box; never part of an API answer.
    unseal_key: bytes = b""
