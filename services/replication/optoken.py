"""Generating a DR operation token from the primary's unseal key shares.

An attempt is started (with an OTP made here, or a PGP key), fed one share per call with the
attempt's nonce, and completes when the threshold is reached and the combined key opens the
primary's root key, which the secondary holds (replicated, still encrypted). The token itself is
returned only encoded (OTP XOR, or PGP-encrypted); the cluster keeps its SHA-256. Shares live in
memory only, for the length of one attempt.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.replication import otp as otp_codec
from services.replication import pgp, promote_key
from services.secrets import shamir
from services.secrets.core.seal import ROOT_KEY, SealConfig, decode_share
from services.secrets.core.tokens import random_b62
from services.secrets.keyring import BarrierError, open_with
from shared.errors import ServiceError

TOKEN_PREFIX = "hvb."
TOKEN_LENGTH = len(TOKEN_PREFIX) + 24

# () -> (seal config, encrypted root key); None where nothing has been replicated yet.
SealReader = Callable[[], Awaitable[tuple[SealConfig | None, bytes | None]]]


def token_hash(token: str) -> str:
    # The exact bytes: a lone surrogate from a JSON body hashes (and fails), never raises.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def is_valid(token: str, hashes: list[str]) -> bool:
    if not token:
        return False
    digest = token_hash(token)
    found = False
    for h in hashes:  # every entry compared, in constant time each
        found |= hmac.compare_digest(h, digest)
    return found


@dataclass
class Attempt:
    nonce: str
    required: int
    otp: str = ""
    pgp_key: str = ""
    pgp_fingerprint: str = ""
    shares: dict[int, bytes] = field(default_factory=dict)


class OperationTokens:
    def __init__(self, read_seal: SealReader) -> None:
        self.read_seal = read_seal
        self.attempt: Attempt | None = None

    def record(self) -> dict[str, Any]:
        a = self.attempt
        return {
            "started": a is not None,
            "nonce": a.nonce if a else "",
            "progress": len(a.shares) if a else 0,
            "required": a.required if a else 0,
            "encoded_token": "",
            "pgp_fingerprint": a.pgp_fingerprint if a else "",
            "complete": False,
        }

    async def _config(self) -> tuple[SealConfig, bytes]:
        config, root = await self.read_seal()
        if config is None or root is None:
            raise ServiceError(
                400,
                "no data has been replicated from the primary yet: its "
                "unseal keys cannot be checked",
            )
        if config.type != "shamir" or config.secret_shares < 1:
            raise ServiceError(
                400,
                "the primary auto-unseals and has no key shares: an "
                "operation token cannot be generated from shares",
            )
        return config, root

    async def start(self, pgp_key: str = "") -> dict[str, Any]:
        if self.attempt is not None:
            raise ServiceError(
                400, "an operation token generation is already in progress; cancel it first"
            )
        config, _ = await self._config()
        attempt = Attempt(nonce=str(uuid.uuid4()), required=config.secret_threshold)
        if pgp_key:
            attempt.pgp_fingerprint = await pgp.fingerprint(pgp_key)
            attempt.pgp_key = pgp_key
        else:
            attempt.otp = otp_codec.new_otp(TOKEN_LENGTH)
        self.attempt = attempt
        out = self.record()
        if attempt.otp:
            out.update(otp=attempt.otp, otp_length=len(attempt.otp))
        return out

    def cancel(self) -> None:
        self.attempt = None

    async def update(self, key: str, nonce: str) -> tuple[dict[str, Any], str, bytes]:
        """Add one share; returns (record, token, wrapped KEK) with the token set once
        complete, and the proven KEK wrapped under it (promote_key.py)."""
        a = self.attempt
        if a is None:
            raise ServiceError(400, "no operation token generation is in progress")
        if not key:
            raise ServiceError(400, "'key' must be given: one of the primary's unseal key shares")
        if not hmac.compare_digest(
            nonce.encode("utf-8", "surrogatepass"), a.nonce.encode("utf-8", "surrogatepass")
        ):
            raise ServiceError(400, "the nonce does not match the attempt in progress")
        config, root_blob = await self._config()
        share = decode_share(key)
        want = 32 if config.secret_shares == 1 else 33
        if len(share) != want:
            raise ServiceError(
                400,
                f"the key share has the wrong length: {len(share)} bytes, "
                f"the primary's shares have {want}",
            )
        if config.secret_shares > 1 and share[-1] in a.shares:
            raise ServiceError(400, "this key share was already given in this attempt")
        a.shares[share[-1] if config.secret_shares > 1 else 0] = share
        if len(a.shares) < a.required:
            return self.record(), "", b""
        parts = list(a.shares.values())
        try:
            kek = parts[0] if config.secret_shares == 1 else shamir.combine(parts)
            open_with(kek, root_blob, ROOT_KEY.encode())
        except (BarrierError, ValueError):
            a.shares.clear()
            raise ServiceError(
                400, "the key shares do not open the primary's root key; progress was reset"
            ) from None
        token = TOKEN_PREFIX + random_b62(24)
        wrapped = promote_key.wrap(token, token_hash(token), kek)
        if a.pgp_key:
            encoded = await pgp.encrypt(a.pgp_key, token.encode())
        else:
            encoded = otp_codec.encode(token, a.otp)
        out = self.record()
        out.update(progress=a.required, complete=True, encoded_token=encoded)
        self.attempt = None
        return out, token, wrapped
