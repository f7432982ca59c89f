"""Remote runs with the real `terraform` 1.0.3 against `trellis dev --tls`: the `remote`
backend on workspaces in remote execution mode. `terraform apply` uploads the configuration,
Trellis plans and applies it as batch jobs on its own scheduler and the CLI prints the logs
as they stream; `terraform plan` is speculative; variables set through the API reach the run
and the sensitive one never shows; `terraform_remote_state` inside a run obeys the remote
state consumers list. Configurations hold outputs only: nothing is downloaded."""

from __future__ import annotations

import io
import os
import pwd
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from tests.procs import DevProcess, until
from tests.terraform_helpers import (
    Api,
    Tf,
    assert_not_in_data_dir,
    create_org,
    grant,
    remote_state_config,
    team_with_token,
    tls_dev,
    workspace,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trellis() -> Iterator[DevProcess]:
    with tls_dev() as d:
        create_org(Api(d), d.root_token)
        yield d


def variable(api: Api, token: str, ws: str, key: str, value: str, *, sensitive: bool) -> None:
    api.ok(
        "POST",
        f"/workspaces/{ws}/vars",
        token,
        {
            "data": {
                "type": "vars",
                "attributes": {
                    "key": key,
                    "value": value,
                    "category": "terraform",
                    "sensitive": sensitive,
                },
            }
        },
        201,
    )


def must(res: Any) -> Any:
    """A terraform command that must succeed; its whole output otherwise."""
    if res.returncode != 0:
        pytest.fail(f"terraform failed:\n{res.stdout}\n{res.stderr}", pytrace=False)
    return res


def runs_of(api: Api, token: str, ws: str) -> list[dict[str, Any]]:
    return api.ok("GET", f"/workspaces/{ws}/runs", token)["data"]


APP = """variable "greeting" {}
variable "db_password" {
  sensitive = true
}
output "greeting" {
  value = var.greeting
}
output "pw_length" {
  value = nonsensitive(length(var.db_password))
}
output "db_password" {
  value     = var.db_password
  sensitive = true
}
"""


def test_remote_runs_on_the_scheduler(trellis: DevProcess, tmp_path: Path) -> None:
    api = Api(trellis)
    admin = trellis.root_token
    host = f"localhost:{urlsplit(trellis.workspace).port}"
    app = workspace(api, admin, "app")
    ops, ops_token = team_with_token(api, admin, "ops")
    grant(api, admin, ops, app, "write")
    marker = f"pw-{uuid.uuid4().hex}"
    variable(api, ops_token, app, "greeting", "hello-trellis", sensitive=False)
    variable(api, ops_token, app, "db_password", marker, sensitive=True)

    tf = Tf(tmp_path, "app", host, ops_token, trellis.ca_file)
    tf.write("app", APP)
    tf.run("init", "-input=false", "-no-color")
    res = must(tf.run("apply", "-auto-approve", "-input=false", "-no-color", check=False))
    out = res.stdout + res.stderr
    # The remote backend streamed the plan and the apply from the run's jobs.
    assert "Running apply in the remote backend" in out, out
    assert "Terraform plan on Trellis" in out, out
    assert "Changes to Outputs" in out, out
    assert "Apply complete!" in out, out
    assert 'greeting = "hello-trellis"' in out, out
    assert f"pw_length = {len(marker)}" in out, out
    assert marker not in out
    first = api.ok("GET", f"/workspaces/{app}/current-state-version", ops_token)["data"]
    outputs = api.ok("GET", f"/workspaces/{app}/current-state-version-outputs", ops_token)["data"]
    assert {o["attributes"]["name"]: o["attributes"]["value"] for o in outputs}["greeting"] == (
        "hello-trellis"
    )
    applied = runs_of(api, ops_token, app)
    assert applied[0]["attributes"]["status"] == "applied", applied[0]
    assert first["relationships"]["run"]["data"]["id"] == applied[0]["id"]
    ws_doc = api.ok("GET", f"/workspaces/{app}", ops_token)["data"]
    assert ws_doc["attributes"]["locked"] is False
    assert ws_doc["relationships"]["current-run"]["data"] is None
    assert ws_doc["relationships"]["latest-run"]["data"]["id"] == applied[0]["id"]

    # The plan's log: readable at its log-read-url, framed STX ... ETX, nothing sensitive.
    run_id = applied[0]["id"]
    plan_id = applied[0]["relationships"]["plan"]["data"]["id"]
    plan = api.ok("GET", f"/plans/{plan_id}", ops_token)["data"]["attributes"]
    assert plan["status"] == "finished" and plan["has-changes"] is True
    log = requests.get(plan["log-read-url"], verify=trellis.ca_file, timeout=10)
    assert log.status_code == 200
    assert log.content.startswith(b"\x02") and log.content.endswith(b"\x03")
    assert b"Changes to Outputs" in log.content and marker.encode() not in log.content
    part = requests.get(
        plan["log-read-url"], params={"offset": 1, "limit": 9}, verify=trellis.ca_file, timeout=10
    )
    assert part.content == log.content[1:10]
    forged = plan["log-read-url"].rsplit("/", 1)[0] + "/" + "0" * 64
    assert requests.get(forged, verify=trellis.ca_file, timeout=10).status_code == 404

    # The scheduler ran both phases as batch jobs named after the run; no secret in the specs.
    for phase in ("plan", "apply"):
        job = requests.get(
            f"{trellis.scheduler}/v1/job/trellis-{run_id}-{phase}",
            verify=trellis.ca_file,
            timeout=10,
        )
        assert job.status_code == 200, job.text
        assert job.json()["Type"] == "batch"
        assert marker not in job.text and ops_token not in job.text

        def statuses(phase: str = phase) -> list[str]:
            allocs = requests.get(
                f"{trellis.scheduler}/v1/job/trellis-{run_id}-{phase}/allocations",
                verify=trellis.ca_file,
                timeout=10,
            ).json()
            return [a["ClientStatus"] for a in allocs]

        # The run is over once its task reported; the task's exit reaches the scheduler in the
        # client's next batch of allocation updates.
        until(lambda: statuses() != ["running"], 60, f"the {phase} task's exit reported")
        assert statuses() == ["complete"]

    # `terraform plan` is speculative: a plan-only run, no new state.
    tf.write("app", APP.replace("var.greeting", "upper(var.greeting)"))
    res = tf.run("plan", "-input=false", "-no-color")
    assert "HELLO-TRELLIS" in res.stdout, res.stdout
    latest = runs_of(api, ops_token, app)
    assert latest[0]["attributes"]["plan-only"] is True
    assert latest[0]["attributes"]["status"] == "planned_and_finished"
    assert latest[1]["id"] == run_id  # newest first
    now = api.ok("GET", f"/workspaces/{app}/current-state-version", ops_token)["data"]
    assert now["id"] == first["id"]

    # terraform_remote_state inside a run: workspace C reads R's outputs only as its consumer.
    net = workspace(api, admin, "network")
    grant(api, admin, ops, net, "write")
    rtf = Tf(tmp_path, "network", host, ops_token, trellis.ca_file)
    rtf.write("network", 'output "vpc_id" {\n  value = "vpc-42"\n}\n')
    rtf.run("init", "-input=false", "-no-color")
    rtf.run("apply", "-auto-approve", "-input=false", "-no-color")
    consumer = workspace(api, admin, "consumer")
    grant(api, admin, ops, consumer, "write")
    ctf = Tf(tmp_path, "consumer", host, ops_token, trellis.ca_file)
    ctf.write("consumer", remote_state_config(host, "network"))
    ctf.run("init", "-input=false", "-no-color")
    # The ops team may read `network`, but the run's token may not: it is not a consumer.
    denied = ctf.run("apply", "-auto-approve", "-input=false", "-no-color", check=False)
    assert denied.returncode != 0, denied.stdout
    failed = runs_of(api, ops_token, consumer)[0]["attributes"]
    assert failed["status"] == "errored", failed
    assert (
        api.ok("GET", f"/workspaces/{consumer}", ops_token)["data"]["attributes"]["locked"] is False
    )
    api.ok(
        "POST",
        f"/workspaces/{net}/relationships/remote-state-consumers",
        admin,
        {"data": [{"type": "workspaces", "id": consumer}]},
        204,
    )
    ok = ctf.run("apply", "-auto-approve", "-input=false", "-no-color")
    assert 'vpc = "vpc-42"' in ok.stdout, ok.stdout
    assert runs_of(api, ops_token, consumer)[0]["attributes"]["status"] == "applied"
    # Off the list again, C reads R through R's global-remote-state (a plan that reads it; no
    # changes, so the run ends planned_and_finished).
    api.ok(
        "DELETE",
        f"/workspaces/{net}/relationships/remote-state-consumers",
        admin,
        {"data": [{"type": "workspaces", "id": consumer}]},
        204,
    )
    api.ok(
        "PATCH",
        f"/workspaces/{net}",
        admin,
        {"data": {"type": "workspaces", "attributes": {"global-remote-state": True}}},
    )
    must(ctf.run("apply", "-auto-approve", "-input=false", "-no-color", check=False))
    assert runs_of(api, ops_token, consumer)[0]["attributes"]["status"] == "planned_and_finished"

    # `terraform destroy` (admin access queues destroy plans): a destroy run, applied from its
    # saved destroy plan.
    dtf = Tf(tmp_path, "app-destroy", host, admin, trellis.ca_file)
    dtf.write("app", APP)
    dtf.run("init", "-input=false", "-no-color")
    gone = must(dtf.run("destroy", "-auto-approve", "-input=false", "-no-color", check=False))
    # Terraform prints a saved plan's summary as "Apply complete!", destroy plans included.
    assert "Apply complete!" in gone.stdout and '"hello-trellis" -> null' in gone.stdout, (
        gone.stdout
    )
    destroyed = runs_of(api, ops_token, app)[0]["attributes"]
    assert destroyed["is-destroy"] is True and destroyed["status"] == "applied", destroyed
    left = api.ok("GET", f"/workspaces/{app}/current-state-version-outputs", ops_token)["data"]
    assert left == []

    # Nothing under the data dir holds the sensitive value in clear.
    assert_not_in_data_dir(trellis, marker)


def targz(name: str, body: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(body.encode())
        tar.addfile(info, io.BytesIO(body.encode()))
    return buf.getvalue()


def test_apply_applies_the_confirmed_plan(trellis: DevProcess) -> None:
    """A run confirmed through the API applies the plan its plan job saved, not a new one: a
    variable changed between the plan and the confirmation does not reach the apply. The saved
    plan holds the sensitive value and is sealed at rest."""
    api = Api(trellis)
    admin = trellis.root_token
    ws = workspace(api, admin, "confirmed")
    marker = f"pw-{uuid.uuid4().hex}"
    var = api.ok(
        "POST",
        f"/workspaces/{ws}/vars",
        admin,
        {
            "data": {
                "type": "vars",
                "attributes": {"key": "size", "value": "planned-value", "category": "terraform"},
            }
        },
        201,
    )["data"]["id"]
    variable(api, admin, ws, "pw", marker, sensitive=True)
    cv = api.ok(
        "POST",
        f"/workspaces/{ws}/configuration-versions",
        admin,
        {"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": False}}},
        201,
    )["data"]
    body = (
        'variable "size" {}\nvariable "pw" {\n  sensitive = true\n}\n'
        'output "size" {\n  value = var.size\n}\n'
        'output "pw_length" {\n  value = nonsensitive(length(var.pw))\n}\n'
        # Who terraform runs as (its local-exec would too), and whether it can read the keys.
        'output "uid" {\n  value = regex("Uid:[[:space:]]+([0-9]+)", '
        'file("/proc/self/status"))[0]\n}\n'
        f'output "keys_readable" {{\n  value = can(file("{trellis.data_dir}/dev-keys.json"))\n}}\n'
    )
    up = requests.put(
        cv["attributes"]["upload-url"],
        data=targz("main.tf", body),
        verify=trellis.ca_file,
        timeout=30,
    )
    assert up.status_code == 200, up.text
    run = api.ok(
        "POST",
        "/runs",
        admin,
        {
            "data": {
                "type": "runs",
                "relationships": {
                    "workspace": {"data": {"type": "workspaces", "id": ws}},
                    "configuration-version": {
                        "data": {"type": "configuration-versions", "id": cv["id"]}
                    },
                },
            }
        },
        201,
    )["data"]

    def status_is(*want: str) -> dict[str, Any] | None:
        doc = api.ok("GET", f"/runs/{run['id']}", admin)["data"]
        return doc if doc["attributes"]["status"] in want else None

    planned = until(lambda: status_is("planned", "errored"), 120, "the plan to finish")
    assert planned["attributes"]["status"] == "planned", planned["attributes"]
    assert_not_in_data_dir(trellis, marker)  # the saved plan holds it, sealed
    api.ok(
        "PATCH",
        f"/workspaces/{ws}/vars/{var}",
        admin,
        {"data": {"type": "vars", "id": var, "attributes": {"value": "changed-later"}}},
    )
    api.ok("POST", f"/runs/{run['id']}/actions/apply", admin, None, 202)
    done = until(lambda: status_is("applied", "errored"), 120, "the apply to finish")
    assert done["attributes"]["status"] == "applied", done["attributes"]
    outputs = api.ok("GET", f"/workspaces/{ws}/current-state-version-outputs", admin)["data"]
    values = {o["attributes"]["name"]: o["attributes"]["value"] for o in outputs}
    # A root client agent runs the run as its task user, who cannot read the dev keys.
    root = os.geteuid() == 0
    uid = pwd.getpwnam("nobody").pw_uid if root else os.geteuid()
    assert values.pop("uid") == str(uid) and values.pop("keys_readable") is not root
    assert values == {"size": "planned-value", "pw_length": len(marker)}
    apply_id = done["relationships"]["apply"]["data"]["id"]
    url = api.ok("GET", f"/applies/{apply_id}", admin)["data"]["attributes"]["log-read-url"]
    log = requests.get(url, verify=trellis.ca_file, timeout=10).content
    # The apply's log is the apply of the saved plan: no second plan in it.
    assert b"Apply complete!" in log and b"Changes to Outputs" not in log, log
    assert marker.encode() not in log


