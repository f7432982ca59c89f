"""sign and verify (signatures, and HMACs through verify), one item or a batch.

Ed25519 and P-256 sign in this process; RSA, P-384 and P-521 private-key work goes to a crypto
worker (an RSA-2048 signature would hold this event loop for about a millisecond). Verification
is a public-key operation and stays here."""

from __future__ import annotations

import base64
import binascii
import hmac as hmac_mod
from typing import TYPE_CHECKING, Any

import msgspec
from cryptography.hazmat.primitives import hashes

from services.crypto import ops_transit as ops
from services.secrets.engines.transit import symmetric as sym
from services.secrets.engines.transit.asym import private_of, public_of
from services.secrets.engines.transit.batch import batch_response, run_items
from services.secrets.engines.transit.ed25519_signer import Ed25519Signer
from services.secrets.engines.transit.policy import Policy, TransitError
from services.secrets.errors import bad_request
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import Request, Response, ok
from services.secrets.tools import HASHES

if TYPE_CHECKING:
    from services.secrets.engines.transit.backend import TransitBackend

# Types whose signatures are computed on a crypto worker. Measured on the 2-core dev machine: a
# worker round trip costs this loop ~0.1-0.15 ms (seal, NATS, open) and ~0.4 ms of latency;
# signing here costs Ed25519 ~0.1 ms and P-256 ~0.15 ms (kept here), but P-384 ~0.6 ms, P-521
# ~0.95 ms and RSA-2048 ~0.85 ms (sent to a worker, so the loop keeps serving meanwhile).
WORKER_SIGN = frozenset({"rsa-2048", "rsa-3072", "rsa-4096", "ecdsa-p384", "ecdsa-p521"})
HMAC_HASHES = HASHES  # sign's hash_algorithm, hmac and verify: the same set as tools/hash


class SignItem(msgspec.Struct, kw_only=True):
    input: str | None = None
    context: str = ""
    signature: str = ""
    hmac: str = ""
    reference: str = ""


class SignFields(SignItem, kw_only=True):
    name: str
    urlalgorithm: str = ""
    hash_algorithm: str = ""
    algorithm: str = ""
    key_version: int = 0
    prehashed: bool = False
    signature_algorithm: str = ""
    marshaling_algorithm: str = "asn1"
    salt_length: str = "auto"
    batch_input: list[dict[str, Any]] | None = None


class Options(msgspec.Struct, kw_only=True):
    hash_algorithm: str
    prehashed: bool
    signature_algorithm: str
    marshaling: str
    salt_length: int


def options(f: SignFields) -> Options:
    algo = f.urlalgorithm or f.hash_algorithm or f.algorithm or "sha2-256"
    if algo not in ops.HASHES and algo != "none":
        raise TransitError(f"unsupported hash algorithm {algo}")
    if f.marshaling_algorithm not in ("asn1", "jws"):
        raise TransitError(f'invalid marshaling type "{f.marshaling_algorithm}"')
    sig_algo = f.signature_algorithm or "pss"
    if sig_algo not in ("pss", "pkcs1v15"):
        raise TransitError(f"unsupported rsa signature algorithm {sig_algo}")

    salt = f.salt_length.strip().lower()
    if salt == "auto":
        salt_len = ops.SALT_AUTO
    elif salt == "hash":
        salt_len = ops.SALT_HASH
    else:
        try:
            salt_len = int(salt)
        except ValueError:
            raise TransitError(
                f"salt length neither 'auto', 'hash', nor an int: {f.salt_length}"
            ) from None
        if salt_len < ops.SALT_HASH:  # as Go's rsa: -1 is the hash's length, 0 "auto"
            raise TransitError(f"requested salt length {salt_len} is invalid")
    return Options(
        hash_algorithm=algo,
        prehashed=f.prehashed,
        signature_algorithm=sig_algo,
        marshaling=f.marshaling_algorithm,
        salt_length=salt_len,
    )


def signed_data(p: Policy, o: Options, data: bytes) -> bytes:
    """What the key signs: the message for Ed25519, its digest for ECDSA and RSA."""
    if not p.kt.hashes_input:
        return data  # Ed25519 signs the message itself, whatever the hash asked for
    if o.hash_algorithm == "none" and not (o.prehashed and o.signature_algorithm == "pkcs1v15"):
        raise TransitError(
            "hash_algorithm=none requires both prehashed=true and signature_algorithm=pkcs1v15"
        )
    if o.prehashed:
        return data
    ctx = hashes.Hash(ops.hash_of(o.hash_algorithm))
    ctx.update(data)
    return ctx.finalize()


def encode_sig(sig: bytes, o: Options) -> str:
    if o.marshaling == "jws":
        return base64.urlsafe_b64encode(sig).decode().rstrip("=")
    return sym.b64encode(sig)


def decode_sig(text: str, o: Options) -> bytes:
    try:
        if o.marshaling == "jws":
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise TransitError("invalid signature: could not decode base64") from None


