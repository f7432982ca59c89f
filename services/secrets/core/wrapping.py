"""Response wrapping: a response is stored behind a single-use token that can be unwrapped once,
looked up, or rewrapped into a new token."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.core.tokens import TokenEntry, random_b62
from services.secrets.errors import bad_request
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.namespaces import Namespace

WRAPPING_POLICY = "response-wrapping"


class Wrapped(msgspec.Struct, kw_only=True):
    response: bytes  # the JSON envelope to hand back on unwrap
    creation_path: str
    creation_time: float
    ttl: int
    namespace_id: str = "root"


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class WrappingManager:
    def __init__(self, core: Core) -> None:
        self.core = core

    @property
    def view(self):  # type: ignore[no-untyped-def]
        return self.core.barrier.view("sys/wrapping/")

    async def wrap(
        self,
        ns: Namespace,
        response: dict[str, Any],
        ttl: int,
        creation_path: str,
        wrapped_accessor: str = "",
    ) -> dict[str, Any]:
        if ttl <= 0:
            raise bad_request("the wrapping TTL must be positive")
        now = time.time()
        entry = TokenEntry(
            id=self.core.tokens.new_id(ns),
            accessor=random_b62(),
            policies=[WRAPPING_POLICY],
            display_name="",
            path=creation_path,
            creation_time=now,
            ttl=ttl,
            num_uses=1,
            renewable=False,
            orphan=True,
            namespace_id=ns.id,
            purpose="wrapping",
        )
        await self.core.tokens.create(entry)
        await self.view.put_obj(
            self.core.tokens.hash(entry.id),
            Wrapped(
                response=msgspec.json.encode(response),
                creation_path=creation_path,
                creation_time=now,
                ttl=ttl,
                namespace_id=ns.id,
            ),
        )
        info = {
            "token": entry.id,
            "accessor": entry.accessor,
            "ttl": ttl,
            "creation_time": rfc3339(now),
            "creation_path": creation_path,
        }
        if wrapped_accessor:
            info["wrapped_accessor"] = wrapped_accessor
        return info

    async def _entry(self, token_id: str) -> tuple[TokenEntry, Wrapped]:
        entry = await self.core.tokens.lookup(token_id)
        wrapped = (
            None
            if entry is None
            else await self.view.get_obj(self.core.tokens.hash(token_id), Wrapped)
        )
        if entry is None or wrapped is None or entry.purpose != "wrapping":
            raise bad_request("wrapping token is not valid or does not exist")
        return entry, wrapped

    async def _claim(self, token_id: str) -> tuple[TokenEntry, Wrapped]:
        """Take the wrapped response out, once: of concurrent unwraps (on any replica) only the
        one whose compare-and-delete succeeds gets it."""
        entry = await self.core.tokens.lookup(token_id)
        key = self.core.tokens.hash(token_id)
        got = None if entry is None else await self.view.get_obj_entry(key, Wrapped)
        if entry is None or got is None or entry.purpose != "wrapping":
            raise bad_request("wrapping token is not valid or does not exist")
        try:
            await self.view.delete(key, got[1])
        except CasConflict:
            raise bad_request("wrapping token is not valid or does not exist") from None
        return entry, got[0]

    async def unwrap(self, token_id: str) -> bytes:
        entry, wrapped = await self._claim(token_id)
        await self.core.tokens.revoke_tree(entry)
        return wrapped.response

    async def lookup(self, token_id: str) -> dict[str, Any]:
        _, wrapped = await self._entry(token_id)
        return {
            "creation_path": wrapped.creation_path,
            "creation_time": rfc3339(wrapped.creation_time),
            "creation_ttl": wrapped.ttl,
        }

    async def rewrap(self, token_id: str) -> dict[str, Any]:
        entry, wrapped = await self._claim(token_id)
        ns = self.core.namespaces.by_id.get(entry.namespace_id)
        assert ns is not None
        info = await self.wrap(
            ns, msgspec.json.decode(wrapped.response), wrapped.ttl, wrapped.creation_path
        )
        await self.core.tokens.revoke_tree(entry)
        return info

    async def forget(self, token_hash: str) -> None:
        await self.view.delete(token_hash)
