"""New unseal key shares: Vault's unauthenticated sys/rekey/{init,update,verify,backup} (raw
JSON, as Vault's HTTP layer answers them; hvac calls these) and OpenBao's authenticated
sys/rotate/root/{init,update,verify,backup} (the envelope; `bao operator rotate-keys`). Both
drive the same attempt (services/secrets/core/rekey.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.core.rekey import Rekey
from services.secrets.core.seal import decode_share
from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.system.common import raw_json

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class InitFields(msgspec.Struct, kw_only=True):
    secret_shares: Annotated[int, desc("number of new key shares")] = 0
    secret_threshold: Annotated[int, desc("new shares needed to unseal")] = 0
    pgp_keys: CommaList = []
    backup: bool = False
    require_verification: Annotated[
        bool, desc("install the new key only once its shares are verified")
    ] = False


class KeyFields(msgspec.Struct, kw_only=True):
    key: Annotated[str, desc("one key share, hex or base64")] = ""
    nonce: Annotated[str, desc("the nonce of the attempt")] = ""


def _share(f: KeyFields) -> bytes:
    if not f.key:
        raise bad_request("'key' must be specified in request body as JSON")
    return decode_share(f.key)


def paths(core: Core) -> list[Path]:
    rekey = Rekey(core)

    def answer(enveloped: bool, data: dict[str, object]) -> Response:
        return Response(data=data) if enveloped else raw_json(data)

    def status_body(data: dict[str, object], enveloped: bool) -> dict[str, object]:
        if enveloped:
            return data
        # Vault's raw status always carries every field.
        full: dict[str, object] = {
            "nonce": "",
            "started": False,
            "t": 0,
            "n": 0,
            "progress": 0,
            "required": 0,
            "pgp_fingerprints": None,
            "backup": False,
            "verification_required": False,
        }
        full.update(data)
        return full

    def family(prefix: str, enveloped: bool) -> list[Path]:
        auth = {} if enveloped else {"unauthenticated": True}

        async def init_read(req: Request, _: NoFields) -> Response:
            return answer(enveloped, status_body(await rekey.status(), enveloped))

        async def init_write(req: Request, f: InitFields) -> Response:
            data = await rekey.start(
                f.secret_shares,
                f.secret_threshold,
                backup=f.backup,
                verify=f.require_verification,
                pgp_keys=list(f.pgp_keys),
            )
            return answer(enveloped, status_body(data, enveloped))

        async def init_delete(req: Request, _: NoFields) -> Response:
            await rekey.cancel()
            return Response()

        async def update(req: Request, f: KeyFields) -> Response:
            data = await rekey.update(_share(f), f.nonce)
            return answer(
                enveloped, status_body(data, enveloped) if "complete" not in data else data
            )

        async def verify_read(req: Request, _: NoFields) -> Response:
            return answer(enveloped, await rekey.verify_status())

        async def verify_write(req: Request, f: KeyFields) -> Response:
            return answer(enveloped, await rekey.verify(_share(f), f.nonce))

        async def verify_delete(req: Request, _: NoFields) -> Response:
            return answer(enveloped, await rekey.verify_restart())

        async def backup_read(req: Request, _: NoFields) -> Response:
            # Backups hold PGP-encrypted shares, which are not supported: there is never one.
            raise bad_request("no backed-up keys found")

        async def backup_delete(req: Request, _: NoFields) -> Response:
            return Response()

        op = Operation
        return [
            Path(
                f"{prefix}/init",
                {
                    Op.READ: op(init_read, "Progress of the rekey attempt", **auth),
                    **write(init_write, "Start a rekey attempt", **auth),
                    Op.DELETE: op(init_delete, "Cancel the rekey attempt", **auth),
                },
                InitFields,
                synopsis="Start, read or cancel an attempt to make new unseal key shares.",
            ),
            Path(
                f"{prefix}/update",
                write(update, "Submit a current key share", **auth),
                KeyFields,
                synopsis="Submit one current unseal key share to the rekey attempt.",
            ),
            Path(
                f"{prefix}/verify",
                {
                    Op.READ: op(verify_read, "Progress of the verification", **auth),
                    **write(verify_write, "Submit a new key share", **auth),
                    Op.DELETE: op(verify_delete, "Restart the verification", **auth),
                },
                KeyFields,
                synopsis="Prove the new key shares were kept before they replace the old ones.",
            ),
            Path(
                f"{prefix}/backup",
                {
                    Op.READ: op(backup_read, "Read backed-up keys", sudo=True),
                    Op.DELETE: op(backup_delete, "Delete backed-up keys", sudo=True),
                },
                synopsis="PGP-encrypted backups of new key shares (none are ever kept).",
            ),
        ]

    return family("rekey", enveloped=False) + family("rotate/root", enveloped=True)
