"""Namespaces: isolated tenants with their own mounts, policies and tokens. A request's namespace
is the `X-Svc-Namespace` header joined with the leading path segments that name namespaces."""

from __future__ import annotations

import re
import secrets
import string
from typing import TYPE_CHECKING

import msgspec

from services.secrets.errors import bad_request, not_found

if TYPE_CHECKING:
    from services.secrets.core.barrier import Barrier, BarrierView

RESERVED = {".", "..", "root", "sys", "audit", "auth", "cubbyhole", "identity"}
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_ALPHABET = string.ascii_letters + string.digits


class Namespace(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    path: str  # "" for root, else "ns1/ns2/"
    custom_metadata: dict[str, str] = {}

    @property
    def is_root(self) -> bool:
        return self.id == "root"

    @property
    def storage_prefix(self) -> str:
        return "" if self.is_root else f"namespaces/{self.id}/"


ROOT = Namespace(id="root", path="")


def normalize(path: str) -> str:
    path = path.strip("/")
    return path + "/" if path else ""


class NamespaceStore:
    """All namespaces, kept in memory (they are few) and in storage at `core/namespaces/`."""

    PREFIX = "core/namespaces/"

    def __init__(self, barrier: Barrier) -> None:
        self.barrier = barrier
        self.by_path: dict[str, Namespace] = {"": ROOT}
        self.by_id: dict[str, Namespace] = {"root": ROOT}

    def view(self, ns: Namespace) -> BarrierView:
        return self.barrier.view(ns.storage_prefix)

    async def load(self) -> None:
        root = self.barrier.view(self.PREFIX)
        by_path = {"": ROOT}
        by_id = {"root": ROOT}
        for key in await root.list_all():
            ns = await root.get_obj(key, Namespace)
            if ns is not None:
                by_path[ns.path] = ns
                by_id[ns.id] = ns
        self.by_path, self.by_id = by_path, by_id

    def resolve(self, header: str, path: str) -> tuple[Namespace, str]:
        """Split a request into (namespace, path inside it)."""
        if not header and len(self.by_path) == 1:
            return ROOT, path  # no namespaces: nothing to look up
        base = normalize(header)
        if base and base not in self.by_path:
            raise not_found(f"namespace {base!r} does not exist")
        ns = self.by_path[base]
        segments = path.split("/")
        consumed = 0
        candidate = base
        for seg in segments[:-1]:
            nxt = f"{candidate}{seg}/"
            if nxt in self.by_path:
                candidate = nxt
                ns = self.by_path[nxt]
                consumed += 1
            else:
                break
        return ns, "/".join(segments[consumed:])

    def children(self, parent: Namespace) -> list[Namespace]:
        return [
            n
            for p, n in self.by_path.items()
            if p
            and p.startswith(parent.path)
            and p != parent.path
            and "/" not in p[len(parent.path) :].rstrip("/")
        ]

    async def create(self, parent: Namespace, name: str, metadata: dict[str, str]) -> Namespace:
        name = name.strip("/")
        if "/" in name:
            raise bad_request("create nested namespaces one level at a time")
        if not _NAME.match(name) or name in RESERVED:
            raise bad_request(f"{name!r} is not a valid namespace name")
        path = f"{parent.path}{name}/"
        if path in self.by_path:
            return self.by_path[path]
        nsid = "".join(secrets.choice(_ALPHABET) for _ in range(5))
        ns = Namespace(id=nsid, path=path, custom_metadata=metadata)
        await self.barrier.view(self.PREFIX).put_obj(nsid, ns)
        self.by_path[path] = ns
        self.by_id[nsid] = ns
        return ns

    async def delete(self, ns: Namespace) -> None:
        if self.children(ns):
            raise bad_request(f"namespace {ns.path!r} has child namespaces; delete them first")
        await self.view(ns).delete_all()
        await self.barrier.view(self.PREFIX).delete(ns.id)
        self.by_path.pop(ns.path, None)
        self.by_id.pop(ns.id, None)
