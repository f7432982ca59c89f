"""Issue 16 (1): nothing secret crosses NATS in the clear. A NATS user allowed `>` (the NATS
operator: here an open nats-server of our own, with `trellis dev --nats-url ... --insecure-bus`)
records every message through init, unseal, seal, unseal, KV writes and reads, PKI issue and
token create, and finds no unseal key, token, secret value or private key in any of them, raw
or base64-encoded."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import nats
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import start_nats
from tests.procs import start_dev

pytestmark = pytest.mark.e2e


def _forms(secret: bytes) -> list[bytes]:
    """The secret as it might appear: raw, base64 (both alphabets), hex."""
    return [
        secret,
        base64.b64encode(secret),
        base64.urlsafe_b64encode(secret),
        secret.hex().encode(),
    ]


def test_a_sniffer_on_every_subject_learns_no_secret(tmp_path: Path) -> None:
    proc, url, _ = start_nats(str(tmp_path))
    seen: list[bytes] = []

    async def run() -> None:
        sniffer = await nats.connect(url)

        async def record(msg: nats.aio.msg.Msg) -> None:
            seen.append(msg.subject.encode() + b" " + repr(msg.headers).encode() + b" " + msg.data)

        await sniffer.subscribe(">", cb=record)
        await sniffer.flush()
        secrets = await asyncio.to_thread(drive, url, tmp_path)
        await sniffer.flush()  # every message published before now has reached us
        await sniffer.close()
        check(secrets)

    def check(secrets: dict[str, bytes]) -> None:
        api = [m for m in seen if m.startswith(b"trellis.api.secrets ")]
        assert len(api) >= 12, "the sniffer saw no secrets API traffic: the test proves nothing"
        assert any(m.startswith(b"trellis.crypto.cmd ") for m in seen)
        assert any(m.startswith(b"trellis.secrets.seal.share ") for m in seen)
        for name, secret in secrets.items():
            for form in _forms(secret):
                hits = [m[:80] for m in seen if form in m]
                assert not hits, f"the {name} crossed the bus: {hits[:3]}"

    try:
        asyncio.run(run())
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp_path / "js", ignore_errors=True)


def drive(url: str, tmp_path: Path) -> dict[str, bytes]:
    """A session of an operator and a client; returns every secret it handled."""
    d = start_dev(
        "--nats-url",
        url,
        "--insecure-bus",
        "--data-dir",
        str(tmp_path / "dev"),
        "--services",
        "crypto",
    )
    try:
        base, root = d.secrets, d.root_token

        def call(method: str, path: str, body: object = None, token: str = root) -> dict:
            # 503 while the crypto worker is still starting (trellis dev does not wait for it).
            deadline = time.monotonic() + 60
            while True:
                r = requests.request(
                    method, base + path, json=body, headers={"X-Vault-Token": token}, timeout=60
                )
                if r.status_code != 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert r.status_code in (200, 204), (path, r.status_code, r.text)
            return r.json() if r.content else {}

        call("POST", "/v1/sys/seal")
        assert call("POST", "/v1/sys/unseal", {"key": d.unseal_key})["sealed"] is False
        value = "kv-" + uuid.uuid4().hex
        call("POST", "/v1/secret/data/sniffed", {"data": {"password": value}})
        assert call("GET", "/v1/secret/data/sniffed")["data"]["data"]["password"] == value
        call("POST", "/v1/sys/mounts/pki", {"type": "pki"})
        call(
            "POST", "/v1/pki/root/generate/internal", {"common_name": "Sniff CA", "key_type": "ec"}
        )
        call("POST", "/v1/pki/roles/web", {"allow_any_name": True, "key_type": "ec"})
        issued = call("POST", "/v1/pki/issue/web", {"common_name": "a.example.com"})["data"]
        token = call("POST", "/v1/auth/token/create", {"policies": ["default"]})["auth"]
        assert call("GET", "/v1/auth/token/lookup-self", token=token["client_token"])
        # The private key's base64 body, one full line (a line never spans a newline escape).
        pem_lines = issued["private_key"].strip().splitlines()[1:-1]
        return {
            "unseal key": bytes.fromhex(d.unseal_key),
            "unseal key (hex)": d.unseal_key.encode(),
            "root token": root.encode(),
            "created token": token["client_token"].encode(),
            "secret value": value.encode(),
            "private key": pem_lines[0].encode(),
            "private key (scalar)": scalar(issued["private_key"]),
        }
    finally:
        d.stop()


def scalar(pem: str) -> bytes:
    """The EC private key itself, as 32 raw bytes."""
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_numbers().private_value.to_bytes(32, "big")
