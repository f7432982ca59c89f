"""Issue 16 (1): nothing secret crosses NATS in the clear. A NATS user allowed `>` (the NATS
operator: here an open nats-server of our own, with `trellis dev --nats-url ... --insecure-bus`)
records every message through init, unseal, seal, unseal, KV writes and reads, PKI issue,
token create, a sensitive workspace variable, two Terraform state uploads, a scheduler
request with a token, and DR replication to a second cluster (its own `trellis dev` on the
same NATS) with its promotion (the primary's unseal key handed to its secrets replicas), and
finds no unseal key, token, secret value, state or private key in any of them, raw, hex or
base64-encoded at any offset."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urljoin

import nats
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.replication import otp
from services.scheduler.client.identity import SECRET_ID
from tests.conftest import free_port, start_nats
from tests.nats_sync import subscribed
from tests.procs import DevProcess, start_dev

pytestmark = pytest.mark.e2e


def _forms(secret: bytes) -> list[bytes]:
    """The secret as it might appear: raw, hex, and base64 (both alphabets) at each of the three
    byte offsets it could start at inside a larger base64 text (a state file, a PEM body)."""
    forms = [secret, secret.hex().encode()]
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + secret)
        # Only the characters made of the secret's bits alone: not the zero prefix's, not the
        # padding's.
        core = encoded[-(-shift * 8 // 6) : (shift + len(secret)) * 8 // 6]
        forms += [core, core.replace(b"+", b"-").replace(b"/", b"_")]
    return forms


def test_a_sniffer_on_every_subject_learns_no_secret(tmp_path: Path) -> None:
    proc, url, _ = start_nats(str(tmp_path))
    seen: list[bytes] = []

    async def run() -> None:
        sniffer = await nats.connect(url)

        async def record(msg: nats.aio.msg.Msg) -> None:
            seen.append(msg.subject.encode() + b" " + repr(msg.headers).encode() + b" " + msg.data)

        await sniffer.subscribe(">", cb=record)
        await subscribed(sniffer)
        secrets = await asyncio.to_thread(drive, url, tmp_path)
        await sniffer.flush()  # every message published before now has reached us
        await sniffer.close()
        check(secrets)

    def check(secrets: dict[str, bytes]) -> None:
        # Alone or micro-batched (shared/bus_batch.py).
        api = [
            m
            for m in seen
            if m.startswith((b"trellis.api.secrets ", b"trellis.api.secrets.batch "))
        ]
        assert len(api) >= 12, "the sniffer saw no secrets API traffic: the test proves nothing"
        assert any(m.startswith(b"trellis.crypto.cmd ") for m in seen)
        assert any(m.startswith(b"trellis.secrets.seal.share ") for m in seen)
        for subject in (b"trellis.api.workspace", b"trellis.api.scheduler"):
            sent = sum(m.startswith((subject + b" ", subject + b".batch ")) for m in seen)
            assert sent >= 2, subject
        assert any(m.startswith(b"trellis.sched.node.") for m in seen)
        assert any(m.startswith(b"trellis.secrets.datakey ") for m in seen)
        # The secondary cluster's storage took the replicated entries (its KV bucket).
        assert sum(m.startswith(b"$KV.drsniff-secrets.") for m in seen) >= 5
        # Its operation-token ceremony and promotion went through its replication service.
        assert sum(m.startswith(b"drsniff.replication.dr ") for m in seen) >= 3
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
    d = start_dev_on(
        url, tmp_path / "dev", "--services", "crypto,workspace,scheduler,replication,client"
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
        # Exported: the test knows the CA key the crypto workers are handed to sign with.
        ca_key = call(
            "POST", "/v1/pki/root/generate/exported", {"common_name": "Sniff CA", "key_type": "ec"}
        )["data"]["private_key"]
        call("POST", "/v1/pki/roles/web", {"allow_any_name": True, "key_type": "ec"})
        issued = call("POST", "/v1/pki/issue/web", {"common_name": "a.example.com", "ttl": "1h"})[
            "data"
        ]
        token = call("POST", "/v1/auth/token/create", {"policies": ["default"]})["auth"]
        assert call("GET", "/v1/auth/token/lookup-self", token=token["client_token"])
        workspace = drive_workspace(d.workspace, root)
        sched_token = drive_scheduler(d.scheduler, root)
        node_secret = wait_for_node(d.scheduler, root, tmp_path / "dev" / "client")
        dr = drive_replication(call, d, url, tmp_path)
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
            "CA private key": scalar(ca_key),
            **workspace,
            "scheduler token": sched_token.encode(),
            "node secret": node_secret.encode(),
            **dr,
        }
    finally:
        d.stop()


def wait_serving(url: str) -> None:
    """`trellis dev` does not wait for the workspace and scheduler services; with the sniffer
    subscribed to `>` a request before they listen times out instead of finding no responder."""
    deadline = time.monotonic() + 90
    while requests.get(url, timeout=30).status_code >= 500:
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)


def drive_workspace(base: str, root: str) -> dict[str, bytes]:
    """A sensitive variable and two state uploads (inline, and through the one-time upload URL
    with the read back); returns what must stay secret."""
    wait_serving(base + "/api/v2/ping")
    hdr = {"Authorization": f"Bearer {root}", "Content-Type": "application/vnd.api+json"}

    def call(method: str, path: str, body: object, status: int) -> dict:
        r = requests.request(method, base + path, json=body, headers=hdr, timeout=60)
        assert r.status_code == status, (path, r.status_code, r.text)
        return r.json() if r.content else {}

    org = "sniff" + uuid.uuid4().hex[:6]
    org_doc = {"data": {"type": "organizations", "attributes": {"name": org, "email": "o@x.io"}}}
    call("POST", "/api/v2/organizations", org_doc, 201)
    ws_attrs = {"name": "app", "execution-mode": "local"}
    ws = call(
        "POST",
        f"/api/v2/organizations/{org}/workspaces",
        {"data": {"type": "workspaces", "attributes": ws_attrs}},
        201,
    )["data"]["id"]
    variable = "wsvar-" + uuid.uuid4().hex
    attrs = {"key": "db_password", "value": variable, "category": "terraform", "sensitive": True}
    call(
        "POST",
        f"/api/v2/workspaces/{ws}/vars",
        {"data": {"type": "vars", "attributes": attrs}},
        201,
    )
    call("POST", f"/api/v2/workspaces/{ws}/actions/lock", {}, 200)
    lineage = str(uuid.uuid4())
    output = "state-" + uuid.uuid4().hex
    raw = state_file(1, lineage, output)
    sv = {
        "serial": 1,
        "lineage": lineage,
        "md5": hashlib.md5(raw).hexdigest(),
        "state": base64.b64encode(raw).decode(),
    }
    versions = f"/api/v2/workspaces/{ws}/state-versions"
    call("POST", versions, {"data": {"type": "state-versions", "attributes": sv}}, 201)
    # As terraform does it: the state PUT to the version's one-time upload URL, then read back.
    uploaded = "state-" + uuid.uuid4().hex
    raw = state_file(2, lineage, uploaded)
    sv = {"serial": 2, "lineage": lineage, "md5": hashlib.md5(raw).hexdigest()}
    created = call("POST", versions, {"data": {"type": "state-versions", "attributes": sv}}, 201)
    put = {"Content-Type": "application/octet-stream"}
    url = urljoin(base, created["data"]["attributes"]["hosted-state-upload-url"])
    r = requests.put(url, data=raw, headers=put, timeout=60)
    assert r.status_code == 200, r.text
    current = call("GET", f"/api/v2/workspaces/{ws}/current-state-version", None, 200)
    url = urljoin(base, current["data"]["attributes"]["hosted-state-download-url"])
    r = requests.get(url, headers={"Authorization": hdr["Authorization"]}, timeout=60)
    assert r.status_code == 200 and r.content == raw, r.text
    return {
        "workspace variable": variable.encode(),
        "state output": output.encode(),
        "uploaded state output": uploaded.encode(),
    }


def state_file(serial: int, lineage: str, output: str) -> bytes:
    """A Terraform state with one sensitive output."""
    state = {
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": serial,
        "lineage": lineage,
        "outputs": {"token": {"value": output, "type": "string", "sensitive": True}},
        "resources": [],
    }
    return json.dumps(state).encode()


def drive_scheduler(base: str, root: str) -> str:
    """Scheduler requests carrying a token (the management token: the root token in dev, and
    one it creates); returns the created token's secret."""
    hdr = {"X-Nomad-Token": root}
    wait_serving(base + "/v1/status/leader")
    r = requests.get(base + "/v1/jobs", headers=hdr, timeout=30)
    assert r.status_code == 200, r.text
    body = {"Name": "sniff", "Type": "client", "Policies": [], "Global": False}
    r = requests.post(base + "/v1/acl/token", json=body, headers=hdr, timeout=30)
    if r.status_code != 200:  # ACLs off in dev: the root token still crossed in the request
        return root
    secret = r.json()["SecretID"]
    assert requests.get(base + "/v1/jobs", headers={"X-Nomad-Token": secret}, timeout=30)
    return secret


