"""sys/policy and sys/policies/acl: ACL policy documents in HCL or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class PolicyFields(msgspec.Struct, kw_only=True):
    name: str
    policy: Annotated[str, desc("the policy document, HCL or JSON")] = ""
    # The legacy sys/policy endpoint calls it "rules".
    rules: str = ""


class NameOnly(msgspec.Struct, kw_only=True):
    name: str


def paths(core: Core) -> list[Path]:
    async def list_legacy(req: Request, _: NoFields) -> Response:
        names = await core.policies.names(req.namespace)
        return Response(data={"keys": names, "policies": names}, data_at_top=True)

    async def list_acl(req: Request, _: NoFields) -> Response:
        names = await core.policies.names(req.namespace)
        return Response(data={"keys": names})

    def read(legacy: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: NameOnly) -> Response:
            name = f.name.lower()
            if name == "root":
                data = {"name": "root", "rules" if legacy else "policy": ""}
                return Response(data=data, data_at_top=legacy)
            stored = await core.policies.read(req.namespace, name)
            if stored is None:
                raise not_found(f"no policy named: {name}")
            data = {"name": stored.name, "rules" if legacy else "policy": stored.policy}
            return Response(data=data, data_at_top=legacy)

        return handler

    async def put(req: Request, f: PolicyFields) -> Response:
        text = f.policy or f.rules
        if not text.strip():
            raise bad_request("'policy' parameter not supplied or empty")
        await core.policies.write(req.namespace, f.name, text)
        return Response()

    async def delete(req: Request, f: NameOnly) -> Response:
        await core.policies.delete(req.namespace, f.name)
        return Response()

    return [
        Path(
            "policy",
            {
                Op.READ: Operation(list_legacy, "List policies"),
                Op.LIST: Operation(list_legacy, "List policies"),
            },
            synopsis="List the ACL policies (legacy endpoint).",
        ),
        Path(
            "policy/{name}",
            {
                Op.READ: Operation(read(True), "Read a policy"),
                **write(put, "Write a policy"),
                Op.DELETE: Operation(delete, "Delete a policy"),
            },
            PolicyFields,
            synopsis="Read, write or delete an ACL policy (legacy endpoint).",
        ),
        Path(
            ("policies/acl", "policies/acl/"),
            {Op.LIST: Operation(list_acl, "List ACL policies")},
            synopsis="List the ACL policies.",
        ),
        Path(
            "policies/acl/{name}",
            {
                Op.READ: Operation(read(False), "Read an ACL policy"),
                **write(put, "Write an ACL policy"),
                Op.DELETE: Operation(delete, "Delete an ACL policy"),
            },
            PolicyFields,
            synopsis="Read, write or delete an ACL policy.",
        ),
    ]
