"""Transit with unmodified hvac through `trellis dev`: every key type, rotation and minimum
versions, derived and convergent keys, batches, export, backup and restore, data keys, random,
hash, HMAC, and signatures checked by openssl (RSA, ECDSA) and `cryptography` (Ed25519). The
cluster runs with the benchmark's layout (`--cpu-affinity`: gateways apart from the secrets
replica and nats-server), and the processes are checked to run where it says."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.procs import DevProcess, dev

pytestmark = pytest.mark.e2e

MSG = b"hvac says hello"
P = base64.b64encode(MSG).decode()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transit-dev")


USABLE = sorted(os.sched_getaffinity(0))
# The auto layout's shape on any host: the gateways on the first usable CPU, the secrets
# replica and nats-server on the last (the same CPU on a 1-CPU host).
GATEWAY_CPU, SECRETS_CPU = USABLE[0], USABLE[-1]
LAYOUT = f"gateway={GATEWAY_CPU};secrets={SECRETS_CPU};nats={SECRETS_CPU}"


@pytest.fixture(scope="module")
def dev_process(data_dir: Path) -> Iterator[DevProcess]:
    with dev(
        "--services",
        "crypto",
        "--data-dir",
        str(data_dir),
        "--cpu-affinity",
        LAYOUT,
        default_replicas=True,
    ) as d:
        yield d


@pytest.fixture(scope="module")
def client(dev_process: DevProcess) -> hvac.Client:
    c = hvac.Client(url=dev_process.secrets, token=dev_process.root_token)
    c.sys.enable_secrets_engine("transit", path="transit")
    return c


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [d for c in map(int, children) for d in (c, *_descendants(c))]


def _kind(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if argv[0].endswith(b"nats-server"):
        return "nats"
    return argv[argv.index(b"run") + 1].decode() if b"run" in argv else ""


def test_each_kind_runs_on_the_cpus_its_layout_names(dev_process: DevProcess) -> None:
    assert f"CPU affinity:   gateway={GATEWAY_CPU}; secrets={SECRETS_CPU}" in "".join(
        dev_process.output
    )
    seen: dict[str, set[int]] = {}
    for pid in _descendants(dev_process.proc.pid):
        kind = _kind(pid)
        for task in Path(f"/proc/{pid}/task").iterdir():
            seen.setdefault(kind, set()).update(os.sched_getaffinity(int(task.name)))
    assert seen["gateway"] == {GATEWAY_CPU}
    assert seen["secrets"] == {SECRETS_CPU}
    assert seen["nats"] == {SECRETS_CPU}
    assert seen["crypto"] == set(USABLE)  # not named: anywhere


def raw_sig(signature: str) -> bytes:
    return base64.b64decode(signature.split(":", 2)[2])


def openssl_verify(tmp: Path, pub_pem: str, sig: bytes, digest: str, *opts: str) -> None:
    (tmp / "pub.pem").write_text(pub_pem)
    (tmp / "sig.bin").write_bytes(sig)
    (tmp / "msg.bin").write_bytes(MSG)
    proc = subprocess.run(
        [
            "openssl",
            "dgst",
            f"-{digest}",
            "-verify",
            str(tmp / "pub.pem"),
            *opts,
            "-signature",
            str(tmp / "sig.bin"),
            str(tmp / "msg.bin"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "Verified OK" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "key_type", ["aes128-gcm96", "aes256-gcm96", "chacha20-poly1305", "rsa-2048", "rsa-4096"]
)
def test_encrypt_decrypt_every_encryption_type(client: hvac.Client, key_type: str) -> None:
    t = client.secrets.transit
    if key_type == "aes128-gcm96":  # hvac's own list of types lacks it: its raw adapter
        client.adapter.post(f"/v1/transit/keys/enc-{key_type}", json={"type": key_type})
    else:
        t.create_key(f"enc-{key_type}", key_type=key_type)
    assert t.read_key(f"enc-{key_type}")["data"]["type"] == key_type
    ct = t.encrypt_data(f"enc-{key_type}", plaintext=P)["data"]["ciphertext"]
    assert ct.startswith("vault:v1:")
    assert t.decrypt_data(f"enc-{key_type}", ciphertext=ct)["data"]["plaintext"] == P
    batch = t.encrypt_data(
        f"enc-{key_type}", batch_input=[{"plaintext": P, "reference": str(i)} for i in range(3)]
    )["data"]["batch_results"]
    dec = t.decrypt_data(
        f"enc-{key_type}", batch_input=[{"ciphertext": r["ciphertext"]} for r in batch]
    )
    assert [r["plaintext"] for r in dec["data"]["batch_results"]] == [P, P, P]


@pytest.mark.parametrize(
    "key_type", ["ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "rsa-2048", "rsa-3072"]
)
def test_sign_verify_checked_by_independent_tools(
    client: hvac.Client, key_type: str, tmp_path: Path
) -> None:
    t = client.secrets.transit
    name = f"sig-{key_type}"
    t.create_key(name, key_type=key_type)
    t.rotate_key(name)
    # hvac's export_key knows no public-key type: the same call through its adapter.
    pub = client.adapter.get(f"/v1/transit/export/public-key/{name}/2")["data"]["keys"]["2"]
    signed = t.sign_data(name, hash_input=P, hash_algorithm="sha2-512")["data"]
    assert signed["key_version"] == 2
    sig = signed["signature"]
    assert t.verify_signed_data(name, hash_input=P, signature=sig, hash_algorithm="sha2-512")[
        "data"
    ]["valid"]
    other = base64.b64encode(b"other").decode()
    assert not t.verify_signed_data(
        name, hash_input=other, signature=sig, hash_algorithm="sha2-512"
    )["data"]["valid"]
    if key_type == "ed25519":
        ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(pub)).verify(raw_sig(sig), MSG)
        return
    pss = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:-2"]
    openssl_verify(tmp_path, pub, raw_sig(sig), "sha512", *(pss if "rsa" in key_type else []))
    if key_type.startswith("rsa"):
        sig = t.sign_data(name, hash_input=P, signature_algorithm="pkcs1v15")["data"]["signature"]
        openssl_verify(tmp_path, pub, raw_sig(sig), "sha256")
        assert t.verify_signed_data(
            name, hash_input=P, signature=sig, signature_algorithm="pkcs1v15"
        )["data"]["valid"]
    else:
        jws = t.sign_data(name, hash_input=P, marshaling_algorithm="jws")["data"]["signature"]
        assert t.verify_signed_data(name, hash_input=P, signature=jws, marshaling_algorithm="jws")[
            "data"
        ]["valid"]


def test_rotation_min_versions_trim_and_rewrap(client: hvac.Client) -> None:
    t = client.secrets.transit
    t.create_key("rot")
    v1 = t.encrypt_data("rot", plaintext=P)["data"]["ciphertext"]
    t.rotate_key("rot")
    t.rotate_key("rot")
    assert t.read_key("rot")["data"]["latest_version"] == 3
    v3 = t.rewrap_data("rot", ciphertext=v1)["data"]["ciphertext"]
    assert v3.startswith("vault:v3:")
    t.update_key_configuration("rot", min_decryption_version=2, min_encryption_version=3)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="too old"):
        t.decrypt_data("rot", ciphertext=v1)
    assert t.decrypt_data("rot", ciphertext=v3)["data"]["plaintext"] == P
    t.trim_key("rot", min_version=2)
    key = t.read_key("rot")["data"]
    assert key["min_available_version"] == 2 and sorted(key["keys"]) == ["2", "3"]
    with pytest.raises(hvac.exceptions.InvalidRequest):
        t.delete_key("rot")
    t.update_key_configuration("rot", deletion_allowed=True)
    t.delete_key("rot")
    assert "rot" not in t.list_keys()["data"]["keys"]


def test_derived_convergent_datakey_and_hmac(client: hvac.Client) -> None:
    t = client.secrets.transit
    t.create_key("conv", derived=True, convergent_encryption=True)
    ctx = base64.b64encode(b"user-42").decode()
    a = t.encrypt_data("conv", plaintext=P, context=ctx)["data"]["ciphertext"]
    assert a == t.encrypt_data("conv", plaintext=P, context=ctx)["data"]["ciphertext"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match="context"):
        t.encrypt_data("conv", plaintext=P)
    assert t.decrypt_data("conv", ciphertext=a, context=ctx)["data"]["plaintext"] == P
    t.create_key("dk")
    dk = t.generate_data_key("dk", key_type="plaintext", bits=128)["data"]
    assert len(base64.b64decode(dk["plaintext"])) == 16
    assert t.decrypt_data("dk", ciphertext=dk["ciphertext"])["data"]["plaintext"] == dk["plaintext"]
    assert "plaintext" not in t.generate_data_key("dk", key_type="wrapped")["data"]
    client.adapter.post(
        "/v1/transit/keys/mac", json={"type": "hmac", "key_size": 64, "exportable": True}
    )
    mac = t.generate_hmac("mac", hash_input=P, algorithm="sha2-256")["data"]["hmac"]
    key = base64.b64decode(t.export_key("mac", "hmac-key")["data"]["keys"]["1"])
    assert (
        mac == "vault:v1:" + base64.b64encode(hmac.new(key, MSG, hashlib.sha256).digest()).decode()
    )
    assert t.verify_signed_data("mac", hash_input=P, hmac=mac)["data"]["valid"]
    rnd = t.generate_random_bytes(n_bytes=24, output_format="hex")["data"]["random_bytes"]
    assert len(bytes.fromhex(rnd)) == 24
    digest = t.hash_data(P, algorithm="sha2-512")["data"]["sum"]
    assert digest == hashlib.sha512(MSG).hexdigest()


def test_export_backup_restore(client: hvac.Client) -> None:
    t = client.secrets.transit
    t.create_key("bk", exportable=True, allow_plaintext_backup=True)
    ct = t.encrypt_data("bk", plaintext=P)["data"]["ciphertext"]
    keys = t.export_key("bk", "encryption-key", version="latest")["data"]["keys"]
    assert len(base64.b64decode(keys["1"])) == 32
    backup = t.backup_key("bk")["data"]["backup"]
    t.restore_key(backup, name="bk-copy")
    assert t.decrypt_data("bk-copy", ciphertext=ct)["data"]["plaintext"] == P
    t.create_key("secret-key")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not exportable"):
        t.export_key("secret-key", "encryption-key")
    cache = client.adapter.get("/v1/transit/cache-config")["data"]
    assert cache == {"size": 0}


def test_key_material_stays_under_the_barrier(client: hvac.Client, data_dir: Path) -> None:
    """An exported key's bytes appear nowhere in the data dir (JetStream's files included)."""
    t = client.secrets.transit
    t.create_key("sealed-key", exportable=True)
    key = base64.b64decode(t.export_key("sealed-key", "encryption-key")["data"]["keys"]["1"])
    hkey = base64.b64decode(t.export_key("sealed-key", "hmac-key")["data"]["keys"]["1"])
    assert len(key) == 32
    needles = [key, hkey, base64.b64encode(key), base64.b64encode(hkey)]
    scanned = 0
    for f in data_dir.rglob("*"):
        if f.is_file():
            blob = f.read_bytes()
            scanned += 1
            assert not any(n in blob for n in needles), f
    assert scanned > 0
