"""Managed keys through the gateway on real key backends: pkcs11 on SoftHSM2 (python-pkcs11),
cloudakms on moto's KMS server, cloudbkeyvault on a local key-vault emulator. Each runs
`test/sign`; bad input is a 400, a backend that is down a 502."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from shared.settings import KmsLibrary
from tests.fakes.process import Fake, start_fake
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

SOFTHSM_PATHS = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/local/lib/softhsm/libsofthsm2.so",
)
PIN = "1234"


def _softhsm_library() -> str | None:
    return next((p for p in SOFTHSM_PATHS if os.path.exists(p)), None)


@pytest.fixture(scope="module")
def softhsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SoftHSM2 token store of our own. The PKCS#11 library reads SOFTHSM2_CONF once, when
    it is first loaded in this process, so tokens are made before any test uses it."""
    import pkcs11  # noqa: F401 - a dependency; fails loudly if missing

    library = _softhsm_library()
    util = shutil.which("softhsm2-util")
    if library is None or util is None:
        pytest.fail("SoftHSM2 is not installed (apt-get install softhsm2; ./test.sh does)")
    root = tmp_path_factory.mktemp("softhsm")
    (root / "tokens").mkdir()
    conf = root / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    old = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    subprocess.run(
        [util, "--init-token", "--free", "--label", "trellis", "--pin", PIN, "--so-pin", "5678"],
        check=True,
        capture_output=True,
    )
    try:
        yield library
    finally:
        if old is None:
            os.environ.pop("SOFTHSM2_CONF", None)
        else:
            os.environ["SOFTHSM2_CONF"] = old


@pytest.fixture
async def hsm_cluster(nats_url: str, softhsm: str) -> AsyncIterator[Cluster]:
    c = await start_cluster(nats_url, kms_library=[KmsLibrary(name="softhsm", library=softhsm)])
    try:
        yield c
    finally:
        await c.close()


def pkcs11_key(**over: Any) -> dict[str, Any]:
    return {
        "library": "softhsm",
        "token_label": "trellis",
        "pin": PIN,
        "mechanism": "0x1041",
        "key_label": "ec-key",
        "allow_generate_key": "true",
        "curve": "P256",
        **over,
    }


async def test_pkcs11_key_on_softhsm(hsm_cluster: Cluster) -> None:
    c = hsm_cluster
    status, body = await c.request("POST", "/v1/sys/managed-keys/pkcs11/hsm-ec", json=pkcs11_key())
    assert status == 204, body
    status, body = await c.request("GET", "/v1/sys/managed-keys/pkcs11/hsm-ec")
    assert status == 200, body
    data = body["data"]
    assert data["pin"] == "redacted" and PIN not in str(body)
    assert data["mechanism"] == 0x1041 and data["allow_generate_key"] is True
    assert data["any_mount"] is False and data["type"] == "pkcs11" and data["UUID"]
    assert data["library"] == "softhsm" and data["token_label"] == "trellis"

    # The first test/sign generates the key pair in the HSM, the second finds it.
    for _ in range(2):
        status, body = await c.request("POST", "/v1/sys/managed-keys/pkcs11/hsm-ec/test/sign")
        assert status == 204, body

    status, body = await c.request(
        "POST",
        "/v1/sys/managed-keys/pkcs11/hsm-rsa",
        json=pkcs11_key(mechanism="0x000D", key_label="rsa-key", key_bits="2048", curve=""),
    )
    assert status == 204, body
    status, body = await c.request("POST", "/v1/sys/managed-keys/pkcs11/hsm-rsa/test/sign")
    assert status == 204, body
    # CKM_RSA_PKCS with the same key: the existing key is used, no generation needed.
    status, body = await c.request(
        "POST",
        "/v1/sys/managed-keys/pkcs11/hsm-rsa",
        json={"mechanism": "0x0001", "allow_generate_key": "false"},
    )
    assert status == 204, body
    status, body = await c.request("POST", "/v1/sys/managed-keys/pkcs11/hsm-rsa/test/sign")
    assert status == 204, body

    status, body = await c.request("GET", "/v1/sys/managed-keys/pkcs11?list=true")
    assert status == 200 and body["data"]["keys"] == ["hsm-ec", "hsm-rsa"], body


