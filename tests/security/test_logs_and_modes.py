"""Logs hold no secret, and the data dir is private (issue 19 item 5): a `trellis dev` session
with failing requests (bad tokens, denied paths, malformed and hostile bodies, a wrong
password), then every log file and every file of the data dir (the JetStream store included)
is searched for the root token, the unseal key, passwords, tokens and secret values written,
in plaintext and base64; and every dir is 0700, every file 0600."""

from __future__ import annotations

import base64
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.procs import DevProcess, dev

pytestmark = pytest.mark.e2e

# Files whose purpose is to hold credentials for the operator (as `vault server -dev` prints
# them and keeps ~/.vault-token); they are checked for their mode, not their content.
CREDENTIAL_FILES = {"dev-keys.json"}
# Task dirs of the dev client node: their modes are the job's business (Nomad's alloc dirs);
# the data dir around them (0711) lets no other user list or read anything.
TASK_DIRS = ("client",)
# Programs a root dev hands its tasks' unprivileged user (services/dev_tools.py): public
# binaries, in a dir that lets it reach them without listing it.
TOOLS_DIR = "tools"


def _needles(secret: str) -> dict[str, bytes]:
    """The secret as plaintext, and as it would look inside any base64 text (each of the three
    alignments, minus the characters it shares with its neighbours)."""
    raw = secret.encode()
    out = {"plain": raw}
    for pad in range(3):
        for name, enc in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            text = enc(b"\0" * pad + raw).rstrip(b"=")
            core = text[4 if pad else 0 : -4]
            if len(core) >= 8:
                out[f"{name}+{pad}"] = core
    return out


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def _session(d: DevProcess) -> dict[str, str]:
    """Write secrets and make requests fail in every way a client can; what must not leak."""
    root = {"X-Vault-Token": d.root_token}
    s = requests.Session()
    kv_value = f"kv-value-{uuid.uuid4().hex}"
    password = f"pw-{uuid.uuid4().hex}"
    wrong = f"wrong-{uuid.uuid4().hex}"
    bogus = f"hvs.{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}"

    def ok(method: str, path: str, **kw: object) -> requests.Response:
        r = s.request(method, f"{d.secrets}/v1/{path}", headers=root, timeout=30, **kw)
        assert r.status_code in (200, 204), (path, r.status_code, r.text)
        return r

    ok("POST", "secret/data/app", json={"data": {"db_password": kv_value}})
    ok("POST", "sys/auth/up", json={"type": "userpass"})
    ok("POST", "auth/up/users/alice", json={"password": password, "policies": ["default"]})
    limited = ok("POST", "auth/token/create", json={"policies": ["default"]}).json()["auth"][
        "client_token"
    ]
    login = s.post(f"{d.secrets}/v1/auth/up/login/alice", json={"password": password}, timeout=30)
    assert login.status_code == 200, login.text
    user_token = login.json()["auth"]["client_token"]

    # Failing requests, each carrying a credential somewhere.
    failing: list[tuple[str, str, dict[str, str], bytes | None]] = [
        ("GET", f"{d.secrets}/v1/secret/data/app", {"X-Vault-Token": bogus}, None),
        ("GET", f"{d.secrets}/v1/sys/mounts", {"X-Vault-Token": limited}, None),
        ("POST", f"{d.secrets}/v1/sys/policies/acl/x", {"X-Vault-Token": user_token}, b"{}"),
        ("POST", f"{d.secrets}/v1/secret/data/bad", root, b'{"data": {"v": '),
        ("POST", f"{d.secrets}/v1/secret/data/bad", root, b'{"data": {"v": "\\ud800"}}'),
        ("POST", f"{d.secrets}/v1/auth/token/create", root, b'{"ttl": Infinity}'),
        ("POST", f"{d.secrets}/v1/auth/token/create", root, b'{"ttl": 1e999}'),
        ("POST", f"{d.secrets}/v1/secret/data/bad", root, b"\xff\xfe{]"),
    ]
    deep = b"[" * 10_000 + b"]" * 10_000
    tfc = {"Authorization": f"Bearer {d.root_token}", "Content-Type": "application/vnd.api+json"}
    nomad = {"X-Nomad-Token": d.root_token}
    failing += [
        ("GET", f"{d.workspace}/api/v2/organizations", {"Authorization": f"Bearer {bogus}"}, None),
        ("POST", f"{d.workspace}/api/v2/organizations", tfc, b'{"data": '),
        ("POST", f"{d.workspace}/api/v2/organizations", tfc, deep),
        ("POST", f"{d.workspace}/api/v2/organizations", tfc, b"\xff\xfe\xfd"),
        ("POST", f"{d.scheduler}/v1/jobs", nomad, b'{"Job": '),
        ("POST", f"{d.scheduler}/v1/jobs", nomad, deep),
        ("POST", f"{d.scheduler}/v1/jobs", nomad, b"\xff\xfe\xfd"),
        ("POST", f"{d.scheduler}/v1/jobs", nomad, b'{"Job": {"ID": 1e999}}'),
        ("GET", f"{d.scheduler}/v1/jobs", {"X-Nomad-Token": bogus}, None),
    ]
    for method, url, headers, body in failing:
        r = s.request(method, url, headers=headers, data=body, timeout=60)
        # Refused, or (a lone surrogate) stored as U+FFFD as OpenBao does; what matters here
        # is what the services logged about them.
        assert r.status_code >= 400 or b"ud800" in (body or b""), (url, r.status_code)
    r = s.post(f"{d.secrets}/v1/auth/up/login/alice", json={"password": wrong}, timeout=30)
    assert r.status_code == 400, r.text
    return {
        "root token": d.root_token,
        "unseal key": d.unseal_key,
        "unseal key (base64)": base64.b64encode(bytes.fromhex(d.unseal_key)).decode(),
        "kv secret value": kv_value,
        "userpass password": password,
        "wrong password": wrong,
        "limited token": limited,
        "login token": user_token,
        "bogus token": bogus,
    }


