"""The transit engine on an in-process cluster with a real nats-server: every key type round
trip, signatures checked by openssl (RSA, ECDSA) and `cryptography` (Ed25519) against exported
public keys, HMACs against the exported HMAC key, rotation and minimum versions seen at once by
a second replica, derived and convergent keys, batches, export, backup and restore, and RSA
private-key work on the crypto worker."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.harness import Cluster, start_cluster
from tests.integration.test_pki_api import add_worker, openssl, pem_file

pytestmark = pytest.mark.nats

MSG = b"transit test message"
P = base64.b64encode(MSG).decode()
ENCRYPTING = ("aes128-gcm96", "aes256-gcm96", "chacha20-poly1305", "rsa-2048")
SIGNING = ("ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048", "rsa-3072")


async def ok(c: Cluster, method: str, path: str, body: Any = None, status: int = 200) -> Any:
    got, out = await c.request(method, "/v1/" + path, json=body)
    assert got == status, (method, path, got, out)
    return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sig_bytes(signature: str) -> bytes:
    assert signature.startswith("vault:v")
    return base64.b64decode(signature.split(":", 2)[2])


async def test_every_key_type_round_trip(nats_url: str, tmp_path: Path) -> None:
    c = await start_cluster(nats_url)
    try:
        await add_worker(c)
        await ok(c, "POST", "sys/mounts/transit", {"type": "transit"}, 204)
        for kt in (*ENCRYPTING, *SIGNING, "hmac"):
            body: dict[str, Any] = {"type": kt, "exportable": True}
            if kt == "hmac":
                body["key_size"] = 48
            key = (await ok(c, "POST", f"transit/keys/{kt}", body))["data"]
            assert key["type"] == kt and key["latest_version"] == 1
            if kt in ENCRYPTING:
                ct = (await ok(c, "POST", f"transit/encrypt/{kt}", {"plaintext": P}))["data"]
                assert ct["ciphertext"].startswith("vault:v1:") and ct["key_version"] == 1
                got = await ok(c, "POST", f"transit/decrypt/{kt}", {"ciphertext": ct["ciphertext"]})
                assert got["data"]["plaintext"] == P
            if kt in SIGNING:
                await check_signatures(c, kt, tmp_path)
            # Every type HMACs with its version's HMAC key, which an exportable key exports.
            mac = (await ok(c, "POST", f"transit/hmac/{kt}/sha2-384", {"input": P}))["data"]
            exported = await ok(c, "GET", f"transit/export/hmac-key/{kt}/1")
            hmac_key = base64.b64decode(exported["data"]["keys"]["1"])
            assert len(hmac_key) == (48 if kt == "hmac" else 32)
            mine = hmac.new(hmac_key, MSG, hashlib.sha384).digest()
            assert mac["hmac"] == "vault:v1:" + b64(mine)
            verify = {"input": P, "hmac": mac["hmac"]}
            assert (await ok(c, "POST", f"transit/verify/{kt}/sha2-384", verify))["data"] == {
                "valid": True
            }
            verify["input"] = b64(b"other")
            assert not (await ok(c, "POST", f"transit/verify/{kt}/sha2-384", verify))["data"][
                "valid"
            ]
        # Symmetric keys export as the raw key: decrypting by hand proves the format.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        ct = (await ok(c, "POST", "transit/encrypt/aes256-gcm96", {"plaintext": P}))["data"]
        raw = base64.b64decode(ct["ciphertext"].split(":", 2)[2])
        exported = await ok(c, "GET", "transit/export/encryption-key/aes256-gcm96/latest")
        key = base64.b64decode(exported["data"]["keys"]["1"])
        assert AESGCM(key).decrypt(raw[:12], raw[12:], None) == MSG
    finally:
        await c.close()


async def check_signatures(c: Cluster, kt: str, tmp: Path) -> None:
    data = tmp / f"{kt}.data"
    data.write_bytes(MSG)
    pub = (await ok(c, "GET", f"transit/export/public-key/{kt}"))["data"]["keys"]["1"]
    signed = await ok(c, "POST", f"transit/sign/{kt}", {"input": P})
    sig = signed["data"]["signature"]
    assert (await ok(c, "POST", f"transit/verify/{kt}", {"input": P, "signature": sig}))["data"][
        "valid"
    ]
    tampered = {"input": b64(b"tampered"), "signature": sig}
    assert not (await ok(c, "POST", f"transit/verify/{kt}", tampered))["data"]["valid"]
    if kt == "ed25519":
        public = ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(pub))
        public.verify(sig_bytes(sig), MSG)  # raises when invalid
        return
    pub_file = pem_file(tmp, f"{kt}.pub", pub)
    sig_file = tmp / f"{kt}.sig"
    sig_file.write_bytes(sig_bytes(sig))
    opts: list[str] = []
    if kt.startswith("rsa"):  # the default is PSS with the longest salt
        opts = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:-2"]
    out = openssl(
        "dgst", "-sha256", "-verify", pub_file, *opts, "-signature", str(sig_file), str(data)
    )
    assert "Verified OK" in out
    if kt.startswith("rsa"):
        body = {"input": P, "signature_algorithm": "pkcs1v15", "hash_algorithm": "sha2-512"}
        sig = (await ok(c, "POST", f"transit/sign/{kt}", body))["data"]["signature"]
        sig_file.write_bytes(sig_bytes(sig))
        out = openssl(
            "dgst", "-sha512", "-verify", pub_file, "-signature", str(sig_file), str(data)
        )
        assert "Verified OK" in out
    else:  # prehashed: the caller sends the digest
        digest = hashlib.sha384(MSG).digest()
        body = {"input": b64(digest), "prehashed": True, "hash_algorithm": "sha2-384"}
        sig = (await ok(c, "POST", f"transit/sign/{kt}", body))["data"]["signature"]
        sig_file.write_bytes(sig_bytes(sig))
        out = openssl(
            "dgst", "-sha384", "-verify", pub_file, "-signature", str(sig_file), str(data)
        )
        assert "Verified OK" in out
        jws = {"input": P, "marshaling_algorithm": "jws"}
        sig = (await ok(c, "POST", f"transit/sign/{kt}", jws))["data"]["signature"]
        size = {"ecdsa-p256": 32, "ecdsa-p384": 48, "ecdsa-p521": 66}[kt]
        raw = sig.split(":", 2)[2]
        assert "=" not in raw and len(base64.urlsafe_b64decode(raw + "==")) == 2 * size
        assert (await ok(c, "POST", f"transit/verify/{kt}", {**jws, "signature": sig}))["data"][
            "valid"
        ]


async def test_rotation_and_min_versions_across_replicas(nats_url: str) -> None:
    c = await start_cluster(nats_url, replicas=2)
    try:
        await add_worker(c)
        await ok(c, "POST", "sys/mounts/transit", {"type": "transit"}, 204)
        await ok(c, "POST", "transit/keys/k", {"exportable": True})
        old = (await ok(c, "POST", "transit/encrypt/k", {"plaintext": P}))["data"]["ciphertext"]
        for version in (2, 3, 4):
            await ok(c, "POST", "transit/keys/k/rotate")
            # Both replicas answer (queue group): none may still encrypt with the old version.
            for _ in range(12):
                got = (await ok(c, "POST", "transit/encrypt/k", {"plaintext": P}))["data"]
                assert got["key_version"] == version
        assert (await ok(c, "POST", "transit/decrypt/k", {"ciphertext": old}))["data"][
            "plaintext"
        ] == P
        rewrapped = (await ok(c, "POST", "transit/rewrap/k", {"ciphertext": old}))["data"]
        assert rewrapped["ciphertext"].startswith("vault:v4:")
        mins = {"min_decryption_version": 3, "min_encryption_version": 4}
        await ok(c, "POST", "transit/keys/k/config", mins)
        for _ in range(6):
            status, body = await c.request(
                "POST", "/v1/transit/decrypt/k", json={"ciphertext": old}
            )
            assert status == 400 and "too old" in body["errors"][0]
        status, body = await c.request(
            "POST", "/v1/transit/encrypt/k", json={"plaintext": P, "key_version": 3}
        )
        assert status == 400
        await ok(c, "POST", "transit/keys/k/trim", {"min_available_version": 3})
        key = (await ok(c, "GET", "transit/keys/k"))["data"]
        assert sorted(key["keys"]) == ["3", "4"] and key["min_available_version"] == 3
        exported = (await ok(c, "GET", "transit/export/encryption-key/k"))["data"]["keys"]
        assert sorted(exported) == ["3", "4"]
        # Lowering the minimum below what was trimmed is refused: those versions are gone.
        status, body = await c.request(
            "POST", "/v1/transit/keys/k/config", json={"min_decryption_version": 2}
        )
        assert status == 400, body
        # Deletion needs deletion_allowed; afterwards no replica knows the key.
        status, _ = await c.request("DELETE", "/v1/transit/keys/k")
        assert status == 400
        await ok(c, "POST", "transit/keys/k/config", {"deletion_allowed": True})
        await ok(c, "DELETE", "transit/keys/k", status=204)
        for _ in range(6):
            status, _ = await c.request(
                "POST", "/v1/transit/decrypt/k", json={"ciphertext": rewrapped["ciphertext"]}
            )
            assert status == 400
    finally:
        await c.close()


async def test_derived_convergent_batch_backup_restore(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await add_worker(c)
        await ok(c, "POST", "sys/mounts/transit", {"type": "transit"}, 204)
        spec = {"derived": True, "convergent_encryption": True, "exportable": True}
        await ok(c, "POST", "transit/keys/d", {**spec, "allow_plaintext_backup": True})
        status, body = await c.request("POST", "/v1/transit/encrypt/d", json={"plaintext": P})
        assert status == 400 and "context" in body["errors"][0]
        ctx_a, ctx_b = b64(b"tenant-a"), b64(b"tenant-b")
        batch = {
            "batch_input": [
                {"plaintext": P, "context": ctx_a, "reference": "1"},
                {"plaintext": P, "context": ctx_a, "reference": "2"},
                {"plaintext": P, "context": ctx_b, "reference": "3"},
                {"plaintext": "not base64!", "context": ctx_a, "reference": "4"},
            ],
            "partial_failure_response_code": 207,
        }
        status, body = await c.request("POST", "/v1/transit/encrypt/d", json=batch)
        assert status == 207, body
        res = body["data"]["batch_results"]
        assert [r["reference"] for r in res] == ["1", "2", "3", "4"]
        assert res[0]["ciphertext"] == res[1]["ciphertext"] != res[2]["ciphertext"]
        assert "error" in res[3]
        dec = {
            "batch_input": [
                {"ciphertext": res[0]["ciphertext"], "context": ctx_a},
                {"ciphertext": res[2]["ciphertext"], "context": ctx_a},  # wrong context
            ]
        }
        status, body = await c.request("POST", "/v1/transit/decrypt/d", json=dec)
        assert status == 400
        out = body["data"]["batch_results"]
        assert out[0]["plaintext"] == P and "error" in out[1]

        # Derived Ed25519: the public key depends on the context, and so does verification.
        await ok(c, "POST", "transit/keys/ed", {"type": "ed25519", "derived": True})
        signed = (await ok(c, "POST", "transit/sign/ed", {"input": P, "context": ctx_a}))["data"]
        public = ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(signed["public_key"]))
        public.verify(sig_bytes(signed["signature"]), MSG)
        for ctx, valid in ((ctx_a, True), (ctx_b, False)):
            body = {"input": P, "context": ctx, "signature": signed["signature"]}
            assert (await ok(c, "POST", "transit/verify/ed", body))["data"]["valid"] is valid

        # Backup, restore under a new name: old ciphertexts decrypt with the restored key.
        await ok(c, "POST", "transit/keys/d/rotate")
        backup = (await ok(c, "GET", "transit/backup/d"))["data"]["backup"]
        await ok(c, "POST", "transit/restore/d2", {"backup": backup}, 204)
        status, body = await c.request("POST", "/v1/transit/restore/d2", json={"backup": backup})
        assert status == 400 and "already exists" in body["errors"][0]
        restored = (await ok(c, "GET", "transit/keys/d2"))["data"]
        assert restored["latest_version"] == 2 and restored["derived"]
        again = {"ciphertext": res[0]["ciphertext"], "context": ctx_a}
        assert (await ok(c, "POST", "transit/decrypt/d2", again))["data"]["plaintext"] == P
        status, body = await c.request(
            "POST", "/v1/transit/restore", json={"backup": b64(b'{"policy": 5}')}
        )
        assert status == 400, body

        # Auto-rotation: a key whose latest version is older than its period rotates once
        # when next used. The backup format (Vault's) lets the test age the key.
        await ok(c, "POST", "transit/keys/d/config", {"auto_rotate_period": "1h"})
        doc = json.loads(
            base64.b64decode((await ok(c, "GET", "transit/backup/d"))["data"]["backup"])
        )
        latest = str(doc["policy"]["latest_version"])
        doc["policy"]["keys"][latest]["creation_time"] -= 7200
        aged = b64(json.dumps(doc).encode())
        await ok(c, "POST", "transit/restore/aged", {"backup": aged}, 204)
        for _ in range(3):
            key = (await ok(c, "GET", "transit/keys/aged"))["data"]
            assert key["latest_version"] == int(latest) + 1 and key["auto_rotate_period"] == 3600

        # Data keys: the wrapped form decrypts to the plaintext form.
        await ok(c, "POST", "transit/keys/w")
        dk = (await ok(c, "POST", "transit/datakey/plaintext/w", {"bits": 512}))["data"]
        assert len(base64.b64decode(dk["plaintext"])) == 64
        got = await ok(c, "POST", "transit/decrypt/w", {"ciphertext": dk["ciphertext"]})
        assert got["data"]["plaintext"] == dk["plaintext"]
        wrapped = (await ok(c, "POST", "transit/datakey/wrapped/w"))["data"]
        assert "plaintext" not in wrapped

        # Non-exportable keys never leave: export and backup are refused.
        for path in ("transit/export/encryption-key/w", "transit/backup/w"):
            status, body = await c.request("GET", "/v1/" + path)
            assert status == 400, (path, body)
    finally:
        await c.close()


async def test_rsa_private_key_work_runs_on_the_crypto_worker(nats_url: str) -> None:
    """Without a worker, RSA signing and decryption answer 503 while Ed25519, ECDSA and the
    symmetric ciphers keep working in the secrets service."""
    c = await start_cluster(nats_url)
    try:
        worker = await add_worker(c)
        await ok(c, "POST", "sys/mounts/transit", {"type": "transit"}, 204)
        for kt in ("rsa-2048", "ed25519", "ecdsa-p256", "aes256-gcm96"):
            await ok(c, "POST", f"transit/keys/{kt}", {"type": kt})
        ct = (await ok(c, "POST", "transit/encrypt/rsa-2048", {"plaintext": P}))["data"]
        await worker.stop()
        await worker.bus.close()
        for path, body in (
            ("transit/sign/rsa-2048", {"input": P}),
            ("transit/decrypt/rsa-2048", {"ciphertext": ct["ciphertext"]}),
        ):
            status, out = await c.request("POST", "/v1/" + path, json=body)
            assert status == 503, (path, status, out)
        await ok(c, "POST", "transit/sign/ed25519", {"input": P})
        await ok(c, "POST", "transit/sign/ecdsa-p256", {"input": P})
        # RSA encryption is a public-key operation: no worker needed.
        await ok(c, "POST", "transit/encrypt/rsa-2048", {"plaintext": P})
    finally:
        await c.close()


async def test_encrypt_creates_a_missing_key_only_with_create(nats_url: str) -> None:
    """Encrypting to a missing key creates it (Vault's upsert), which takes `create`: a token
    with only `update` encrypts with existing keys and is refused a new one."""
    c = await start_cluster(nats_url)
    try:
        await ok(c, "POST", "sys/mounts/transit", {"type": "transit"}, 204)
        await ok(c, "POST", "transit/keys/there")
        hcl = 'path "transit/encrypt/*" { capabilities = ["update"] }'
        await ok(c, "POST", "sys/policy/enc-only", {"policy": hcl}, 204)
        token = (await ok(c, "POST", "auth/token/create", {"policies": ["enc-only"]}))["auth"][
            "client_token"
        ]
        status, body = await c.request(
            "POST", "/v1/transit/encrypt/there", token=token, json={"plaintext": P}
        )
        assert status == 200, body
        status, body = await c.request(
            "POST", "/v1/transit/encrypt/new", token=token, json={"plaintext": P}
        )
        assert status == 403, body
        status, _ = await c.request("GET", "/v1/transit/keys/new")
        assert status == 404
        # Root may: the key appears, derived because a context came with the request.
        ctx = b64(b"c")
        await ok(c, "POST", "transit/encrypt/new", {"plaintext": P, "context": ctx})
        assert (await ok(c, "GET", "transit/keys/new"))["data"]["derived"] is True
    finally:
        await c.close()
