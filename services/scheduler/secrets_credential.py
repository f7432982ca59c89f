"""The credential the scheduler holds for task secrets (Nomad's server Vault token): a periodic
orphan token whose only policy lets it create task tokens under one token role (which refuses
root and this policy itself), renew and revoke them. `trellis dev` provisions it through the
secrets API with the root token it already holds; the root token never reaches the scheduler's
task side nor a task."""

from __future__ import annotations

from shared.localnet import http_json

POLICY = "trellis-scheduler"
ROLE = "trellis-tasks"
RULES = f"""
path "auth/token/create/{ROLE}" {{ capabilities = ["update"] }}
path "auth/token/revoke-accessor" {{ capabilities = ["update"] }}
path "auth/token/renew" {{ capabilities = ["update"] }}
path "auth/token/renew-self" {{ capabilities = ["update"] }}
path "auth/token/lookup-self" {{ capabilities = ["read"] }}
"""


class ProvisionError(RuntimeError):
    pass


def provision(base: str, root_token: str) -> str:
    """Create (or update) the policy and the role, and a fresh scheduler token; its value."""
    steps = [
        ("PUT", f"/v1/sys/policies/acl/{POLICY}", {"policy": RULES}),
        (
            "POST",
            f"/v1/auth/token/roles/{ROLE}",
            {
                "orphan": True,
                "renewable": True,
                "period": "30m",
                "disallowed_policies": f"root,{POLICY}",
            },
        ),
    ]
    for method, path, body in steps:
        status, _ = http_json(method, base + path, body, token=root_token)
        if status >= 300:
            raise ProvisionError(f"{method} {path}: status {status}")
    status, data = http_json(
        "POST",
        base + "/v1/auth/token/create-orphan",
        {
            "policies": [POLICY],
            "period": "24h",
            "display_name": "scheduler",
            "no_default_policy": True,
        },
        token=root_token,
    )
    if status >= 300 or not isinstance(data, dict):
        raise ProvisionError(f"creating the scheduler's token: status {status}")
    return str(data["auth"]["client_token"])
