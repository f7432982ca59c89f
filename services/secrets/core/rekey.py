"""Rekey: new unseal key shares for the running cluster (Vault's `sys/rekey/*`, OpenBao's
`sys/rotate/root/*`).

An attempt is started with the new share count and threshold; holders of the current shares
submit them until the threshold is met; the service then makes a new unseal key, seals the root
key under it (one write: `core/root-key`) and updates the seal config. With
`require_verification` the new key is kept pending until a threshold of the *new* shares is
submitted to `verify`; only then is it installed. Old shares stop working the moment the new
key is installed.

The attempt lives under the barrier (`core/rekey/attempt`), so any replica can serve the next
step and nothing readable reaches JetStream; it is deleted when the attempt ends. Shares are
compared by their x coordinate and exact bytes, and no share, key or nonce-bound secret is ever
logged or put in an error message. PGP-encrypted shares (and so backups) are not supported.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from services.secrets import shamir
from services.secrets.core.barrier import CasConflict
from services.secrets.core.seal import ROOT_KEY, SEAL_CONFIG, SealConfig
from services.secrets.core.share_attempt import ShareAttempt, add_share, combine_shares
from services.secrets.errors import bad_request
from services.secrets.keyring import seal_with

if TYPE_CHECKING:
    pass

log = structlog.get_logger("rekey")

ATTEMPT = "core/rekey/attempt"
# `trellis dev` names the file where it keeps the unseal key; a completed rekey rewrites it so
# that dev can still unseal its own cluster (services/dev.py).
DEV_KEYS_ENV = "TRELLIS_DEV_KEYS_FILE"


class Attempt(msgspec.Struct, kw_only=True):
    nonce: str
    secret_shares: int
    secret_threshold: int
    backup: bool = False
    verification_required: bool = False
    shares: list[bytes] = []  # current-key shares submitted so far
    # Set once the current shares are complete and verification is required.
    pending_key: bytes = b""
    verification_nonce: str = ""
    verification_shares: list[bytes] = []


def check_shares(shares: int, threshold: int) -> None:
    """The rules OpenBao applies to a new seal configuration (messages as it words them)."""
    if shares < 1:
        raise bad_request("invalid rotate seal configuration: shares must be at least one")
    if threshold < 1:
        raise bad_request("invalid rotate seal configuration: threshold must be at least one")
    if shares > 1 and threshold == 1:
        raise bad_request(
            "invalid rotate seal configuration: threshold must be greater than one for "
            "multiple shares"
        )
    if threshold > shares:
        raise bad_request(
            "invalid rotate seal configuration: threshold cannot be larger than shares"
        )
    if shares > 255:
        raise bad_request("invalid rotate seal configuration: shares must be 255 or less")


class Rekey(ShareAttempt[Attempt]):
    PATH = ATTEMPT
    KIND = Attempt
    WHAT = "the rekey attempt"
    STATIC_REFUSAL = "rekeying is not supported with an auto-unseal (static) seal"

    async def attempt(self) -> Attempt | None:
        return await self.view().get_obj(ATTEMPT, Attempt)

    # ---- status ----------------------------------------------------------------------------
    async def status(self) -> dict[str, Any]:
        config = await self.seal_config()
        attempt = await self.attempt()
        if attempt is None:
            return {"started": False, "t": 0, "n": 0, "required": config.secret_threshold}
        return {
            "nonce": attempt.nonce,
            "started": True,
            "t": attempt.secret_threshold,
            "n": attempt.secret_shares,
            "progress": len(attempt.shares),
            "required": config.secret_threshold,
            "verification_required": attempt.verification_required,
            "verification_nonce": attempt.verification_nonce,
        }

    # ---- init / cancel ---------------------------------------------------------------------
    async def start(
        self, shares: int, threshold: int, *, backup: bool, verify: bool, pgp_keys: list[str]
    ) -> dict[str, Any]:
        await self.seal_config()
        if await self.attempt() is not None:
            raise bad_request("rotation already in progress")
        if pgp_keys:
            raise bad_request("pgp_keys are not supported; the new keys are returned in hex")
        if backup:
            raise bad_request("backup requires pgp_keys, which are not supported")
        check_shares(shares, threshold)
        try:
            await self.view().create(
                ATTEMPT,
                msgspec.json.encode(
                    Attempt(
                        nonce=str(uuid.uuid4()),
                        secret_shares=shares,
                        secret_threshold=threshold,
                        verification_required=verify,
                    )
                ),
            )
        except CasConflict:
            raise bad_request("rotation already in progress") from None
        return await self.status()

    def wrong_nonce(self, attempt: Attempt) -> str:
        return f'incorrect nonce supplied; nonce for rotation is "{attempt.nonce}"'

    # ---- update ----------------------------------------------------------------------------
    async def update(self, share: bytes, nonce: str) -> dict[str, Any]:
        config, attempt, rev = await self.for_share(nonce, "no rotation in progress")
        if attempt.pending_key:
            raise bad_request("rotation already complete; verify the new keys")
        root = await self.take_share(attempt, rev, share, config)
        if root is None:
            return await self.status()
        new_key = os.urandom(32)
        new_shares = (
            [new_key]
            if attempt.secret_shares == 1
            else shamir.split(new_key, attempt.secret_shares, attempt.secret_threshold)
        )
        out: dict[str, Any] = {
            "nonce": attempt.nonce,
            "complete": True,
            "keys": [s.hex() for s in new_shares],
            "keys_base64": [_b64(s) for s in new_shares],
            "pgp_fingerprints": None,
            "backup": False,
            "verification_required": attempt.verification_required,
        }
        if attempt.verification_required:
            attempt.shares = []
            attempt.pending_key = new_key
            attempt.verification_nonce = str(uuid.uuid4())
            await self.save(attempt, rev)
            out["verification_nonce"] = attempt.verification_nonce
            return out
        await self._claim(rev)
        await self._install(root, new_key, attempt, new_shares)
        return out

    async def _install(
        self, root: bytes, new_key: bytes, attempt: Attempt, new_shares: list[bytes]
    ) -> None:
        # One write switches the unseal key: from here only the new shares open the root key.
        await self.core.storage.put(ROOT_KEY, seal_with(new_key, root, ROOT_KEY.encode()))
        config = SealConfig(
            type="shamir",
            secret_shares=attempt.secret_shares,
            secret_threshold=attempt.secret_threshold,
        )
        await self.core.storage.put(SEAL_CONFIG, msgspec.json.encode(config))
        self.core.seal.config = config
        await self.cancel()
        await self.core.broadcast_invalidate("seal-config")
        _rewrite_dev_keys(new_shares)
        log.info("rekeyed", shares=attempt.secret_shares, threshold=attempt.secret_threshold)

    # ---- verification ----------------------------------------------------------------------
    async def _pending(self) -> tuple[Attempt, int]:
        attempt, rev = await self.load()
        if attempt is None or not attempt.pending_key:
            raise bad_request("no rotation configuration found")
        return attempt, rev

    async def _claim(self, revision: int) -> None:
        """End the attempt before installing: of two replicas completing it at once, only
        one installs a key."""
        try:
            await self.view().delete(ATTEMPT, revision)
        except CasConflict:
            raise bad_request("the rekey attempt changed meanwhile; submit the key again") from None

    async def verify_status(self) -> dict[str, Any]:
        attempt = await self.attempt()
        if attempt is None:
            raise bad_request("no rotation configuration found")
        if not attempt.pending_key:
            # OpenBao: an attempt without (or not yet at) verification is "not started".
            return {
                "nonce": "",
                "started": False,
                "t": attempt.secret_threshold,
                "n": attempt.secret_shares,
                "progress": 0,
            }
        return {
            "nonce": attempt.verification_nonce,
            "started": True,
            "t": attempt.secret_threshold,
            "n": attempt.secret_shares,
            "progress": len(attempt.verification_shares),
        }

    async def verify_restart(self) -> dict[str, Any]:
        attempt, rev = await self.load()
        if attempt is None or not attempt.pending_key:
            return await self.verify_status()
        attempt.verification_nonce = str(uuid.uuid4())
        attempt.verification_shares = []
        await self.save(attempt, rev)
        return await self.verify_status()

    async def verify(self, share: bytes, nonce: str) -> dict[str, Any]:
        if not nonce:
            raise bad_request("missing required field 'nonce'")
        attempt, rev = await self._pending()
        if not hmac.compare_digest(
            nonce.encode("utf-8", "surrogatepass"), attempt.verification_nonce.encode()
        ):
            raise bad_request(
                f'incorrect nonce supplied; nonce for verification is "'
                f'{attempt.verification_nonce}"'
            )
        multi = attempt.secret_shares > 1
        attempt.verification_shares = add_share(attempt.verification_shares, share, multi)
        if len(attempt.verification_shares) < attempt.secret_threshold:
            await self.save(attempt, rev)
            return await self.verify_status()
        try:
            combined = combine_shares(
                attempt.verification_shares, attempt.secret_threshold, attempt.secret_shares
            )
        except ValueError:
            combined = b""
        if not hmac.compare_digest(combined, attempt.pending_key):
            attempt.verification_shares = []
            await self.save(attempt, rev)
            raise bad_request(
                "the new key shares do not combine to the new key; progress was reset"
            )
        root = await self._current_root()
        nonce_out = attempt.verification_nonce
        await self._claim(rev)
        await self._install(root, attempt.pending_key, attempt, attempt.verification_shares)
        return {"nonce": nonce_out, "complete": True}

    async def _current_root(self) -> bytes:
        from services.secrets.core.rotation import root_key

        return await root_key(self.core)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _rewrite_dev_keys(new_shares: list[bytes]) -> None:
    """`trellis dev` unseals its own cluster from a kept file: keep it current after a rekey
    (it is 0600 in the 0700 data dir, as dev wrote it)."""
    path = os.environ.get(DEV_KEYS_ENV, "")
    if not path or not new_shares or not os.path.exists(path):
        return
    with open(path) as fh:
        kept = json.load(fh)
    kept["unseal_key"] = new_shares[0].hex()
    kept["unseal_keys"] = [s.hex() for s in new_shares]
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(kept, fh)
    os.replace(path + ".new", path)