async def test_pkcs11_errors(hsm_cluster: Cluster) -> None:
    c = hsm_cluster
    base = "/v1/sys/managed-keys/pkcs11/"
    status, body = await c.request(
        "POST",
        base + "missing",
        json=pkcs11_key(key_label="", key_id="0x0badbeef", allow_generate_key="false"),
    )
    assert status == 204, body
    status, body = await c.request("POST", base + "missing/test/sign")
    assert status == 400 and "0x0badbeef" in body["errors"][0], body

    await c.request("POST", base + "wrongpin", json=pkcs11_key(pin="0000", key_label="x"))
    status, body = await c.request("POST", base + "wrongpin/test/sign")
    assert status == 400 and "PIN" in body["errors"][0], body

    await c.request("POST", base + "notoken", json=pkcs11_key(token_label="", slot="999999"))
    status, body = await c.request("POST", base + "notoken/test/sign")
    assert status == 400 and "no token" in body["errors"][0], body

    for js, message in (
        (pkcs11_key(library="other"), "unknown kms_library"),
        (pkcs11_key(mechanism="4161"), "hex"),
        (pkcs11_key(pin=None), "'pin'"),
        (pkcs11_key(slot="x", token_label=""), "decimal"),
        (pkcs11_key(curve=""), "curve is required"),
    ):
        status, body = await c.request("POST", base + "bad", json=js)
        assert status == 400 and message in body["errors"][0], (js, body)
    status, _ = await c.request("GET", base + "bad")
    assert status == 404  # nothing stored
    status, body = await c.request("POST", "/v1/sys/managed-keys/hsm/x", json={})
    assert status == 400 and "unknown managed key type" in body["errors"][0]
    status, body = await c.request("GET", "/v1/sys/managed-keys/cloudakms/missing")
    assert status == 404, body


async def test_names_are_unique_and_delete_respects_mounts(hsm_cluster: Cluster) -> None:
    c = hsm_cluster
    status, body = await c.request("POST", "/v1/sys/managed-keys/pkcs11/Shared", json=pkcs11_key())
    assert status == 204, body
    status, body = await c.request(
        "POST",
        "/v1/sys/managed-keys/cloudakms/shared",
        json={
            "access_key": "a",
            "secret_key": "s",
            "key_type": "RSA",
            "key_bits": "2048",
            "kms_key": "alias/x",
        },
    )
    assert status == 400 and "already exists with type 'pkcs11'" in body["errors"][0], body

    status, body = await c.request("POST", "/v1/sys/mounts/keyed", json={"type": "dbcloud"})
    assert status == 204, body
    status, body = await c.request(
        "POST", "/v1/sys/mounts/keyed/tune", json={"allowed_managed_keys": ["shared"]}
    )
    assert status == 204, body
    status, body = await c.request("DELETE", "/v1/sys/managed-keys/pkcs11/shared")
    assert status == 400 and "keyed/" in body["errors"][0], body
    status, body = await c.request(
        "POST", "/v1/sys/mounts/keyed/tune", json={"allowed_managed_keys": []}
    )
    assert status == 204, body
    status, body = await c.request("DELETE", "/v1/sys/managed-keys/pkcs11/shared")
    assert status == 204, body
    status, body = await c.request("GET", "/v1/sys/managed-keys/pkcs11/shared")
    assert status == 404, body


@pytest.fixture
async def kms() -> AsyncIterator[Fake]:
    import boto3  # noqa: F401
    import moto  # noqa: F401

    fake = await start_fake("tests.fakes.kms")
    try:
        yield fake
    finally:
        await fake.stop()


