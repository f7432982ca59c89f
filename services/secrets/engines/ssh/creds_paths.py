"""Credentials for otp and dynamic roles (`creds/<role>`), the roles serving an IP (`lookup`),
and OTP verification by the target host's helper (`verify`, unauthenticated, each OTP once)."""

from __future__ import annotations

import hmac
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.engines.ssh import remote
from services.secrets.engines.ssh.install_script import BUILTIN_INSTALL_SCRIPT
from services.secrets.engines.ssh.network import parse_ip, role_allows_ip
from services.secrets.engines.ssh.roles import DYNAMIC, OTP, SSHRole
from services.secrets.engines.ssh.store import OTPEntry
from services.secrets.errors import bad_request, upstream
from services.secrets.framework.backend import SecretType
from services.secrets.framework.fields import desc
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import LeaseSpec, Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.ssh.backend import SSHBackend

ECHO_REQUEST, ECHO_RESPONSE = "verify-echo-request", "verify-echo-response"
OTP_SECRET, DYNAMIC_SECRET = "otp", "dynamic_key"


class CredsFields(msgspec.Struct, kw_only=True):
    name: str
    username: Annotated[str, desc("user on the target host; the role's default_user if empty")] = ""
    ip: Annotated[str, desc("IP address of the target host")] = ""


class LookupFields(msgspec.Struct, kw_only=True):
    ip: str = ""


class VerifyFields(msgspec.Struct, kw_only=True):
    otp: str = ""


def _username(role: SSHRole, requested: str) -> str:
    """The role's default_user unless another is asked for; allowed_users (empty or '*' allow
    anyone) limits who else."""
    username = requested.strip() or role.default_user
    allowed = [u.strip() for u in role.allowed_users.split(",") if u.strip()]
    if (
        requested.strip()
        and username != role.default_user
        and allowed
        and "*" not in allowed
        and username not in allowed
    ):
        raise bad_request(f"username {username!r} is not in the role's allowed_users")
    return username


