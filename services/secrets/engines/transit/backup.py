"""Backups in Vault's format: base64 of {"policy": ..., "archived_keys": {"keys": [...]}} with the
key entries as Vault's keysutil writes them (big integers for EC and RSA numbers), so a backup
taken from Vault or OpenBao restores here, and one taken here restores there."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_der_private_key

from services.secrets.engines.transit.keytypes import BY_VAULT_ID, KEY_TYPES
from services.secrets.engines.transit.policy import (
    KDF_HKDF,
    Info,
    KeyVersion,
    Policy,
    TransitError,
    set_private,
)

_CURVES = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}
_NS = 1_000_000_000


def _b64(data: bytes) -> str | None:
    return base64.b64encode(data).decode() if data else None


def _entry_out(p: Policy, e: KeyVersion) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": _b64(e.key),
        "hmac_key": _b64(e.hmac_key),
        "time": e.time,
        "ec_x": None,
        "ec_y": None,
        "ec_d": None,
        "rsa_key": None,
        "rsa_public_key": None,
        "public_key": e.public_key,
        "convergent_version": e.convergent_version,
        "creation_time": e.creation_time,
        "certificate_chain": None,
    }
    if e.private_der:
        key = load_der_private_key(e.private_der, password=None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            nums = key.private_numbers()
            out["ec_d"] = nums.private_value
            out["ec_x"] = nums.public_numbers.x
            out["ec_y"] = nums.public_numbers.y
        elif isinstance(key, rsa.RSAPrivateKey):
            n = key.private_numbers()
            pub = {"N": n.public_numbers.n, "E": n.public_numbers.e}
            out["rsa_key"] = {
                **pub,
                "D": n.d,
                "Primes": [n.p, n.q],
                "Precomputed": {"Dp": n.dmp1, "Dq": n.dmq1, "Qinv": n.iqmp, "CRTValues": []},
            }
            out["rsa_public_key"] = pub
    return out


def encode(p: Policy) -> str:
    policy_keys = {
        v: _entry_out(p, e) for v, e in p.keys.items() if int(v) >= p.min_decryption_version
    }
    start = p.min_available_version
    archive: list[dict[str, Any]] = []
    for v in range(start, p.latest_version + 1):
        e = p.keys.get(str(v))
        archive.append(_entry_out(p, e) if e is not None else {"key": None})
    doc = {
        "policy": {
            "name": p.name,
            "keys": policy_keys,
            "derived": p.derived,
            "kdf": p.kdf,
            "convergent_encryption": p.convergent_encryption,
            "exportable": p.exportable,
            "min_decryption_version": p.min_decryption_version,
            "min_encryption_version": p.min_encryption_version,
            "latest_version": p.latest_version,
            "archive_version": p.latest_version,
            "archive_min_version": p.min_available_version,
            "min_available_version": p.min_available_version,
            "deletion_allowed": p.deletion_allowed,
            "convergent_version": p.convergent_version,
            "type": p.kt.vault_id,
            "key_size": p.key_size,
            "backup_info": _info_out(p.backup_info),
            "restore_info": _info_out(p.restore_info),
            "allow_plaintext_backup": p.allow_plaintext_backup,
            "version_template": "",
            "storage_prefix": "",
            "auto_rotate_period": p.auto_rotate_period * _NS,
            "Imported": False,
            "AllowImportedKeyRotation": False,
            "soft_deleted": False,
        },
        "archived_keys": {"keys": archive},
    }
    return base64.b64encode(json.dumps(doc).encode()).decode()


def _info_out(info: Info | None) -> dict[str, Any] | None:
    return None if info is None else {"time": info.time, "version": info.version}


def _bytes(value: Any) -> bytes:
    if not value:
        return b""
    if not isinstance(value, str):
        raise TransitError("invalid backup: a key is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise TransitError("invalid backup: a key is not valid base64") from None


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TransitError(f"invalid backup: {what} is not an integer")
    return value


def _entry_in(type_name: str, raw: Any) -> KeyVersion:
    if not isinstance(raw, dict):
        raise TransitError("invalid backup: a key entry is not an object")
    kt = KEY_TYPES[type_name]
    e = KeyVersion(
        key=_bytes(raw.get("key")),
        hmac_key=_bytes(raw.get("hmac_key")),
        public_key=str(raw.get("public_key") or ""),
        time=str(raw.get("time") or ""),
        creation_time=_int(raw.get("creation_time") or 0, "creation_time"),
        convergent_version=_int(raw.get("convergent_version") or 0, "convergent_version"),
    )
    try:
        if kt.is_ec:
            d = _int(raw.get("ec_d"), "ec_d")
            set_private(e, ec.derive_private_key(d, _CURVES[kt.curve]()))
        elif kt.is_rsa:
            rk = raw.get("rsa_key")
            if not isinstance(rk, dict):
                raise TransitError("invalid backup: an RSA key version has no private key")
            primes = rk.get("Primes") or []
            if len(primes) != 2:
                raise TransitError("invalid backup: only two-prime RSA keys can be restored")
            p, q = _int(primes[0], "Primes"), _int(primes[1], "Primes")
            d = _int(rk.get("D"), "D")
            pub = rsa.RSAPublicNumbers(_int(rk.get("E"), "E"), _int(rk.get("N"), "N"))
            nums = rsa.RSAPrivateNumbers(
                p,
                q,
                d,
                rsa.rsa_crt_dmp1(d, p),
                rsa.rsa_crt_dmq1(d, q),
                rsa.rsa_crt_iqmp(p, q),
                pub,
            )
            key = nums.private_key()
            if key.key_size != kt.rsa_bits:
                raise TransitError(f"invalid backup: the RSA key is not {kt.rsa_bits} bits")
            set_private(e, key)
        elif kt.name == "ed25519" and len(e.key) != 64:
            raise TransitError("invalid backup: an Ed25519 key is not 64 bytes")
        elif kt.symmetric and len(e.key) != kt.key_bytes:
            raise TransitError(f"invalid backup: a {kt.name} key is not {kt.key_bytes} bytes")
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, TransitError):
            raise
        raise TransitError("invalid backup: a key version does not hold a valid key") from None
    return e


def decode(text: str, name: str) -> Policy:
    """The policy inside a backup, renamed to `name` when given."""
    try:
        doc = json.loads(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise TransitError("invalid backup: not base64 of a JSON document") from None
    pol = doc.get("policy") if isinstance(doc, dict) else None
    if not isinstance(pol, dict):
        raise TransitError("invalid backup: no policy in the backup")
    type_id = pol.get("type")
    kt = BY_VAULT_ID.get(type_id) if isinstance(type_id, int) else None
    if kt is None:
        raise TransitError("invalid backup: unsupported key type")
    latest = _int(pol.get("latest_version") or 0, "latest_version")
    min_avail = _int(pol.get("min_available_version") or 0, "min_available_version")
    raw_keys = pol.get("keys") or {}
    archive_doc = doc.get("archived_keys")
    archived = (archive_doc.get("keys") if isinstance(archive_doc, dict) else None) or []
    if not isinstance(raw_keys, dict) or not isinstance(archived, list):
        raise TransitError("invalid backup: malformed key versions")
    keys: dict[str, KeyVersion] = {}
    for v in range(max(min_avail, 1), latest + 1):
        raw = raw_keys.get(str(v))
        idx = v - min_avail
        if raw is None and 0 <= idx < len(archived):
            raw = archived[idx]
        if not isinstance(raw, dict) or not (
            raw.get("key") or raw.get("ec_d") or raw.get("rsa_key")
        ):
            continue
        keys[str(v)] = _entry_in(kt.name, raw)
    if latest < 1 or str(latest) not in keys:
        raise TransitError("invalid backup: the latest key version is missing")
    period_ns = _int(pol.get("auto_rotate_period") or 0, "auto_rotate_period")
    info = pol.get("backup_info")
    backup_info = (
        Info(time=str(info.get("time") or ""), version=_int(info.get("version") or 0, "version"))
        if isinstance(info, dict)
        else None
    )
    return Policy(
        name=name or str(pol.get("name") or ""),
        type=kt.name,
        keys=keys,
        derived=bool(pol.get("derived")),
        kdf=_int(pol.get("kdf", KDF_HKDF), "kdf"),
        convergent_encryption=bool(pol.get("convergent_encryption")),
        convergent_version=_int(pol.get("convergent_version") or 0, "convergent_version"),
        exportable=bool(pol.get("exportable")),
        allow_plaintext_backup=bool(pol.get("allow_plaintext_backup")),
        deletion_allowed=bool(pol.get("deletion_allowed")),
        min_decryption_version=_int(pol.get("min_decryption_version") or 1, "min_decryption"),
        min_encryption_version=_int(pol.get("min_encryption_version") or 0, "min_encryption"),
        min_available_version=min_avail,
        latest_version=latest,
        auto_rotate_period=period_ns // _NS,
        key_size=_int(pol.get("key_size") or 0, "key_size"),
        backup_info=backup_info,
    )
