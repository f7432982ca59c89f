"""SSH crypto ops: CA and user key pairs, CA import, public-key inspection, and OpenSSH certificate
signing (PROTOCOL.certkeys) with the signature algorithm the role asks for.

Certificates are encoded here rather than with `cryptography`'s SSHCertificateBuilder because the
builder always signs RSA with rsa-sha2-512, and roles may ask for rsa-sha2-256 or ssh-rsa; encoding
from the caller's own key blob also signs every key type OpenSSH knows, sk- keys included.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import struct
from functools import lru_cache
from typing import Any

import msgspec
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from services.crypto.ops import CryptoFailure, operation

CERT_SUFFIX = "-cert-v01@openssh.com"
USER_CERT, HOST_CERT = 1, 2

# Key type names a caller may give, mapped to (kind, fixed EC size or 0).
_KEY_TYPES: dict[str, tuple[str, int]] = {
    "rsa": ("rsa", 0),
    "ssh-rsa": ("rsa", 0),
    "ec": ("ec", 0),
    "ecdsa": ("ec", 0),
    "ecdsa-sha2-nistp256": ("ec", 256),
    "ecdsa-sha2-nistp384": ("ec", 384),
    "ecdsa-sha2-nistp521": ("ec", 521),
    "ed25519": ("ed25519", 0),
    "ssh-ed25519": ("ed25519", 0),
}
_CURVES: dict[int, ec.EllipticCurve] = {
    256: ec.SECP256R1(),
    384: ec.SECP384R1(),
    521: ec.SECP521R1(),
}
# RSA sizes each purpose accepts, and what 0 means for it (the seed's defaults).
_RSA_BITS: dict[str, tuple[int, tuple[int, ...]]] = {
    "ca": (4096, (2048, 3072, 4096, 8192)),
    "issue": (2048, (2048, 3072, 4096)),
    "dynamic": (1024, (1024, 2048)),
}
_SIGNERS: dict[str, hashes.HashAlgorithm] = {
    "ssh-rsa": hashes.SHA1(),
    "rsa-sha2-256": hashes.SHA256(),
    "rsa-sha2-512": hashes.SHA512(),
}
# ECDSA signs with the hash that goes with its curve (RFC 5656).
_EC_HASHES: dict[int, hashes.HashAlgorithm] = {
    256: hashes.SHA256(),
    384: hashes.SHA384(),
    521: hashes.SHA512(),
}


# ---- SSH wire format ------------------------------------------------------------------------
def _string(data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return struct.pack(">I", len(raw)) + raw


def _mpint(value: int) -> bytes:
    if value == 0:
        return _string(b"")
    return _string(value.to_bytes((value.bit_length() + 8) // 8, "big"))


def _read_string(buf: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise CryptoFailure("truncated SSH key blob")
    (n,) = struct.unpack_from(">I", buf, pos)
    end = pos + 4 + n
    if end > len(buf):
        raise CryptoFailure("truncated SSH key blob")
    return buf[pos + 4 : end], end


def _options(items: dict[str, str]) -> bytes:
    """Critical options and extensions: sorted by name; a non-empty value is itself a string."""
    out = b""
    for name in sorted(items):
        value = items[name]
        out += _string(name) + _string(_string(value) if value else b"")
    return out


# ---- public keys ----------------------------------------------------------------------------
class PublicKeyInfo(msgspec.Struct, kw_only=True):
    algorithm: str  # the SSH key type, e.g. "ssh-ed25519"
    kind: str  # rsa, dsa, ecdsa or ed25519: the names allowed_user_key_lengths uses
    bits: int
    blob: bytes
    sha256_hex: str


def _key_kind(key: Any) -> tuple[str, int]:
    if isinstance(key, rsa.RSAPublicKey):
        return "rsa", key.key_size
    if isinstance(key, dsa.DSAPublicKey):
        return "dsa", key.key_size
    if isinstance(key, ec.EllipticCurvePublicKey):
        return "ecdsa", key.curve.key_size
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519", 256
    raise CryptoFailure(f"unsupported public key type {type(key).__name__}")


def parse_public_key(text: str) -> PublicKeyInfo:
    """An authorized_keys style line (`type base64 [comment]`), checked to be a usable key."""
    parts = text.strip().split()
    if len(parts) < 2:
        raise CryptoFailure("failed to parse public_key as SSH key: expected '<type> <base64>'")
    algorithm, b64 = parts[0], parts[1]
    if algorithm.endswith(CERT_SUFFIX):
        raise CryptoFailure("public_key is already a certificate; give the plain public key")
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise CryptoFailure("failed to parse public_key as SSH key: invalid base64") from None
    inner, _ = _read_string(blob, 0)
    if inner.decode(errors="replace") != algorithm:
        raise CryptoFailure(
            f"failed to parse public_key as SSH key: the key says it is "
            f"{inner.decode(errors='replace')!r}, not {algorithm!r}"
        )
    try:
        key = serialization.load_ssh_public_key(f"{algorithm} {b64}".encode())
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CryptoFailure(f"failed to parse public_key as SSH key: {exc}") from None
    kind, bits = _key_kind(key)
    return PublicKeyInfo(
        algorithm=algorithm,
        kind=kind,
        bits=bits,
        blob=blob,
        sha256_hex=hashlib.sha256(blob).hexdigest(),
    )


def check_key_lengths(info: PublicKeyInfo, allowed: dict[str, list[int]]) -> None:
    """Vault's allowed_user_key_lengths: a short name (rsa, dsa, ecdsa/ec, ed25519) with sizes,
    or an SSH identifier; identifiers that fix the size (ssh-ed25519, ecdsa-sha2-nistp256)
    accept any listed value."""
    if not allowed:
        return
    names = {
        "rsa": ["rsa", "ssh-rsa"],
        "dsa": ["dsa", "ssh-dss"],
        "ecdsa": ["ecdsa", "ec", f"ecdsa-sha2-nistp{info.bits}"],
        "ed25519": ["ed25519", "ssh-ed25519"],
    }[info.kind]
    present = False
    for name in names:
        if name not in allowed:
            continue
        present = True
        sized = info.kind in ("rsa", "dsa") or name in ("ecdsa", "ec")
        if any(not sized or v == info.bits for v in allowed[name]):
            return
    if not present:
        raise CryptoFailure(
            f"public_key failed to meet the key requirements: key of type "
            f"{info.kind} is not allowed"
        )
    raise CryptoFailure(
        f"public_key failed to meet the key requirements: key is of an invalid size: {info.bits}"
    )


def _public_line(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + "\n"
    )


# ---- private keys ---------------------------------------------------------------------------
def _private_pem(key: Any) -> str:
    """What ssh clients load: PKCS#1 / SEC1 PEM for RSA / EC (as Vault returns), OpenSSH format
    for Ed25519."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        fmt = serialization.PrivateFormat.OpenSSH
    else:
        fmt = serialization.PrivateFormat.TraditionalOpenSSL
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


