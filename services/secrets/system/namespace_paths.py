"""sys/namespaces: create, read, list and delete child namespaces of the request's namespace."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import not_found
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.namespaces import Namespace


_UUID_BASE = uuid.UUID("5f0c52a4-6d43-4b49-9e0e-1f3c2a7b9d10")


class NamespaceFields(msgspec.Struct, kw_only=True):
    path: str
    custom_metadata: dict[str, str] = {}


def _json(ns: Namespace) -> dict[str, Any]:
    # OpenBao's fields: a namespace is never locked here (no sys/namespaces/api-lock), and is
    # never left tainted (deletion finishes before the DELETE answers). The uuid is derived
    # from the id, so every replica reports the same one without storing it.
    return {
        "id": ns.id,
        "path": ns.path,
        "custom_metadata": ns.custom_metadata,
        "uuid": str(uuid.uuid5(_UUID_BASE, ns.id)),
        "locked": False,
        "tainted": False,
    }


def paths(core: Core) -> list[Path]:
    async def listing(req: Request, _: NoFields) -> Response:
        kids = core.namespaces.children(req.namespace)
        if not kids:
            raise not_found()
        rel = {n.path[len(req.namespace.path) :]: _json(n) for n in kids}
        return Response(data={"keys": sorted(rel), "key_info": rel})

    async def create(req: Request, f: NamespaceFields) -> Response:
        ns = await core.namespaces.create(req.namespace, f.path, f.custom_metadata)
        await core.reload_namespace(ns)
        return Response(data=_json(ns))

    async def read(req: Request, f: NamespaceFields) -> Response:
        ns = core.namespaces.by_path.get(f"{req.namespace.path}{f.path.strip('/')}/")
        if ns is None:
            raise not_found()
        return Response(data=_json(ns))

    async def delete(req: Request, f: NamespaceFields) -> Response:
        ns = core.namespaces.by_path.get(f"{req.namespace.path}{f.path.strip('/')}/")
        # OpenBao answers 200 with a status (its CLI parses the body; a 204 reads as EOF).
        if ns is None:
            return Response(warnings=["requested namespace does not exist"])
        await core.delete_namespace(ns)
        return Response(data={"status": "deleted"})

    return [
        Path(
            ("namespaces", "namespaces/"),
            {Op.LIST: Operation(listing, "List namespaces")},
            synopsis="List the child namespaces.",
        ),
        Path(
            "namespaces/{path*}",
            {
                Op.READ: Operation(read, "Read a namespace"),
                **write(create, "Create a namespace"),
                Op.DELETE: Operation(delete, "Delete a namespace"),
            },
            NamespaceFields,
            synopsis="Create, read or delete a namespace.",
        ),
    ]
