"""The userpass auth method: users with scrypt-hashed passwords log in at `login/<username>`.

Users live at `user/<lowercased name>` in the mount's (encrypted) storage. A password is stored
only as an scrypt hash with a per-user random salt; the KDF runs in a worker thread, bounded by
a semaphore, so logins never block the event loop and a flood cannot exhaust memory.

scrypt keys HMAC-SHA256 (inside PBKDF2) with the password, and HMAC pads a key shorter than its
block with zero bytes: scrypt("s3cret") == scrypt("s3cret\0"). Hashes of version 2 therefore
derive from the password's exact bytes followed by a 0x01 terminator, which no NUL suffix can
imitate. Version-1 hashes (the raw password) still verify, but never for a password that ends
in NUL, and a successful login moves them to version 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import re
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from services.secrets.auth.exact import secret_bytes
from services.secrets.auth.token_params import (
    TokenInput,
    TokenParams,
    addr_allowed,
    apply_token_input,
    login_auth,
    sanitize_policies,
    take_deprecated,
    token_data,
)
from services.secrets.errors import (
    SecretsError,
    bad_request,
    not_found,
    permission_denied,
    unsupported_path,
)
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.listing import list_prefix
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry

# scrypt cost: N=2^15, r=8 is 32 MiB and ~0.1 s per hash here. Stored per user, so raising it
# later only affects new passwords.
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
KEY_LEN = 32
SALT_LEN = 16
HASH_VERSION = 2
# Vault's GenericNameRegex: word characters, with dots and dashes inside.
_NAME = re.compile(r"\w(?:[\w.-]*\w)?")
# Names become storage keys (NATS subjects, with a 4 KiB control line): keep them short.
MAX_NAME_BYTES = 256
INVALID_LOGIN = "invalid username or password"
# Deprecated fields of users/<name> and the token_* fields they stand for.
_ALIASES = {
    "policies": "token_policies",
    "ttl": "token_ttl",
    "max_ttl": "token_max_ttl",
    "bound_cidrs": "token_bound_cidrs",
}


class PasswordHash(msgspec.Struct, kw_only=True):
    alg: str = "scrypt"
    n: int
    r: int
    p: int
    salt: bytes
    key: bytes
    # 1: scrypt over the raw password (legacy); 2: over the password and a 0x01 terminator.
    v: int = 1


class UserEntry(TokenParams, kw_only=True):
    password: PasswordHash
    # Deprecated names the last writer used; a read echoes them as Vault does.
    legacy: list[str] = []


class UserFields(TokenInput, kw_only=True):
    username: str
    password: Annotated[str, desc("the user's password (required on create)")] | None = None
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None
    ttl: Annotated[Duration, desc("deprecated: use token_ttl")] | None = None
    max_ttl: Annotated[Duration, desc("deprecated: use token_max_ttl")] | None = None
    bound_cidrs: Annotated[CommaList, desc("deprecated: use token_bound_cidrs")] | None = None


class UsernameOnly(msgspec.Struct, kw_only=True):
    username: str


class PasswordFields(msgspec.Struct, kw_only=True):
    username: str
    password: Annotated[str, desc("the password")] = ""


class PoliciesFields(msgspec.Struct, kw_only=True):
    username: str
    token_policies: Annotated[CommaList, desc("policies of the login tokens")] | None = None
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None


def _kdf_input(password: str, version: int) -> bytes:
    raw = secret_bytes(password)
    return raw + b"\x01" if version >= 2 else raw


def _derive(password: str, salt: bytes, n: int, r: int, p: int, version: int) -> bytes:
    return Scrypt(salt=salt, length=KEY_LEN, n=n, r=r, p=p).derive(_kdf_input(password, version))


def hash_password(password: str) -> PasswordHash:
    """Blocking: call through a thread."""
    salt = os.urandom(SALT_LEN)
    key = _derive(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P, HASH_VERSION)
    return PasswordHash(n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, salt=salt, key=key, v=HASH_VERSION)


def verify_password(stored: PasswordHash, password: str) -> bool:
    """Blocking: call through a thread. Constant-time comparison of the derived keys."""
    if stored.alg != "scrypt" or stored.v not in (1, 2):
        return False
    # A version-1 hash cannot tell "pw" from "pw\0": refuse the ambiguous candidate (after the
    # same work, so timing says nothing).
    ambiguous = stored.v == 1 and password.endswith("\x00")
    derived = _derive(password, stored.salt, stored.n, stored.r, stored.p, stored.v)
    return hmac.compare_digest(derived, stored.key) and not ambiguous


# A stand-in hash for unknown users: the same work is done whether or not the user exists, so
# the response time does not tell which.
_DUMMY = PasswordHash(
    n=SCRYPT_N,
    r=SCRYPT_R,
    p=SCRYPT_P,
    salt=os.urandom(SALT_LEN),
    key=os.urandom(KEY_LEN),
    v=HASH_VERSION,
)


class UserpassBackend(Backend):
    type_name = "userpass"
    is_auth = True
    help_text = (
        "Username and password logins. Users are managed under users/; a login at "
        "login/<username> returns a token with the user's policies."
    )

    def __init__(self, core: Any, mount: MountEntry | None, storage: BarrierView) -> None:
        super().__init__(core, mount, storage)
        # Bounds concurrent KDF runs (each takes 32 MiB and a core for ~0.1 s).
        self._kdf_slots = asyncio.Semaphore(max(2, 2 * (os.cpu_count() or 1)))

    # ---- helpers ------------------------------------------------------------------------
    @staticmethod
    def _name(raw: str) -> str:
        name = raw.strip().lower()
        if not _NAME.fullmatch(name):
            raise unsupported_path(raw)
        if len(name.encode()) > MAX_NAME_BYTES:
            raise bad_request(f"username must be at most {MAX_NAME_BYTES} bytes")
        return name

    async def _hash(self, password: str) -> PasswordHash:
        async with self._kdf_slots:
            return await asyncio.to_thread(hash_password, password)

    async def _verify(self, stored: PasswordHash, password: str) -> bool:
        async with self._kdf_slots:
            return await asyncio.to_thread(verify_password, stored, password)

    async def _upgrade(self, name: str, old: PasswordHash, password: str) -> None:
        """Rehash a legacy (version-1) password after a successful login. Best effort: a
        concurrent change of the user wins, and the next login tries again."""
        new_hash = await self._hash(password)

        def change(current: UserEntry | None) -> UserEntry:
            if current is None or current.password != old:
                raise bad_request("changed meanwhile")
            return msgspec.structs.replace(current, password=new_hash)

        with contextlib.suppress(SecretsError):
            await self._change(name, change)

    async def _user(self, name: str) -> tuple[UserEntry, int] | None:
        return await self.storage.get_obj_entry(f"user/{name}", UserEntry)

    async def _change(self, name: str, change: Any) -> None:
        """Read-modify-write with CAS so concurrent writers on any replica never lose updates.
        `change(entry or None) -> UserEntry` may raise a 400."""
        key = f"user/{name}"
        for _ in range(20):
            got = await self._user(name)
            new = change(got[0] if got else None)
            raw = msgspec.json.encode(new)
            try:
                if got is None:
                    await self.storage.create(key, raw)
                else:
                    await self.storage.update(key, raw, got[1])
                return
            except CasConflict:
                await asyncio.sleep(0.005)
        raise bad_request("the user is being changed concurrently; try again")

    # ---- paths --------------------------------------------------------------------------
    def build_paths(self) -> list[Path]:
        async def user_exists(req: Request, f: UserFields) -> bool:
            return await self._user(self._name(f.username)) is not None

        async def list_users(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, "user/")

        async def read_user(req: Request, f: UserFields) -> Response:
            got = await self._user(self._name(f.username))
            if got is None:
                raise not_found()
            user = got[0]
            data = token_data(user)
            for old in user.legacy:
                data[old] = data[_ALIASES[old]]
            return Response(data=data)

        async def write_user(req: Request, f: UserFields) -> Response:
            name = self._name(f.username)
            used, dropped = take_deprecated(
                f, {old: (new, getattr(f, old)) for old, new in _ALIASES.items()}
            )
            password = f.password or ""
            # Validate first, so bad input never pays for the KDF.
            got = await self._user(name)
            if got is None and not password:
                raise bad_request("missing password")
            apply_token_input(got[0] if got else TokenParams(), f)
            # Hash before the CAS loop: a retry must not pay for the KDF again.
            new_hash = await self._hash(password) if password else None

            def change(current: UserEntry | None) -> UserEntry:
                if current is None:
                    if new_hash is None:
                        raise bad_request("missing password")
                    base = UserEntry(password=new_hash)
                else:
                    base = current
                changes = apply_token_input(base, f)
                legacy = sorted((set(base.legacy) - dropped) | used)
                return msgspec.structs.replace(
                    base, password=new_hash or base.password, legacy=legacy, **changes
                )

            await self._change(name, change)
            return Response()

        async def delete_user(req: Request, f: UserFields) -> Response:
            await self.storage.delete(f"user/{self._name(f.username)}")
            return Response()

        async def set_password(req: Request, f: PasswordFields) -> Response:
            name = self._name(f.username)
            if not f.password:
                raise bad_request("missing password")
            if await self._user(name) is None:
                raise bad_request("username does not exist")
            new_hash = await self._hash(f.password)

            def change(current: UserEntry | None) -> UserEntry:
                if current is None:
                    raise bad_request("username does not exist")
                return msgspec.structs.replace(current, password=new_hash)

            await self._change(name, change)
            return Response()

        async def set_policies(req: Request, f: PoliciesFields) -> Response:
            name = self._name(f.username)
            if f.token_policies is None and f.policies is None:
                raise bad_request("policies or token_policies must be set")

            def change(current: UserEntry | None) -> UserEntry:
                if current is None:
                    raise bad_request("username does not exist")
                legacy = set(current.legacy)
                if f.policies is not None and f.token_policies is None:
                    legacy.add("policies")
                else:
                    legacy.discard("policies")
                chosen = f.token_policies if f.token_policies is not None else f.policies
                return msgspec.structs.replace(
                    current, legacy=sorted(legacy), token_policies=sanitize_policies(chosen or [])
                )

            await self._change(name, change)
            return Response()

        async def login(req: Request, f: PasswordFields) -> Response:
            name = f.username.strip().lower()
            valid = _NAME.fullmatch(name) and len(name.encode()) <= MAX_NAME_BYTES
            got = await self._user(name) if valid else None
            if got is None or not f.password:
                # Same cost as a real check, so timing does not reveal unknown users.
                await self._verify(_DUMMY, f.password or "x")
                raise bad_request(INVALID_LOGIN)
            user = got[0]
            if not await self._verify(user.password, f.password):
                raise bad_request(INVALID_LOGIN)
            if user.password.v < HASH_VERSION:
                await self._upgrade(name, user.password, f.password)
            if not addr_allowed(req.remote_addr, user.token_bound_cidrs):
                raise permission_denied()
            auth = login_auth(
                user,
                req,
                display_name=name,
                metadata={"username": name},
                internal={"username": name},
            )
            auth.alias_name = name  # the user's entity alias on this mount
            return Response(auth=auth)

        r = Operation
        return [
            Path(
                ("users", "users/"),
                {Op.LIST: r(list_users, "List users")},
                synopsis="List the users of this method.",
            ),
            Path(
                "users/{username}/password",
                write(set_password, "Change a user's password"),
                PasswordFields,
                synopsis="Reset a user's password.",
            ),
            Path(
                "users/{username}/policies",
                write(set_policies, "Change a user's policies"),
                PoliciesFields,
                synopsis="Replace the policies of a user's tokens.",
            ),
            Path(
                "users/{username}",
                {
                    Op.READ: r(read_user, "Read a user"),
                    **write(write_user, "Create or update a user"),
                    Op.DELETE: r(delete_user, "Delete a user"),
                },
                UserFields,
                exists=user_exists,
                synopsis="Manage users.",
                description="Usernames are case-insensitive. The password is required when "
                "the user is created and is never returned.",
            ),
            Path(
                "login/{username}",
                write(login, "Log in", unauthenticated=True),
                PasswordFields,
                synopsis="Log in with a username and password.",
                description="Returns a token; bad credentials are answered 400 without "
                "saying whether the user exists.",
            ),
        ]
