"""test/sign for `pkcs11` keys: find (or generate) the key in the HSM through the library a
kms_library stanza names, sign random data and verify it. Blocking (the PKCS#11 library is
synchronous): callers run it in a thread."""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

from services.secrets.errors import SecretsError, bad_request, upstream
from services.secrets.managed_keys.params import (
    CKM_ECDSA,
    CKM_RSA_PKCS,
    CKM_RSA_PKCS_OAEP,
    CKM_RSA_PKCS_PSS,
    KeyConfig,
)

_CURVES = {"P256": "secp256r1", "P384": "secp384r1", "P521": "secp521r1"}
# DER prefix of a SHA-256 DigestInfo: CKM_RSA_PKCS signs what it is given, as is.
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")
_lock = threading.Lock()
_libs: dict[str, Any] = {}


def _lib(path: str) -> Any:
    import pkcs11

    with _lock:  # a PKCS#11 library is initialised once per process
        lib = _libs.get(path)
        if lib is None:
            try:
                lib = _libs[path] = pkcs11.lib(path)
            except pkcs11.PKCS11Error as exc:
                raise upstream(f"cannot load the PKCS#11 library {path}: {exc}") from None
        return lib


def _key_id(text: str) -> bytes:
    return bytes.fromhex(text[2:]) if text.lower().startswith("0x") else text.encode()


def _token(lib: Any, p: dict[str, Any]) -> Any:
    import pkcs11

    try:
        slots = lib.get_slots(token_present=True)
    except pkcs11.PKCS11Error as exc:
        raise upstream(f"HSM: cannot list slots: {type(exc).__name__}") from None
    for slot in slots:
        token = slot.get_token()
        if p["slot"] is not None and slot.slot_id != p["slot"]:
            continue
        if p["token_label"] and token.label != p["token_label"]:
            continue
        return token
    where = f"slot {p['slot']}" if p["slot"] is not None else f"label {p['token_label']!r}"
    raise bad_request(f"the HSM has no token with {where}")


def _find(session: Any, cls: Any, p: dict[str, Any]) -> Any | None:
    from pkcs11 import Attribute

    attrs: dict[Any, Any] = {Attribute.CLASS: cls}
    if p["key_label"]:
        attrs[Attribute.LABEL] = p["key_label"]
    if p["key_id"]:
        attrs[Attribute.ID] = _key_id(p["key_id"])
    found = list(session.get_objects(attrs))
    return found[0] if found else None


def _generate(session: Any, p: dict[str, Any]) -> tuple[Any, Any]:
    from pkcs11 import Attribute, KeyType
    from pkcs11.util.ec import encode_named_curve_parameters

    kw: dict[str, Any] = {"store": True, "label": p["key_label"] or None}
    if p["key_id"]:
        kw["id"] = _key_id(p["key_id"])
    if p["mechanism"] == CKM_ECDSA:
        params = encode_named_curve_parameters(_CURVES[p["curve"]])
        return session.generate_keypair(
            KeyType.EC, None, public_template={Attribute.EC_PARAMS: params}, **kw
        )
    return session.generate_keypair(KeyType.RSA, p["key_bits"], **kw)


def _exercise(pub: Any, priv: Any, mech: int) -> bool:
    from pkcs11 import MGF, Mechanism

    digest = hashlib.sha256(os.urandom(32)).digest()
    if mech == CKM_ECDSA:
        sig = priv.sign(digest, mechanism=Mechanism.ECDSA)
        return pub.verify(digest, sig, mechanism=Mechanism.ECDSA)
    if mech == CKM_RSA_PKCS_PSS:
        param = (Mechanism.SHA256, MGF.SHA256, 32)
        sig = priv.sign(digest, mechanism=Mechanism.RSA_PKCS_PSS, mechanism_param=param)
        return pub.verify(digest, sig, mechanism=Mechanism.RSA_PKCS_PSS, mechanism_param=param)
    if mech == CKM_RSA_PKCS:
        data = _SHA256_DIGEST_INFO + digest
        sig = priv.sign(data, mechanism=Mechanism.RSA_PKCS)
        return pub.verify(data, sig, mechanism=Mechanism.RSA_PKCS)
    if mech == CKM_RSA_PKCS_OAEP:  # an encryption mechanism: round-trip instead of signing
        param = (Mechanism.SHA_1, MGF.SHA1, None)
        ct = pub.encrypt(digest, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param)
        return priv.decrypt(ct, mechanism=Mechanism.RSA_PKCS_OAEP, mechanism_param=param) == digest
    raise bad_request(f"unsupported mechanism 0x{mech:04X}")


def test_sign(cfg: KeyConfig, library_path: str) -> None:
    """Raise a 400 for a key that cannot be used as configured, a 502 for HSM failures."""
    from pkcs11 import ObjectClass
    from pkcs11 import exceptions as err

    p = cfg.params
    lib = _lib(library_path)
    token = _token(lib, p)
    generate = cfg.generic["allow_generate_key"]
    try:
        with token.open(user_pin=p["pin"], rw=p["force_rw_session"] or generate) as session:
            priv = _find(session, ObjectClass.PRIVATE_KEY, p)
            pub = _find(session, ObjectClass.PUBLIC_KEY, p)
            if priv is None or pub is None:
                if not generate:
                    what = (
                        f"key_id {p['key_id']!r}"
                        if p["key_id"]
                        else f"key_label {p['key_label']!r}"
                    )
                    raise bad_request(
                        f"no key with {what} exists in the HSM and allow_generate_key is false"
                    )
                pub, priv = _generate(session, p)
            if not _exercise(pub, priv, p["mechanism"]):
                raise upstream("HSM: the test signature did not verify")
    except SecretsError:
        raise
    except (err.PinIncorrect, err.PinInvalid, err.PinLenRange, err.PinLocked):
        raise bad_request("the HSM refused the PIN") from None
    except (err.KeyTypeInconsistent, err.MechanismInvalid, err.MechanismParamInvalid) as exc:
        raise bad_request(
            f"the key cannot be used with mechanism 0x{p['mechanism']:04X}: {type(exc).__name__}"
        ) from None
    except err.PKCS11Error as exc:
        raise upstream(f"HSM error: {type(exc).__name__} {exc}".strip()) from None