def test_no_secret_in_any_log_or_data_file_and_every_mode_is_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    root_token = f"root-{uuid.uuid4().hex}"
    # --acl: the scheduler checks tokens too (and refuses a bogus one).
    with dev("--data-dir", str(data_dir), "--root-token", root_token, "--acl") as d:
        secrets = _session(d)
    assert d.proc.returncode == 0
    logs = list((data_dir / "logs").glob("*.log"))
    assert {"secrets.log", "workspace.log", "scheduler.log", "gateway.log"} <= {
        p.name for p in logs
    }
    assert any((data_dir / "jetstream").rglob("*.blk")), "the JetStream store was not scanned"

    found: list[str] = []
    for path in _files(data_dir):
        if path.name in CREDENTIAL_FILES:
            continue
        blob = path.read_bytes()
        for what, secret in secrets.items():
            for form, needle in _needles(secret).items():
                if needle in blob:
                    found.append(f"{path.relative_to(data_dir)}: {what} ({form})")
    assert not found, "\n".join(found)

    wrong_modes: list[str] = []
    for path in [data_dir, *sorted(data_dir.rglob("*"))]:
        rel = path.relative_to(data_dir)
        if rel.parts and rel.parts[0] in TASK_DIRS and len(rel.parts) > 1:
            continue
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        if path == data_dir and os.geteuid() == 0:
            want = 0o711  # traversable for tasks that run as their own user, never listable
        if rel.parts and rel.parts[0] in TASK_DIRS:
            want = mode if mode & 0o077 in (0, 0o011) else want  # traversable, never listable
        if rel.parts and rel.parts[0] == TOOLS_DIR and os.geteuid() == 0:
            want = 0o711 if path.is_dir() else 0o755
        if mode != want:
            wrong_modes.append(f"{rel or '.'}: {oct(mode)} (want {oct(want)})")
    assert not wrong_modes, "\n".join(wrong_modes)
