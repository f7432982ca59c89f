"""Transit's asymmetric operations, as pure functions over PKCS#8 DER keys.

The transit engine runs the cheap ones (Ed25519, ECDSA, RSA public-key work) in its own process
and sends the expensive RSA private-key work here (`transit_sign`, `transit_rsa_decrypt`): an
RSA-2048 signature holds an event loop for about a millisecond.

`transit_sign` {key_der, key_type, input (digest when the key hashes), hash_algorithm,
    signature_algorithm="pss", salt_length=-1 (auto), marshaling="asn1"} -> {signature: bytes}
`transit_rsa_decrypt` {key_der, ciphertext} -> {plaintext: bytes} (RSA-OAEP with SHA-256)
"""

from __future__ import annotations

import functools
import hmac
from typing import Any

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

from services.crypto.ops import CryptoFailure, operation

HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1,
    "sha2-224": hashes.SHA224,
    "sha2-256": hashes.SHA256,
    "sha2-384": hashes.SHA384,
    "sha2-512": hashes.SHA512,
    "sha3-224": hashes.SHA3_224,
    "sha3-256": hashes.SHA3_256,
    "sha3-384": hashes.SHA3_384,
    "sha3-512": hashes.SHA3_512,
}
# Go's rsa.PSSSaltLengthAuto (0) signs with the longest salt and verifies any; "hash" is -1.
SALT_AUTO = 0
SALT_HASH = -1
EC_BYTES = {"ecdsa-p256": 32, "ecdsa-p384": 48, "ecdsa-p521": 66}


@functools.lru_cache(maxsize=256)
def load_der(der: bytes) -> Any:
    """A PKCS#8 private key, cached: RSA loading checks the key and costs about a millisecond."""
    try:
        return serialization.load_der_private_key(der, password=None)
    except (ValueError, TypeError) as exc:
        raise CryptoFailure(f"the stored key could not be loaded: {exc}") from None


def hash_of(name: str) -> hashes.HashAlgorithm:
    cls = HASHES.get(name)
    if cls is None:
        raise CryptoFailure(f"unsupported hash algorithm {name}")
    return cls()


def _pss(h: hashes.HashAlgorithm, salt_length: int, *, verify: bool) -> padding.PSS:
    if salt_length == SALT_AUTO:
        salt: Any = padding.PSS.AUTO if verify else padding.PSS.MAX_LENGTH
    elif salt_length == SALT_HASH:
        salt = padding.PSS.DIGEST_LENGTH
    else:
        salt = salt_length
    return padding.PSS(mgf=padding.MGF1(h), salt_length=salt)


def _ec_to_jws(der_sig: bytes, size: int) -> bytes:
    r, s = utils.decode_dss_signature(der_sig)
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


def _jws_to_ec(raw: bytes, size: int) -> bytes:
    if len(raw) != 2 * size:
        raise InvalidSignature()
    return utils.encode_dss_signature(
        int.from_bytes(raw[:size], "big"), int.from_bytes(raw[size:], "big")
    )


