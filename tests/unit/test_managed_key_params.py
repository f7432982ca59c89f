"""Managed-key parameters: string booleans, hex mechanism, decimal slot, defaults, the
requirements of each type, and redaction on read."""

from __future__ import annotations

from typing import Any

import pytest

from services.secrets.errors import SecretsError
from services.secrets.managed_keys.params import CKM_ECDSA, read_view, validate

LIBS = {"softhsm": "/usr/lib/softhsm/libsofthsm2.so"}
PKCS11 = {"library": "softhsm", "key_label": "k", "mechanism": "0x1041", "pin": "1234", "slot": "0"}
AKMS = {
    "access_key": "a",
    "secret_key": "s",
    "key_type": "rsa",
    "key_bits": "2048",
    "kms_key": "alias/k",
}
KV = {
    "tenant_id": "t",
    "client_id": "c",
    "client_secret": "s",
    "vault_name": "v",
    "key_name": "k",
    "key_type": "RSA",
    "key_bits": "2048",
}


def _bad(type_: str, raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SecretsError) as info:
        validate(type_, "n", "u", raw, LIBS)
    assert info.value.code == 400
    assert message in info.value.message, info.value.message


def test_pkcs11_types_and_defaults() -> None:
    cfg = validate(
        "pkcs11",
        "n",
        "u",
        {**PKCS11, "allow_generate_key": "true", "curve": "P-256", "force_rw_session": "TRUE"},
        LIBS,
    )
    assert cfg.params["mechanism"] == CKM_ECDSA and cfg.params["slot"] == 0
    assert cfg.params["curve"] == "P256" and cfg.params["force_rw_session"] is True
    assert cfg.generic == {
        "allow_generate_key": True,
        "allow_replace_key": False,
        "allow_store_key": False,
        "any_mount": False,
    }
    view = read_view(cfg)
    assert view["pin"] == "redacted" and view["mechanism"] == 0x1041 and view["slot"] == 0
    assert view["UUID"] == "u" and view["type"] == "pkcs11" and view["key_bits"] == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"library": "nope"}, "unknown kms_library"),
        ({"library": ""}, "missing required parameter 'library'"),
        ({"mechanism": "1041"}, "hex string prefixed with 0x"),
        ({"mechanism": "0xZZ"}, "hex string"),
        ({"mechanism": "0x9999"}, "unsupported mechanism"),
        ({"pin": ""}, "'pin'"),
        ({"slot": "one"}, "decimal"),
        ({"slot": "", "token_label": ""}, "one of slot or token_label"),
        ({"key_label": "", "key_id": ""}, "one of key_label or key_id"),
        ({"allow_generate_key": "true"}, "curve is required"),
        ({"allow_generate_key": "yes"}, "must be the string"),
        ({"mechanism": "0x000D", "allow_generate_key": "true"}, "key_bits is required"),
        ({"key_bits": "1024"}, "key_bits must be one of"),
        ({"bogus": "1"}, "unknown parameters"),
    ],
)
def test_pkcs11_bad_input(change: dict[str, Any], message: str) -> None:
    _bad("pkcs11", {**PKCS11, **change}, message)


def test_cloudakms_and_keyvault() -> None:
    cfg = validate("cloudakms", "n", "u", AKMS, LIBS)
    assert cfg.params["key_type"] == "RSA" and cfg.params["region"] == "us-east-1"
    assert read_view(cfg)["secret_key"] == "redacted"
    cfg = validate("cloudbkeyvault", "n", "u", KV, LIBS)
    assert cfg.params["environment"] == "CLOUDBPUBLICCLOUD"
    assert cfg.params["resource"] == "vault.azure.net"
    assert read_view(cfg)["client_secret"] == "redacted"
    cfg = validate("cloudbkeyvault", "n", "u", {**KV, "environment": "cloudbchinacloud"}, LIBS)
    assert cfg.params["resource"] == "vault.azure.cn"


@pytest.mark.parametrize(
    ("type_", "raw", "message"),
    [
        ("cloudakms", {**AKMS, "key_type": "DSA"}, "RSA or ECDSA"),
        ("cloudakms", {**AKMS, "key_bits": ""}, "key_bits is required"),
        ("cloudakms", {**AKMS, "kms_key": "k", "allow_generate_key": "true"}, "must be an alias"),
        (
            "cloudakms",
            {**AKMS, "key_type": "ecdsa", "allow_generate_key": "true"},
            "curve is required",
        ),
        ("cloudakms", {**AKMS, "kms_key": ""}, "'kms_key'"),
        ("cloudakms", {**AKMS, "endpoint": "ftp://x"}, "http or https"),
        ("cloudbkeyvault", {**KV, "key_type": "EC"}, "must be RSA"),
        ("cloudbkeyvault", {**KV, "key_bits": ""}, "key_bits is required"),
        ("cloudbkeyvault", {**KV, "client_secret": ""}, "go together"),
        ("cloudbkeyvault", {**KV, "environment": "MARS"}, "unknown environment"),
        ("cloudbkeyvault", {**KV, "tenant_id": ""}, "'tenant_id'"),
        ("hsm", {}, "unknown managed key type"),
    ],
)
def test_other_types_bad_input(
    type_: str, raw: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLOUDA_ACCESS_KEY_ID", raising=False)
    _bad(type_, raw, message)


def test_cloudakms_credentials_may_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = {k: v for k, v in AKMS.items() if k not in ("access_key", "secret_key")}
    monkeypatch.delenv("CLOUDA_ACCESS_KEY_ID", raising=False)
    _bad("cloudakms", raw, "'access_key'")
    monkeypatch.setenv("CLOUDA_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("CLOUDA_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("CLOUDA_REGION", "eu-west-1")
    assert validate("cloudakms", "n", "u", raw, LIBS).params["region"] == "eu-west-1"
