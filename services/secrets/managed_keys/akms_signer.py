"""test/sign for `cloudakms` keys through a KMS-compatible API (boto3; `endpoint` honoured):
find the key, or create it with its alias when generation is allowed, then sign and verify.
Blocking (boto3 is synchronous): callers run it in a thread."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from services.secrets.errors import SecretsError, bad_request, upstream
from services.secrets.managed_keys.params import KeyConfig

_SPECS = {"P256": "ECC_NIST_P256", "P384": "ECC_NIST_P384", "P521": "ECC_NIST_P521"}
_ECDSA_ALG = {
    "ECC_NIST_P256": "ECDSA_SHA_256",
    "ECC_NIST_P384": "ECDSA_SHA_384",
    "ECC_NIST_P521": "ECDSA_SHA_512",
}


def _client(p: dict[str, Any]) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "kms",
        region_name=p["region"],
        endpoint_url=p["endpoint"] or None,
        aws_access_key_id=p["access_key"] or os.environ.get("CLOUDA_ACCESS_KEY_ID"),
        aws_secret_access_key=p["secret_key"] or os.environ.get("CLOUDA_SECRET_ACCESS_KEY"),
        config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 2}),
    )


def _create(kms: Any, cfg: KeyConfig) -> dict[str, Any]:
    """Create the key and its alias; a key whose alias could not be made is scheduled for
    deletion again, so a failure leaves nothing half created."""
    p = cfg.params
    spec = f"RSA_{p['key_bits']}" if p["key_type"] == "RSA" else _SPECS[p["curve"]]
    meta = kms.create_key(
        KeyUsage="SIGN_VERIFY", KeySpec=spec, Description=f"trellis managed key {cfg.name}"
    )["KeyMetadata"]
    try:
        kms.create_alias(AliasName=p["kms_key"], TargetKeyId=meta["KeyId"])
    except BaseException:
        with contextlib.suppress(Exception):
            kms.schedule_key_deletion(KeyId=meta["KeyId"], PendingWindowInDays=7)
        raise
    return meta


def test_sign(cfg: KeyConfig) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    p = cfg.params
    try:
        kms = _client(p)
        try:
            meta = kms.describe_key(KeyId=p["kms_key"])["KeyMetadata"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NotFoundException":
                raise
            if not cfg.generic["allow_generate_key"]:
                raise bad_request(
                    f"kms_key {p['kms_key']!r} does not exist and allow_generate_key is false"
                ) from None
            meta = _create(kms, cfg)
        if meta.get("KeyUsage") != "SIGN_VERIFY":
            raise bad_request(
                f"kms_key {p['kms_key']!r} has usage {meta.get('KeyUsage')}; "
                "a managed key needs SIGN_VERIFY"
            )
        spec = meta.get("KeySpec") or meta.get("CustomerMasterKeySpec") or ""
        alg = "RSASSA_PSS_SHA_256" if spec.startswith("RSA") else _ECDSA_ALG.get(spec)
        if alg is None:
            raise bad_request(f"kms_key {p['kms_key']!r} has key spec {spec!r}, which cannot sign")
        message = os.urandom(32)
        sig = kms.sign(
            KeyId=meta["KeyId"], Message=message, MessageType="RAW", SigningAlgorithm=alg
        )["Signature"]
        ok = kms.verify(
            KeyId=meta["KeyId"],
            Message=message,
            MessageType="RAW",
            Signature=sig,
            SigningAlgorithm=alg,
        )["SignatureValid"]
    except SecretsError:
        raise
    except ClientError as exc:
        e = exc.response.get("Error", {})
        raise upstream(
            f"KMS: {e.get('Code', 'error')}: {e.get('Message', '')}".rstrip(": ")
        ) from None
    except BotoCoreError as exc:
        raise upstream(f"KMS unreachable: {exc}") from None
    if not ok:
        raise upstream("KMS: the test signature did not verify")