def sign(
    key: Any,
    key_type: str,
    data: bytes,
    hash_algorithm: str,
    signature_algorithm: str = "pss",
    salt_length: int = SALT_AUTO,
    marshaling: str = "asn1",
) -> bytes:
    """Sign `data`: the message for Ed25519, the digest (made with hash_algorithm) otherwise."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    if hash_algorithm == "none":
        if not isinstance(key, rsa.RSAPrivateKey) or signature_algorithm != "pkcs1v15":
            raise CryptoFailure("hash_algorithm=none signs only with RSA PKCS#1 v1.5")
        n = key.private_numbers()
        return _raw_pkcs1(data, n.public_numbers.n, n.d)
    h = hash_of(hash_algorithm)
    if len(data) != h.digest_size:
        raise CryptoFailure(
            f"the prehashed input is {len(data)} bytes; {hash_algorithm} digests are "
            f"{h.digest_size} bytes"
        )
    if isinstance(key, ec.EllipticCurvePrivateKey):
        sig = key.sign(data, ec.ECDSA(utils.Prehashed(h)))
        return _ec_to_jws(sig, EC_BYTES[key_type]) if marshaling == "jws" else sig
    if isinstance(key, rsa.RSAPrivateKey):
        if signature_algorithm == "pkcs1v15":
            pad: Any = padding.PKCS1v15()
        elif signature_algorithm == "pss":
            pad = _pss(h, salt_length, verify=False)
        else:
            raise CryptoFailure(f"unsupported rsa signature algorithm {signature_algorithm}")
        return key.sign(data, pad, utils.Prehashed(h))
    raise CryptoFailure("the key cannot sign")


def verify(
    public: Any,
    key_type: str,
    data: bytes,
    signature: bytes,
    hash_algorithm: str,
    signature_algorithm: str = "pss",
    salt_length: int = SALT_AUTO,
    marshaling: str = "asn1",
) -> bool:
    try:
        if isinstance(public, ed25519.Ed25519PublicKey):
            public.verify(signature, data)
            return True
        if hash_algorithm == "none" and isinstance(public, rsa.RSAPublicKey):
            nums = public.public_numbers()
            size = (nums.n.bit_length() + 7) // 8
            if len(signature) != size:
                return False
            got = pow(int.from_bytes(signature, "big"), nums.e, nums.n).to_bytes(size, "big")
            return hmac.compare_digest(got, _pkcs1_block(data, size))
        h = hash_of(hash_algorithm)
        if len(data) != h.digest_size:
            return False
        if isinstance(public, ec.EllipticCurvePublicKey):
            if marshaling == "jws":
                signature = _jws_to_ec(signature, EC_BYTES[key_type])
            public.verify(signature, data, ec.ECDSA(utils.Prehashed(h)))
            return True
        if isinstance(public, rsa.RSAPublicKey):
            if signature_algorithm == "pkcs1v15":
                pad: Any = padding.PKCS1v15()
            elif signature_algorithm == "pss":
                pad = _pss(h, salt_length, verify=True)
            else:
                raise CryptoFailure(f"unsupported rsa signature algorithm {signature_algorithm}")
            public.verify(signature, data, pad, utils.Prehashed(h))
            return True
    except (InvalidSignature, ValueError):
        return False
    raise CryptoFailure("the key cannot verify")


def _pkcs1_block(data: bytes, size: int) -> bytes:
    """EMSA-PKCS1-v1_5 without a DigestInfo: what Go's SignPKCS1v15 makes with hash 0."""
    if len(data) > size - 11:
        raise CryptoFailure("the input is too long for the RSA key")
    return b"\x00\x01" + b"\xff" * (size - 3 - len(data)) + b"\x00" + data


def _raw_pkcs1(data: bytes, n: int, d: int) -> bytes:
    size = (n.bit_length() + 7) // 8
    block = int.from_bytes(_pkcs1_block(data, size), "big")
    return pow(block, d, n).to_bytes(size, "big")


def rsa_decrypt(key: rsa.RSAPrivateKey, ciphertext: bytes) -> bytes:
    try:
        return key.decrypt(ciphertext, _oaep())
    except ValueError:
        raise CryptoFailure("failed to RSA decrypt the ciphertext") from None


def rsa_encrypt(public: rsa.RSAPublicKey, plaintext: bytes) -> bytes:
    try:
        return public.encrypt(plaintext, _oaep())
    except ValueError as exc:
        raise CryptoFailure(f"failed to RSA encrypt the plaintext: {exc}") from None


def _oaep() -> padding.OAEP:
    return padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


class TransitSignArgs(msgspec.Struct, kw_only=True):
    key_der: bytes
    key_type: str
    input: bytes
    hash_algorithm: str = "sha2-256"
    signature_algorithm: str = "pss"
    salt_length: int = SALT_AUTO
    marshaling: str = "asn1"


class TransitDecryptArgs(msgspec.Struct, kw_only=True):
    key_der: bytes
    ciphertext: bytes


@operation("transit_sign", TransitSignArgs)
def transit_sign(a: TransitSignArgs) -> dict[str, Any]:
    sig = sign(
        load_der(a.key_der),
        a.key_type,
        a.input,
        a.hash_algorithm,
        a.signature_algorithm,
        a.salt_length,
        a.marshaling,
    )
    return {"signature": sig}


@operation("transit_rsa_decrypt", TransitDecryptArgs)
def transit_rsa_decrypt(a: TransitDecryptArgs) -> dict[str, Any]:
    key = load_der(a.key_der)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise CryptoFailure("the key is not an RSA key")
    return {"plaintext": rsa_decrypt(key, a.ciphertext)}
