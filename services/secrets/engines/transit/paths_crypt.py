"""encrypt, decrypt, rewrap and datakey, one item or a batch (`batch_input`).

Symmetric keys work in this process (microseconds); RSA encryption (a public-key operation) too;
RSA decryption goes to a crypto worker."""

from __future__ import annotations

import base64
import os
from binascii import a2b_base64
from typing import TYPE_CHECKING, Any

import msgspec

from services.crypto.ops_transit import rsa_encrypt
from services.secrets.engines.transit import symmetric as sym
from services.secrets.engines.transit.asym import public_of
from services.secrets.engines.transit.batch import batch_response, run_items
from services.secrets.engines.transit.paths_keys import CreateFields, create_key
from services.secrets.engines.transit.policy import Policy, TransitError
from services.secrets.errors import bad_request
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response, ok

if TYPE_CHECKING:
    from services.secrets.engines.transit.backend import TransitBackend


class CryptItem(msgspec.Struct, kw_only=True):
    plaintext: str | None = None
    ciphertext: str = ""
    context: str = ""
    key_version: int = 0
    associated_data: str = ""
    reference: str = ""


class EncryptFields(CryptItem, kw_only=True):
    name: str
    type: str = "aes256-gcm96"
    convergent_encryption: bool = False
    batch_input: list[dict[str, Any]] | None = None
    partial_failure_response_code: int = 0


class DatakeyFields(msgspec.Struct, kw_only=True):
    plaintext: str
    name: str
    context: str = ""
    key_version: int = 0
    bits: int = 256


def _ad(p: Policy, item: CryptItem) -> bytes:
    if not item.associated_data:
        return b""
    if not p.kt.symmetric:
        raise TransitError(
            f"'[batch_input.]associated_data' parameter given but key type {p.type} does "
            "not support it"
        )
    return sym.b64decode(item.associated_data, "associated_data")


def encrypt_one(p: Policy, item: CryptItem) -> dict[str, Any]:
    kt = p.kt
    if not kt.encrypt:
        raise TransitError(f"message encryption not supported for key type {p.type}")
    if item.plaintext is None:
        raise TransitError("missing plaintext to encrypt")
    try:
        plaintext = a2b_base64(item.plaintext, strict_mode=True)  # base64.b64decode(validate=)
    except ValueError as exc:
        raise TransitError(f"invalid plaintext: {exc}") from None
    ver = sym.resolve_encrypt_version(p, item.key_version)
    context = sym.b64decode(item.context, "context") if item.context else b""
    if kt.is_rsa:
        raw = rsa_encrypt(public_of(p, ver), plaintext)
    else:
        ad = _ad(p, item) if item.associated_data else b""
        raw = sym.encrypt(p, ver, plaintext, context, ad)
    return {"ciphertext": sym.prefix(ver) + sym.b64encode(raw), "key_version": ver}


async def decrypt_one(b: TransitBackend, p: Policy, item: CryptItem) -> bytes:
    kt = p.kt
    if not kt.encrypt:
        raise TransitError(f"message decryption not supported for key type {p.type}")
    if not item.ciphertext:
        raise TransitError("missing ciphertext to decrypt")
    ver, body = sym.split_versioned(p, item.ciphertext)
    raw = sym.decode_body(body)
    if kt.is_rsa:
        got = await b.crypto(
            "transit_rsa_decrypt", {"key_der": p.version(ver).private_der, "ciphertext": raw}
        )
        return bytes(got["plaintext"])
    context = sym.b64decode(item.context, "context") if item.context else b""
    return sym.decrypt(p, ver, raw, context, _ad(p, item))


def paths(b: TransitBackend) -> list[Path]:
    async def policy_for(name: str, missing: str) -> Policy:
        return b.cached(name) or await b.require(name, missing)

    async def key_exists(req: Request, f: EncryptFields) -> bool:
        # A write that would create the key needs the `create` capability (Vault's upsert).
        return b.cached(f.name) is not None or await b.load(f.name) is not None

    async def encrypt(req: Request, f: EncryptFields) -> Response:
        p = b.cached(f.name) or await b.load(f.name)
        if p is None:
            # Encrypt creates a missing key (Vault's upsert), derived when a context is given.
            first = f.batch_input[0] if f.batch_input else {}
            context = f.context or str(first.get("context") or "")
            p = await create_key(
                b,
                CreateFields(
                    name=f.name,
                    type=f.type,
                    derived=bool(context),
                    convergent_encryption=f.convergent_encryption,
                ),
            )
        if f.batch_input is None:
            return ok(encrypt_one(p, f))

        async def one(item: CryptItem) -> dict[str, Any]:
            return encrypt_one(p, item)

        results = await run_items(f.batch_input, CryptItem, one)
        return batch_response(results, f.partial_failure_response_code)

    async def decrypt(req: Request, f: EncryptFields) -> Response:
        p = await policy_for(f.name, "encryption key not found")

        async def one(item: CryptItem) -> dict[str, Any]:
            try:
                plain = await decrypt_one(b, p, item)
            except TransitError as exc:
                if "too new" not in str(exc):
                    raise
                # Rotated on another replica a moment ago: read the key again, once.
                fresh = await b.fresh(f.name)
                if fresh is None:
                    raise
                plain = await decrypt_one(b, fresh, item)
            return {"plaintext": sym.b64encode(plain)}

        if f.batch_input is None:
            return ok(await one(f))
        results = await run_items(f.batch_input, CryptItem, one)
        return batch_response(results, f.partial_failure_response_code)

    async def rewrap(req: Request, f: EncryptFields) -> Response:
        p = await policy_for(f.name, "encryption key not found")

        async def one(item: CryptItem) -> dict[str, Any]:
            plain = await decrypt_one(b, p, item)
            again = msgspec.structs.replace(item, plaintext=base64.b64encode(plain).decode())
            return encrypt_one(p, again)

        if f.batch_input is None:
            return ok(await one(f))
        results = await run_items(f.batch_input, CryptItem, one)
        return batch_response(results, f.partial_failure_response_code)

    async def datakey(req: Request, f: DatakeyFields) -> Response:
        if f.plaintext not in ("plaintext", "wrapped"):
            raise bad_request("Invalid path, must be 'plaintext' or 'wrapped'")
        if f.bits not in (128, 256, 512):
            raise bad_request("invalid bit length")
        p = await policy_for(f.name, "encryption key not found")
        key = os.urandom(f.bits // 8)
        item = CryptItem(
            plaintext=base64.b64encode(key).decode(),
            context=f.context,
            key_version=f.key_version,
        )
        out = encrypt_one(p, item)
        if f.plaintext == "plaintext":
            out["plaintext"] = item.plaintext
        return ok(out)

    return [
        Path(
            "encrypt/{name}",
            write(encrypt, "Encrypt base64 plaintext (creates the key if missing)"),
            fields=EncryptFields,
            synopsis="Encrypt with a named key",
            exists=key_exists,
        ),
        Path(
            "decrypt/{name}",
            write(decrypt, "Decrypt a vault:vN: ciphertext"),
            fields=EncryptFields,
            synopsis="Decrypt with a named key",
        ),
        Path(
            "rewrap/{name}",
            write(rewrap, "Re-encrypt a ciphertext under the latest (or given) key version"),
            fields=EncryptFields,
            synopsis="Rewrap ciphertext without exposing the plaintext",
        ),
        Path(
            "datakey/{plaintext}/{name}",
            write(datakey, "Generate a data key, wrapped (and in plaintext)"),
            fields=DatakeyFields,
            synopsis="Generate a high-entropy data key encrypted with a named key",
        ),
    ]
