"""Two targets for the secrets-API security cases: a real `trellis dev` and the real OpenBao dev
server. Each case is written once and runs against both (parametrized over `target`), so the
statuses and shapes Trellis must give are the ones OpenBao gives, not assumed ones."""

from __future__ import annotations

import http.client
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from tests.openbao import bao_binary
from tests.procs import until

# A policy that may create child tokens, without sudo.
CREATOR = 'path "auth/token/create" { capabilities = ["create", "update"] }\n'


@dataclass
class Target:
    name: str
    addr: str  # http://127.0.0.1:PORT
    root: str  # a root token

    def req(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        hdrs = {"X-Vault-Token": self.root if token is None else token, **(headers or {})}
        return requests.request(
            method, f"{self.addr}/v1/{path}", headers=hdrs, json=json, timeout=30
        )

    def ok(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """A request that must succeed; returns the JSON body ({} for 204)."""
        r = self.req(method, path, **kw)
        assert r.status_code in (200, 204), (self.name, method, path, r.status_code, r.text)
        return r.json() if r.status_code == 200 and r.content else {}

    def status_from(self, source_ip: str, method: str, path: str, token: str) -> int:
        """The status of a request sent from another loopback address (127.0.0.0/8 is all
        local on Linux), to exercise CIDR bindings."""
        parts = urlsplit(self.addr)
        conn = http.client.HTTPConnection(
            parts.hostname, parts.port, timeout=30, source_address=(source_ip, 0)
        )
        try:
            conn.request(method, f"/v1/{path}", headers={"X-Vault-Token": token})
            return conn.getresponse().status
        finally:
            conn.close()

    def alive(self, token: str, namespace: str = "") -> bool:
        headers = {"X-Vault-Namespace": namespace} if namespace else None
        r = self.req("GET", "auth/token/lookup-self", token=token, headers=headers)
        assert r.status_code in (200, 403), (self.name, r.status_code, r.text)
        return r.status_code == 200

    def bao(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The unmodified `bao` CLI against this target, with the root token."""
        with tempfile.TemporaryDirectory(prefix="trellis-bao-home-") as home:
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": home,
                "BAO_ADDR": self.addr,
                "BAO_TOKEN": self.root,
            }
            return subprocess.run(
                [bao_binary(), *args], env=env, capture_output=True, text=True, timeout=60
            )


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def eventually(cond: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Poll `cond` until it holds (OpenBao revokes some things asynchronously)."""
    until(cond, timeout, what, interval=0.05)


def userpass(t: Target, policies: str = "default") -> tuple[str, str, str]:
    """A fresh userpass mount with one user; returns (mount, username, password)."""
    mount, user, password = unique("up"), "alice", "s3cret"
    t.ok("POST", f"sys/auth/{mount}", json={"type": "userpass"})
    t.ok("POST", f"auth/{mount}/users/{user}", json={"password": password, "policies": policies})
    return mount, user, password


def login(t: Target, mount: str, user: str, password: str) -> str:
    body = t.ok("POST", f"auth/{mount}/login/{user}", json={"password": password})
    return body["auth"]["client_token"]


def creator_policy(t: Target) -> str:
    name = unique("creator")
    t.ok("PUT", f"sys/policies/acl/{name}", json={"policy": CREATOR})
    return name


def child_of(t: Target, parent: str) -> str:
    body = t.ok("POST", "auth/token/create", token=parent, json={"ttl": "1h"})
    return body["auth"]["client_token"]


def ssh_otp_mount(t: Target, mount: str) -> None:
    """An ssh mount at `mount` with an OTP role `otp` (user ubuntu, loopback CIDR)."""
    t.ok("POST", f"sys/mounts/{mount}", json={"type": "ssh"})
    t.ok(
        "POST",
        f"{mount}/roles/otp",
        json={"key_type": "otp", "default_user": "ubuntu", "cidr_list": "127.0.0.0/8"},
    )