def load_private_key(text: str, *, trusted: bool = False) -> Any:
    """PEM (PKCS#1, SEC1, PKCS#8) or OpenSSH format, unencrypted. `trusted` skips RSA's slow
    consistency check for keys this service generated or already checked."""
    data = text.strip().encode() + b"\n"
    key: Any
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, None)
        else:
            key = serialization.load_pem_private_key(
                data, None, unsafe_skip_rsa_key_validation=trusted
            )
    except TypeError:
        raise CryptoFailure("the private key is encrypted; give it without a passphrase") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CryptoFailure(f"failed to parse the private key: {exc}") from None
    if not isinstance(
        key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)
    ):
        raise CryptoFailure(
            f"unsupported private key type {type(key).__name__}; use RSA, ECDSA or Ed25519"
        )
    return key


@lru_cache(maxsize=16)
def _cached_ca(text: str) -> Any:
    # A worker signs with the same few CA keys over and over: parse each once.
    return load_private_key(text, trusted=True)


def resolve_key_spec(key_type: str, key_bits: int, purpose: str) -> tuple[str, int]:
    """(kind, bits) for a key to generate, with the seed's defaults and limits per purpose."""
    spec = _KEY_TYPES.get(key_type.strip().lower())
    if spec is None:
        raise CryptoFailure(
            f"unsupported key_type {key_type!r}: use one of {', '.join(sorted(_KEY_TYPES))}"
        )
    kind, fixed = spec
    if purpose == "dynamic" and kind != "rsa":
        raise CryptoFailure("dynamic keys are RSA keys")
    if kind == "rsa":
        default, allowed = _RSA_BITS[purpose]
        bits = key_bits or default
        if bits not in allowed:
            raise CryptoFailure(
                f"invalid key_bits {key_bits} for an RSA {purpose} key: use "
                f"{', '.join(map(str, allowed))}"
            )
        return kind, bits
    if kind == "ec":
        bits = fixed or key_bits or 256
        if bits not in _CURVES or (fixed and key_bits not in (0, fixed)):
            raise CryptoFailure(f"invalid key_bits {key_bits} for {key_type}: use 256, 384 or 521")
        return kind, bits
    return kind, 256


