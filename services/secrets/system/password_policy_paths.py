"""sys/policies/password: password policies (write, read, delete, list, generate)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.passwords import store
from services.secrets.passwords.generator import GenerationTimeout
from services.secrets.passwords.policy import PolicyError, decode_document, parse

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class PasswordPolicyFields(msgspec.Struct, kw_only=True):
    name: str
    policy: Annotated[str, desc("the policy document, HCL or JSON; may be base64-encoded")] = ""


class NameOnly(msgspec.Struct, kw_only=True):
    name: str


def paths(core: Core) -> list[Path]:
    async def put(req: Request, f: PasswordPolicyFields) -> Response:
        if not f.policy.strip():
            raise bad_request("missing field 'policy'")
        text = decode_document(f.policy)
        try:
            policy = parse(text)
        except PolicyError as exc:
            raise bad_request(str(exc)) from None
        # Generate once before saving: a policy whose rules are (almost) never met fails here,
        # not later inside an engine.
        try:
            await store.generate_async(policy)
        except GenerationTimeout as exc:
            raise bad_request(f"unable to generate a password from the policy: {exc}") from None
        await store.view(core, req.namespace).put_obj(
            f.name, store.StoredPasswordPolicy(name=f.name, policy=text)
        )
        return Response()

    async def read(req: Request, f: NameOnly) -> Response:
        stored = await store.read(core, req.namespace, f.name)
        if stored is None:
            raise not_found("policy does not exist")
        return Response(data={"policy": stored.policy})

    async def delete(req: Request, f: NameOnly) -> Response:
        # As Vault: engines that name the policy are not checked; they fail on next use.
        await store.view(core, req.namespace).delete(f.name)
        return Response()

    async def listing(req: Request, _: NoFields) -> Response:
        keys = await store.view(core, req.namespace).list()
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def generate(req: Request, f: NameOnly) -> Response:
        policy = await store.load_policy(core, req.namespace, f.name)
        try:
            password = await store.generate_async(policy)
        except GenerationTimeout as exc:
            raise bad_request(str(exc)) from None
        return Response(data={"password": password})

    return [
        Path(
            ("policies/password", "policies/password/"),
            {Op.LIST: Operation(listing, "List password policies")},
            synopsis="List the password policies.",
        ),
        Path(
            "policies/password/{name}/generate",
            {Op.READ: Operation(generate, "Generate a password")},
            NameOnly,
            synopsis="Generate a password from a password policy.",
        ),
        Path(
            "policies/password/{name}",
            {
                Op.READ: Operation(read, "Read a password policy"),
                **write(put, "Create or update a password policy"),
                Op.DELETE: Operation(delete, "Delete a password policy"),
            },
            PasswordPolicyFields,
            synopsis="Manage password policies: length and charset rules for generated passwords.",
        ),
    ]
