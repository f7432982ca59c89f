"""ACL policies per namespace: stored as their source text, parsed once, cached; ACLs are
cached per set of policy names and dropped when any policy changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from services.secrets.acl import ACL, DEFAULT_POLICY
from services.secrets.errors import bad_request
from services.secrets.policy import Policy, PolicyError, parse_policy

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.namespaces import Namespace


# Wrapping tokens may only unwrap and look up the response they carry.
RESPONSE_WRAPPING_POLICY = """
path "sys/wrapping/unwrap" { capabilities = ["update"] }
path "sys/wrapping/lookup" { capabilities = ["update"] }
"""


class StoredPolicy(msgspec.Struct, kw_only=True):
    name: str
    policy: str


class PolicyStore:
    def __init__(self, core: Core) -> None:
        self.core = core
        self._parsed: dict[tuple[str, str], Policy | None] = {}
        self._acls: dict[tuple[str, tuple[str, ...]], ACL] = {}

    def _view(self, ns: Namespace):  # type: ignore[no-untyped-def]
        return self.core.namespaces.view(ns).sub("sys/policy/")

    def invalidate(self) -> None:
        self._parsed.clear()
        self._acls.clear()

    async def read(self, ns: Namespace, name: str) -> StoredPolicy | None:
        name = name.lower()
        if name == "root":
            return None
        got = await self._view(ns).get_obj(name, StoredPolicy)
        if got is None and name == "default":
            return StoredPolicy(name="default", policy=DEFAULT_POLICY)
        if name == "response-wrapping":
            return StoredPolicy(name=name, policy=RESPONSE_WRAPPING_POLICY)
        return got

    async def write(self, ns: Namespace, name: str, text: str) -> None:
        name = name.lower()
        if name in ("root", "response-wrapping"):
            raise bad_request(f"cannot update the {name} policy")
        try:
            parse_policy(text, name)
        except PolicyError as exc:
            raise bad_request(f"failed to parse policy: {exc}") from None
        await self._view(ns).put_obj(name, StoredPolicy(name=name, policy=text))
        await self.core.broadcast_invalidate("policies")

    async def delete(self, ns: Namespace, name: str) -> None:
        name = name.lower()
        if name in ("root", "default"):
            raise bad_request(f"cannot delete the {name} policy")
        await self._view(ns).delete(name)
        await self.core.broadcast_invalidate("policies")

    async def names(self, ns: Namespace) -> list[str]:
        stored = set(await self._view(ns).list())
        return sorted(stored | {"default", "root"})

    async def _policy(self, ns: Namespace, name: str) -> Policy | None:
        key = (ns.id, name)
        if key not in self._parsed:
            stored = await self.read(ns, name)
            try:
                self._parsed[key] = None if stored is None else parse_policy(stored.policy, name)
            except PolicyError:
                self._parsed[key] = None
        return self._parsed[key]

    async def exists(self, ns: Namespace, name: str) -> bool:
        """Whether a policy of this name can be used (memoised with the parsed policies)."""
        return await self._policy(ns, name) is not None

    def known_acl(self, ns: Namespace, names: list[str]) -> ACL | None:
        """The ACL `acl` would answer for these names as listed, if already built."""
        return self._acls.get((ns.id, tuple(names)))

    async def acl(self, ns: Namespace, names: list[str]) -> ACL:
        # Found first by the names as the token lists them (every request asks), then by the
        # set they make, so each set of policies is one ACL however its tokens order them.
        listed = (ns.id, tuple(names))
        acl = self._acls.get(listed)
        if acl is not None:
            return acl
        key = (ns.id, tuple(sorted(set(names))))
        acl = self._acls.get(key)
        if acl is None:
            if "root" in names:
                acl = ACL.root()
            else:
                policies = [p for n in key[1] if (p := await self._policy(ns, n)) is not None]
                acl = ACL(policies)
            self._acls[key] = acl
        self._acls[listed] = acl
        return acl
