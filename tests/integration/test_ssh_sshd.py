"""The SSH engine against a real OpenSSH server on a loopback port: sshd trusts the mount's CA and
accepts a signed certificate for a signed principal but not for another; dynamic keys appear in
the target user's authorized_keys, log in, and are gone after the lease is revoked.

Needs OpenSSH (`apt-get install openssh-server openssh-client`); the dynamic-key test also needs
root, to create a throwaway user whose home is in a temp dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import hvac
import pytest

from services.crypto.ops import run_local
from services.crypto.service import CryptoService
from shared.bus import Bus
from tests.conftest import free_port
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")
assert SSHD and SSH and SSH_KEYGEN, (
    "OpenSSH sshd, ssh and ssh-keygen are needed (apt-get install openssh-server "
    "openssh-client; ./test.sh installs them)"
)


class Sshd:
    """A private sshd on 127.0.0.1: its own host key, config, pid file and trust anchors, all in
    one temp dir. Users' keys come from `<dir>/authorized/<user>` and ~/.ssh/authorized_keys."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.ca_file = root / "trusted_user_ca.pub"
        self.authorized = root / "authorized"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert SSHD is not None and SSH_KEYGEN is not None
        self.authorized.mkdir()
        self.ca_file.write_text("")
        host_key = self.root / "host_ed25519"
        subprocess.run(
            [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True
        )
        config = self.root / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
            f"PidFile {self.root / 'sshd.pid'}\nUsePAM no\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
            f"TrustedUserCAKeys {self.ca_file}\n"
            f"AuthorizedKeysFile {self.authorized}/%u .ssh/authorized_keys\n"
            "LogLevel VERBOSE\n"
        )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        self.log = open(self.root / "sshd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "sshd.log").read_text())
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening in 10 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()

    def login(
        self, user: str, key: Path, cert: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`ssh ... true` with only this key (and certificate): exit 0 when sshd let us in."""
        assert SSH is not None
        args = [
            SSH,
            "-F",
            "/dev/null",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(self.port),
        ]
        if cert is not None:
            args += ["-o", f"CertificateFile={cert}"]
        return subprocess.run(
            [*args, f"{user}@127.0.0.1", "true"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture
def sshd() -> Iterator[Sshd]:
    root = Path(tempfile.mkdtemp(prefix="trellis-sshd-"))
    root.chmod(0o755)  # a throwaway user must reach its home below this dir
    server = Sshd(root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def cluster(nats_url: str) -> AsyncIterator[Cluster]:
    c = await start_cluster(nats_url)
    bus = await Bus.connect(nats_url, "crypto")
    try:
        worker = CryptoService(bus, c.settings)
        await worker.start()
        c.extra.append(worker)
        status, body = await c.request("POST", "/v1/sys/mounts/ssh", json={"type": "ssh"})
        assert status == 204, body
        yield c
    finally:
        await c.close()
        await bus.close()


def _keygen(*args: str) -> str:
    assert SSH_KEYGEN is not None
    return subprocess.run([SSH_KEYGEN, *args], check=True, capture_output=True, text=True).stdout


def _write_key(path: Path, private_key: str) -> Path:
    path.write_text(private_key)
    path.chmod(0o600)
    return path


async def test_signed_certificate_logs_in_to_sshd(
    cluster: Cluster, sshd: Sshd, tmp_path: Path
) -> None:
    c = cluster
    me = getpass.getuser()
    client = hvac.Client(url=c.secrets_url, token=c.root_token)
    await asyncio.to_thread(client.secrets.ssh.submit_ca_information, key_type="rsa", key_bits=2048)
    # sshd trusts exactly what the unauthenticated public_key endpoint serves.
    status, ca_text = await c.request("GET", "/v1/ssh/public_key", token="")
    assert status == 200
    sshd.ca_file.write_text(ca_text)
    await asyncio.to_thread(
        client.secrets.ssh.create_role,
        name="login",
        key_type="ca",
        allow_user_certificates=True,
        allowed_users=f"{me},nobody-else",
        default_user=me,
        default_extensions={"permit-pty": ""},
        max_ttl="10m",
    )
    await asyncio.to_thread(_keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id"))
    public = (tmp_path / "id.pub").read_text()

    # Signed for this user (the role's default_user): sshd lets us in.
    signed = await asyncio.to_thread(
        client.secrets.ssh.sign_ssh_key, name="login", public_key=public
    )
    # Not id-cert.pub: ssh would pick that up by itself and spoil the key-only attempt.
    cert = tmp_path / "signed-cert"
    cert.write_text(signed["data"]["signed_key"])
    ok = await asyncio.to_thread(sshd.login, me, tmp_path / "id", cert)
    assert ok.returncode == 0, (ok.stderr, (sshd.root / "sshd.log").read_text()[-2000:])
    # The key alone is not enough: it is not in any authorized_keys.
    bare = await asyncio.to_thread(sshd.login, me, tmp_path / "id")
    assert bare.returncode == 255

    # Signed only for another principal: refused.
    other = await asyncio.to_thread(
        client.secrets.ssh.sign_ssh_key,
        name="login",
        public_key=public,
        valid_principals="nobody-else",
    )
    cert.write_text(other["data"]["signed_key"])
    refused = await asyncio.to_thread(sshd.login, me, tmp_path / "id", cert)
    assert refused.returncode == 255
    assert "not a listed principal" in (sshd.root / "sshd.log").read_text()

    # issue/: a new key pair and its certificate log in too (under an Ed25519 CA now).
    gen = await c.request("POST", "/v1/ssh/config/ca", json={"key_type": "ed25519"})
    sshd.ca_file.write_text(gen[1]["data"]["public_key"])
    status, issued = await c.request(
        "POST", "/v1/ssh/issue/login", json={"key_type": "ec", "ttl": "5m"}
    )
    assert status == 200, issued
    key = _write_key(tmp_path / "issued", issued["data"]["private_key"])
    (tmp_path / "issued-cert.pub").write_text(issued["data"]["signed_key"])
    ok = await asyncio.to_thread(sshd.login, me, key, tmp_path / "issued-cert.pub")
    assert ok.returncode == 0, ok.stderr


@contextlib.contextmanager
def throwaway_user(home_parent: Path) -> Iterator[str]:
    """A local user whose home is in the test's temp dir (deleted afterwards)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.fail("creating a target user for dynamic keys needs root and useradd")
    name = "trl" + uuid.uuid4().hex[:8]
    home = home_parent / name
    subprocess.run(
        ["useradd", "-M", "-d", str(home), "-s", "/bin/sh", name], check=True, capture_output=True
    )
    try:
        home.mkdir()
        shutil.chown(home, name, name)
        # '*' rather than useradd's '!': sshd without PAM refuses locked accounts.
        subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


async def test_dynamic_key_installed_and_removed(
    cluster: Cluster, sshd: Sshd, tmp_path: Path
) -> None:
    c = cluster
    with throwaway_user(sshd.root) as user:
        home = sshd.root / user
        # The role's admin key: here the target user administers its own authorized_keys.
        admin = run_local("ssh_generate_key", {"key_type": "ed25519"})
        (sshd.authorized / user).write_text(admin["public_key"])
        client = hvac.Client(url=c.secrets_url, token=c.root_token)
        await asyncio.to_thread(
            client.secrets.ssh.create_or_update_key, name="admin", key=admin["private_key"]
        )
        await asyncio.to_thread(
            client.secrets.ssh.create_role,
            name="dyn",
            key="admin",
            admin_user=user,
            default_user=user,
            cidr_list="127.0.0.0/8",
            port=sshd.port,
            key_type="dynamic",
            key_bits=2048,
            key_option_specs="no-agent-forwarding",
        )

        creds = await asyncio.to_thread(
            client.secrets.ssh.generate_ssh_credentials, name="dyn", ip="127.0.0.1"
        )
        assert creds["lease_id"].startswith("ssh/creds/dyn/"), creds
        data = creds["data"]
        assert data["key_type"] == "dynamic" and data["username"] == user
        assert data["port"] == sshd.port and data["key_bits"] == 2048
        key = _write_key(tmp_path / "dyn", data["key"])
        public = (await asyncio.to_thread(_keygen, "-y", "-f", str(key))).split()[1]
        lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
        assert [ln for ln in lines if public in ln] == [f"no-agent-forwarding ssh-rsa {public}"]

        ok = await asyncio.to_thread(sshd.login, user, key)
        assert ok.returncode == 0, (ok.stderr, (sshd.root / "sshd.log").read_text()[-2000:])

        status, body = await c.request(
            "PUT", "/v1/sys/leases/revoke", json={"lease_id": creds["lease_id"]}
        )
        assert status == 204, body
        assert public not in (home / ".ssh" / "authorized_keys").read_text()
        refused = await asyncio.to_thread(sshd.login, user, key)
        assert refused.returncode == 255
        # Leftovers of the install runs are cleaned up in the admin's home.
        assert not [p for p in home.iterdir() if p.name.startswith(".trellis-ssh.") and p.is_dir()]