def sign_version(p: Policy, ver: int) -> int:
    if ver == 0:
        return p.latest_version
    if ver < 0:
        raise TransitError("requested version for signing is negative")
    if ver > p.latest_version:
        raise TransitError("requested version for signing is higher than the latest key version")
    if p.min_encryption_version > 0 and ver < p.min_encryption_version:
        raise TransitError(
            "requested version for signing is less than the minimum encryption key version"
        )
    return ver


def hmac_value(p: Policy, ver: int, algorithm: str, data: bytes) -> bytes:
    fn = HMAC_HASHES.get(algorithm)
    if fn is None:
        raise TransitError(f"unsupported algorithm {algorithm}")
    key = p.version(ver).hmac_key
    if not key:
        raise TransitError("no HMAC key exists for that key version")
    return hmac_mod.new(key, data, fn).digest()


def _input(item: SignItem) -> bytes:
    if item.input is None:
        raise TransitError("missing input")
    return sym.b64decode(item.input, "input")


def paths(b: TransitBackend) -> list[Path]:
    async def sign_one(p: Policy, f: SignFields, o: Options, item: SignItem) -> dict[str, Any]:
        data = signed_data(p, o, _input(item))
        ver = sign_version(p, f.key_version)
        out: dict[str, Any] = {}
        if p.type in WORKER_SIGN:
            got = await b.crypto(
                "transit_sign",
                {
                    "key_der": p.version(ver).private_der,
                    "key_type": p.type,
                    "input": data,
                    "hash_algorithm": o.hash_algorithm,
                    "signature_algorithm": o.signature_algorithm,
                    "salt_length": o.salt_length,
                    "marshaling": o.marshaling,
                },
            )
            sig = bytes(got["signature"])
        else:
            if p.derived:
                context = sym.b64decode(item.context, "context") if item.context else b""
                key: Any = sym.derived_ed25519(p, ver, context)
                out["public_key"] = base64.b64encode(key.public_key().public_bytes_raw()).decode()
            else:
                key = private_of(p, ver)
            if isinstance(key, Ed25519Signer):
                sig = key.sign(data)  # Ed25519 signs the message itself (libsodium)
            else:
                try:
                    sig = ops.sign(
                        key,
                        p.type,
                        data,
                        o.hash_algorithm,
                        o.signature_algorithm,
                        o.salt_length,
                        o.marshaling,
                    )
                except ops.CryptoFailure as exc:
                    raise TransitError(str(exc)) from None
        return {"signature": sym.prefix(ver) + encode_sig(sig, o), "key_version": ver, **out}

    def verify_one(p: Policy, f: SignFields, o: Options, item: SignItem) -> dict[str, Any]:
        data = _input(item)
        if item.hmac and not item.signature:
            ver, body = sym.split_versioned(p, item.hmac, "hmac")
            try:
                given = base64.b64decode(body, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise TransitError(f"unable to decode verification HMAC as base64: {exc}") from None
            mine = hmac_value(p, ver, o.hash_algorithm, data)
            return {"valid": hmac_mod.compare_digest(mine, given)}
        if not item.signature:
            raise TransitError("neither a 'signature' nor an 'hmac' were given to verify")
        if not p.kt.sign:
            raise TransitError(f"key type {p.type} does not support verification")
        ver, body = sym.split_versioned(p, item.signature, "signature")
        sig = decode_sig(body, o)
        if p.derived:
            context = sym.b64decode(item.context, "context") if item.context else b""
            public: Any = sym.derived_ed25519(p, ver, context).public_key()
        else:
            public = public_of(p, ver)
        digest = signed_data(p, o, data)
        try:
            valid = ops.verify(
                public,
                p.type,
                digest,
                sig,
                o.hash_algorithm,
                o.signature_algorithm,
                o.salt_length,
                o.marshaling,
            )
        except ops.CryptoFailure as exc:
            raise TransitError(str(exc)) from None
        return {"valid": valid}

    async def sign(req: Request, f: SignFields) -> Response:
        p = b.cached(f.name) or await b.require(f.name, "signing key not found")
        if not p.kt.sign:
            raise bad_request(f"key type {p.type} does not support signing")
        o = options(f)
        if f.batch_input is None:
            return ok(await sign_one(p, f, o, f))

        async def one(item: SignItem) -> dict[str, Any]:
            return await sign_one(p, f, o, item)

        results = await run_items(f.batch_input, SignItem, one, {"key_version": 0})
        return batch_response(results, strict=False)

    async def verify(req: Request, f: SignFields) -> Response:
        p = await b.require(f.name, "signature verification key not found")
        o = options(f)
        if f.batch_input is None:
            return ok(verify_one(p, f, o, f))

        async def one(item: SignItem) -> dict[str, Any]:
            return verify_one(p, f, o, item)

        results = await run_items(f.batch_input, SignItem, one, {"valid": False})
        return batch_response(results, strict=False)

    return [
        Path(
            ("sign/{name}", "sign/{name}/{urlalgorithm}"),
            write(sign, "Sign base64 input with a signing key"),
            fields=SignFields,
            synopsis="Generate a signature",
        ),
        Path(
            ("verify/{name}", "verify/{name}/{urlalgorithm}"),
            write(verify, "Verify a signature or an HMAC"),
            fields=SignFields,
            synopsis="Verify a signature or HMAC",
        ),
    ]
