"""The everyday `bao` CLI session, unmodified, against `trellis dev` and against the real
`bao server -dev`: the same script must pass against both, so the test cannot be one that only
Trellis's own reading of the protocol passes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.localnet import free_port
from tests.openbao import bao_binary
from tests.procs import DevProcess, server_config, start_server, wait_http

pytestmark = pytest.mark.e2e


@dataclass
class Bao:
    """The `bao` binary with BAO_ADDR/BAO_TOKEN set and a private HOME (no token helper file
    leaks between runs or into the user's home)."""

    addr: str
    token: str
    home: Path

    def run(
        self, *args: str, token: str | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "BAO_ADDR": self.addr,
            "BAO_TOKEN": self.token if token is None else token,
        }
        if not env["BAO_TOKEN"]:
            del env["BAO_TOKEN"]
        return subprocess.run(
            [bao_binary(), *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str, **kw: Any) -> str:
        cp = self.run(*args, **kw)
        assert cp.returncode == 0, (
            f"bao {' '.join(args)} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
        )
        return cp.stdout

    def json(self, *args: str, **kw: Any) -> Any:
        """Run with -format=json placed after the command words (flags precede arguments)."""
        return json.loads(self.flagged("-format=json", *args, **kw))

    def flagged(self, flag: str, *args: str, **kw: Any) -> str:
        """Run with `flag` placed after the command words."""
        n = 1 + (args[0] in _TWO_WORD) + (args[:2] == ("kv", "metadata"))
        return self.ok(*args[:n], flag, *args[n:], **kw)

    def fails(self, *args: str, code: int = 2, **kw: Any) -> str:
        cp = self.run(*args, **kw)
        assert cp.returncode == code, (
            f"bao {' '.join(args)} -> {cp.returncode}, wanted {code}\n{cp.stdout}\n{cp.stderr}"
        )
        return cp.stdout + cp.stderr


# Commands whose subcommand comes before the flags (`bao kv get -format=json ...`).
_TWO_WORD = {
    "kv",
    "secrets",
    "auth",
    "policy",
    "token",
    "lease",
    "namespace",
    "operator",
}


def _kv_get(bao: Bao, *args: str) -> Any:
    return bao.json("kv", "get", *args)


def _printed(value: Any) -> str:
    """A scalar as the CLI's table and -field print it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def every_format(
    bao: Bao, *args: str, field: str, at: tuple[str, ...] = ("data",), field_flag: bool = True
) -> Any:
    """One read in each output format: -format=json, -format=yaml and -format=table tell the
    same value of `field` (found under `at` in the JSON), and so does -field where the command
    has it. Returns the value."""
    as_json, as_yaml = bao.json(*args), yaml.safe_load(bao.flagged("-format=yaml", *args))
    for part in at:
        as_json, as_yaml = as_json[part], as_yaml[part]
    value = as_json[field]
    assert as_yaml[field] == value, (as_yaml, value)
    table = bao.flagged("-format=table", *args)
    row = rf"^{re.escape(field)}\s+{re.escape(_printed(value))}\s*$"
    assert re.search(row, table, re.M), f"no row {field} {value!r} in:\n{table}"
    if field_flag:
        assert bao.flagged(f"-field={field}", *args).strip() == _printed(value)
    return value


def cli_session(bao: Bao, u: str) -> None:
    """The session a new user types, step by step. `u` makes every name unique."""
    # status, in each output format
    st = bao.json("status")
    assert st["sealed"] is False and st["initialized"] is True
    assert "Sealed" in bao.ok("status")
    assert "sealed: false" in bao.ok("status", "-format=yaml")
    assert "is initialized" in bao.ok("operator", "init", "-status")
    assert "already initialized" in bao.fails(
        "operator", "init", "-key-shares=1", "-key-threshold=1"
    )

    # what an operator reads of the server: its versions, its host; and a step-down
    history = bao.json("version-history")["data"]
    assert history["keys"] and sorted(history["key_info"]) == sorted(history["keys"])
    newest = history["key_info"][history["keys"][-1]]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", newest["timestamp_installed"])
    assert newest["previous_version"] == (history["keys"][-2] if len(history["keys"]) > 1 else None)
    assert re.search(rf"^{re.escape(history['keys'][-1])}\s", bao.ok("version-history"), re.M)
    host = bao.json("read", "sys/host-info")["data"]
    assert host["host"]["hostname"] == socket.gethostname(), host["host"]
    assert host["memory"]["total"] > host["memory"]["available"] > 0
    assert len(host["cpu"]) == len(host["cpu_times"]) == os.cpu_count()
    assert any(d["path"] == "/" and d["total"] > 0 for d in host["disk"]), host["disk"]
    assert "Code: 403" in bao.fails("read", "sys/host-info", token="")  # sudo, as Vault's
    assert "Success! Stepped down" in bao.ok("operator", "step-down")

    # secrets engines
    kv1, kv2 = f"kv1-{u}", f"kv2-{u}"
    bao.ok("secrets", "enable", f"-path={kv1}", "kv")
    bao.ok("secrets", "enable", f"-path={kv2}", "-version=2", "kv")
    mounts = bao.json("secrets", "list")
    assert mounts[f"{kv1}/"]["type"] == "kv" and mounts[f"{kv2}/"]["options"]["version"] == "2"
    assert f"{kv2}/" in bao.ok("secrets", "list")
    assert yaml.safe_load(bao.flagged("-format=yaml", "secrets", "list")) == mounts
    bao.ok("secrets", "tune", "-default-lease-ttl=1h", "-max-lease-ttl=2h", kv1)
    assert bao.ok("read", "-field=default_lease_ttl", f"sys/mounts/{kv1}/tune").strip() == "3600"

    # kv on a v1 mount, with and without -mount
    assert "Success" in bao.ok("kv", "put", f"{kv1}/app", "k=v", "n=1")
    bao.ok("kv", "put", f"-mount={kv1}", "other", "a=b")
    assert bao.ok("kv", "get", "-field=k", f"{kv1}/app").strip() == "v"
    assert _kv_get(bao, f"-mount={kv1}", "app")["data"] == {"k": "v", "n": "1"}
    assert sorted(bao.json("kv", "list", kv1)) == ["app", "other"]
    assert bao.json("kv", "list", f"-mount={kv1}") == bao.json("kv", "list", kv1)
    assert yaml.safe_load(bao.flagged("-format=yaml", "kv", "list", kv1)) == ["app", "other"]
    assert "app" in bao.flagged("-format=table", "kv", "list", kv1).split()
    bao.ok("kv", "delete", f"{kv1}/other")
    bao.fails("kv", "get", f"{kv1}/other")
    bao.ok("kv", "put", f"{kv1}/third", "c=d")
    bao.ok("kv", "delete", f"-mount={kv1}", "third")
    bao.fails("kv", "get", f"-mount={kv1}", "third")
    assert every_format(bao, "kv", "get", f"{kv1}/app", field="k") == "v"

    # kv on a v2 mount: every subcommand
    bao.ok("kv", "put", f"{kv2}/app", "k=v1")
    meta = bao.json("kv", "put", f"-mount={kv2}", "app", "k=v2", "x=y")
    assert meta["data"]["version"] == 2
    assert _kv_get(bao, "-version=1", f"{kv2}/app")["data"]["data"] == {"k": "v1"}
    bao.ok("kv", "patch", f"{kv2}/app", "k=v3")
    bao.ok("kv", "patch", f"-mount={kv2}", "-method=rw", "app", "z=w")
    got = _kv_get(bao, f"-mount={kv2}", "app")["data"]
    assert got["data"] == {"k": "v3", "x": "y", "z": "w"} and got["metadata"]["version"] == 4
    assert every_format(bao, "kv", "get", f"{kv2}/app", field="x", at=("data", "data")) == "y"
    table = bao.ok("kv", "get", f"{kv2}/app")
    assert f"{kv2}/data/app" in table and "== Data ==" in table and "Metadata" in table
    bao.ok("kv", "put", f"{kv2}/dir/leaf", "a=1")
    assert sorted(bao.json("kv", "list", kv2)) == ["app", "dir/"]
    assert bao.json("kv", "list", f"-mount={kv2}", "dir") == ["leaf"]
    bao.fails("kv", "put", "-cas=1", f"{kv2}/app", "k=stale")
    bao.ok("kv", "put", "-cas=4", f"{kv2}/app", "k=v5")
    bao.ok("kv", "metadata", "put", "-max-versions=6", "-custom-metadata=owner=ops", f"{kv2}/app")
    bao.ok("kv", "metadata", "put", f"-mount={kv2}", "-max-versions=7", "app")
    assert (
        every_format(
            bao, "kv", "metadata", "get", f"{kv2}/app", field="max_versions", field_flag=False
        )
        == 7
    )
    md = bao.json("kv", "metadata", "get", f"{kv2}/app")["data"]
    assert md["max_versions"] == 7 and md["custom_metadata"] == {"owner": "ops"}
    assert md["current_version"] == 5
    bao.ok("kv", "metadata", "patch", "-max-versions=8", f"-mount={kv2}", "app")
    assert bao.json("kv", "metadata", "get", f"-mount={kv2}", "app")["data"]["max_versions"] == 8
    bao.ok("kv", "delete", f"{kv2}/app")
    gone = bao.ok("kv", "get", f"{kv2}/app")  # a deleted version: metadata only, exit 0
    assert "deletion_time" in gone and "== Data ==" not in gone
    bao.ok("kv", "undelete", "-versions=5", f"{kv2}/app")
    assert bao.ok("kv", "get", "-field=k", f"{kv2}/app").strip() == "v5"
    bao.ok("kv", "delete", f"-mount={kv2}", "app")
    bao.fails("kv", "get", "-field=k", f"{kv2}/app")
    bao.ok("kv", "undelete", f"-mount={kv2}", "-versions=5", "app")
    assert bao.ok("kv", "get", "-field=k", f"-mount={kv2}", "-version=5", "app").strip() == "v5"
    bao.ok("kv", "delete", "-versions=1", f"-mount={kv2}", "app")
    bao.ok("kv", "destroy", "-versions=2", f"{kv2}/app")
    bao.ok("kv", "destroy", f"-mount={kv2}", "-versions=1", "app")
    versions = bao.json("kv", "metadata", "get", f"{kv2}/app")["data"]["versions"]
    assert versions["1"]["destroyed"] and versions["2"]["destroyed"], versions
    bao.ok("kv", "rollback", f"-mount={kv2}", "-version=4", "app")
    assert bao.ok("kv", "get", "-field=z", f"{kv2}/app").strip() == "w"
    bao.ok("kv", "rollback", "-version=3", f"{kv2}/app")
    assert bao.ok("kv", "get", "-field=k", f"{kv2}/app").strip() == "v3"
    assert bao.json("kv", "get", f"{kv2}/app")["data"]["metadata"]["version"] == 7
    bao.ok("kv", "metadata", "delete", f"{kv2}/dir/leaf")
    bao.fails("kv", "get", f"{kv2}/dir/leaf")
    bao.ok("kv", "put", f"{kv2}/dir/leaf2", "b=2")
    bao.ok("kv", "metadata", "delete", f"-mount={kv2}", "dir/leaf2")
    bao.fails("kv", "get", f"-mount={kv2}", "dir/leaf2")
    # A v1 mount upgraded in place, then used through kv as a v2 mount.
    kvu = f"kvu-{u}"
    bao.ok("secrets", "enable", f"-path={kvu}", "kv")
    bao.ok("kv", "put", f"{kvu}/old", "a=1")
    bao.ok("kv", "enable-versioning", kvu)
    deadline = time.monotonic() + 20
    while bao.run("kv", "get", "-field=a", f"{kvu}/old").stdout.strip() != "1":
        assert time.monotonic() < deadline, "the upgraded mount never served its old data"
        time.sleep(0.2)

    # moving and disabling engines
    bao.ok("secrets", "move", f"{kv1}/", f"{kv1}-moved/")
    assert bao.ok("kv", "get", "-field=k", f"{kv1}-moved/app").strip() == "v"
    bao.ok("secrets", "disable", f"{kv1}-moved/")
    assert f"{kv1}-moved/" not in bao.json("secrets", "list")

    # policies
    pol = f"app-{u}"
    hcl = f'path "{kv2}/data/*" {{ capabilities = ["read", "create", "update"] }}\n'
    hcl += f'path "{kv2}/metadata/*" {{ capabilities = ["list", "read"] }}\n'
    bao.ok("policy", "write", pol, "-", stdin=hcl)
    assert f"{kv2}/data/*" in bao.ok("policy", "read", pol)
    assert pol in bao.json("policy", "list")
    assert bao.json("policy", "read", pol)["policy"] == hcl
    assert pol in yaml.safe_load(bao.flagged("-format=yaml", "policy", "list"))
    assert yaml.safe_load(bao.flagged("-format=yaml", "policy", "read", pol))["policy"] == hcl
    dropped = f"dropped-{u}"
    bao.ok("policy", "write", dropped, "-", stdin=hcl)
    assert dropped in bao.json("policy", "list")
    assert "Success! Deleted policy" in bao.ok("policy", "delete", dropped)
    assert dropped not in bao.json("policy", "list")
    bao.fails("policy", "read", dropped)

    # tokens
    tok = bao.json("token", "create", f"-policy={pol}", "-ttl=1h", "-renewable=true")["auth"]
    child = tok["client_token"]
    look = bao.json("token", "lookup", child)["data"]
    assert sorted(look["policies"]) == sorted(["default", pol]), look
    assert look["accessor"] == tok["accessor"], (look, tok)
    assert bao.json("token", "lookup", "-accessor", tok["accessor"])["data"]["id"] == ""
    assert every_format(bao, "token", "lookup", child, field="display_name") == "token"
    renewed = bao.json("token", "renew", "-increment=30m", child)["auth"]
    assert 0 < renewed["lease_duration"] <= 1800
    caps = bao.ok("token", "capabilities", child, f"{kv2}/data/app").strip()
    assert caps == "create, read, update"
    assert bao.ok("token", "capabilities", child, "sys/mounts").strip() == "deny"
    assert bao.ok("kv", "get", "-field=k", f"{kv2}/app", token=child).strip() == "v3"
    bao.fails("kv", "put", f"{kv1}-nope/app", "a=b", token=child)
    assert bao.json("token", "lookup", token=child)["data"]["id"] == child
    bao.ok("token", "revoke", child)
    bao.fails("token", "lookup", child)
    short = bao.flagged("-field=token", "token", "create", "-ttl=5m").strip()
    assert bao.json("token", "lookup", token=short)["data"]["id"] == short
    bao.ok("token", "revoke", "-self", token=short)
    bao.fails("token", "lookup", token=short)

    # auth methods and logins
    up, ar = f"up-{u}", f"ar-{u}"
    bao.ok("auth", "enable", f"-path={up}", "userpass")
    bao.ok("auth", "enable", f"-path={ar}", "approle")
    auths = bao.json("auth", "list")
    assert auths[f"{up}/"]["type"] == "userpass" and auths[f"{ar}/"]["type"] == "approle"
    assert yaml.safe_load(bao.flagged("-format=yaml", "auth", "list")) == auths
    assert f"{up}/" in bao.flagged("-format=table", "auth", "list").split()
    bao.ok("auth", "tune", "-default-lease-ttl=30m", "-max-lease-ttl=1h", up)
    assert bao.ok("read", "-field=default_lease_ttl", f"sys/auth/{up}/tune").strip() == "1800"
    bao.ok("write", f"auth/{up}/users/alice", "password=s3cret-pw", f"token_policies={pol}")
    login = bao.json(
        "login",
        "-no-store",
        "-method=userpass",
        f"-path={up}",
        "username=alice",
        "password=s3cret-pw",
    )
    assert pol in login["auth"]["policies"] and login["auth"]["lease_duration"] == 1800
    assert (
        bao.ok("kv", "get", "-field=k", f"{kv2}/app", token=login["auth"]["client_token"]).strip()
        == "v3"
    )
    bao.fails(
        "login", "-no-store", "-method=userpass", f"-path={up}", "username=alice", "password=wrong"
    )
    tok_login = bao.json("login", "-no-store", bao.token)
    assert tok_login["auth"]["client_token"] == bao.token
    assert "Success! You are now authenticated" in bao.ok("login", "-no-store", bao.token)
    bao.ok("write", f"auth/{ar}/role/web", f"token_policies={pol}", "token_ttl=10m")
    role_id = bao.ok("read", "-field=role_id", f"auth/{ar}/role/web/role-id").strip()
    secret_id = bao.ok("write", "-f", "-field=secret_id", f"auth/{ar}/role/web/secret-id").strip()
    ar_login = bao.json("write", f"auth/{ar}/login", f"role_id={role_id}", f"secret_id={secret_id}")
    assert ar_login["auth"]["lease_duration"] == 600 and pol in ar_login["auth"]["token_policies"]
    bao.ok("auth", "disable", ar)
    assert f"{ar}/" not in bao.json("auth", "list")

    # generic read/write/list/delete/patch and path-help
    bao.ok("write", f"cubbyhole/note-{u}", "text=hello")
    assert every_format(bao, "read", f"cubbyhole/note-{u}", field="text") == "hello"
    assert f"note-{u}" in bao.json("list", "cubbyhole/")
    bao.ok("patch", f"{kv2}/metadata/app", "max_versions=9")
    assert bao.json("read", f"{kv2}/metadata/app")["data"]["max_versions"] == 9
    bao.ok("delete", f"cubbyhole/note-{u}")
    bao.fails("read", f"cubbyhole/note-{u}")
    helptext = bao.ok("path-help", f"{kv2}/data/app")
    assert "## " in helptext and "data" in helptext
    assert bao.ok("path-help", "sys/mounts").strip()
    assert "Code: 404" in bao.fails("path-help", f"sys/no-such-path-{u}")
    rnd = bao.ok("write", "-field=random_bytes", "sys/tools/random/16", "format=hex").strip()
    assert len(rnd) == 32 and int(rnd, 16) >= 0

    # response wrapping
    wrapped = bao.json("kv", "get", "-wrap-ttl=5m", f"{kv2}/app")["wrap_info"]
    assert wrapped["ttl"] == 300
    assert bao.json("unwrap", wrapped["token"])["data"]["data"]["k"] == "v3"
    bao.fails("unwrap", wrapped["token"])
    wtok = bao.json("token", "create", "-wrap-ttl=2m", "-ttl=5m")["wrap_info"]["token"]
    assert bao.json("unwrap", wtok)["auth"]["lease_duration"] == 300

    # PKI through write/read/list, with a TTL over the mount's max (capped, as OpenBao does)
    pki = f"pki-{u}"
    bao.ok("secrets", "enable", f"-path={pki}", "pki")
    root = bao.json(
        "write", f"{pki}/root/generate/internal", "common_name=example.com", "ttl=8760h"
    )
    assert "BEGIN CERTIFICATE" in root["data"]["certificate"]
    assert any("so maxTTL is being used" in w for w in root["warnings"])
    assert abs(root["data"]["expiration"] - time.time() - 768 * 3600) < 120  # the mount's max
    assert bao.ok("read", "-field=certificate", f"{pki}/cert/ca").startswith(
        "-----BEGIN CERTIFICATE"
    )
    bao.ok(
        "write",
        f"{pki}/roles/web",
        "allowed_domains=example.com",
        "allow_subdomains=true",
        "max_ttl=72h",
        "generate_lease=true",
    )
    assert "web" in bao.json("list", f"{pki}/roles")
    leaf = bao.json("write", f"{pki}/issue/web", "common_name=a.example.com", "ttl=1h")
    serial = leaf["data"]["serial_number"]
    assert leaf["lease_id"].startswith(f"{pki}/issue/web/")
    assert serial in bao.json("list", f"{pki}/certs")
    assert "BEGIN CERTIFICATE" in bao.ok("read", "-field=certificate", f"{pki}/cert/{serial}")

    # leases of that certificate
    lease_id = leaf["lease_id"]
    look = bao.json("lease", "lookup", lease_id)["data"]
    assert look["id"] == lease_id and 0 < look["ttl"] <= 3600
    assert every_format(bao, "lease", "lookup", lease_id, field="id", field_flag=False) == lease_id
    assert bao.json("list", f"sys/leases/lookup/{pki}/issue/web/") == [lease_id.rsplit("/", 1)[1]]
    assert "lease is not renewable" in bao.fails("lease", "renew", "-increment=30m", lease_id)
    bao.ok("lease", "revoke", lease_id)
    bao.fails("lease", "lookup", lease_id)

    # SSH through write/read/list
    ssh = f"ssh-{u}"
    bao.ok("secrets", "enable", f"-path={ssh}", "ssh")
    bao.ok("write", f"{ssh}/config/ca", "generate_signing_key=true")
    ca_pub = bao.ok("read", "-field=public_key", f"{ssh}/config/ca").strip()
    assert ca_pub.startswith("ssh-")
    bao.ok(
        "write",
        f"{ssh}/roles/dev",
        "key_type=ca",
        "allow_user_certificates=true",
        "allowed_users=*",
        "default_user=ubuntu",
        "ttl=1h",
    )
    assert "dev" in bao.json("list", f"{ssh}/roles")
    pub = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0Wj3ItwTxxS8mnGD3V4xcs8XBs1aqKYvEhHlO4P1Ev user@host"
    )
    signed = bao.ok("write", "-field=signed_key", f"{ssh}/sign/dev", f"public_key={pub}")
    assert signed.startswith("ssh-ed25519-cert-v01@openssh.com ")

    # namespaces
    ns = f"ns{u}"
    bao.ok("namespace", "create", ns)
    assert f"{ns}/" in bao.json("namespace", "list")
    assert (
        every_format(bao, "namespace", "lookup", ns, field="path", at=(), field_flag=False)
        == f"{ns}/"
    )
    bao.ok("secrets", "enable", f"-namespace={ns}", "-path=kvn", "-version=2", "kv")
    bao.ok("kv", "put", f"-namespace={ns}", "kvn/app", "a=b")
    assert bao.ok("kv", "get", f"-namespace={ns}", "-field=a", "kvn/app").strip() == "b"
    assert bao.ok("kv", "get", "-field=a", f"{ns}/kvn/app").strip() == "b"
    bao.fails("kv", "get", "kvn/app")
    bao.ok("secrets", "disable", f"-namespace={ns}", "kvn")
    bao.ok("namespace", "delete", ns)
    deadline = time.monotonic() + 30
    while f"{ns}/" in (
        bao.json("namespace", "list") if bao.run("namespace", "list").returncode == 0 else []
    ):
        assert time.monotonic() < deadline, "the namespace was never deleted"
        time.sleep(0.2)

    bao.ok("secrets", "disable", pki)
    bao.ok("auth", "disable", up)


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="trellis-bao-home-") as d:
        yield Path(d)


def test_cli_session_against_trellis(trellis_dev: DevProcess, home: Path) -> None:
    d = trellis_dev
    cli_session(Bao(d.secrets, d.root_token, home), uuid.uuid4().hex[:8])


def test_cli_session_against_openbao(openbao: Any, home: Path) -> None:
    """The same script against the real OpenBao, so the test itself is honest."""
    cli_session(Bao(openbao.addr, openbao.token, home), uuid.uuid4().hex[:8])


def operator_session(bao: Bao) -> None:
    """`operator init/unseal/seal` on a fresh, uninitialised server."""
    st = json.loads(bao.run("status", "-format=json").stdout)
    assert st["initialized"] is False
    assert "is not initialized" in bao.fails("operator", "init", "-status")
    init = bao.json("operator", "init", "-key-shares=3", "-key-threshold=2")
    keys, root = init["unseal_keys_hex"], init["root_token"]
    assert len(keys) == 3 and len(init["unseal_keys_b64"]) == 3
    bao.fails("status")  # sealed: exit code 2
    prog = bao.json("operator", "unseal", keys[0])
    assert prog["sealed"] is True and prog["progress"] == 1
    bao.ok("operator", "unseal", "-reset")
    bao.json("operator", "unseal", keys[1])
    assert bao.json("operator", "unseal", init["unseal_keys_b64"][2])["sealed"] is False
    wait_unsealed(bao)
    bao.ok("operator", "seal", token=root)
    assert json.loads(bao.run("status", "-format=json").stdout)["sealed"] is True
    bao.json("operator", "unseal", keys[0])
    bao.json("operator", "unseal", keys[2])
    wait_unsealed(bao)
    assert bao.json("token", "lookup", token=root)["data"]["policies"] == ["root"]
    generate_root(bao, root, keys)


def generate_root(bao: Bao, root: str, keys: list[str]) -> None:
    """`operator generate-root`: a new root token from a threshold of the key shares, returned
    only XOR-encoded with the pad, decoded by the CLI. (OpenBao asks a token of the caller.)"""
    assert bao.json("operator", "generate-root", "-status", token=root)["started"] is False
    otp = bao.ok("operator", "generate-root", "-generate-otp", token=root).strip()
    start = bao.json("operator", "generate-root", "-init", f"-otp={otp}", token=root)
    assert start["started"] is True and start["required"] == 2
    assert start["otp_length"] == len(otp) and start["progress"] == 0
    nonce = f"-nonce={start['nonce']}"
    step = bao.json("operator", "generate-root", nonce, "-", stdin=keys[2], token=root)
    assert step["progress"] == 1 and step["complete"] is False and not step["encoded_token"]
    done = bao.json("operator", "generate-root", nonce, "-", stdin=keys[0], token=root)
    assert done["complete"] is True and done["encoded_token"]
    assert bao.json("operator", "generate-root", "-status", token=root)["started"] is False
    decode = ("operator", "generate-root", f"-decode={done['encoded_token']}", f"-otp={otp}")
    new_root = bao.ok(*decode, token=root).strip()
    assert new_root != root and len(new_root) == len(otp)
    assert bao.json("token", "lookup", token=new_root)["data"]["policies"] == ["root"]
    # Shares that do not make the key: refused, nothing made; then an attempt is cancelled.
    start = bao.json("operator", "generate-root", "-init", f"-otp={otp}", token=root)
    forged = keys[1][:10] + ("0" if keys[1][10] != "0" else "1") + keys[1][11:]
    nonce = f"-nonce={start['nonce']}"
    bao.json("operator", "generate-root", nonce, "-", stdin=keys[0], token=root)
    bao.fails("operator", "generate-root", nonce, "-", stdin=forged, token=root)
    bao.ok("operator", "generate-root", "-cancel", token=root)
    assert bao.json("operator", "generate-root", "-status", token=root)["started"] is False


def wait_unsealed(bao: Bao) -> None:
    deadline = time.monotonic() + 30
    while bao.run("status").returncode != 0:
        assert time.monotonic() < deadline, "never unsealed"
        time.sleep(0.2)


def test_operator_session_against_trellis_server(nats_url: str, tmp_path: Path) -> None:
    cfg, ports = server_config(nats_url, tmp_path, prefix="cli", log_json=False)
    proc = start_server(cfg)
    try:
        base = f"http://127.0.0.1:{ports[0]}"
        wait_http(base + "/v1/sys/health", ok=(501,))
        operator_session(Bao(base, "", tmp_path))
    finally:
        _stop(proc)


def test_operator_session_against_openbao_server(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "bao.hcl"
    cfg.write_text(
        'storage "inmem" {}\n'
        f'listener "tcp" {{\n  address = "127.0.0.1:{port}"\n  tls_disable = true\n}}\n'
        "disable_mlock = true\n"
    )
    proc = subprocess.Popen(
        [bao_binary(), "server", f"-config={cfg}"],
        env={**os.environ, "HOME": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/v1/sys/health", ok=(501,))
        operator_session(Bao(base, "", tmp_path))
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
