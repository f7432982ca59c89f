"""`trellis dev --tls` readies Terraform for the user: a CLI config whose `credentials` block
holds the root token for the workspace listener (`TF_CLI_CONFIG_FILE`; Terraform 1.0 reads no
token from the environment), and an organization `dev` to keep workspaces in, as a dev secrets
server mounts `secret/`. Both are named in the banner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.supervisor import write_private
from shared.localnet import http_json

ORG = "dev"
CONFIG = "terraform.tfrc"


def prepare(workspace_addr: str, token: str, data_dir: Path) -> Path:
    """Write the CLI config and create the organization (kept from an earlier start of the same
    data dir); the config's path."""
    # The name the dev certificate covers: Terraform checks it, and keys credentials by it.
    host = f"localhost:{workspace_addr.rsplit(':', 1)[1]}"
    path = data_dir / CONFIG
    write_private(path, f'credentials "{host}" {{\n  token = "{token}"\n}}\n')
    doc = {"data": {"type": "organizations", "attributes": {"name": ORG, "email": "dev@localhost"}}}
    code, body = http_json("POST", f"https://{host}/api/v2/organizations", doc, token=token)
    if code != 201 and not _taken(code, body):
        raise SystemExit(f"--tls: creating the organization {ORG!r} failed ({code}): {body}")
    return path


def _taken(code: int, body: Any) -> bool:
    """The organization exists already (a data dir kept from an earlier start)."""
    return code == 422 and "taken" in str(body)


def banner(path: Path | None) -> str:
    return f"Terraform CLI config: {path} (organization {ORG!r})\n" if path else ""
