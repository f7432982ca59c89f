"""A root token from the unseal key shares: Vault's unauthenticated sys/generate-root/{attempt,
update} (raw JSON, as Vault's HTTP layer answers them; hvac calls these) and OpenBao's
authenticated sys/generate-root-token/{attempt,update} (the envelope; `bao operator
generate-root`). Both drive the same attempt (services/secrets/core/generate_root.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.core.generate_root import GenerateRoot
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.system.common import raw_json
from services.secrets.system.rekey_paths import KeyFields, _share

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class AttemptFields(msgspec.Struct, kw_only=True):
    otp: Annotated[str, desc("a base62 one-time pad as long as a token (otp_length)")] = ""
    pgp_key: Annotated[str, desc("a base64 PGP public key to encrypt the token to")] = ""


def paths(core: Core) -> list[Path]:
    generate = GenerateRoot(core)

    def family(prefix: str, enveloped: bool) -> list[Path]:
        auth = {} if enveloped else {"unauthenticated": True}

        def answer(data: dict[str, object]) -> Response:
            if not enveloped:
                return raw_json(data)  # Vault's raw answer carries every field
            # OpenBao's carries the nonce and fingerprint once started, the token once made.
            drop = set() if data["started"] or data["complete"] else {"nonce", "pgp_fingerprint"}
            if not data["complete"]:
                drop |= {"encoded_token", "encoded_root_token"}
            return Response(data={k: v for k, v in data.items() if k not in drop})

        async def attempt_read(req: Request, _: NoFields) -> Response:
            return answer(await generate.status())

        async def attempt_write(req: Request, f: AttemptFields) -> Response:
            return answer(await generate.start(f.otp, f.pgp_key))

        async def attempt_delete(req: Request, _: NoFields) -> Response:
            await generate.cancel()
            return Response()

        async def update(req: Request, f: KeyFields) -> Response:
            return answer(await generate.update(_share(f), f.nonce))

        return [
            Path(
                f"{prefix}/attempt",
                {
                    Op.READ: Operation(attempt_read, "Progress of the root generation", **auth),
                    **write(attempt_write, "Start a root generation", **auth),
                    Op.DELETE: Operation(attempt_delete, "Cancel the root generation", **auth),
                },
                AttemptFields,
                synopsis="Start, read or cancel generating a root token from the key shares.",
            ),
            Path(
                f"{prefix}/update",
                write(update, "Submit an unseal key share", **auth),
                KeyFields,
                synopsis="Submit one unseal key share to the root generation.",
            ),
        ]

    return family("generate-root", enveloped=False) + family("generate-root-token", enveloped=True)
