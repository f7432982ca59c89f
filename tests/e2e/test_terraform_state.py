"""The real `terraform` 1.0.3 keeps its state in Trellis: `trellis dev --tls` with its dev CA
(SSL_CERT_FILE), a CLI config with a `credentials` block, the `remote` backend with local
execution. init, apply, output, a second apply that raises the serial, state pull, an apply
refused while the workspace is locked through the API, force-unlock, and
`terraform_remote_state` reading another workspace's outputs: refused without access, allowed
with it; and the README's five-line example, run as written. Nothing is downloaded:
configurations hold outputs only."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from cryptography import x509

from tests.procs import DevProcess, banner_value, until
from tests.terraform_helpers import (
    ORG,
    Api,
    Tf,
    assert_not_in_data_dir,
    create_org,
    grant,
    readme_terraform_lines,
    remote_state_config,
    team_with_token,
    tls_dev,
    workspace,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trellis() -> Iterator[DevProcess]:
    with tls_dev() as d:
        yield d


def test_terraform_keeps_state_in_trellis(trellis: DevProcess, tmp_path: Path) -> None:
    api = Api(trellis)
    admin = trellis.root_token
    host = f"localhost:{urlsplit(trellis.workspace).port}"
    assert trellis.workspace.startswith("https://") and trellis.ca_file
    assert trellis.secrets.startswith("https://") and trellis.scheduler.startswith("https://")
    # The dev CA, the certificate and its key: files only their owner can read.
    tls_files = sorted(p.name for p in Path(trellis.ca_file).parent.iterdir())
    assert tls_files == ["ca.pem", "server-key.pem", "server.pem"]
    for p in Path(trellis.ca_file).parent.iterdir():
        assert p.stat().st_mode & 0o777 == 0o600, p
    # Every listener answers over HTTPS with the dev CA.
    assert requests.get(f"{trellis.secrets}/v1/sys/health", verify=trellis.ca_file).ok
    leader = f"{trellis.scheduler}/v1/status/leader"
    # The banner comes before the scheduler service answers: wait for it, not for TLS.
    until(lambda: requests.get(leader, verify=trellis.ca_file, timeout=30).ok, what=leader)
    assert_dev_certificate(trellis)
    create_org(api, admin)
    ws = {name: workspace(api, admin, name, "local") for name in ("network", "app")}
    ops, ops_token = team_with_token(api, admin, "ops")
    grant(api, admin, ops, ws["network"], "write")
    apps, apps_token = team_with_token(api, admin, "apps")
    grant(api, admin, apps, ws["app"], "write")

    marker = f"pw-{uuid.uuid4().hex}"
    net = Tf(tmp_path, "network", host, ops_token, trellis.ca_file)
    net.write(
        "network",
        f'output "vpc_id" {{\n  value = "vpc-1"\n}}\n'
        f'output "db_password" {{\n  value = "{marker}"\n  sensitive = true\n}}\n',
    )
    net.run("init", "-input=false", "-no-color")
    net.run("apply", "-auto-approve", "-input=false", "-no-color")
    out = json.loads(net.run("output", "-json").stdout)
    assert out["vpc_id"]["value"] == "vpc-1"
    assert out["db_password"]["value"] == marker and out["db_password"]["sensitive"] is True
    first = api.ok("GET", f"/workspaces/{ws['network']}/current-state-version", ops_token)
    serial1 = first["data"]["attributes"]["serial"]

    # A change: the second apply writes a state with a higher serial.
    net.write(
        "network",
        f'output "vpc_id" {{\n  value = "vpc-2"\n}}\n'
        f'output "db_password" {{\n  value = "{marker}"\n  sensitive = true\n}}\n',
    )
    net.run("apply", "-auto-approve", "-input=false", "-no-color")
    second = api.ok("GET", f"/workspaces/{ws['network']}/current-state-version", ops_token)
    assert second["data"]["attributes"]["serial"] > serial1
    assert second["data"]["id"] != first["data"]["id"]
    pulled = json.loads(net.run("state", "pull").stdout)
    assert pulled["serial"] == second["data"]["attributes"]["serial"]
    assert pulled["outputs"]["vpc_id"]["value"] == "vpc-2"
    # The hosted download URL: absolute, and only for callers that may read the state.
    url = second["data"]["attributes"]["hosted-state-download-url"]
    assert url == f"{trellis.workspace}/api/v2/state-versions/{second['data']['id']}/download"

    def fetch(token: str | None) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.get(url, headers=headers, verify=trellis.ca_file, timeout=30)

    assert fetch(ops_token).json() == pulled
    assert fetch(apps_token).status_code == 404
    assert fetch(None).status_code == 401
    # Terraform locked and unlocked around each write: nothing is left locked.
    doc = api.ok("GET", f"/workspaces/{ws['network']}", ops_token)
    assert doc["data"]["attributes"]["locked"] is False

    # Locked through the API by someone else: apply fails with a lock error.
    api.ok("POST", f"/workspaces/{ws['network']}/actions/lock", admin, {"reason": "maintenance"})
    net.write("network", 'output "vpc_id" {\n  value = "vpc-3"\n}\n')
    refused = net.run("apply", "-auto-approve", "-input=false", "-no-color", check=False)
    assert refused.returncode != 0
    assert "workspace already locked" in refused.stderr, refused.stderr
    still = api.ok("GET", f"/workspaces/{ws['network']}/current-state-version", ops_token)
    assert still["data"]["id"] == second["data"]["id"]
    # `terraform force-unlock` (lock ID org/workspace) needs admin access: refused for the
    # ops team (write access), done by an owner.
    denied_unlock = net.run("force-unlock", "-force", f"{ORG}/network", check=False)
    assert denied_unlock.returncode != 0
    teams = api.ok("GET", f"/organizations/{ORG}/teams", admin)["data"]
    owners = next(t["id"] for t in teams if t["attributes"]["name"] == "owners")
    owner_token = api.ok(
        "POST",
        f"/teams/{owners}/authentication-token",
        admin,
        {"data": {"type": "authentication-token"}},
        201,
    )["data"]["attributes"]["token"]
    boss = Tf(tmp_path, "boss", host, owner_token, trellis.ca_file)
    boss.write("network", "")
    boss.run("init", "-input=false", "-no-color")
    boss.run("force-unlock", "-force", f"{ORG}/network")
    doc = api.ok("GET", f"/workspaces/{ws['network']}", ops_token)
    assert doc["data"]["attributes"]["locked"] is False
    net.run("apply", "-auto-approve", "-input=false", "-no-color")
    assert json.loads(net.run("output", "-json").stdout)["vpc_id"]["value"] == "vpc-3"

    # terraform_remote_state: the apps team cannot read the network workspace's state...
    app = Tf(tmp_path, "app", host, apps_token, trellis.ca_file)
    app.write("app", remote_state_config(host, "network"))
    app.run("init", "-input=false", "-no-color")
    denied = app.run("apply", "-auto-approve", "-input=false", "-no-color", check=False)
    assert denied.returncode != 0, denied.stdout
    assert "error loading the remote state" in denied.stderr, denied.stderr
    # ... until it is given read access to it.
    grant(api, admin, apps, ws["network"], "read")
    app.run("apply", "-auto-approve", "-input=false", "-no-color")
    assert json.loads(app.run("output", "-json").stdout)["vpc"]["value"] == "vpc-3"

    # States hold secrets: nothing under the data dir (JetStream files included) has the
    # sensitive output in clear.
    assert_not_in_data_dir(trellis, marker)


def test_the_readmes_five_line_example(trellis: DevProcess, tmp_path: Path) -> None:
    """README.md's Terraform example, exactly its lines (the placeholders filled in from the
    banner, the port from the listener), in bash with the real terraform: the state it leaves
    is in the workspace the example names, with the example's output."""
    lines = readme_terraform_lines()
    assert len(lines) == 5, lines
    config = banner_value(trellis.output, r"Terraform CLI config: (\S+)", "Terraform CLI config")
    assert Path(config).stat().st_mode & 0o777 == 0o600
    port = urlsplit(trellis.workspace).port
    script = "\n".join(lines)
    for shown, actual in (
        ("<CA certificate>", trellis.ca_file),
        ("<Terraform CLI config>", config),
        ("localhost:8800", f"localhost:{port}"),
    ):
        assert shown in script, shown
        script = script.replace(shown, actual)
    work = tmp_path / "readme"
    work.mkdir()
    # Only what any shell has: the example itself exports the CA and the CLI config.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CHECKPOINT_DISABLE": "1"}
    done = subprocess.run(
        ["bash", "-euc", script], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Apply complete!" in done.stdout, done.stdout
    backend = json.loads((work / "backend.tf.json").read_text())["terraform"]["backend"]["remote"]
    greeting = re.search(r'output "(\w+)" \{ value = "([^"]*)" \}', lines[2])
    assert greeting, lines[2]
    api = Api(trellis)
    org, name = backend["organization"], backend["workspaces"]["name"]
    ws = api.ok("GET", f"/organizations/{org}/workspaces/{name}", trellis.root_token)["data"]
    current = api.ok("GET", f"/workspaces/{ws['id']}/current-state-version", trellis.root_token)
    outputs = api.ok("GET", f"/state-versions/{current['data']['id']}/outputs", trellis.root_token)[
        "data"
    ]
    stored = {o["attributes"]["name"]: o["attributes"]["value"] for o in outputs}
    assert stored == {greeting.group(1): greeting.group(2)}
    # What the README says reads it back, in the same shell setting.
    read = subprocess.run(
        ["bash", "-euc", script.split("\n")[0] + "\nterraform output -json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0, read.stderr
    assert {k: v["value"] for k, v in json.loads(read.stdout).items()} == stored


def assert_dev_certificate(d: DevProcess) -> None:
    """The CA is the root of Trellis's own PKI mount (its public CA endpoint serves the same
    certificate), and the server certificate it signed names localhost, 127.0.0.1 and ::1."""
    ca_pem = Path(d.ca_file).read_bytes()
    served = requests.get(f"{d.secrets}/v1/trellis-dev-pki/ca/pem", verify=d.ca_file, timeout=30)
    assert served.status_code == 200
    ca = x509.load_pem_x509_certificate(ca_pem)
    assert x509.load_pem_x509_certificate(served.content) == ca
    server = x509.load_pem_x509_certificates((Path(d.ca_file).parent / "server.pem").read_bytes())
    server[0].verify_directly_issued_by(ca)
    names = server[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    # Clients reach it by name as well as by address.
    port = urlsplit(d.workspace).port
    assert requests.get(f"https://localhost:{port}/api/v2/ping", verify=d.ca_file).ok


def test_plain_http_stays_the_default(trellis_dev: DevProcess) -> None:
    """Without --tls: plain HTTP on every listener, no CA line, no certificates written."""
    d = trellis_dev
    assert all(u.startswith("http://") for u in (d.secrets, d.workspace, d.scheduler))
    assert not any(line.startswith("CA certificate:") for line in d.output)
    assert not (Path(d.data_dir) / "tls").exists()
    assert requests.get(f"{d.workspace}/api/v2/ping", timeout=30).status_code == 204
