"""Issuer keys on their own: list, read (never the private part), rename, delete, generate,
import, and the default key (`config/keys`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from services.secrets.engines.pki.issuers import check_name
from services.secrets.engines.pki.models import KeyEntry, KeysConfig
from services.secrets.errors import SecretsError, bad_request, not_found
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend


class KeyRef(msgspec.Struct, kw_only=True):
    key_ref: str
    key_name: str = ""


class GenerateKeyFields(msgspec.Struct, kw_only=True):
    exported: str
    key_name: str = ""
    key_type: str = "rsa"
    key_bits: int = 0
    managed_key_name: str = ""
    managed_key_id: str = ""


class ImportKeyFields(msgspec.Struct, kw_only=True):
    pem_bundle: str = ""
    key_name: str = ""


class KeysConfigFields(msgspec.Struct, kw_only=True):
    default: str = ""


def key_data(entry: KeyEntry) -> dict[str, Any]:
    """A key as Vault reports it: id, name, type and the subject key id its certificates carry
    (the size is in the type's defaults, and never the key itself)."""
    return {
        "key_id": entry.id,
        "key_name": entry.name,
        "key_type": entry.key_type,
        "subject_key_id": subject_key_id(entry.private_key),
    }


def subject_key_id(private_pem: str) -> str:
    """RFC 5280's key identifier (SHA-1 of the public key), colon-separated hex as Vault prints
    it; "" for a key held outside (managed keys). Loading a key is cheap next to signing, and
    skips RSA validation: the key was made or checked when it entered this mount."""
    if not private_pem.strip():
        return ""
    try:
        key = serialization.load_pem_private_key(
            private_pem.encode(), password=None, unsafe_skip_rsa_key_validation=True
        )
    except (ValueError, TypeError):
        return ""
    public = key.public_key()
    digest = x509.SubjectKeyIdentifier.from_public_key(public).digest  # type: ignore[arg-type]
    return ":".join(f"{b:02x}" for b in digest)


async def new_key(b: PKIBackend, result: dict[str, Any], name: str) -> KeyEntry:
    """Store a key a crypto op produced (generate_key, x509_issue, csr_create)."""
    entry = KeyEntry(
        id=str(uuid.uuid4()),
        name=name,
        key_type=result.get("key_type") or result["private_key_type"],
        key_bits=result["key_bits"],
        private_key=result["private_key_pkcs8"],
        fingerprint=result["fingerprint"],
    )
    await b.issuers.add_key(entry)
    return entry


async def checked_key_name(b: PKIBackend, name: str) -> str:
    if not name:
        return ""
    name = check_name(name, "key")
    if await b.issuers.key_name_taken(name):
        raise bad_request(f"key name {name!r} is already in use")
    return name


def key_spec(key_type: str, key_bits: int) -> tuple[str, int]:
    """Validate a key request before any CPU is spent on it."""
    kt = key_type.strip().lower() or "rsa"
    if kt == "ecdsa":
        kt = "ec"
    if kt == "rsa":
        bits = key_bits or 2048
        if bits not in (2048, 3072, 4096):
            raise bad_request(
                f"unsupported bit length for RSA key: {bits} (use 2048, 3072 or 4096)"
            )
        return kt, bits
    if kt == "ec":
        bits = key_bits or 256
        if bits not in (224, 256, 384, 521):
            raise bad_request(
                f"unsupported bit length for EC key: {bits} (use 224, 256, 384 or 521)"
            )
        return kt, bits
    if kt == "ed25519":
        return kt, 0
    raise bad_request(f"unsupported key_type {key_type!r}: use rsa, ec or ed25519")


def paths(b: PKIBackend) -> list[Path]:
    store = b.issuers

    async def listing(req: Request, f: NoFields) -> Response:
        entries = await store.all_keys()
        if not entries:
            raise not_found()
        return Response(
            data={
                "keys": [e.id for e in entries],
                "key_info": {e.id: {"key_name": e.name} for e in entries},
            }
        )

    async def read(req: Request, f: KeyRef) -> Response:
        return Response(data=key_data(await store.resolve_key(f.key_ref)))

    async def update(req: Request, f: KeyRef) -> Response:
        entry = await store.resolve_key(f.key_ref)
        name = check_name(f.key_name, "key") if f.key_name else ""
        if await store.key_name_taken(name, entry.id):
            raise bad_request(f"key name {name!r} is already in use")
        entry = msgspec.structs.replace(entry, name=name)
        await b.cfg.put(f"key/{entry.id}", entry)
        return Response(data=key_data(entry))

    async def delete(req: Request, f: KeyRef) -> Response:
        try:
            entry = await store.resolve_key(f.key_ref)
        except SecretsError:
            return Response()
        users = [i.name or i.id for i in await store.all() if i.key_id == entry.id]
        if users:
            raise bad_request(
                "the key is still used by issuers " + ", ".join(users) + "; delete them first"
            )
        await b.cfg.delete(f"key/{entry.id}")
        cfg = await store.keys_config()
        warnings = []
        if cfg.default == entry.id:
            await b.cfg.put("config/keys", KeysConfig())
            warnings.append("Deleted key was the default key; set a new one with config/keys.")
        return Response(warnings=warnings)

    async def generate(req: Request, f: GenerateKeyFields) -> Response:
        if f.exported in ("kms",) or f.managed_key_name or f.managed_key_id:
            raise bad_request("managed keys are not supported by this PKI engine")
        if f.exported not in ("internal", "exported"):
            raise bad_request(f"invalid type {f.exported!r}: use internal or exported")
        kt, bits = key_spec(f.key_type, f.key_bits)
        name = await checked_key_name(b, f.key_name)
        result = await b.crypto(
            "generate_key",
            {"key_type": kt, "key_bits": bits, "private_format": "traditional"},
            slow=bits >= 4096,
        )
        entry = await new_key(b, result, name)
        data = {"key_id": entry.id, "key_name": entry.name, "key_type": entry.key_type}
        if f.exported == "exported":
            data["private_key"] = result["private_key"].strip()
            data["private_key_type"] = entry.key_type
        return Response(data=data)

    async def import_key(req: Request, f: ImportKeyFields) -> Response:
        if not f.pem_bundle.strip():
            raise bad_request("missing required field 'pem_bundle'")
        parsed = await b.crypto("bundle_parse", {"pem_bundle": f.pem_bundle})
        if len(parsed["keys"]) != 1 or parsed["certificates"]:
            raise bad_request("pem_bundle must hold exactly one private key and nothing else")
        key = parsed["keys"][0]
        for existing in await store.all_keys():
            if existing.fingerprint == key["fingerprint"]:
                return Response(
                    data=key_data(existing), warnings=["the key was already present in this mount"]
                )
        name = await checked_key_name(b, f.key_name)
        entry = await new_key(b, {**key, "private_key_type": key["key_type"]}, name)
        return Response(data=key_data(entry))

    async def read_config(req: Request, f: NoFields) -> Response:
        return Response(data={"default": (await store.keys_config()).default})

    async def write_config(req: Request, f: KeysConfigFields) -> Response:
        if not f.default:
            raise bad_request("missing required field 'default'")
        entry = await store.resolve_key(f.default)
        await b.cfg.put("config/keys", KeysConfig(default=entry.id))
        return Response(data={"default": entry.id})

    return [
        Path(
            ("keys", "keys/"),
            {Op.LIST: Operation(listing, "List keys")},
            synopsis="List the keys of this mount.",
        ),
        Path(
            "keys/generate/{exported}",
            write(generate, "Generate a key"),
            GenerateKeyFields,
            synopsis="Generate a key (returned only with `exported`).",
        ),
        Path(
            "keys/import",
            write(import_key, "Import a key"),
            ImportKeyFields,
            synopsis="Import a PEM private key.",
        ),
        Path(
            "key/{key_ref}",
            {
                Op.READ: Operation(read, "Read a key"),
                **write(update, "Rename a key"),
                Op.DELETE: Operation(delete, "Delete a key"),
            },
            KeyRef,
            synopsis="One key (by id, name or `default`).",
        ),
        Path(
            "config/keys",
            {
                Op.READ: Operation(read_config, "Read the default key"),
                **write(write_config, "Set the default key"),
            },
            KeysConfigFields,
            synopsis="The default key.",
        ),
    ]
