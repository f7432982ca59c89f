"""Paths that configure an SSH mount: admin keys, roles and the zero-address role list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.engines.ssh.install_script import BUILTIN_INSTALL_SCRIPT
from services.secrets.engines.ssh.roles import ROLE_NAME, RoleFields, build_role, read_shape
from services.secrets.engines.ssh.store import AdminKey, ZeroAddress
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import CommaList, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.ssh.backend import SSHBackend


class KeyFields(msgspec.Struct, kw_only=True):
    name: str
    key: Annotated[str, desc("SSH private key with privileges on the target hosts")] = ""


class ZeroAddressFields(msgspec.Struct, kw_only=True):
    roles: Annotated[
        CommaList, desc("roles allowed for any IP (their CIDR lists are ignored)")
    ] = []


def paths(b: SSHBackend) -> list[Path]:
    store = b.store

    async def write_key(req: Request, f: KeyFields) -> Response:
        if not ROLE_NAME.match(f.name):
            raise bad_request(f"invalid key name {f.name!r}")
        if not f.key.strip():
            raise bad_request("missing key: give the admin user's SSH private key")
        # Parsing proves the key is usable before a role can depend on it.
        await b.crypto("ssh_parse_private_key", {"private_key": f.key})
        await store.put_admin_key(f.name, AdminKey(key=f.key))
        return Response()

    async def delete_key(req: Request, f: KeyFields) -> Response:
        await store.delete_admin_key(f.name)
        return Response()

    async def write_role(req: Request, f: RoleFields) -> Response:
        try:
            role = build_role(f)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        if role.key_type == "dynamic" and await store.admin_key(role.key) is None:
            raise bad_request(
                f"invalid key {role.key!r}: no key of that name is registered at keys/<name>"
            )
        await store.put_role(f.name, role)
        return Response()

    async def read_role(req: Request, f: RoleFields) -> Response:
        role = await store.role(f.name)
        if role is None:
            raise not_found()
        return Response(data=read_shape(role, BUILTIN_INSTALL_SCRIPT))

    async def delete_role(req: Request, f: RoleFields) -> Response:
        # A deleted role must not linger in the zero-address list.
        zero = await store.zero_address()
        if zero is not None and f.name in zero.roles:
            zero.roles = [r for r in zero.roles if r != f.name]
            await store.put_zero_address(zero)
        await store.delete_role(f.name)
        return Response()

    async def list_roles(req: Request, _: NoFields) -> Response:
        names = await store.role_names()
        if not names:
            raise not_found()
        info = {}
        for name in names:
            role = await store.role(name)
            if role is not None:
                info[name] = {"key_type": role.key_type}
                if role.key_type == "ca":  # signed by the mount's one CA (ca_paths.issuer)
                    info[name]["issuer_ref"] = "default"
        return Response(data={"keys": names, "key_info": info})

    async def read_zero(req: Request, _: ZeroAddressFields) -> Response:
        zero = await store.zero_address()
        if zero is None:
            raise not_found()
        return Response(data={"roles": zero.roles})

    async def write_zero(req: Request, f: ZeroAddressFields) -> Response:
        roles = sorted(set(f.roles))
        if not roles:
            raise bad_request("missing roles")
        for name in roles:
            if await store.role(name) is None:
                raise bad_request(f"role {name!r} does not exist")
        await store.put_zero_address(ZeroAddress(roles=roles))
        return Response()

    async def delete_zero(req: Request, _: ZeroAddressFields) -> Response:
        await store.delete_zero_address()
        return Response()

    return [
        Path(
            "keys/{name}",
            {
                **write(write_key, "Register an admin key"),
                Op.DELETE: Operation(delete_key, "Delete an admin key"),
            },
            KeyFields,
            synopsis="Admin keys that install dynamic keys on target hosts.",
        ),
        Path(
            ("roles", "roles/"),
            {Op.LIST: Operation(list_roles, "List roles")},
            synopsis="List the roles with their key types.",
        ),
        Path(
            "roles/{name}",
            {
                Op.READ: Operation(read_role, "Read a role"),
                **write(write_role, "Create or update a role"),
                Op.DELETE: Operation(delete_role, "Delete a role"),
            },
            RoleFields,
            synopsis="Roles: otp, dynamic or ca credentials for users and hosts.",
        ),
        Path(
            "config/zeroaddress",
            {
                Op.READ: Operation(read_zero, "Read zero-address roles"),
                **write(write_zero, "Set the zero-address roles"),
                Op.DELETE: Operation(delete_zero, "Clear them"),
            },
            ZeroAddressFields,
            synopsis="Roles that serve any IP address.",
        ),
    ]
