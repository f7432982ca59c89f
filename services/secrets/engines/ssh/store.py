"""What an SSH mount keeps, under its encrypted storage view:

`roles/<name>` roles, `keys/<name>` admin keys for dynamic roles, `config/ca` the CA key pair,
`config/zeroaddress` the roles valid for any IP, and `otp/<hmac(otp)>` unused one-time passwords
(only the HMAC of an OTP is ever stored).
"""

from __future__ import annotations

import msgspec

from services.secrets.core.barrier import BarrierView, CasConflict
from services.secrets.engines.ssh.roles import SSHRole


class AdminKey(msgspec.Struct, kw_only=True):
    key: str  # private key, PEM or OpenSSH format


class CAKeys(msgspec.Struct, kw_only=True):
    public_key: str  # authorized_keys line ending in a newline
    private_key: str


class ZeroAddress(msgspec.Struct, kw_only=True):
    roles: list[str] = []


class OTPEntry(msgspec.Struct, kw_only=True):
    username: str
    ip: str
    role_name: str
    otp_hash: str
    used: bool = False


CA_PATH = "config/ca"
ZERO_PATH = "config/zeroaddress"


class SSHStore:
    def __init__(self, view: BarrierView) -> None:
        self.view = view

    # roles
    async def role(self, name: str) -> SSHRole | None:
        return await self.view.get_obj(f"roles/{name}", SSHRole)

    async def put_role(self, name: str, role: SSHRole) -> None:
        await self.view.put_obj(f"roles/{name}", role)

    async def delete_role(self, name: str) -> None:
        await self.view.delete(f"roles/{name}")

    async def role_names(self) -> list[str]:
        return [k for k in await self.view.list("roles/") if not k.endswith("/")]

    # admin keys
    async def admin_key(self, name: str) -> AdminKey | None:
        return await self.view.get_obj(f"keys/{name}", AdminKey)

    async def put_admin_key(self, name: str, key: AdminKey) -> None:
        await self.view.put_obj(f"keys/{name}", key)

    async def delete_admin_key(self, name: str) -> None:
        await self.view.delete(f"keys/{name}")

    # CA
    async def ca(self) -> CAKeys | None:
        return await self.view.get_obj(CA_PATH, CAKeys)

    async def put_ca(self, keys: CAKeys) -> None:
        await self.view.put_obj(CA_PATH, keys)

    async def create_ca(self, keys: CAKeys) -> CAKeys:
        """Store `keys` unless a CA appeared meanwhile (another replica); return the CA in use."""
        try:
            await self.view.create(CA_PATH, msgspec.json.encode(keys))
            return keys
        except CasConflict:
            current = await self.ca()
            return current if current is not None else keys

    async def delete_ca(self) -> None:
        await self.view.delete(CA_PATH)

    # zero-address roles
    async def zero_address(self) -> ZeroAddress | None:
        return await self.view.get_obj(ZERO_PATH, ZeroAddress)

    async def put_zero_address(self, entry: ZeroAddress) -> None:
        await self.view.put_obj(ZERO_PATH, entry)

    async def delete_zero_address(self) -> None:
        await self.view.delete(ZERO_PATH)

    # one-time passwords
    async def create_otp(self, entry: OTPEntry) -> None:
        await self.view.create(f"otp/{entry.otp_hash}", msgspec.json.encode(entry))

    async def consume_otp(self, otp_hash: str) -> OTPEntry | None:
        """The OTP's entry, marked used by compare-and-set first so that two replicas verifying
        the same OTP at once cannot both succeed; None if unknown or already used."""
        got = await self.view.get_obj_entry(f"otp/{otp_hash}", OTPEntry)
        if got is None or got[0].used:
            return None
        entry, revision = got
        entry.used = True
        try:
            await self.view.update(f"otp/{otp_hash}", msgspec.json.encode(entry), revision)
        except CasConflict:
            return None
        await self.view.delete(f"otp/{otp_hash}")
        return entry

    async def delete_otp(self, otp_hash: str) -> None:
        await self.view.delete(f"otp/{otp_hash}")
