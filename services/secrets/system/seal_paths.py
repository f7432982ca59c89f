"""sys/init, sys/unseal, sys/seal-status, sys/seal, sys/health, sys/leader."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.core.seal import decode_share
from services.secrets.core.state_publisher import current_state
from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.system.common import raw_json
from shared import sys_status
from shared.sys_status import HealthCodes

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class InitFields(msgspec.Struct, kw_only=True):
    secret_shares: Annotated[int, desc("number of key shares to split the unseal key into")] = 0
    secret_threshold: Annotated[int, desc("key shares needed to unseal")] = 0
    pgp_keys: list[str] = []
    root_token_pgp_key: str = ""
    stored_shares: int = 0
    recovery_shares: int = 0
    recovery_threshold: int = 0
    recovery_pgp_keys: list[str] = []


class UnsealFields(msgspec.Struct, kw_only=True):
    key: Annotated[str, desc("one unseal key share, hex or base64")] = ""
    reset: Annotated[bool, desc("discard the shares submitted so far")] = False
    migrate: bool = False


def seal_status(core: Core) -> dict[str, object]:
    return sys_status.seal_status(current_state(core))


def paths(core: Core) -> list[Path]:
    async def init_read(req: Request, _: NoFields) -> Response:
        await core.seal.load_config()
        return raw_json({"initialized": core.seal.initialized})

    async def init_write(req: Request, f: InitFields) -> Response:
        await core.seal.load_config()
        if core.seal.initialized:
            raise bad_request("the secrets service is already initialized")
        if core.settings.seal.type != "static" and (f.secret_shares < 1 or f.secret_threshold < 1):
            raise bad_request(
                "secret_shares and secret_threshold are required and must be at least 1"
            )
        if f.pgp_keys:
            raise bad_request("pgp_keys are not supported; the keys are returned in hex and base64")
        shares, keyring = await core.seal.initialize(f.secret_shares, f.secret_threshold)
        # Unseal this replica with the fresh keyring to create the root token and mounts, then
        # seal again: a Shamir-sealed cluster stays sealed until its shares are given.
        root = await core.first_unseal(keyring)
        return raw_json(
            {
                "keys": [s.hex() for s in shares],
                "keys_base64": [base64.b64encode(s).decode() for s in shares],
                "root_token": root,
            }
        )

    async def unseal(req: Request, f: UnsealFields) -> Response:
        await core.seal.load_config()
        if f.reset:
            await core.seal.reset_everywhere()
            return raw_json(seal_status(core))
        if not f.key:
            raise bad_request(
                "'key' must be specified in request body as JSON, or 'reset' set to true"
            )
        if not core.seal.initialized:
            raise bad_request("the secrets service is not initialized")
        await core.seal.submit_share(decode_share(f.key))
        return raw_json(seal_status(core))

    async def status(req: Request, _: NoFields) -> Response:
        await core.seal.load_config()
        return raw_json(seal_status(core))

    async def seal(req: Request, _: NoFields) -> Response:
        await core.seal.seal()
        return Response()

    async def health(req: Request, f: HealthCodes) -> Response:
        await core.seal.load_config()
        status, body = sys_status.health(current_state(core), f)
        return raw_json(body, status=status)

    async def leader(req: Request, _: NoFields) -> Response:
        return raw_json(sys_status.LEADER)

    async def step_down(req: Request, _: NoFields) -> Response:
        # Every unsealed replica is active (sys/leader: ha_enabled false): there is no active
        # node to give up its role, so this succeeds doing nothing, as on OpenBao's lone node.
        return Response()

    unauth = {"unauthenticated": True}
    return [
        Path(
            "init",
            {
                Op.READ: Operation(init_read, "Is the service initialized?", **unauth),
                **write(init_write, "Initialize the service", **unauth),
            },
            InitFields,
            synopsis="Initialize the service: create the keys and the root token.",
        ),
        Path(
            "unseal",
            write(unseal, "Submit an unseal key share", **unauth),
            UnsealFields,
            synopsis="Unseal with key shares.",
        ),
        Path(
            "seal-status",
            {Op.READ: Operation(status, "Seal status", **unauth)},
            synopsis="Whether the service is sealed, and the unseal progress.",
        ),
        Path(
            "seal",
            write(seal, "Seal the service", sudo=True),
            synopsis="Seal every replica of the service.",
        ),
        Path(
            "health",
            {Op.READ: Operation(health, "Health", **unauth)},
            HealthCodes,
            synopsis="Health of the node, as a status code.",
        ),
        Path(
            "leader",
            {Op.READ: Operation(leader, "Leader", **unauth)},
            synopsis="High availability status.",
        ),
        Path(
            "step-down",
            write(step_down, "Step down the active node", sudo=True),
            synopsis="Step down the active node (every replica is active: nothing to do).",
        ),
    ]