def test_remote_run_with_scheduler_acls(tmp_path: Path) -> None:
    """With scheduler ACLs the workspace service submits run jobs with a client token of its
    own (a policy limited to jobs), provisioned by `trellis dev --acl`: never the root token."""
    with tls_dev("--acl") as d:
        api = Api(d)
        admin = d.root_token
        host = f"localhost:{urlsplit(d.workspace).port}"
        create_org(api, admin, "o@e.x")
        ws = workspace(api, admin, "acl")
        tf = Tf(tmp_path, "acl", host, admin, d.ca_file)
        tf.write("acl", 'output "x" {\n  value = "through-acls"\n}\n')
        tf.run("init", "-input=false", "-no-color")
        res = must(tf.run("apply", "-auto-approve", "-input=false", "-no-color", check=False))
        assert 'x = "through-acls"' in res.stdout
        run_id = runs_of(api, admin, ws)[0]["id"]
        headers = {"X-Nomad-Token": admin}
        job = requests.get(
            f"{d.scheduler}/v1/job/trellis-{run_id}-apply",
            headers=headers,
            verify=d.ca_file,
            timeout=10,
        )
        assert job.status_code == 200, job.text
        # Anonymous callers see nothing; the workspace's token is a client token.
        anon = requests.get(f"{d.scheduler}/v1/jobs", verify=d.ca_file, timeout=10)
        assert anon.status_code == 403
        tokens = requests.get(
            f"{d.scheduler}/v1/acl/tokens", headers=headers, verify=d.ca_file, timeout=10
        ).json()
        mine = [t for t in tokens if t["Name"] == "workspace remote runs"]
        assert len(mine) == 1 and mine[0]["Type"] == "client"
        assert mine[0]["Policies"] == ["trellis-remote-runs"]
