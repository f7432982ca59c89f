"""sys/replication/dr/*: DR replication, served by the replication service.

These handlers authenticate (the dispatcher has applied the ACL and sudo), do what needs the
core (minting and revoking the activation's wrapping token), and forward a typed command to the
replication service, which checks DR operation tokens and owns the state. Paths a DR secondary
must answer (it is sealed: its storage holds its primary's ciphertext) are unauthenticated at
the dispatcher and authorised by the operation token, as Vault's are.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.replication import commands as c
from services.replication.link import link_of
from services.replication.modes import DISABLED
from services.secrets.core.namespaces import ROOT
from services.secrets.errors import bad_request
from services.secrets.framework.fields import Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.system.common import raw_json
from shared.errors import ServiceError

if TYPE_CHECKING:
    from services.secrets.core.core import Core

PREFIX = "replication/dr/"
TOKEN_PATH = "sys/replication/dr/primary/secondary-token"
DEFAULT_TTL = 30 * 60


class PrimaryEnableFields(msgspec.Struct, kw_only=True):
    primary_cluster_addr: Annotated[str, desc("cluster address given to secondaries")] = ""


class SecondaryTokenFields(msgspec.Struct, kw_only=True):
    id: Annotated[str, desc("unique opaque id of the secondary")]
    ttl: Annotated[Duration, desc("TTL of the activation token")] = DEFAULT_TTL
    secondary_public_key: Annotated[
        str, desc("a key from secondary/generate-public-key: encrypt instead of wrapping")
    ] = ""


class IdField(msgspec.Struct, kw_only=True):
    id: Annotated[str, desc("the secondary's id")]


class SecondaryEnableFields(msgspec.Struct, kw_only=True):
    token: Annotated[str, desc("the activation token from the primary")]
    primary_api_addr: Annotated[str, desc("overrides the API address in the token")] = ""
    ca_file: Annotated[str, desc("PEM file of the CA to verify the primary's API")] = ""
    ca_path: Annotated[str, desc("directory of PEM files to verify the primary's API")] = ""


class PromoteFields(msgspec.Struct, kw_only=True):
    dr_operation_token: Annotated[str, desc("DR operation token")]
    primary_cluster_addr: Annotated[str, desc("cluster address given to secondaries")] = ""
    force: Annotated[bool, desc("promote despite failed safety checks (may lose data)")] = False


class OperationTokenField(msgspec.Struct, kw_only=True):
    dr_operation_token: Annotated[str, desc("DR operation token")] = ""


class UpdatePrimaryFields(msgspec.Struct, kw_only=True):
    dr_operation_token: Annotated[str, desc("DR operation token")]
    token: Annotated[str, desc("activation token; blank forgets the past primary")]
    primary_api_addr: str = ""
    ca_file: str = ""
    ca_path: str = ""


class AttemptFields(msgspec.Struct, kw_only=True):
    pgp_key: Annotated[str, desc("base64 PGP public key to encrypt the token to")] = ""


class AttemptUpdateFields(msgspec.Struct, kw_only=True):
    key: Annotated[str, desc("one of the primary's unseal key shares")]
    nonce: Annotated[str, desc("nonce of the attempt")]


class ReindexFields(msgspec.Struct, kw_only=True):
    dr_operation_token: Annotated[str, desc("DR operation token")]
    diff: Annotated[bool, desc("report key-level differences")] = False
    force: Annotated[bool, desc("resynchronise with the primary whatever the result")] = False
    skip_flush: bool = False


def paths(core: Core) -> list[Path]:
    link = link_of(core)

    async def send(req: Request, cmd: Any) -> c.DrReply:
        if not req.namespace.is_root:
            raise bad_request("DR replication is managed from the root namespace only")
        return await link.request(cmd)

    def answer(reply: c.DrReply, **kw: Any) -> Response:
        return Response(data=reply.data, warnings=list(reply.warnings), **kw)

    async def status(req: Request, _: NoFields) -> Response:
        try:
            return answer(await send(req, c.Status()))
        except ServiceError as exc:
            if exc.code != 503:
                raise
            # No replication service: say what the cluster's stored state says.
            st = link.state
            data: dict[str, Any] = {"mode": st.mode}
            if st.mode != DISABLED:
                data["cluster_id"] = st.cluster_id
            return Response(data=data, warnings=[exc.message])

    async def enable_primary(req: Request, f: PrimaryEnableFields) -> Response:
        return answer(await send(req, c.EnablePrimary(primary_cluster_addr=f.primary_cluster_addr)))

    async def demote(req: Request, _: NoFields) -> Response:
        return answer(await send(req, c.DemotePrimary()))

    async def disable_primary(req: Request, _: NoFields) -> Response:
        return answer(await send(req, c.DisablePrimary()))

    async def secondary_token(req: Request, f: SecondaryTokenFields) -> Response:
        api_addr = core.settings.api_addr
        reply = await send(
            req,
            c.SecondaryToken(
                id=f.id, ttl=f.ttl, api_addr=api_addr, secondary_public_key=f.secondary_public_key
            ),
        )
        data = reply.data or {}
        if "token" in data:  # encrypted to the secondary's key: no wrapping involved
            return Response(data={"token": data["token"]})
        envelope = {
            "request_id": req.request_id,
            "lease_id": "",
            "renewable": False,
            "lease_duration": 0,
            "data": data["activation"],
            "wrap_info": None,
            "warnings": None,
            "auth": None,
        }
        try:
            info = await core.wrapping.wrap(ROOT, envelope, f.ttl, TOKEN_PATH)
            bound = await send(
                req,
                c.BindToken(
                    id=f.id,
                    wrapping_token=info["token"],
                    wrap_accessor=info["accessor"],
                    ttl=f.ttl,
                    creation_time=time.time(),
                    api_addr=api_addr,
                ),
            )
        except Exception:
            await send(req, c.RevokeSecondary(id=f.id))  # no half-issued secondary left
            raise
        info = {
            "token": (bound.data or {})["token"],
            "accessor": info["accessor"],
            "ttl": f.ttl,
            "creation_time": info["creation_time"],
            "creation_path": TOKEN_PATH,
            "wrapped_accessor": "",
        }
        return Response(extra={"wrap_info": info})

    async def revoke_secondary(req: Request, f: IdField) -> Response:
        reply = await send(req, c.RevokeSecondary(id=f.id))
        accessor = (reply.data or {}).get("wrap_accessor", "")
        if accessor:  # an unused activation token dies with the secondary
            entry = await core.tokens.lookup_accessor(accessor, ROOT.id)
            if entry is not None:
                await core.tokens.revoke_tree(entry)
        return Response()

    async def generate_public_key(req: Request, _: NoFields) -> Response:
        return answer(await send(req, c.GeneratePublicKey()))

    async def enable_secondary(req: Request, f: SecondaryEnableFields) -> Response:
        return answer(
            await send(
                req,
                c.EnableSecondary(
                    token=f.token,
                    primary_api_addr=f.primary_api_addr,
                    ca_file=f.ca_file,
                    ca_path=f.ca_path,
                ),
            )
        )

    async def promote(req: Request, f: PromoteFields) -> Response:
        reply = await send(
            req,
            c.Promote(
                dr_operation_token=f.dr_operation_token,
                force=f.force,
                primary_cluster_addr=f.primary_cluster_addr,
            ),
        )
        if reply.unseal_key:
            # Promote and serve: the unseal key the operation token proved (sealed to us).
            await link.refresh()
            await core.seal.unseal_with_key(reply.unseal_key)
            reply.unseal_key = b""
        return answer(reply, data_at_top=True)

    async def disable_secondary(req: Request, f: OperationTokenField) -> Response:
        # The operation token may also come as the client token, as Vault's CLI sends it.
        token = f.dr_operation_token or req.client_token
        return answer(await send(req, c.DisableSecondary(dr_operation_token=token)))

    async def update_primary(req: Request, f: UpdatePrimaryFields) -> Response:
        return answer(
            await send(
                req,
                c.UpdatePrimary(
                    dr_operation_token=f.dr_operation_token,
                    token=f.token,
                    primary_api_addr=f.primary_api_addr,
                    ca_file=f.ca_file,
                    ca_path=f.ca_path,
                ),
            )
        )

    async def attempt_read(req: Request, _: NoFields) -> Response:
        return raw_json((await send(req, c.AttemptRead())).data)

    async def attempt_start(req: Request, f: AttemptFields) -> Response:
        return raw_json((await send(req, c.AttemptStart(pgp_key=f.pgp_key))).data)

    async def attempt_cancel(req: Request, _: NoFields) -> Response:
        await send(req, c.AttemptCancel())
        return Response()

    async def attempt_update(req: Request, f: AttemptUpdateFields) -> Response:
        return raw_json((await send(req, c.AttemptUpdate(key=f.key, nonce=f.nonce))).data)

    async def delete_op_token(req: Request, f: OperationTokenField) -> Response:
        await send(req, c.DeleteOperationToken(dr_operation_token=f.dr_operation_token))
        return Response()

    async def reindex(req: Request, f: ReindexFields) -> Response:
        return answer(
            await send(
                req,
                c.Reindex(
                    dr_operation_token=f.dr_operation_token,
                    diff=f.diff,
                    force=f.force,
                    skip_flush=f.skip_flush,
                ),
            )
        )

    open_ = {"unauthenticated": True}
    p = PREFIX
    return [
        Path(
            p + "status",
            {Op.READ: Operation(status, "DR replication status", **open_)},
            synopsis="DR replication status of this cluster.",
        ),
        Path(
            p + "primary/enable",
            write(enable_primary, "Enable DR primary"),
            PrimaryEnableFields,
            synopsis="Make this cluster a DR primary.",
        ),
        Path(
            p + "primary/demote",
            write(demote, "Demote the DR primary"),
            synopsis="Make this DR primary a secondary that keeps its data and cluster id.",
        ),
        Path(
            p + "primary/disable",
            write(disable_primary, "Disable DR primary"),
            synopsis="Turn DR replication off; secondaries can no longer connect.",
        ),
        Path(
            p + "primary/secondary-token",
            write(secondary_token, "Generate a secondary activation token", sudo=True),
            SecondaryTokenFields,
            synopsis="An activation token for a new DR secondary.",
        ),
        Path(
            p + "primary/revoke-secondary",
            write(revoke_secondary, "Revoke a secondary"),
            IdField,
            synopsis="Disconnect a secondary at once; it needs a new token.",
        ),
        Path(
            p + "secondary/generate-public-key",
            write(generate_public_key, "Generate a public key"),
            synopsis="A public key the primary can encrypt an activation token to.",
        ),
        Path(
            p + "secondary/enable",
            write(enable_secondary, "Enable DR secondary"),
            SecondaryEnableFields,
            synopsis="Make this cluster a DR secondary; clears all its data at once.",
        ),
        Path(
            p + "secondary/promote",
            write(promote, "Promote the DR secondary", **open_),
            PromoteFields,
            synopsis="Make this DR secondary the primary.",
        ),
        Path(
            p + "secondary/disable",
            write(disable_secondary, "Disable DR secondary", **open_),
            OperationTokenField,
            synopsis="Turn DR replication off on this secondary (operation token).",
        ),
        Path(
            p + "secondary/update-primary",
            write(update_primary, "Point the secondary at a primary", **open_),
            UpdatePrimaryFields,
            synopsis="Change (or forget) the primary; keeps the data.",
        ),
        Path(
            p + "secondary/generate-operation-token/attempt",
            {
                Op.READ: Operation(attempt_read, "Read the attempt", **open_),
                **write(attempt_start, "Start an attempt", **open_),
                Op.DELETE: Operation(attempt_cancel, "Cancel the attempt", **open_),
            },
            AttemptFields,
            synopsis="Generate a DR operation token from the primary's unseal key shares.",
        ),
        Path(
            p + "secondary/generate-operation-token/update",
            write(attempt_update, "Give one key share", **open_),
            AttemptUpdateFields,
            synopsis="Give one of the primary's unseal key shares to the attempt.",
        ),
        Path(
            p + "secondary/operation-token/delete",
            write(delete_op_token, "Revoke a DR operation token", **open_),
            OperationTokenField,
            synopsis="Revoke a DR operation token.",
        ),
        Path(
            p + "secondary/reindex",
            write(reindex, "Reindex the Merkle tree", **open_),
            ReindexFields,
            synopsis="Rebuild the Merkle index from storage.",
        ),
    ]
