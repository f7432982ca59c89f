"""Key management: keys (create, read, list, delete), config, rotate, trim, export, backup,
restore."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_der_private_key

from services.secrets.engines.transit import backup
from services.secrets.engines.transit.keytypes import HMAC_MAX_BYTES, HMAC_MIN_BYTES, key_type
from services.secrets.engines.transit.policy import (
    KDF_HKDF,
    MIN_AUTO_ROTATE,
    Info,
    Policy,
    TransitError,
    add_version,
    apply_config,
    describe,
    now_rfc3339,
    trim,
)
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import Duration, desc
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response, no_content, ok

if TYPE_CHECKING:
    from services.secrets.engines.transit.backend import TransitBackend


class KeyName(msgspec.Struct, kw_only=True):
    name: str


class CreateFields(msgspec.Struct, kw_only=True):
    name: str
    type: Annotated[
        str,
        desc(
            "aes128-gcm96, aes256-gcm96 (default), chacha20-poly1305, "
            "ed25519, ecdsa-p256/p384/p521, rsa-2048/3072/4096 or hmac"
        ),
    ] = "aes256-gcm96"
    derived: Annotated[bool, desc("derive a key per request from a context")] = False
    convergent_encryption: Annotated[bool, desc("same plaintext and context, same ciphertext")] = (
        False
    )
    exportable: bool = False
    allow_plaintext_backup: bool = False
    key_size: Annotated[int, desc("HMAC key size in bytes (32 to 512)")] = 0
    auto_rotate_period: Duration = 0
    context: str = ""


class ConfigFields(msgspec.Struct, kw_only=True):
    name: str
    min_decryption_version: int | None = None
    min_encryption_version: int | None = None
    deletion_allowed: bool | None = None
    exportable: bool | None = None
    allow_plaintext_backup: bool | None = None
    auto_rotate_period: Duration | None = None


class TrimFields(msgspec.Struct, kw_only=True):
    name: str
    min_available_version: int = 0


class ExportFields(msgspec.Struct, kw_only=True):
    type: str
    name: str
    version: str = ""


class RestoreFields(msgspec.Struct, kw_only=True):
    backup: Annotated[str, desc("a backup from backup/<name>")] = ""
    name: str = ""
    force: bool = False


def new_policy(f: CreateFields) -> Policy:
    kt = key_type(f.type)
    if kt is None:
        raise TransitError(f"unknown key type {f.type}")
    if f.convergent_encryption and not f.derived:
        raise TransitError("convergent encryption requires derivation to be enabled")
    if f.derived and not kt.derive:
        raise TransitError(
            f"key derivation and convergent encryption not supported for keys of type {kt.name}"
        )
    if kt.name == "hmac":
        if not HMAC_MIN_BYTES <= f.key_size <= HMAC_MAX_BYTES:
            raise TransitError(
                f"invalid key size for HMAC key, must be between {HMAC_MIN_BYTES} and "
                f"{HMAC_MAX_BYTES} bytes"
            )
    elif f.key_size:
        raise TransitError(f"key_size is not valid for algorithm {kt.name}")
    if f.auto_rotate_period and f.auto_rotate_period < MIN_AUTO_ROTATE:
        raise TransitError("auto rotate period must be 0 to disable or at least an hour")
    return Policy(
        name=f.name,
        type=kt.name,
        derived=f.derived,
        kdf=KDF_HKDF,
        convergent_encryption=f.convergent_encryption,
        convergent_version=-1 if f.convergent_encryption else 0,
        exportable=f.exportable,
        allow_plaintext_backup=f.allow_plaintext_backup,
        key_size=f.key_size,
        auto_rotate_period=f.auto_rotate_period,
        min_decryption_version=0,
    )


async def create_key(b: TransitBackend, f: CreateFields) -> Policy:
    """Create the key unless it exists (a second create answers with the key, as Vault)."""
    p = await b.load(f.name)
    if p is not None:
        return p
    p = new_policy(f)
    add_version(p, await b.new_material(p))
    if not await b.create(p):
        existing = await b.load(f.name)
        if existing is not None:
            return existing
    return p


def _export_version(p: Policy, version: str) -> list[str]:
    if version == "":
        return [v for v in p.keys if int(v) >= p.min_decryption_version]
    if version == "latest":
        return [str(p.latest_version)]
    try:
        ver = int(version)
    except ValueError:
        raise TransitError("invalid key version") from None
    if ver < p.min_decryption_version:
        raise TransitError("version for export is below minimum decryption version")
    if ver > p.latest_version:
        raise TransitError("version for export is greater than the latest version")
    return [str(ver)]


def _pem_private(der: bytes, traditional: bool) -> str:
    key = load_der_private_key(der, password=None)
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if traditional
        else serialization.PrivateFormat.PKCS8
    )
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


def export_value(p: Policy, export_type: str, ver: str) -> str:
    kt = p.kt
    e = p.version(int(ver))
    if export_type == "hmac-key":
        return base64.b64encode(e.hmac_key).decode()
    if export_type == "public-key":
        return e.public_key
    if kt.is_rsa or kt.is_ec:
        # Vault writes PKCS#1 for RSA and SEC1 for EC ("traditional" PEM).
        return _pem_private(e.private_der, traditional=True)
    return base64.b64encode(e.key).decode()


def paths(b: TransitBackend) -> list[Path]:
    async def list_keys(req: Request, f: Any) -> Response:
        names = sorted(n for n in await b.storage.list("policy/") if not n.endswith("/"))
        if not names:
            raise not_found()
        return ok({"keys": names})

    async def read_key(req: Request, f: KeyName) -> Response:
        p = await b.load(f.name)
        if p is None:
            raise not_found()
        return ok(describe(p))

    async def write_key(req: Request, f: CreateFields) -> Response:
        return ok(describe(await create_key(b, f)))

    async def delete_key(req: Request, f: KeyName) -> Response:
        p = await b.fresh(f.name)
        if p is None:
            raise bad_request(f"error deleting policy {f.name}: could not delete key; not found")
        if not p.deletion_allowed:
            raise bad_request(
                f"error deleting policy {f.name}: deletion is not allowed for this key"
            )
        await b.delete(f.name)
        return no_content()

    async def config(req: Request, f: ConfigFields) -> Response:
        present = {k for k in msgspec.structs.asdict(f) if getattr(f, k) is not None}
        done = await b.mutate(f.name, lambda p: apply_config(p, f, present))
        if done is None:
            raise bad_request(f"no existing key named {f.name} could be found")
        p, warnings = done
        return ok(describe(p), warnings=warnings)

    async def rotate(req: Request, f: KeyName) -> Response:
        p = await b.rotate(f.name)
        if p is None:
            raise bad_request(f"no existing key named {f.name} could be found")
        return ok(describe(p))

    async def trim_key(req: Request, f: TrimFields) -> Response:
        done = await b.mutate(f.name, lambda p: trim(p, f.min_available_version))
        if done is None:
            raise bad_request(f"invalid key name {f.name}")
        return ok(describe(done[0]))

    async def export(req: Request, f: ExportFields) -> Response:
        if f.type not in ("encryption-key", "signing-key", "hmac-key", "public-key"):
            raise bad_request(f"invalid export type: {f.type}")
        p = await b.load(f.name)
        if p is None:
            raise not_found()
        kt = p.kt
        if f.type != "public-key" and not p.exportable:
            raise bad_request("private key material is not exportable")
        if f.type == "encryption-key" and not kt.encrypt:
            raise bad_request("encryption not supported for the key")
        if f.type in ("signing-key", "public-key") and not kt.sign:
            raise bad_request("signing not supported for the key")
        if f.type == "public-key" and p.derived:
            raise bad_request("public key export is not supported for derived keys")
        out = {v: export_value(p, f.type, v) for v in _export_version(p, f.version)}
        return ok({"name": p.name, "type": p.type, "keys": out})

    async def backup_key(req: Request, f: KeyName) -> Response:
        def mark(p: Policy) -> None:
            if not p.exportable:
                raise TransitError("exporting is disallowed on the policy")
            if not p.allow_plaintext_backup:
                raise TransitError("plaintext backup is disallowed on the policy")
            p.backup_info = Info(time=now_rfc3339(), version=p.latest_version)

        done = await b.mutate(f.name, mark)
        if done is None:
            raise bad_request(f"key {f.name!r} not found")
        return ok({"backup": backup.encode(done[0])})

    async def restore(req: Request, f: RestoreFields) -> Response:
        if not f.backup:
            raise bad_request("'backup' must be supplied")
        if "/" in f.name:
            raise bad_request("'name' cannot contain '/'")
        p = backup.decode(f.backup, f.name)
        if not p.name:
            raise bad_request("the backup names no key and no 'name' was given")
        p.restore_info = Info(time=now_rfc3339(), version=p.latest_version)
        if f.force:
            await b.put(p)
        elif not await b.create(p):
            raise bad_request(f'key "{p.name}" already exists')
        return no_content()

    return [
        Path(
            "keys/",
            {Op.LIST: Operation(list_keys, "List the keys")},
            synopsis="The named keys of this mount",
        ),
        Path(
            "keys/{name}",
            {
                Op.READ: Operation(read_key, "Read a key (never its material)"),
                Op.DELETE: Operation(delete_key, "Delete a key whose config allows it"),
                **write(write_key, "Create a key"),
            },
            fields=CreateFields,
            synopsis="A named encryption, signing or HMAC key",
        ),
        Path(
            "keys/{name}/config",
            write(config, "Configure a key"),
            fields=ConfigFields,
            synopsis="A key's minimum versions, exportability, deletion and rotation period",
        ),
        Path(
            "keys/{name}/rotate",
            write(rotate, "Add a new key version"),
            fields=KeyName,
            synopsis="Rotate a key: new data uses the new version",
        ),
        Path(
            "keys/{name}/trim",
            write(trim_key, "Delete versions below min_available_version"),
            fields=TrimFields,
            synopsis="Trim old key versions",
        ),
        Path(
            ("export/{type}/{name}", "export/{type}/{name}/{version}"),
            {Op.READ: Operation(export, "Export key material of an exportable key")},
            fields=ExportFields,
            synopsis="Export keys: encryption-key, signing-key, hmac-key or public-key",
        ),
        Path(
            "backup/{name}",
            {Op.READ: Operation(backup_key, "Back up a key with all its versions")},
            fields=KeyName,
            synopsis="A plaintext backup of a key that allows it",
        ),
        Path(
            ("restore", "restore/{name}"),
            write(restore, "Restore a key from a backup"),
            fields=RestoreFields,
            synopsis="Restore a backed-up key, optionally under a new name",
        ),
    ]