def generate_private_key(kind: str, bits: int) -> Any:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=bits)
    if kind == "ec":
        return ec.generate_private_key(_CURVES[bits])
    return ed25519.Ed25519PrivateKey.generate()


# ---- certificates ---------------------------------------------------------------------------
def _signature(ca: Any, data: bytes, algorithm_signer: str) -> bytes:
    algo = algorithm_signer.strip() or "default"
    if isinstance(ca, rsa.RSAPrivateKey):
        name = "rsa-sha2-256" if algo == "default" else algo
        if name not in _SIGNERS:
            raise CryptoFailure(f"unknown algorithm_signer {algorithm_signer!r}")
        sig = ca.sign(data, padding.PKCS1v15(), _SIGNERS[name])
        return _string(name) + _string(sig)
    if algo != "default":
        raise CryptoFailure(
            f"algorithm_signer {algorithm_signer!r} needs an RSA CA key; this CA "
            "signs with its own algorithm (leave algorithm_signer blank or "
            "'default')"
        )
    if isinstance(ca, ec.EllipticCurvePrivateKey):
        size = ca.curve.key_size
        r, s = decode_dss_signature(ca.sign(data, ec.ECDSA(_EC_HASHES[size])))
        return _string(f"ecdsa-sha2-nistp{size}") + _string(_mpint(r) + _mpint(s))
    return _string("ssh-ed25519") + _string(ca.sign(data))


def build_certificate(
    ca: Any,
    subject: PublicKeyInfo,
    *,
    serial: int,
    cert_type: int,
    key_id: str,
    principals: list[str],
    valid_after: int,
    valid_before: int,
    critical_options: dict[str, str],
    extensions: dict[str, str],
    algorithm_signer: str,
) -> str:
    """The signed certificate as an authorized_keys line ending in a newline."""
    if valid_after > valid_before:
        raise CryptoFailure("the certificate would expire before it becomes valid")
    cert_algo = subject.algorithm + CERT_SUFFIX
    _, key_fields_at = _read_string(subject.blob, 0)
    ca_blob = base64.b64decode(_public_line(ca).split()[1])
    body = (
        _string(cert_algo)
        + _string(secrets.token_bytes(32))
        + subject.blob[key_fields_at:]
        + struct.pack(">QI", serial, cert_type)
        + _string(key_id)
        + _string(b"".join(_string(p) for p in principals))
        + struct.pack(">QQ", valid_after, valid_before)
        + _string(_options(critical_options))
        + _string(_options(extensions))
        + _string(b"")
        + _string(ca_blob)
    )
    signed = body + _string(_signature(ca, body, algorithm_signer))
    return f"{cert_algo} {base64.b64encode(signed).decode()}\n"


# ---- ops --------------------------------------------------------------------------------------
class GenerateKeyArgs(msgspec.Struct, kw_only=True):
    key_type: str = "ssh-rsa"
    key_bits: int = 0
    purpose: str = "ca"  # ca, issue or dynamic: decides RSA defaults and sizes


@operation("ssh_generate_key", GenerateKeyArgs)
def ssh_generate_key(a: GenerateKeyArgs) -> dict[str, Any]:
    if a.purpose not in _RSA_BITS:
        raise CryptoFailure(f"unknown key purpose {a.purpose!r}")
    kind, bits = resolve_key_spec(a.key_type, a.key_bits, a.purpose)
    key = generate_private_key(kind, bits)
    return {
        "public_key": _public_line(key),
        "private_key": _private_pem(key),
        "private_key_type": kind,
        "key_bits": bits,
    }


