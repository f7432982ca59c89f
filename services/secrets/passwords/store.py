"""Stored password policies (per namespace, inside the barrier) and the helper engines call to
generate a password from a named policy. Policies are read on every use, so an update takes
effect immediately on every replica."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.passwords.generator import GenerationTimeout, generate
from services.secrets.passwords.policy import DEFAULT_POLICY, PasswordPolicy, PolicyError, parse

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.namespaces import Namespace

PREFIX = "sys/password_policy/"


class StoredPasswordPolicy(msgspec.Struct, kw_only=True):
    name: str
    policy: str  # the decoded document as written


def view(core: object, ns: Namespace) -> BarrierView:
    return core.namespaces.view(ns).sub(PREFIX)  # type: ignore[attr-defined]


async def read(core: object, ns: Namespace, name: str) -> StoredPasswordPolicy | None:
    return await view(core, ns).get_obj(name, StoredPasswordPolicy)


async def generate_async(policy: PasswordPolicy) -> str:
    """Generation is CPU work bounded by its timeout; keep it off the event loop."""
    return await asyncio.to_thread(generate, policy)


async def load_policy(core: object, ns: Namespace, name: str) -> PasswordPolicy:
    stored = await read(core, ns, name)
    if stored is None:
        raise not_found(f"password policy {name!r} does not exist")
    try:
        return parse(stored.policy)
    except PolicyError as exc:  # stored before a stricter parser; report, don't crash
        raise bad_request(f"password policy {name!r} is invalid: {exc}") from None


async def generate_password(core: object, namespace: Namespace, policy_name: str = "") -> str:
    """A password from the named policy of `namespace`, or from the default policy (20
    characters, one each of lower, upper, digit and '-') when no name is given. Raises a 400
    when the named policy does not exist, so an engine configured with a wrong name says so."""
    if not policy_name:
        policy = DEFAULT_POLICY
    else:
        stored = await read(core, namespace, policy_name)
        if stored is None:
            raise bad_request(f"password policy {policy_name!r} does not exist")
        try:
            policy = parse(stored.policy)
        except PolicyError as exc:
            raise bad_request(f"password policy {policy_name!r} is invalid: {exc}") from None
    try:
        return await generate_async(policy)
    except GenerationTimeout as exc:
        raise bad_request(str(exc)) from None
