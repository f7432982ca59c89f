"""cubbyhole: private storage of each token, gone when the token is."""

from __future__ import annotations

from typing import Any

import msgspec

from services.secrets.errors import bad_request, not_found, permission_denied
from services.secrets.framework.backend import Backend
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response


class CubbyPath(msgspec.Struct, kw_only=True):
    path: str = ""


class CubbyholeBackend(Backend):
    type_name = "cubbyhole"
    help_text = "Each token has its own cubbyhole; no token can read another's."

    def _view(self, req: Request):  # type: ignore[no-untyped-def]
        if req.token is None:
            raise permission_denied()
        if req.token.type == "batch":
            # Nothing would ever delete a batch token's cubbyhole: it is never revoked.
            raise bad_request("cubbyhole operations are only supported by 'service' type tokens")
        return self.storage.sub(self.core.tokens.hash(req.token.id) + "/")

    def build_paths(self) -> list[Path]:
        async def read(req: Request, f: CubbyPath) -> Response:
            raw = await self._view(req).get(f.path)
            if raw is None:
                raise not_found()
            return Response(data=msgspec.json.decode(raw))

        async def put(req: Request, f: CubbyPath) -> Response:
            if not req.data:
                raise bad_request("missing data fields")
            await self._view(req).put(f.path, msgspec.json.encode(req.data))
            return Response()

        async def delete(req: Request, f: CubbyPath) -> Response:
            await self._view(req).delete(f.path)
            return Response()

        async def listing(req: Request, f: CubbyPath) -> Response:
            prefix = f.path if not f.path or f.path.endswith("/") else f.path + "/"
            keys = await self._view(req).list(prefix)
            if not keys:
                raise not_found()
            return Response(data={"keys": keys})

        async def listing_root(req: Request, _: NoFields) -> Response:
            return await listing(req, CubbyPath())

        ops: dict[Op, Operation] = {
            Op.READ: Operation(read, "Read a secret"),
            **write(put, "Store a secret"),
            Op.DELETE: Operation(delete, "Delete a secret"),
            Op.LIST: Operation(listing, "List secrets"),
        }
        return [
            Path(
                "",
                {Op.LIST: Operation(listing_root, "List secrets")},
                synopsis="List the caller's cubbyhole.",
            ),
            Path(
                "{path*}",
                ops,
                CubbyPath,
                arbitrary_input=True,
                synopsis="Secrets private to the calling token.",
            ),
        ]

    async def revoke_token_storage(self, token_hash: str) -> Any:
        await self.storage.sub(token_hash + "/").delete_all()
