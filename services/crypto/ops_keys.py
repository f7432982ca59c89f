"""Key pairs: generation and parsing of RSA, EC (NIST curves) and Ed25519 keys.

Ops (call with `await crypto_call(bus, cluster, "<op>", {...})`; every failure is a 400 whose
message names the problem):

`generate_key` {key_type, key_bits=0, private_format="pkcs8", min_rsa_bits=2048}
    key_type: "rsa" | "ec" (alias "ecdsa") | "ed25519".
    key_bits: rsa 2048 (default) / 3072 / 4096, and 1024 only when min_rsa_bits <= 1024 (SSH
    dynamic keys); ec 256 (default) / 224 / 384 / 521; ignored for ed25519.
    private_format: "pkcs8" | "traditional" (PKCS#1 for RSA, SEC1 for EC; aliases "der",
    "pkcs1", "sec1"; Ed25519 has no traditional form and stays PKCS#8) | "openssh".
    -> {private_key: PEM in private_format, private_key_pkcs8: PEM, public_key: SPKI PEM,
        public_key_openssh: "ssh-ed25519 AAAA..." (no comment), key_type, key_bits,
        fingerprint: hex SHA-256 of the SPKI DER}

`parse_private_key` {private_key: PEM (PKCS#1, SEC1, PKCS#8 or OpenSSH)}
    -> the same fields as generate_key (private_key is returned as PKCS#8).

`parse_public_key` {public_key: SPKI PEM or an OpenSSH "type base64 [comment]" line}
    -> {public_key, public_key_openssh, key_type, key_bits, fingerprint}
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from services.crypto.keypool import POOL, generate_rsa
from services.crypto.ops import CryptoFailure, operation

F = TypeVar("F", bound=Callable[..., Any])

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

RSA_BITS = (2048, 3072, 4096)
CURVES: dict[int, type[ec.EllipticCurve]] = {
    224: ec.SECP224R1,
    256: ec.SECP256R1,
    384: ec.SECP384R1,
    521: ec.SECP521R1,
}
KEY_TYPES = ("rsa", "ec", "ed25519")


def guarded(fn: F) -> F:
    """Errors the library raises on bad input become CryptoFailure (a 400), never a 500."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CryptoFailure:
            raise
        except (ValueError, TypeError, UnsupportedAlgorithm, InvalidSignature) as exc:
            raise CryptoFailure(f"{fn.__name__.replace('_', ' ')}: {exc}") from None

    return wrapper  # type: ignore[return-value]


def normalize_type(key_type: str) -> str:
    kt = key_type.strip().lower()
    if kt == "ecdsa":
        kt = "ec"
    if kt not in KEY_TYPES:
        raise CryptoFailure(f"unsupported key type {key_type!r}: use rsa, ec or ed25519")
    return kt


def resolve_bits(key_type: str, key_bits: int, *, min_rsa_bits: int = 2048) -> int:
    """The bit size a request means (0 picks the default), or CryptoFailure naming the sizes."""
    kt = normalize_type(key_type)
    if kt == "ed25519":
        return 256
    if kt == "rsa":
        bits = key_bits or 2048
        allowed = [b for b in (1024, *RSA_BITS) if b >= min_rsa_bits]
        if bits not in allowed:
            raise CryptoFailure(
                f"unsupported RSA key size {bits}: use one of " + ", ".join(str(b) for b in allowed)
            )
        return bits
    bits = key_bits or 256
    if bits not in CURVES:
        raise CryptoFailure(f"unsupported EC key size {bits}: use 224, 256, 384 or 521")
    return bits


def generate_private_key(
    key_type: str, key_bits: int = 0, *, min_rsa_bits: int = 2048
) -> PrivateKey:
    kt = normalize_type(key_type)
    bits = resolve_bits(kt, key_bits, min_rsa_bits=min_rsa_bits)
    if kt == "rsa":
        return POOL.take(bits) or generate_rsa(bits)
    if kt == "ec":
        return ec.generate_private_key(CURVES[bits]())
    return ed25519.Ed25519PrivateKey.generate()


def describe(key: PrivateKey | PublicKey) -> tuple[str, int]:
    """(key_type, key_bits) of a key; other algorithms are refused."""
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "rsa", key.key_size
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        if key.curve.key_size not in CURVES or not isinstance(
            key.curve, CURVES[key.curve.key_size]
        ):
            raise CryptoFailure(f"unsupported EC curve {key.curve.name}: use a NIST P curve")
        return "ec", key.curve.key_size
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return "ed25519", 256
    raise CryptoFailure(f"unsupported key algorithm {type(key).__name__}")


