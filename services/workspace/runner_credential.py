"""The workspace service's own scheduler credential for remote runs, when the scheduler has
ACLs: a client token whose one policy may submit, read and stop jobs in the default namespace.
`trellis dev --acl` provisions it through the scheduler API with the management token it
already holds; the management token never reaches the workspace service nor a job."""

from __future__ import annotations

import time

from shared.localnet import http_json

POLICY = "trellis-remote-runs"
# alloc-lifecycle: a force-canceled run's task is killed at once.
RULES = (
    'namespace "default" {\n'
    '  capabilities = ["submit-job", "read-job", "list-jobs", "alloc-lifecycle"]\n'
    "}\n"
)


class ProvisionError(RuntimeError):
    pass


def provision(scheduler: str, management_token: str, timeout: float = 60.0) -> str:
    """Create (or update) the policy, then a fresh client token; its secret. Waits for the
    scheduler API to answer first (it may have just been started)."""
    deadline = time.monotonic() + timeout
    while True:
        status, _ = http_json(
            "POST",
            f"{scheduler}/v1/acl/policy/{POLICY}",
            {"Name": POLICY, "Description": "remote runs of the workspace service", "Rules": RULES},
            token=management_token,
        )
        if status < 300:
            break
        if time.monotonic() > deadline or status not in (404, 500, 502, 503, 504):
            raise ProvisionError(f"creating the remote runs policy: status {status}")
        time.sleep(0.2)  # the scheduler is still starting
    status, data = http_json(
        "POST",
        f"{scheduler}/v1/acl/token",
        {"Name": "workspace remote runs", "Type": "client", "Policies": [POLICY]},
        token=management_token,
    )
    if status >= 300 or not isinstance(data, dict) or not data.get("SecretID"):
        raise ProvisionError(f"creating the workspace's scheduler token: status {status}")
    return str(data["SecretID"])