async def test_cloudakms_key_on_kms_endpoint(nats_url: str, kms: Fake) -> None:
    import asyncio

    import boto3

    c = await start_cluster(nats_url)
    try:
        key = {
            "access_key": "test",
            "secret_key": "test-secret",
            "key_type": "ecdsa",
            "curve": "P256",
            "kms_key": "alias/trellis-ec",
            "allow_generate_key": "true",
            "endpoint": kms.url,
            "region": "us-east-1",
        }
        status, body = await c.request("POST", "/v1/sys/managed-keys/cloudakms/ec", json=key)
        assert status == 204, body
        status, body = await c.request("GET", "/v1/sys/managed-keys/cloudakms/ec")
        assert status == 200 and body["data"]["secret_key"] == "redacted", body
        assert body["data"]["key_type"] == "ECDSA" and body["data"]["endpoint"] == kms.url
        for _ in range(2):  # creates key and alias, then reuses them
            status, body = await c.request("POST", "/v1/sys/managed-keys/cloudakms/ec/test/sign")
            assert status == 204, body
        client = boto3.client(
            "kms",
            endpoint_url=kms.url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="x",
        )
        aliases = await asyncio.to_thread(client.list_aliases)
        assert [
            a["AliasName"] for a in aliases["Aliases"] if a["AliasName"].startswith("alias/trellis")
        ] == ["alias/trellis-ec"]
        assert len((await asyncio.to_thread(client.list_keys))["Keys"]) == 1

        rsa = {
            **key,
            "key_type": "RSA",
            "key_bits": "2048",
            "curve": "",
            "kms_key": "alias/trellis-rsa",
        }
        await c.request("POST", "/v1/sys/managed-keys/cloudakms/rsa", json=rsa)
        status, body = await c.request("POST", "/v1/sys/managed-keys/cloudakms/rsa/test/sign")
        assert status == 204, body

        status, body = await c.request(
            "POST",
            "/v1/sys/managed-keys/cloudakms/absent",
            json={**key, "kms_key": "alias/absent", "allow_generate_key": "false"},
        )
        assert status == 204, body
        status, body = await c.request("POST", "/v1/sys/managed-keys/cloudakms/absent/test/sign")
        assert status == 400 and "does not exist" in body["errors"][0], body

        status, body = await c.request(
            "POST", "/v1/sys/managed-keys/cloudakms/bad", json={**key, "kms_key": "not-an-alias"}
        )
        assert status == 400 and "alias" in body["errors"][0], body

        await kms.stop()  # the KMS goes down
        status, body = await c.request("POST", "/v1/sys/managed-keys/cloudakms/ec/test/sign")
        assert status == 502 and "KMS unreachable" in body["errors"][0], body
    finally:
        await c.close()


@pytest.fixture
async def keyvault() -> AsyncIterator[Fake]:
    fake = await start_fake(
        "tests.fakes.keyvault",
        "--tenant",
        "tenant1",
        "--client-id",
        "client1",
        "--client-secret",
        "sekrit",
    )
    try:
        yield fake
    finally:
        await fake.stop()


async def test_cloudbkeyvault_key_on_emulator(nats_url: str, keyvault: Fake) -> None:
    c = await start_cluster(nats_url)
    try:
        key = {
            "tenant_id": "tenant1",
            "client_id": "client1",
            "client_secret": "sekrit",
            "environment": keyvault.url,
            "resource": keyvault.url,
            "vault_name": "vault1",
            "key_name": "signing",
            "key_type": "RSA",
            "key_bits": "2048",
            "allow_generate_key": "true",
        }
        base = "/v1/sys/managed-keys/cloudbkeyvault/"
        status, body = await c.request("POST", base + "kv1", json=key)
        assert status == 204, body
        status, body = await c.request("GET", base + "kv1")
        assert status == 200 and body["data"]["client_secret"] == "redacted", body
        for _ in range(2):
            status, body = await c.request("POST", base + "kv1/test/sign")
            assert status == 204, body

        await c.request(
            "POST", base + "nogen", json={**key, "key_name": "other", "allow_generate_key": "false"}
        )
        status, body = await c.request("POST", base + "nogen/test/sign")
        assert status == 400 and "does not exist" in body["errors"][0], body

        await c.request("POST", base + "kv1", json={"client_secret": "wrong"})
        status, body = await c.request("POST", base + "kv1/test/sign")
        assert status == 502 and "bad client credentials" in body["errors"][0], body

        await c.request("POST", base + "kv1", json={"client_secret": "sekrit"})
        await keyvault.stop()
        status, body = await c.request("POST", base + "kv1/test/sign")
        assert status == 502 and "unreachable" in body["errors"][0], body
    finally:
        await c.close()