PRIVATE_FORMATS = ("pkcs8", "traditional", "der", "pkcs1", "sec1", "openssh")


def check_private_format(fmt: str) -> str:
    f = fmt.strip().lower() or "pkcs8"
    if f not in PRIVATE_FORMATS:
        raise CryptoFailure(
            f"unsupported private key format {fmt!r}: use pkcs8, traditional or openssh"
        )
    return f


def private_pem(key: PrivateKey, fmt: str = "pkcs8") -> str:
    f = check_private_format(fmt)
    if f == "pkcs8":
        pf = serialization.PrivateFormat.PKCS8
    elif f in ("traditional", "der", "pkcs1", "sec1"):
        # Ed25519 has no PKCS#1/SEC1 form: PKCS#8 is its only standard encoding.
        pf = (
            serialization.PrivateFormat.PKCS8
            if isinstance(key, ed25519.Ed25519PrivateKey)
            else serialization.PrivateFormat.TraditionalOpenSSL
        )
    else:
        pf = serialization.PrivateFormat.OpenSSH
    return key.private_bytes(serialization.Encoding.PEM, pf, serialization.NoEncryption()).decode()


def public_pem(key: PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def public_openssh(key: PublicKey) -> str:
    """The OpenSSH form, or "" for keys SSH cannot carry (P-224)."""
    try:
        return key.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
    except ValueError:
        return ""


def fingerprint(key: PublicKey) -> str:
    """Identifies a key pair across encodings (used to pair issuers with their keys)."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


@functools.lru_cache(maxsize=128)
def load_private(pem: str) -> PrivateKey:
    """Parse a private key PEM; cached because issuers sign with the same key many times and
    RSA key loading runs consistency checks that cost about a millisecond."""
    data = pem.strip().encode()
    if not data:
        raise CryptoFailure("no private key given")
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key: Any = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise CryptoFailure(f"could not parse the private key: {_short(exc)}") from None
    describe(key)
    return key


def load_public(text: str) -> PublicKey:
    data = text.strip().encode()
    if not data:
        raise CryptoFailure("no public key given")
    try:
        if data.startswith(b"-----"):
            key: Any = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_ssh_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise CryptoFailure(f"could not parse the public key: {_short(exc)}") from None
    describe(key)
    return key


def _short(exc: Exception) -> str:
    # cryptography's messages can run to several lines of OpenSSL detail; the first is enough.
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def key_result(key: PrivateKey, private_format: str = "pkcs8") -> dict[str, Any]:
    pub = key.public_key()
    key_type, key_bits = describe(key)
    return {
        "private_key": private_pem(key, private_format),
        "private_key_pkcs8": private_pem(key, "pkcs8"),
        "public_key": public_pem(pub),
        "public_key_openssh": public_openssh(pub),
        "key_type": key_type,
        "key_bits": key_bits,
        "fingerprint": fingerprint(pub),
    }


class GenerateKeyArgs(msgspec.Struct, kw_only=True):
    key_type: str
    key_bits: int = 0
    private_format: str = "pkcs8"
    min_rsa_bits: int = 2048


class ParsePrivateKeyArgs(msgspec.Struct, kw_only=True):
    private_key: str


class ParsePublicKeyArgs(msgspec.Struct, kw_only=True):
    public_key: str


@operation("generate_key", GenerateKeyArgs)
@guarded
def generate_key(a: GenerateKeyArgs) -> dict[str, Any]:
    check_private_format(a.private_format)  # before spending CPU on the key
    key = generate_private_key(a.key_type, a.key_bits, min_rsa_bits=a.min_rsa_bits)
    return key_result(key, a.private_format)


@operation("parse_private_key", ParsePrivateKeyArgs)
@guarded
def parse_private_key(a: ParsePrivateKeyArgs) -> dict[str, Any]:
    return key_result(load_private(a.private_key))


@operation("parse_public_key", ParsePublicKeyArgs)
@guarded
def parse_public_key(a: ParsePublicKeyArgs) -> dict[str, Any]:
    key = load_public(a.public_key)
    key_type, key_bits = describe(key)
    return {
        "public_key": public_pem(key),
        "public_key_openssh": public_openssh(key),
        "key_type": key_type,
        "key_bits": key_bits,
        "fingerprint": fingerprint(key),
    }
