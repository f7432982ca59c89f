"""test/sign for `cloudbkeyvault` keys through the Key Vault REST API: log in with the client
credentials, find the key (creating it when generation is allowed), sign a digest, and have it
verified both by the vault and locally with the key's public half.

`environment` names a cloud (its login endpoint) and `resource` the key-vault DNS suffix; both
may instead be an http(s) URL, which reaches a private endpoint (and the tests' emulator)."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import aiohttp

from services.secrets.errors import SecretsError, bad_request, upstream
from services.secrets.managed_keys.params import ENVIRONMENTS, KeyConfig

API_VERSION = "7.4"
TIMEOUT = aiohttp.ClientTimeout(total=15)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def endpoints(p: dict[str, Any]) -> tuple[str, str, str]:
    """(login URL, vault base URL, token scope)."""
    env = p["environment"]
    login = env.rstrip("/") if env.startswith(("http://", "https://")) else ENVIRONMENTS[env][0]
    resource = p["resource"]
    if resource.startswith(("http://", "https://")):
        base = resource.rstrip("/")
        scope = base + "/.default"
    else:
        base = f"https://{p['vault_name']}.{resource}"
        scope = f"https://{resource}/.default"
    return f"{login}/{p['tenant_id']}/oauth2/v2.0/token", base, scope


async def _json(resp: aiohttp.ClientResponse, what: str) -> dict[str, Any]:
    try:
        body = await resp.json(content_type=None)
    except ValueError:
        body = None
    if resp.status >= 400:
        detail = ""
        if isinstance(body, dict):
            err = body.get("error")
            detail = (
                (err.get("message") if isinstance(err, dict) else None)
                or body.get("error_description")
                or str(err or "")
            )
        raise upstream(f"key vault: {what}: HTTP {resp.status}{': ' + detail if detail else ''}")
    if not isinstance(body, dict):
        raise upstream(f"key vault: {what}: unreadable response")
    return body


async def test_sign(cfg: KeyConfig) -> None:
    p = cfg.params
    if not p["client_id"]:
        raise bad_request(
            "managed identities are not available to this server; set client_id and client_secret"
        )
    login, base, scope = endpoints(p)
    q = {"api-version": API_VERSION}
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.post(
                login,
                data={
                    "grant_type": "client_credentials",
                    "client_id": p["client_id"],
                    "client_secret": p["client_secret"],
                    "scope": scope,
                },
            ) as r:
                token = (await _json(r, "login"))["access_token"]
            auth = {"Authorization": f"Bearer {token}"}
            key_url = f"{base}/keys/{p['key_name']}"
            async with s.get(key_url, params=q, headers=auth) as r:
                key = None if r.status == 404 else (await _json(r, "get key"))["key"]
            if key is None:
                if not cfg.generic["allow_generate_key"]:
                    raise bad_request(
                        f"key {p['key_name']!r} does not exist in vault "
                        f"{p['vault_name']!r} and allow_generate_key is false"
                    )
                body = {"kty": "RSA", "key_size": p["key_bits"], "key_ops": ["sign", "verify"]}
                async with s.post(key_url + "/create", params=q, headers=auth, json=body) as r:
                    key = (await _json(r, "create key"))["key"]
            version = str(key.get("kid", "")).rstrip("/").rsplit("/", 1)[-1]
            digest = hashlib.sha256(os.urandom(32)).digest()
            async with s.post(
                f"{key_url}/{version}/sign",
                params=q,
                headers=auth,
                json={"alg": "PS256", "value": _b64url(digest)},
            ) as r:
                signature = _unb64url((await _json(r, "sign"))["value"])
            async with s.post(
                f"{key_url}/{version}/verify",
                params=q,
                headers=auth,
                json={"alg": "PS256", "digest": _b64url(digest), "value": _b64url(signature)},
            ) as r:
                verified = bool((await _json(r, "verify")).get("value"))
    except SecretsError:
        raise
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise upstream(f"key vault unreachable: {exc or type(exc).__name__}") from None
    except (KeyError, TypeError, ValueError):
        raise upstream("key vault: unexpected response") from None
    if not verified or not _verify_locally(key, digest, signature):
        raise upstream("key vault: the test signature did not verify")


def _verify_locally(jwk: dict[str, Any], digest: bytes, signature: bytes) -> bool:
    """Trust the vault's answer only if the public key agrees."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

    try:
        pub = rsa.RSAPublicNumbers(
            int.from_bytes(_unb64url(jwk["e"]), "big"), int.from_bytes(_unb64url(jwk["n"]), "big")
        ).public_key()
        pub.verify(
            signature,
            digest,
            padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32),
            utils.Prehashed(hashes.SHA256()),
        )
    except (InvalidSignature, KeyError, ValueError):
        return False
    return True
