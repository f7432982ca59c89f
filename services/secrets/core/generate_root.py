"""Generating a root token from the unseal key shares (Vault's `sys/generate-root/*`, OpenBao's
`sys/generate-root-token/*`): the way back in when every root token is revoked.

An attempt is started with a one-time pad (the caller's, or one made here and returned once) or
a PGP key; holders of the unseal key shares submit them with the attempt's nonce; when the
threshold is met and the combined key opens the stored root key, a root token is created and
returned only encoded (OTP XOR token, or PGP-encrypted), so whoever watches the calls learns
nothing usable. The attempt lives under the barrier (`core/generate-root/attempt`), as a rekey
attempt does (services/secrets/core/rekey.py), so any replica serves the next step; no share,
pad or token is ever logged or put in an error message."""

from __future__ import annotations

import re
import uuid
from typing import Any

import msgspec

from services.replication import otp as otp_codec
from services.replication import pgp
from services.secrets.core.barrier import CasConflict
from services.secrets.core.share_attempt import ShareAttempt
from services.secrets.errors import bad_request

ATTEMPT = "core/generate-root/attempt"
# The length of a root token ("hvs." and 24 base62 characters): the pad must match it.
OTP_LENGTH = 28
_B62 = re.compile(r"[A-Za-z0-9]+")


class Attempt(msgspec.Struct, kw_only=True):
    nonce: str
    otp: str = ""
    pgp_key: str = ""
    pgp_fingerprint: str = ""
    shares: list[bytes] = []


class GenerateRoot(ShareAttempt[Attempt]):
    PATH = ATTEMPT
    KIND = Attempt
    WHAT = "the attempt"
    STATIC_REFUSAL = "an auto-unseal (static) seal has no key shares to generate from"

    async def status(self) -> dict[str, Any]:
        config = await self.seal_config()
        attempt, _ = await self.load()
        return {
            "started": attempt is not None,
            "nonce": attempt.nonce if attempt else "",
            "progress": len(attempt.shares) if attempt else 0,
            "required": config.secret_threshold,
            "encoded_token": "",
            "encoded_root_token": "",
            "pgp_fingerprint": attempt.pgp_fingerprint if attempt else "",
            "otp": "",
            "otp_length": OTP_LENGTH,
            "complete": False,
        }

    async def start(self, otp: str, pgp_key: str) -> dict[str, Any]:
        await self.seal_config()
        if otp and pgp_key:
            raise bad_request("only one of 'otp' and 'pgp_key' may be given")
        if otp and (len(otp) != OTP_LENGTH or not _B62.fullmatch(otp)):
            raise bad_request(f"the OTP must be {OTP_LENGTH} base62 characters")
        attempt = Attempt(nonce=str(uuid.uuid4()))
        made = ""
        if pgp_key:
            attempt.pgp_fingerprint = await pgp.fingerprint(pgp_key)
            attempt.pgp_key = pgp_key
        else:
            attempt.otp = otp or otp_codec.new_otp(OTP_LENGTH)
            made = "" if otp else attempt.otp
        try:
            await self.view().create(ATTEMPT, msgspec.json.encode(attempt))
        except CasConflict:
            raise bad_request("root generation already in progress") from None
        out = await self.status()
        out["otp"] = made  # a pad made here is shown this once
        return out

    def wrong_nonce(self, attempt: Attempt) -> str:
        return "incorrect nonce supplied for the root generation in progress"

    async def update(self, share: bytes, nonce: str) -> dict[str, Any]:
        config, attempt, rev = await self.for_share(nonce, "no root generation in progress")
        if await self.take_share(attempt, rev, share, config) is None:
            return await self.status()
        # End the attempt first: of two replicas completing it at once, one makes a token.
        try:
            await self.view().delete(ATTEMPT, rev)
        except CasConflict:
            raise bad_request("the attempt changed meanwhile; submit the key again") from None
        token = await self.core.tokens.create_root()
        if attempt.pgp_key:
            encoded = await pgp.encrypt(attempt.pgp_key, token.encode())
        else:
            encoded = otp_codec.encode(token, attempt.otp)
        out = await self.status()
        out.update(
            nonce=attempt.nonce,
            progress=config.secret_threshold,
            pgp_fingerprint=attempt.pgp_fingerprint,
            encoded_token=encoded,
            encoded_root_token=encoded,
            complete=True,
        )
        return out
