"""Managed-key parameters as the seed writes them (booleans as "true"/"false", mechanism as a
"0x" hex string, slot as a decimal string) checked and turned into typed values. Pure: the
only outside fact is the list of configured kms_library names."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from services.secrets.errors import bad_request

TYPES = ("pkcs11", "cloudakms", "cloudbkeyvault")
REDACTED = "redacted"
RSA_BITS = (2048, 3072, 4096)
CURVES = ("P256", "P384", "P521")

GENERIC_BOOLS = ("allow_generate_key", "allow_replace_key", "allow_store_key", "any_mount")

CKM_RSA_PKCS = 0x0001
CKM_RSA_PKCS_OAEP = 0x0009
CKM_RSA_PKCS_PSS = 0x000D
CKM_ECDSA = 0x1041
MECHANISMS = {
    CKM_RSA_PKCS: "CKM_RSA_PKCS",
    CKM_RSA_PKCS_OAEP: "CKM_RSA_PKCS_OAEP",
    CKM_RSA_PKCS_PSS: "CKM_RSA_PKCS_PSS",
    CKM_ECDSA: "CKM_ECDSA",
}
RSA_MECHANISMS = (CKM_RSA_PKCS, CKM_RSA_PKCS_OAEP, CKM_RSA_PKCS_PSS)

# Parameters each type accepts; the secret ones are never returned.
FIELDS: dict[str, tuple[str, ...]] = {
    "pkcs11": (
        "library",
        "key_label",
        "key_id",
        "mechanism",
        "pin",
        "slot",
        "token_label",
        "curve",
        "key_bits",
        "force_rw_session",
    ),
    "cloudakms": (
        "access_key",
        "secret_key",
        "key_type",
        "key_bits",
        "curve",
        "kms_key",
        "endpoint",
        "region",
    ),
    "cloudbkeyvault": (
        "tenant_id",
        "client_id",
        "client_secret",
        "environment",
        "vault_name",
        "key_name",
        "resource",
        "key_bits",
        "key_type",
    ),
}
SECRETS = {"pin", "secret_key", "client_secret"}

# Key Vault environments: (login endpoint, key-vault DNS suffix).
ENVIRONMENTS = {
    "CLOUDBPUBLICCLOUD": ("https://login.microsoftonline.com", "vault.azure.net"),
    "CLOUDBCHINACLOUD": ("https://login.chinacloudapi.cn", "vault.azure.cn"),
    "CLOUDBUSGOVERNMENTCLOUD": ("https://login.microsoftonline.us", "vault.usgovcloudapi.net"),
    "CLOUDBGERMANCLOUD": ("https://login.microsoftonline.de", "vault.microsoftazure.de"),
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def check_type(type_: str) -> str:
    if type_ not in TYPES:
        raise bad_request(f"unknown managed key type {type_!r}: use one of {', '.join(TYPES)}")
    return type_


def check_name(name: str) -> str:
    name = name.lower()
    if not _NAME.match(name):
        raise bad_request(f"invalid managed key name {name!r}")
    return name


def str_bool(raw: dict[str, Any], name: str) -> bool:
    """Written as the strings "true"/"false" (JSON booleans are accepted too)."""
    value = raw.get(name, "false")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", ""):
        return value.strip().lower() == "true"
    raise bad_request(f'{name} must be the string "true" or "false", got {value!r}')


def _str(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name, "")
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise bad_request(f"{name} must be a string")
    return str(value).strip()


def _required(raw: dict[str, Any], name: str) -> str:
    value = _str(raw, name)
    if not value:
        raise bad_request(f"missing required parameter {name!r}")
    return value


def mechanism(value: str) -> int:
    if not re.fullmatch(r"0[xX][0-9a-fA-F]+", value):
        raise bad_request(f"mechanism must be a hex string prefixed with 0x, got {value!r}")
    mech = int(value, 16)
    if mech not in MECHANISMS:
        names = ", ".join(f"0x{m:04X} ({n})" for m, n in MECHANISMS.items())
        raise bad_request(f"unsupported mechanism {value}: use one of {names}")
    return mech


def decimal(value: str, name: str) -> int:
    if not re.fullmatch(r"\d+", value):
        raise bad_request(f"{name} must be a decimal number, got {value!r}")
    return int(value)


def key_bits(value: str) -> int:
    if not re.fullmatch(r"\d+", value) or int(value) not in RSA_BITS:
        raise bad_request(f"key_bits must be one of {', '.join(map(str, RSA_BITS))}, got {value!r}")
    return int(value)


def curve(value: str) -> str:
    norm = value.upper().replace("-", "")
    if norm not in CURVES:
        raise bad_request(f"curve must be one of {', '.join(CURVES)}, got {value!r}")
    return norm


@dataclass(frozen=True)
class KeyConfig:
    """A validated managed key: `generic` booleans and typed `params` of its type."""

    name: str
    type: str
    uuid: str
    generic: dict[str, bool]
    params: dict[str, Any]


def validate(
    type_: str, name: str, uuid: str, raw: dict[str, Any], kms_libraries: dict[str, str] | None
) -> KeyConfig:
    """Check `raw` (the merged write parameters) and type them; each problem is a 400."""
    check_type(type_)
    unknown = sorted(set(raw) - set(FIELDS[type_]) - set(GENERIC_BOOLS) - {"name", "type"})
    if unknown:
        raise bad_request(f"unknown parameters for a {type_} key: {', '.join(unknown)}")
    generic = {b: str_bool(raw, b) for b in GENERIC_BOOLS}
    gen = generic["allow_generate_key"]
    if type_ == "pkcs11":
        params = _pkcs11(raw, gen, kms_libraries)
    elif type_ == "cloudakms":
        params = _cloudakms(raw, gen)
    else:
        params = _keyvault(raw)
    return KeyConfig(name=name, type=type_, uuid=uuid, generic=generic, params=params)


def _pkcs11(raw: dict[str, Any], gen: bool, libraries: dict[str, str] | None) -> dict[str, Any]:
    library = _required(raw, "library")
    # None: reading back a stored key, which stays readable if its stanza was removed.
    if libraries is not None and library.lower() not in libraries:
        raise bad_request(
            f"unknown kms_library {library!r}: the server config has no "
            "kms_library stanza of that name"
        )
    key_label, key_id = _str(raw, "key_label"), _str(raw, "key_id")
    if not key_label and not key_id:
        raise bad_request("one of key_label or key_id is required")
    mech = mechanism(_required(raw, "mechanism"))
    pin = _required(raw, "pin")
    slot_text, token_label = _str(raw, "slot"), _str(raw, "token_label")
    if not slot_text and not token_label:
        raise bad_request("one of slot or token_label is required")
    slot = decimal(slot_text, "slot") if slot_text else None
    curve_text, bits_text = _str(raw, "curve"), _str(raw, "key_bits")
    crv = curve(curve_text) if curve_text else ""
    bits = key_bits(bits_text) if bits_text and bits_text != "0" else 0
    if gen and mech == CKM_ECDSA and not crv:
        raise bad_request(
            "curve is required when allow_generate_key is true and the mechanism is CKM_ECDSA"
        )
    if gen and mech in RSA_MECHANISMS and not bits:
        raise bad_request(
            "key_bits is required when allow_generate_key is true and the "
            "mechanism is an RSA mechanism"
        )
    return {
        "library": library,
        "key_label": key_label,
        "key_id": key_id,
        "mechanism": mech,
        "pin": pin,
        "slot": slot,
        "token_label": token_label,
        "curve": crv,
        "key_bits": bits,
        "force_rw_session": str_bool(raw, "force_rw_session"),
    }


def _cloudakms(raw: dict[str, Any], gen: bool) -> dict[str, Any]:
    access_key = _str(raw, "access_key")
    secret_key = _str(raw, "secret_key")
    # Like the provider's SDK: credentials may come from the server's environment instead.
    if not access_key and not os.environ.get("CLOUDA_ACCESS_KEY_ID"):
        raise bad_request("missing required parameter 'access_key'")
    if not secret_key and not os.environ.get("CLOUDA_SECRET_ACCESS_KEY"):
        raise bad_request("missing required parameter 'secret_key'")
    key_type = _required(raw, "key_type").upper()
    if key_type not in ("RSA", "ECDSA"):
        raise bad_request(f"key_type must be RSA or ECDSA, got {key_type!r}")
    bits_text, curve_text = _str(raw, "key_bits"), _str(raw, "curve")
    bits = key_bits(bits_text) if bits_text else 0
    crv = curve(curve_text) if curve_text else ""
    if key_type == "RSA" and not bits:
        raise bad_request("key_bits is required when key_type is RSA")
    if gen and key_type == "ECDSA" and not crv:
        raise bad_request("curve is required when allow_generate_key is true and key_type is ECDSA")
    kms_key = _required(raw, "kms_key")
    if gen and not kms_key.startswith("alias/"):
        raise bad_request("kms_key must be an alias (alias/...) when allow_generate_key is true")
    endpoint = _str(raw, "endpoint")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise bad_request("endpoint must be an http or https URL")
    region = (
        _str(raw, "region")
        or os.environ.get("CLOUDA_REGION")
        or os.environ.get("CLOUDA_DEFAULT_REGION")
        or "us-east-1"
    )
    return {
        "access_key": access_key,
        "secret_key": secret_key,
        "key_type": key_type,
        "key_bits": bits,
        "curve": crv,
        "kms_key": kms_key,
        "endpoint": endpoint,
        "region": region,
    }


def _keyvault(raw: dict[str, Any]) -> dict[str, Any]:
    tenant_id = _required(raw, "tenant_id")
    client_id, client_secret = _str(raw, "client_id"), _str(raw, "client_secret")
    if bool(client_id) != bool(client_secret):
        raise bad_request(
            "client_id and client_secret go together (give neither to use a managed identity)"
        )
    environment = _str(raw, "environment") or "CLOUDBPUBLICCLOUD"
    if not environment.startswith(("http://", "https://")):
        environment = environment.upper()
        if environment not in ENVIRONMENTS:
            raise bad_request(
                f"unknown environment {environment!r}: use one of {', '.join(ENVIRONMENTS)}"
            )
    key_type = _required(raw, "key_type").upper()
    if key_type != "RSA":
        raise bad_request(f"key_type must be RSA, got {key_type!r}")
    bits_text = _str(raw, "key_bits")
    if not bits_text:
        raise bad_request("key_bits is required (key_type is RSA)")
    resource = _str(raw, "resource")
    if not resource:
        resource = (
            ENVIRONMENTS[environment][1] if environment in ENVIRONMENTS else "vault.azure.net"
        )
    return {
        "tenant_id": tenant_id,
        "client_id": client_id,
        "client_secret": client_secret,
        "environment": environment,
        "vault_name": _required(raw, "vault_name"),
        "key_name": _required(raw, "key_name"),
        "resource": resource,
        "key_bits": key_bits(bits_text),
        "key_type": key_type,
    }


def read_view(cfg: KeyConfig) -> dict[str, Any]:
    """The read response: every parameter of the type, secrets as a redaction marker."""
    out: dict[str, Any] = {"UUID": cfg.uuid, "name": cfg.name, "type": cfg.type, **cfg.generic}
    for field in FIELDS[cfg.type]:
        value = cfg.params.get(field)
        if field in SECRETS:
            out[field] = REDACTED if value else ""
        elif field == "slot":
            out[field] = value if value is not None else 0
        else:
            out[field] = value
    return out
