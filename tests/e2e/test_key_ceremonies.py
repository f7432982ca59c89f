"""Key ceremonies and batch tokens through `trellis dev`, driven by unmodified hvac and the real
`bao` CLI (issue 21): keyring rotation (sys/rotate, sys/key-status, sys/rotate/config), rekey
with verification (sys/rekey/*, the old shares stop working, the new ones unseal), OpenBao's
`bao operator rotate-keys` and `bao operator rotate`, and batch tokens.

One dev cluster with its own data dir for the module: a rekey rewrites the dev-keys.json that
dev unseals itself from, which the tests check too."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import hvac
import hvac.exceptions
import pytest

from tests.openbao import bao_binary
from tests.procs import DevProcess, dev

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevProcess, Path]]:
    data_dir = tmp_path_factory.mktemp("ceremonies") / "data"
    with dev(
        "--data-dir",
        str(data_dir),
        "--root-token",
        "cer-root",
        "--services",
        "none",
        default_replicas=True,
    ) as d:
        yield d, data_dir


def _client(d: DevProcess, token: str | None = None) -> hvac.Client:
    return hvac.Client(url=d.secrets, token=token or d.root_token)


def _kept(data_dir: Path) -> dict[str, object]:
    return json.loads((data_dir / "dev-keys.json").read_text())


def _bao(d: DevProcess, tmp: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "BAO_ADDR": d.secrets,
        "BAO_TOKEN": d.root_token,
    }
    cp = subprocess.run([bao_binary(), *args], env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, f"bao {' '.join(args)}: {cp.stdout}\n{cp.stderr}"
    return cp.stdout


def _unseal_with(client: hvac.Client, keys: list[str]) -> dict[str, object]:
    status: dict[str, object] = {}
    for key in keys:
        status = client.sys.submit_unseal_key(key)
        if not status["sealed"]:
            break
    return status


def test_rotate_keeps_old_data_and_counts(cluster: tuple[DevProcess, Path]) -> None:
    d, _ = cluster
    c = _client(d)
    c.secrets.kv.v2.create_or_update_secret(path="before-rotate", secret={"v": "old-term"})
    before = c.sys.get_encryption_key_status()
    term = before["data"]["term"]
    assert before["data"]["encryptions"] >= 1
    assert before["term"] == term  # OpenBao copies the data to the top level
    c.sys.rotate_encryption_key()
    after = c.sys.get_encryption_key_status()["data"]
    assert after["term"] == term + 1
    assert after["encryptions"] == 0
    assert after["install_time"].endswith("Z")
    read = c.secrets.kv.v2.read_secret_version(path="before-rotate", raise_on_deleted_version=True)
    assert read["data"]["data"] == {"v": "old-term"}
    c.secrets.kv.v2.create_or_update_secret(path="after-rotate", secret={"v": "new-term"})
    assert c.sys.get_encryption_key_status()["data"]["encryptions"] >= 1

    # Automatic rotation settings, with Vault's bounds.
    assert c.read("sys/rotate/config")["data"] == {
        "enabled": True,
        "interval": 0,
        "max_operations": 3865470566,
    }
    c.write("sys/rotate/config", max_operations=2_000_000, interval="48h")
    assert c.read("sys/rotate/config")["data"] == {
        "enabled": True,
        "interval": "48h0m0s",
        "max_operations": 2_000_000,
    }
    with pytest.raises(hvac.exceptions.InvalidRequest, match="max_operations"):
        c.write("sys/rotate/config", max_operations=10)

    # A token without sudo may not rotate.
    c.sys.create_or_update_policy("rotate-read", 'path "sys/*" { capabilities = ["update"] }')
    weak = c.auth.token.create(policies=["rotate-read"], ttl="10m")["auth"]["client_token"]
    with pytest.raises(hvac.exceptions.Forbidden):
        _client(d, weak).sys.rotate_encryption_key()


def test_rekey_with_verification_old_shares_stop_working(
    cluster: tuple[DevProcess, Path],
) -> None:
    d, data_dir = cluster
    c = _client(d)
    old = str(_kept(data_dir)["unseal_key"])
    assert c.sys.read_rekey_progress()["started"] is False
    with pytest.raises(hvac.exceptions.InvalidRequest, match="no backed-up keys found"):
        c.sys.read_backup_keys()

    started = c.sys.start_rekey(secret_shares=3, secret_threshold=2, require_verification=True)
    assert started["started"] is True and started["t"] == 2 and started["n"] == 3
    assert started["verification_required"] is True
    nonce = started["nonce"]
    with pytest.raises(hvac.exceptions.InvalidRequest, match="already in progress"):
        c.sys.start_rekey(secret_shares=1, secret_threshold=1)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="incorrect nonce"):
        c.sys.rekey(key=old, nonce="not-the-nonce")
    done = c.sys.rekey(key=old, nonce=nonce)
    assert done["complete"] is True
    new_keys = done["keys"]
    assert len(new_keys) == 3 and len(set(new_keys)) == 3
    assert done["verification_nonce"]

    # Not installed yet: until verification the old key is still the one.
    progress = c.sys.read_rekey_verify_progress()
    assert progress["nonce"] == done["verification_nonce"] and progress["progress"] == 0
    restarted = c.sys.cancel_rekey_verify()
    vnonce = restarted["nonce"]
    assert vnonce != done["verification_nonce"]
    first = c.sys.rekey_verify(new_keys[0], vnonce)
    assert first["progress"] == 1
    verified = c.sys.rekey_verify(new_keys[2], vnonce)
    assert verified == {"nonce": vnonce, "complete": True}
    assert c.sys.read_rekey_progress()["started"] is False
    status = c.sys.read_seal_status()
    assert (status["t"], status["n"]) == (2, 3)
    # dev keeps what it needs to unseal its own cluster.
    assert _kept(data_dir)["unseal_keys"] == [new_keys[0], new_keys[2]]

    c.secrets.kv.v2.create_or_update_secret(path="across-rekey", secret={"v": "kept"})
    c.sys.seal()
    assert c.sys.read_seal_status()["sealed"] is True
    # The old key now counts as one share of two; with a genuine new share it opens nothing.
    assert c.sys.submit_unseal_key(old)["progress"] == 1
    with pytest.raises(hvac.exceptions.InvalidRequest, match="do not open"):
        c.sys.submit_unseal_key(new_keys[0])
    assert c.sys.read_seal_status()["sealed"] is True
    assert _unseal_with(c, [new_keys[1], new_keys[2]])["sealed"] is False
    deadline = time.monotonic() + 30
    while True:
        try:
            got = c.secrets.kv.v2.read_secret_version(
                path="across-rekey", raise_on_deleted_version=True
            )
            break
        except hvac.exceptions.VaultDown:
            assert time.monotonic() < deadline, "the unsealed cluster never answered"
            time.sleep(0.2)
    assert got["data"]["data"] == {"v": "kept"}


def test_bao_operator_rotate_and_rotate_keys(
    cluster: tuple[DevProcess, Path], tmp_path: Path
) -> None:
    d, data_dir = cluster
    c = _client(d)
    term = c.sys.get_encryption_key_status()["data"]["term"]
    assert "Success! Rotated key" in _bao(d, tmp_path, "operator", "rotate")
    assert c.sys.get_encryption_key_status()["data"]["term"] == term + 1

    kept = _kept(data_dir)
    old_keys = [str(k) for k in kept.get("unseal_keys") or [kept["unseal_key"]]]
    init = json.loads(
        _bao(
            d,
            tmp_path,
            "operator",
            "rotate-keys",
            "-init",
            "-key-shares=1",
            "-key-threshold=1",
            "-verify",
            "-format=json",
        )
    )
    assert init["started"] is True and init["n"] == 1 and init["verification_required"]
    out: dict[str, object] = {}
    for key in old_keys:
        out = json.loads(
            _bao(
                d,
                tmp_path,
                "operator",
                "rotate-keys",
                f"-nonce={init['nonce']}",
                "-format=json",
                key,
            )
        )
        if out.get("complete"):
            break
    assert out["complete"] is True
    new_key = out["keys"][0]  # type: ignore[index]
    # Not installed until verified: the kept key is still the old one.
    assert _kept(data_dir)["unseal_key"] != new_key
    verified = _bao(
        d,
        tmp_path,
        "operator",
        "rotate-keys",
        "-verify",
        f"-nonce={out['verification_nonce']}",
        new_key,
    )
    assert "rotation is complete" in verified
    assert _kept(data_dir)["unseal_key"] == new_key
    c.sys.seal()
    with pytest.raises(hvac.exceptions.InvalidRequest):
        c.sys.submit_unseal_key(old_keys[0])
    assert c.sys.submit_unseal_key(new_key)["sealed"] is False


def test_batch_tokens(cluster: tuple[DevProcess, Path]) -> None:
    d, _ = cluster
    c = _client(d)
    deadline = time.monotonic() + 30
    while c.sys.read_seal_status()["sealed"] is not False or not c.is_authenticated():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    c.sys.create_or_update_policy(
        "batch-kv", 'path "secret/data/batch/*" { capabilities = ["create", "read", "update"] }'
    )
    created = c.auth.token.create(policies=["batch-kv"], ttl="10m", type="batch")["auth"]
    batch = created["client_token"]
    assert batch.startswith("hvb.")
    assert created["token_type"] == "batch" and created["accessor"] == ""
    assert created["renewable"] is False
    b = _client(d, batch)
    me = b.auth.token.lookup_self()["data"]
    assert me["type"] == "batch" and me["policies"] == ["batch-kv", "default"]
    assert 0 < me["ttl"] <= 600
    b.secrets.kv.v2.create_or_update_secret(path="batch/x", secret={"a": "1"})
    assert b.secrets.kv.v2.read_secret_version(path="batch/x", raise_on_deleted_version=True)[
        "data"
    ]["data"] == {"a": "1"}
    with pytest.raises(hvac.exceptions.Forbidden):
        b.secrets.kv.v2.read_secret_version(path="other", raise_on_deleted_version=True)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="only supported by 'service'"):
        b.write("cubbyhole/mine", value="x")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="cannot be renewed"):
        b.auth.token.renew_self()
    with pytest.raises(hvac.exceptions.InvalidRequest, match="cannot be revoked"):
        c.auth.token.revoke(batch)
    # Not stored: no accessor to list.
    assert c.auth.token.lookup(batch)["data"]["accessor"] == ""
    # A tampered token is no token.
    tampered = batch[:-2] + ("AA" if not batch.endswith("AA") else "BB")
    with pytest.raises(hvac.exceptions.Forbidden):
        _client(d, tampered).auth.token.lookup_self()
    with pytest.raises(hvac.exceptions.InvalidRequest, match="root tokens"):
        c.auth.token.create(type="batch")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="period"):
        c.auth.token.create(type="batch", policies=["default"], period="1h")

    # It dies with its parent.
    c.sys.create_or_update_policy("mint", 'path "auth/token/create" { capabilities = ["update"] }')
    parent = c.auth.token.create(policies=["batch-kv", "mint"], ttl="10m")["auth"]["client_token"]
    child = _client(d, parent).auth.token.create(type="batch", ttl="5m")["auth"]["client_token"]
    assert _client(d, child).auth.token.lookup_self()["data"]["type"] == "batch"
    c.auth.token.revoke(parent)
    with pytest.raises(hvac.exceptions.Forbidden):
        _client(d, child).auth.token.lookup_self()

    # Token roles and an auth mount tuned to batch.
    c.write("auth/token/roles/batchy", token_type="batch", allowed_policies=["batch-kv"])
    assert c.read("auth/token/roles/batchy")["data"]["token_type"] == "batch"
    via_role = c.auth.token.create(role_name="batchy", policies=["batch-kv"])["auth"]
    assert via_role["client_token"].startswith("hvb.")
    c.sys.enable_auth_method("userpass", path="up-batch")
    c.sys.tune_auth_method("up-batch", token_type="batch")
    c.auth.userpass.create_or_update_user(
        "ana", "pw-ana-1", policies=["batch-kv"], mount_point="up-batch"
    )
    login = hvac.Client(url=d.secrets).auth.userpass.login(
        "ana", "pw-ana-1", mount_point="up-batch"
    )["auth"]
    assert login["token_type"] == "batch" and login["client_token"].startswith("hvb.")
    # A batch token issued under an older keyring term still opens after a rotation.
    c.sys.rotate_encryption_key()
    assert _client(d, batch).auth.token.lookup_self()["data"]["type"] == "batch"


def test_dev_restarts_after_its_cluster_was_rekeyed(cluster: tuple[DevProcess, Path]) -> None:
    """Last in the module: dev unseals itself again from the rewritten dev-keys.json."""
    d, data_dir = cluster
    c = _client(d)
    c.secrets.kv.v2.create_or_update_secret(path="before-restart", secret={"v": "kept"})
    assert d.stop() is not None
    with dev("--data-dir", str(data_dir), "--root-token", "cer-root", "--services", "none") as d2:
        again = _client(d2)
        assert again.sys.read_seal_status()["sealed"] is False
        got = again.secrets.kv.v2.read_secret_version(
            path="before-restart", raise_on_deleted_version=True
        )
        assert got["data"]["data"] == {"v": "kept"}
