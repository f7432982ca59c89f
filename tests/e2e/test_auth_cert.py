"""The cert auth method through `trellis dev --tls --tls-client-ca-file`: role, config and CRL
management with unmodified hvac, and logins over real TLS with client certificates issued by
the openssl CLI. The listener asks for certificates of two CAs; the roles trust only one, so
the refusals below come from the auth method, not from the handshake."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest
import requests

from tests.openssl_ca import Issued, OpensslCa
from tests.procs import DevProcess, dev

pytestmark = pytest.mark.e2e

GOOD_CN = "good.example"


class Pki:
    def __init__(self, root: Path) -> None:
        self.trusted = OpensslCa(root, "trusted-ca")
        self.other = OpensslCa(root, "other-ca")
        self.good = self.trusted.issue("good", f"/CN={GOOD_CN}/OU=web", sans=f"DNS:{GOOD_CN}")
        self.good2 = self.trusted.issue("good2", f"/CN={GOOD_CN}/OU=web")
        self.foreign = self.other.issue("foreign", f"/CN={GOOD_CN}/OU=web")
        past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        self.expired = self.trusted.issue(
            "expired", f"/CN={GOOD_CN}", not_before=past, not_after=past + datetime.timedelta(1)
        )
        self.bad_cn = self.trusted.issue("bad-cn", "/CN=intruder.example/OU=web")
        self.server_only = self.trusted.issue("server-only", f"/CN={GOOD_CN}", usage="serverAuth")
        self.bundle = root / "client-cas.pem"
        self.bundle.write_text(self.trusted.pem + self.other.pem)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("cert-pki"))


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[DevProcess]:
    data_dir = tmp_path_factory.mktemp("cert-auth") / "data"
    with dev(
        "--data-dir",
        str(data_dir),
        "--services",
        "crypto",
        "--tls",
        "--tls-client-ca-file",
        str(pki.bundle),
    ) as p:
        yield p


@pytest.fixture
def client(d: DevProcess) -> hvac.Client:
    return hvac.Client(url=d.secrets, token=d.root_token, verify=d.ca_file)


def mount(client: hvac.Client) -> str:
    path = f"cert-{uuid.uuid4().hex[:8]}"
    client.sys.enable_auth_method("cert", path=path)
    return path


def login(d: DevProcess, path: str, who: Issued, name: str = "") -> dict[str, Any]:
    c = hvac.Client(url=d.secrets, verify=d.ca_file)
    return c.auth.cert.login(
        name=name, cert_pem=str(who.cert), key_pem=str(who.key), mount_point=path
    )


def refused(d: DevProcess, path: str, who: Issued, name: str = "") -> str:
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        login(d, path, who, name)
    return str(err.value)


def test_roles_config_and_crls(client: hvac.Client, pki: Pki, tmp_path: Path) -> None:
    path = mount(client)
    cert = client.auth.cert
    with pytest.raises(hvac.exceptions.InvalidPath):
        cert.list_certificate_roles(mount_point=path)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(pki.trusted.pem)
    cert.create_ca_certificate_role(
        "web",
        certificate_file=str(ca_file),
        allowed_common_names=[GOOD_CN],
        token_policies=["web"],
        mount_point=path,
    )
    cert.create_ca_certificate_role(
        "named", certificate=pki.other.pem, display_name="shown", mount_point=path
    )
    web = cert.read_ca_certificate_role("web", mount_point=path)["data"]
    assert web["display_name"] == "web"  # defaults to the name
    assert web["certificate"] == pki.trusted.pem
    assert web["allowed_common_names"] == [GOOD_CN]
    assert web["token_policies"] == ["web"]
    assert cert.read_ca_certificate_role("named", mount_point=path)["data"]["display_name"] == (
        "shown"
    )
    assert cert.list_certificate_roles(mount_point=path)["data"]["keys"] == ["named", "web"]
    # Not a certificate; a non-CA certificate without client-auth usage.
    with pytest.raises(hvac.exceptions.InvalidRequest) as bad:
        client.write(f"auth/{path}/certs/broken", certificate="not a certificate")
    assert "failed to parse certificate" in str(bad.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as usage:
        client.write(f"auth/{path}/certs/server", certificate=pki.server_only.cert.read_text())
    assert "client authentication" in str(usage.value)
    cert.delete_certificate_role("named", mount_point=path)
    assert cert.list_certificate_roles(mount_point=path)["data"]["keys"] == ["web"]
    # config: stored and read back.
    assert cert.configure_tls_certificate(mount_point=path).status_code == 204
    client.write(f"auth/{path}/config", enable_identity_alias_metadata=True, ocsp_cache_size=10)
    conf = client.read(f"auth/{path}/config")["data"]
    assert conf == {
        "disable_binding": False,
        "enable_identity_alias_metadata": True,
        "ocsp_cache_size": 10,
    }
    with pytest.raises(hvac.exceptions.InvalidRequest):
        client.write(f"auth/{path}/config", ocsp_cache_size=1)
    # CRLs: parsed, listed, read as serials, deleted.
    crl = pki.other.crl_revoking(pki.other.issue("gone", "/CN=gone.example"))
    client.write(f"auth/{path}/crls/other", crl=crl)
    assert client.list(f"auth/{path}/crls")["data"]["keys"] == ["other"]
    assert list(client.read(f"auth/{path}/crls/other")["data"]["serials"]) == [str(0x1001)]
    with pytest.raises(hvac.exceptions.InvalidRequest):
        client.write(f"auth/{path}/crls/junk", crl="not a CRL")
    client.delete(f"auth/{path}/crls/other")
    with pytest.raises(hvac.exceptions.InvalidRequest):
        client.read(f"auth/{path}/crls/other")


def test_login_over_tls(d: DevProcess, client: hvac.Client, pki: Pki) -> None:
    path = mount(client)
    client.auth.cert.create_ca_certificate_role(
        "web",
        certificate=pki.trusted.pem,
        allowed_common_names=[GOOD_CN],
        allowed_organizational_units=["web"],
        token_policies=["web"],
        mount_point=path,
    )
    auth = login(d, path, pki.good, name="web")["auth"]
    assert auth["policies"] == ["default", "web"]
    meta = auth["metadata"]
    assert meta["cert_name"] == "web" and meta["common_name"] == GOOD_CN
    assert meta["serial_number"] == str(0x1000)
    assert meta["subject_key_id"].count(":") == 19 and meta["authority_key_id"]
    me = hvac.Client(url=d.secrets, token=auth["client_token"], verify=d.ca_file)
    self_data = me.auth.token.lookup_self()["data"]
    assert self_data["display_name"] == f"{path}-web"
    # The login's alias is the certificate's common name, linked to an entity.
    alias = client.read(f"identity/entity/id/{self_data['entity_id']}")["data"]["aliases"][0]
    assert alias["name"] == GOOD_CN
    # Without `name`, every role is tried.
    assert login(d, path, pki.good2)["auth"]["metadata"]["cert_name"] == "web"

    # Refusals by the auth method: another CA (the listener accepts it), an expired
    # certificate, a common name the role does not allow.
    assert "invalid certificate" in refused(d, path, pki.foreign)
    assert "expired" in refused(d, path, pki.expired)
    assert "no chain matching all constraints" in refused(d, path, pki.bad_cn)
    # A certificate only for servers never gets past the handshake (OpenSSL checks purpose);
    # under TLS 1.3 the client may see the refusal as a closed connection rather than an alert.
    with pytest.raises(requests.exceptions.ConnectionError):
        login(d, path, pki.server_only)
    # No client certificate at all.
    plain = requests.post(f"{d.secrets}/v1/auth/{path}/login", json={}, verify=d.ca_file)
    assert plain.status_code == 400
    assert plain.json()["errors"] == ["client certificate must be supplied"]
    # A CRL revoking the client's serial refuses it until the CRL is deleted.
    client.write(f"auth/{path}/crls/trusted", crl=pki.trusted.crl_revoking(pki.good))
    assert "no chain matching" in refused(d, path, pki.good, name="web")
    assert login(d, path, pki.good2, name="web")["auth"]["client_token"]
    client.delete(f"auth/{path}/crls/trusted")
    assert login(d, path, pki.good, name="web")["auth"]["client_token"]


def test_login_with_a_trusted_leaf(d: DevProcess, client: hvac.Client, pki: Pki) -> None:
    """A non-CA role trusts exactly its own certificate, not its siblings."""
    path = mount(client)
    client.auth.cert.create_ca_certificate_role(
        "exact", certificate=pki.good.cert.read_text(), mount_point=path
    )
    assert login(d, path, pki.good)["auth"]["metadata"]["cert_name"] == "exact"
    assert "invalid certificate" in refused(d, path, pki.good2)
