"""What the key-share ceremonies (rekey, root generation) share: the seal configuration they
need, and their one attempt kept under the barrier with compare-and-set, so any replica serves
the next step and two replicas taking shares at once cannot lose one silently."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from services.secrets import shamir
from services.secrets.core.barrier import CasConflict
from services.secrets.core.seal import ROOT_KEY, SealConfig
from services.secrets.errors import bad_request
from services.secrets.keyring import BarrierError, open_with

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class _Attempt(Protocol):
    nonce: str
    shares: list[bytes]


T = TypeVar("T", bound=_Attempt)


def add_share(have: list[bytes], share: bytes, multi: bool) -> list[bytes]:
    """Shares of one attempt, refusing the same share twice (constant-time comparison)."""
    if multi and len(share) < 2:
        raise bad_request("the key share is too short")
    for old in have:
        if hmac.compare_digest(old, share) or (multi and old[-1:] == share[-1:]):
            raise bad_request("given key has already been provided during this rotation")
    return [*have, share]


def combine_shares(shares: list[bytes], threshold: int, total: int) -> bytes:
    return shares[0] if threshold == 1 or total == 1 else shamir.combine(shares)


class ShareAttempt(Generic[T]):
    """A ceremony names its attempt's storage path and type, itself in a conflict's message,
    and why a static seal cannot take part."""

    PATH: str
    KIND: type[T]
    WHAT: str
    STATIC_REFUSAL: str

    def __init__(self, core: Core) -> None:
        self.core = core

    def view(self) -> Any:
        return self.core.barrier.view("")

    async def seal_config(self) -> SealConfig:
        """The seal's configuration; a static (auto-unseal) seal has no shares to take."""
        config = await self.core.seal.load_config()
        if config is None:
            raise bad_request("the secrets service is not initialized")
        if config.type == "static":
            raise bad_request(self.STATIC_REFUSAL)
        return config

    async def load(self) -> tuple[T | None, int]:
        got = await self.view().get_obj_entry(self.PATH, self.KIND)
        return (None, 0) if got is None else got

    async def save(self, attempt: T, revision: int) -> None:
        """Revision 0 creates the attempt; any other must still be the stored one."""
        data = msgspec.json.encode(attempt)
        try:
            if revision:
                await self.view().update(self.PATH, data, revision)
            else:
                await self.view().create(self.PATH, data)
        except CasConflict:
            raise bad_request(f"{self.WHAT} changed meanwhile; submit the key again") from None

    async def cancel(self) -> None:
        await self.view().delete(self.PATH)

    async def for_share(self, nonce: str, missing: str) -> tuple[SealConfig, T, int]:
        """The seal configuration and the attempt a share with `nonce` is for (400 `missing`
        when there is none, 400 on a wrong nonce: `wrong_nonce` words it)."""
        config = await self.seal_config()
        attempt, revision = await self.load()
        if attempt is None:
            raise bad_request(missing)
        if not nonce:
            raise bad_request("missing required field 'nonce'")
        # surrogatepass: a lone surrogate from a JSON body compares (unequal), never raises.
        given = nonce.encode("utf-8", "surrogatepass")
        if not hmac.compare_digest(given, attempt.nonce.encode()):
            raise bad_request(self.wrong_nonce(attempt))
        return config, attempt, revision

    def wrong_nonce(self, attempt: T) -> str:
        return "incorrect nonce supplied"

    async def take_share(
        self, attempt: T, revision: int, share: bytes, config: SealConfig
    ) -> bytes | None:
        """Adds a share: below the threshold the attempt is saved and None returned; at it, the
        root key the combined shares open (a 400 and the progress reset when they open none)."""
        multi = config.secret_shares > 1 and config.secret_threshold > 1
        attempt.shares = add_share(attempt.shares, share, multi)
        if len(attempt.shares) < config.secret_threshold:
            await self.save(attempt, revision)
            return None
        try:
            key = combine_shares(attempt.shares, config.secret_threshold, config.secret_shares)
            return await self.root_key(key)
        except (BarrierError, ValueError):
            attempt.shares = []
            await self.save(attempt, revision)
            raise bad_request(
                "the key shares do not open the barrier; progress was reset"
            ) from None

    async def root_key(self, unseal_key: bytes) -> bytes:
        entry = await self.core.storage.get(ROOT_KEY)
        if entry is None:
            raise BarrierError("the stored root key is missing")
        return open_with(unseal_key, entry.value, ROOT_KEY.encode())
