"""sys/metrics and the smaller differences hvac's own tests found between Trellis and OpenBao
(issue 21): PKI tidy with no body, an issuer read after its deletion, sys/wrapping/wrap with an
empty body, `generic` as KV version 1, and sys/rekey/backup with no backup. Unmodified hvac
through one `trellis dev` (with the crypto worker, for PKI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
import requests

from tests.procs import DevProcess, dev

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data_dir: Path = tmp_path_factory.mktemp("hvacdiff") / "data"
    with dev("--data-dir", str(data_dir), "--root-token", "diff-root", "--services", "crypto") as p:
        yield p


def test_sys_metrics_prometheus_and_json(d: DevProcess) -> None:
    url = f"{d.secrets}/v1/sys/metrics"
    # Token-protected, as Vault without unauthenticated_metrics_access.
    assert requests.get(url, params={"format": "prometheus"}, timeout=10).status_code in (
        400,
        403,
    )
    got = requests.get(
        url, params={"format": "prometheus"}, headers={"X-Vault-Token": d.root_token}, timeout=10
    )
    assert got.status_code == 200
    assert got.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = got.text
    assert "vault_core_unsealed 1.0" in text
    assert "vault_barrier_key_term" in text
    assert "# TYPE process_resident_memory_bytes gauge" in text  # the process registry
    summary = hvac.Client(url=d.secrets, token=d.root_token).read("sys/metrics")
    assert set(summary) >= {"Timestamp", "Gauges", "Counters", "Samples"}
    names = {g["Name"] for g in summary["Gauges"]}
    assert "vault_core_unsealed" in names
    bad = requests.get(
        url, params={"format": "xml"}, headers={"X-Vault-Token": d.root_token}, timeout=10
    )
    assert bad.status_code == 400 and "prometheus" in bad.json()["errors"][0]


def test_hvac_differences(d: DevProcess) -> None:
    c = hvac.Client(url=d.secrets, token=d.root_token)

    # sys/wrapping/wrap with no data wraps an empty object.
    wrapped = c.sys.wrap(payload={}, ttl="60s")
    assert wrapped["wrap_info"]["token"]
    # `generic` is KV version 1.
    c.sys.enable_secrets_engine("generic", path="gen")
    c.secrets.kv.v1.create_or_update_secret("foo", {"a": "b"}, mount_point="gen")
    assert c.secrets.kv.v1.read_secret("foo", mount_point="gen")["data"] == {"a": "b"}
    assert c.sys.list_mounted_secrets_engines()["data"]["gen/"]["type"] == "generic"
    # No backup is ever kept (no PGP keys): Vault's answer.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="no backed-up keys found"):
        c.sys.read_backup_keys()

    # PKI: tidy with no body, and an issuer read after its deletion.
    c.sys.enable_secrets_engine("pki", path="pki-diff")
    root = c.secrets.pki.generate_root("internal", "diff.test", mount_point="pki-diff")
    issuer_id = root["data"]["issuer_id"]
    tidy = c.secrets.pki.tidy(mount_point="pki-diff")
    assert tidy.status_code == 202 and "no tidy operations were set" in tidy.json()["warnings"][0]
    assert c.secrets.pki.read_issuer(issuer_id, mount_point="pki-diff")["data"]["issuer_id"]
    c.secrets.pki.delete_issuer(issuer_id, mount_point="pki-diff")
    with pytest.raises(hvac.exceptions.InternalServerError, match="unable to find PKI issuer"):
        c.secrets.pki.read_issuer(issuer_id, mount_point="pki-diff")
    # A reference that never named an issuer stays a client error.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="unable to find PKI issuer"):
        c.secrets.pki.read_issuer("never-was", mount_point="pki-diff")


def test_new_endpoints_are_in_the_openapi_document(d: DevProcess) -> None:
    doc = hvac.Client(url=d.secrets, token=d.root_token).read("sys/internal/specs/openapi")
    paths = set(doc["paths"])
    for want in (
        "/sys/rotate",
        "/sys/key-status",
        "/sys/rotate/config",
        "/sys/rekey/init",
        "/sys/rekey/update",
        "/sys/rekey/verify",
        "/sys/rekey/backup",
        "/sys/rotate/root/init",
        "/sys/rotate/root/verify",
        "/sys/metrics",
    ):
        assert want in paths, want
