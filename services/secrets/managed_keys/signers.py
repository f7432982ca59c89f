"""Dispatch `test/sign` to the key's backend; blocking libraries run in a worker thread."""

from __future__ import annotations

import asyncio
import importlib.util

from services.secrets.errors import bad_request
from services.secrets.managed_keys import akms_signer, keyvault_signer, pkcs11_signer
from services.secrets.managed_keys.params import KeyConfig


def _need(module: str, package: str, what: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise bad_request(f"this server has no {what} support ({package} is not installed)")


async def test_sign(cfg: KeyConfig, libraries: dict[str, str]) -> None:
    if cfg.type == "pkcs11":
        _need("pkcs11", "python-pkcs11", "PKCS#11")
        path = libraries.get(cfg.params["library"].lower())
        if path is None:
            raise bad_request(f"unknown kms_library {cfg.params['library']!r}")
        await asyncio.to_thread(pkcs11_signer.test_sign, cfg, path)
    elif cfg.type == "cloudakms":
        _need("boto3", "boto3", "KMS")
        await asyncio.to_thread(akms_signer.test_sign, cfg)
    else:
        await keyvault_signer.test_sign(cfg)
