"""sys/managed-keys/:type[/:name[/test/sign]]: keys held in an HSM, a KMS or a key vault."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from services.secrets.errors import not_found
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.managed_keys import signers, store
from services.secrets.managed_keys.params import check_name, check_type, read_view

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class TypeOnly(msgspec.Struct, kw_only=True):
    type: str


class TypeName(msgspec.Struct, kw_only=True):
    type: str
    name: str


_DESCRIPTION = """Parameters are written as strings, as the seed documents them: booleans as
"true"/"false", `mechanism` as a 0x-prefixed hex string, `slot` as a decimal string. `pin`,
`secret_key` and `client_secret` read back as "redacted". Names are lowercase and unique across
types within a namespace; a key listed in a mount's `allowed_managed_keys` cannot be deleted."""


def paths(core: Core) -> list[Path]:
    async def listing(req: Request, f: TypeOnly) -> Response:
        keys = await store.names(core, req.namespace, check_type(f.type))
        if not keys:
            raise not_found()
        # The anchor shows `keys` at the top level; clients of the envelope read data.keys.
        return Response(data={"keys": keys}, data_at_top=True)

    async def put(req: Request, f: TypeName) -> Response:
        await store.put(core, req.namespace, check_type(f.type), check_name(f.name), req.data)
        return Response()

    async def read(req: Request, f: TypeName) -> Response:
        stored = await store.get(core, req.namespace, check_type(f.type), check_name(f.name))
        return Response(data=read_view(store.config_of(core, stored, for_use=False)))

    async def delete(req: Request, f: TypeName) -> Response:
        await store.delete(core, req.namespace, check_type(f.type), check_name(f.name))
        return Response()

    async def test_sign(req: Request, f: TypeName) -> Response:
        stored = await store.get(core, req.namespace, check_type(f.type), check_name(f.name))
        await signers.test_sign(store.config_of(core, stored), store.libraries(core))
        return Response()

    return [
        Path(
            ("managed-keys/{type}", "managed-keys/{type}/"),
            {Op.LIST: Operation(listing, "List managed keys of a type")},
            TypeOnly,
            synopsis="List the managed keys of one backend type.",
        ),
        Path(
            "managed-keys/{type}/{name}/test/sign",
            {Op.UPDATE: Operation(test_sign, "Sign and verify random data")},
            TypeName,
            synopsis="Check a managed key works: sign random data with it and verify the "
            "signature (generating the key first when allowed).",
        ),
        Path(
            "managed-keys/{type}/{name}",
            {
                Op.READ: Operation(read, "Read a managed key"),
                **write(put, "Create or update a managed key"),
                Op.DELETE: Operation(delete, "Delete a managed key"),
            },
            TypeName,
            arbitrary_input=True,
            synopsis="Manage a key held in an external key backend (pkcs11, cloudakms, "
            "cloudbkeyvault).",
            description=_DESCRIPTION,
        ),
    ]