class ImportCAArgs(msgspec.Struct, kw_only=True):
    private_key: str
    public_key: str


@operation("ssh_import_ca", ImportCAArgs)
def ssh_import_ca(a: ImportCAArgs) -> dict[str, Any]:
    """Check that an imported CA key pair parses and matches; returns it normalised."""
    key = load_private_key(a.private_key)
    given = parse_public_key(a.public_key)
    derived = _public_line(key)
    if base64.b64decode(derived.split()[1]) != given.blob:
        raise CryptoFailure("public_key does not match private_key")
    return {"public_key": derived, "private_key": _private_pem(key)}


class PrivateKeyArgs(msgspec.Struct, kw_only=True):
    private_key: str


@operation("ssh_parse_private_key", PrivateKeyArgs)
def ssh_parse_private_key(a: PrivateKeyArgs) -> dict[str, Any]:
    key = load_private_key(a.private_key)
    info = parse_public_key(_public_line(key))
    return {"public_key": _public_line(key), "key_type": info.algorithm, "key_bits": info.bits}


class PublicKeyArgs(msgspec.Struct, kw_only=True):
    public_key: str


@operation("ssh_public_key_info", PublicKeyArgs)
def ssh_public_key_info(a: PublicKeyArgs) -> dict[str, Any]:
    info = parse_public_key(a.public_key)
    return {
        "algorithm": info.algorithm,
        "kind": info.kind,
        "bits": info.bits,
        "sha256": info.sha256_hex,
    }


class SignArgs(msgspec.Struct, kw_only=True):
    ca_private_key: str
    public_key: str = ""
    cert_type: str = "user"
    # May hold "{{public_key_hash}}", filled in here once the key is known.
    key_id: str = ""
    principals: list[str] = []
    valid_after: int
    valid_before: int
    critical_options: dict[str, str] = {}
    extensions: dict[str, str] = {}
    algorithm_signer: str = "default"
    allowed_user_key_lengths: dict[str, list[int]] = {}


class IssueArgs(SignArgs, kw_only=True):
    key_type: str = "rsa"
    key_bits: int = 0


def _sign(a: SignArgs, info: PublicKeyInfo) -> dict[str, Any]:
    if a.cert_type not in ("user", "host"):
        raise CryptoFailure("cert_type must be either 'user' or 'host'")
    check_key_lengths(info, a.allowed_user_key_lengths)
    serial = secrets.randbits(64)
    cert = build_certificate(
        _cached_ca(a.ca_private_key),
        info,
        serial=serial,
        cert_type=USER_CERT if a.cert_type == "user" else HOST_CERT,
        key_id=a.key_id.replace("{{public_key_hash}}", info.sha256_hex),
        principals=a.principals,
        valid_after=a.valid_after,
        valid_before=a.valid_before,
        critical_options=a.critical_options,
        extensions=a.extensions,
        algorithm_signer=a.algorithm_signer,
    )
    return {"serial_number": f"{serial:x}", "signed_key": cert}


@operation("ssh_sign", SignArgs)
def ssh_sign(a: SignArgs) -> dict[str, Any]:
    if not a.public_key.strip():
        raise CryptoFailure("missing public_key")
    return _sign(a, parse_public_key(a.public_key))


@operation("ssh_issue", IssueArgs)
def ssh_issue(a: IssueArgs) -> dict[str, Any]:
    """Generate a key pair and sign it; the private key goes back to the caller only."""
    kind, bits = resolve_key_spec(a.key_type, a.key_bits, "issue")
    # Refuse a disallowed type or size before paying for the key generation.
    check_key_lengths(
        PublicKeyInfo(
            algorithm="", kind="ecdsa" if kind == "ec" else kind, bits=bits, blob=b"", sha256_hex=""
        ),
        a.allowed_user_key_lengths,
    )
    key = generate_private_key(kind, bits)
    out = _sign(a, parse_public_key(_public_line(key)))
    out.update(private_key=_private_pem(key), private_key_type=kind)
    return out