def paths(b: SSHBackend) -> list[Path]:
    store = b.store

    async def zero_roles() -> list[str]:
        zero = await store.zero_address()
        return zero.roles if zero is not None else []

    async def creds(req: Request, f: CredsFields) -> Response:
        role = await store.role(f.name)
        if role is None:
            raise bad_request(f"unknown role: {f.name}")
        if role.key_type not in (OTP, DYNAMIC):
            raise bad_request(
                f"role {f.name!r} is a {role.key_type} role: sign keys with it at "
                "sign/<role> instead"
            )
        if not f.ip.strip():
            raise bad_request("missing ip")
        try:
            ip = parse_ip(f.ip)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        username = _username(role, f.username)
        if not role_allows_ip(
            ip, role.cidr_list, role.exclude_cidr_list, zero_address=f.name in await zero_roles()
        ):
            raise bad_request(f"IP {ip} does not belong to role {f.name!r}")
        if role.key_type == OTP:
            return await _otp(req, f.name, role, username, str(ip))
        return await _dynamic(f.name, role, username, str(ip))

    async def _otp(req: Request, name: str, role: SSHRole, username: str, ip: str) -> Response:
        otp = str(uuid.uuid4())
        otp_hash = b.core.tokens.hash(otp)
        await store.create_otp(
            OTPEntry(username=username, ip=ip, role_name=name, otp_hash=otp_hash)
        )
        return Response(
            data={"key": otp, "key_type": OTP, "username": username, "ip": ip, "port": role.port},
            lease=LeaseSpec(
                ttl=0, renewable=False, internal={"otp_hash": otp_hash}, secret_type=OTP_SECRET
            ),
        )

    async def _dynamic(name: str, role: SSHRole, username: str, ip: str) -> Response:
        remote.check_username(username)
        admin = await store.admin_key(role.key)
        if admin is None:
            raise bad_request(f"the role's admin key {role.key!r} is no longer registered")
        pair = await b.crypto(
            "ssh_generate_key", {"key_type": "rsa", "key_bits": role.key_bits, "purpose": "dynamic"}
        )
        public = pair["public_key"].strip()
        key_line = f"{role.key_option_specs} {public}" if role.key_option_specs else public
        script = role.install_script or BUILTIN_INSTALL_SCRIPT
        await remote.run_script(
            host=ip,
            port=role.port,
            admin_user=role.admin_user,
            admin_key=admin.key,
            action="install",
            key_line=key_line,
            script=script,
            username=username,
        )
        internal = {
            "admin_user": role.admin_user,
            "username": username,
            "ip": ip,
            "port": role.port,
            "host_key_name": role.key,
            "key_line": key_line,
            "install_script": role.install_script,
        }
        return Response(
            data={
                "key": pair["private_key"],
                "key_type": DYNAMIC,
                "username": username,
                "ip": ip,
                "port": role.port,
                "admin_user": role.admin_user,
                "allowed_users": role.allowed_users,
                "cidr_list": role.cidr_list,
                "default_user": role.default_user,
                "exclude_cidr_list": role.exclude_cidr_list,
                "install_script": script,
                "key_bits": role.key_bits,
                "key_option_specs": role.key_option_specs,
            },
            lease=LeaseSpec(ttl=0, renewable=True, internal=internal, secret_type=DYNAMIC_SECRET),
        )

    async def lookup(req: Request, f: LookupFields) -> Response:
        if not f.ip.strip():
            raise bad_request("missing ip")
        try:
            ip = parse_ip(f.ip)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        zero = await zero_roles()
        matching: list[str] = []
        for name in await store.role_names():
            role = await store.role(name)
            if (
                role is not None
                and role.key_type in (OTP, DYNAMIC)
                and role.cidr_list
                and role_allows_ip(ip, role.cidr_list, role.exclude_cidr_list, zero_address=False)
            ):
                matching.append(name)
        matching += [r for r in zero if r not in matching]
        return Response(data={"roles": matching})

    async def verify(req: Request, f: VerifyFields) -> Response:
        if not f.otp:
            raise bad_request("missing otp")
        if hmac.compare_digest(f.otp.encode("utf-8", "surrogatepass"), ECHO_REQUEST.encode()):
            return Response(data={"message": ECHO_RESPONSE})
        otp_hash = b.core.tokens.hash(f.otp)
        entry = await store.consume_otp(otp_hash)
        # The key is the HMAC already; comparing it again in constant time keeps the check
        # independent of how storage looked the key up.
        if entry is None or not hmac.compare_digest(entry.otp_hash, otp_hash):
            raise bad_request("OTP not found")
        return Response(
            data={"username": entry.username, "ip": entry.ip, "role_name": entry.role_name}
        )

    async def revoke_otp(internal: dict[str, Any]) -> None:
        otp_hash = str(internal.get("otp_hash", ""))
        if otp_hash:
            await store.delete_otp(otp_hash)

    async def revoke_dynamic(internal: dict[str, Any]) -> None:
        admin = await store.admin_key(str(internal.get("host_key_name", "")))
        if admin is None:
            raise upstream(
                f"cannot remove the dynamic key from {internal.get('ip')}: the admin "
                f"key {internal.get('host_key_name')!r} is no longer registered"
            )
        await remote.run_script(
            host=str(internal["ip"]),
            port=int(internal.get("port", 22)),
            admin_user=str(internal["admin_user"]),
            admin_key=admin.key,
            action="uninstall",
            key_line=str(internal["key_line"]),
            script=str(internal.get("install_script") or BUILTIN_INSTALL_SCRIPT),
            username=str(internal["username"]),
        )

    async def renew_dynamic(internal: dict[str, Any], ttl: int) -> int:
        return ttl  # the key stays installed; only the lease moves

    b.secret_types[OTP_SECRET] = SecretType(revoke=revoke_otp)
    b.secret_types[DYNAMIC_SECRET] = SecretType(revoke=revoke_dynamic, renew=renew_dynamic)

    return [
        Path(
            "creds/{name}",
            write(creds, "Create OTP or dynamic key credentials"),
            CredsFields,
            synopsis="Credentials for a host from an otp or dynamic role.",
        ),
        Path(
            "lookup",
            write(lookup, "List the roles serving an IP"),
            LookupFields,
            synopsis="Roles whose CIDR blocks (or the zero-address list) include an IP.",
        ),
        Path(
            "verify",
            write(verify, "Verify and consume an OTP", unauthenticated=True),
            VerifyFields,
            synopsis="Verify a one-time password (once); no token needed.",
        ),
    ]