def start_dev_on(url: str, data_dir: Path, *args: str) -> DevProcess:
    """`trellis dev` on the sniffed NATS, its DR listener on a free port."""
    os.environ["TRELLIS_CLUSTER_ADDR"] = f"127.0.0.1:{free_port()}"
    try:
        return start_dev("--nats-url", url, "--insecure-bus", "--data-dir", str(data_dir), *args)
    finally:
        del os.environ["TRELLIS_CLUSTER_ADDR"]


def wait_for_node(base: str, root: str, client_dir: Path) -> str:
    """The dev client node registered (its RPCs, with its node secret, crossed the bus);
    returns that secret."""
    deadline = time.monotonic() + 60
    while True:
        r = requests.get(base + "/v1/nodes", headers={"X-Nomad-Token": root}, timeout=30)
        if r.status_code == 200 and any(n["Status"] == "ready" for n in r.json()):
            break
        assert time.monotonic() < deadline, f"no client node became ready: {r.text}"
        time.sleep(0.2)
    return (client_dir / SECRET_ID).read_text().strip()


def drive_replication(call, d: DevProcess, url: str, tmp_path: Path) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """A second cluster on the same NATS becomes this one's DR secondary, catches up with a
    fresh secret, and is promoted with an operation token made from the primary's unseal key
    (the replication service hands the secrets replica the primary's unseal key to unseal
    with); it then serves the secret to the primary's root token. Returns what must stay
    secret (the value, the activation and operation tokens, the second cluster's own unseal
    key and root token)."""
    primary = d.secrets
    value = "dr-" + uuid.uuid4().hex
    call("POST", "/v1/secret/data/replicated", {"data": {"password": value}})
    call("POST", "/v1/sys/replication/dr/primary/enable", {})
    wrapped = call("POST", "/v1/sys/replication/dr/primary/secondary-token", {"id": "sniff"})[
        "wrap_info"
    ]["token"]
    # Two secrets replicas: on promotion the one that unseals hands the key to the other.
    second = start_dev_on(
        url,
        tmp_path / "dev2",
        "--cluster-name",
        "drsniff",
        "--services",
        "replication",
        "--secrets-replicas",
        "2",
    )
    try:
        r = requests.post(
            second.secrets + "/v1/sys/replication/dr/secondary/enable",
            json={"token": wrapped, "primary_api_addr": primary},
            headers={"X-Vault-Token": second.root_token},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        status = "/v1/sys/replication/dr/status"
        want = call("GET", status)["data"]["last_wal"]
        deadline = time.monotonic() + 60
        while True:
            got = requests.get(second.secrets + status, timeout=10).json()["data"]
            if got.get("last_remote_wal", 0) >= want:
                break
            assert time.monotonic() < deadline, f"the secondary did not catch up: {got}"
            time.sleep(0.1)
        op_token, otp_value = promote(second.secrets, d.unseal_key)
        read = "/v1/secret/data/replicated"
        deadline = time.monotonic() + 60
        while True:  # the first read the promoted cluster serves
            r = requests.get(
                second.secrets + read, headers={"X-Vault-Token": d.root_token}, timeout=30
            )
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.status_code == 200 and r.json()["data"]["data"]["password"] == value, r.text
        deadline = time.monotonic() + 60
        while True:  # both replicas serve (the queue group spreads the reads over them)
            codes = [
                requests.get(
                    second.secrets + read, headers={"X-Vault-Token": d.root_token}, timeout=30
                ).status_code
                for _ in range(10)
            ]
            if codes == [200] * 10:
                break
            assert time.monotonic() < deadline, f"a promoted replica does not serve: {codes}"
            time.sleep(0.2)
    finally:
        second.stop()
    return {
        "replicated secret value": value.encode(),
        "DR activation token": wrapped.encode(),
        "DR operation token": op_token.encode(),
        "OTP": otp_value.encode(),
        "secondary's unseal key": bytes.fromhex(second.unseal_key),
        "secondary's root token": second.root_token.encode(),
    }


def promote(base: str, unseal_key: str) -> tuple[str, str]:
    """Generate a DR operation token on the secondary from the primary's unseal key and promote
    with it (no unseal call); returns the token and the OTP it was encoded with."""
    gen = base + "/v1/sys/replication/dr/secondary/generate-operation-token/"
    att = requests.post(gen + "attempt", json={}, timeout=60).json()
    body = {"key": unseal_key, "nonce": att["nonce"]}
    done = requests.post(gen + "update", json=body, timeout=60).json()
    assert done["complete"] is True, done
    token = otp.decode(done["encoded_token"], att["otp"])
    r = requests.post(
        base + "/v1/sys/replication/dr/secondary/promote",
        # The primary is still up (a drill, not an outage): promoting over it takes `force`.
        json={"dr_operation_token": token, "force": True},
        timeout=120,
    )
    assert r.status_code == 200 and r.json()["complete"] is True, r.text
    return token, att["otp"]


def scalar(pem: str) -> bytes:
    """The EC private key itself, as 32 raw bytes."""
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_numbers().private_value.to_bytes(32, "big")
