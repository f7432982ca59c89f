"""Issue 21 (Nomad part) through a real `trellis dev` and python-nomad (unmodified): Variables
with check-and-set, the agent, status and raft endpoints, job validation, client and
allocation stats read on the node, deployment pause and fail, scaling policies, namespaces,
and /v1/metrics in both formats."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import nomad
import nomad.api.exceptions as nexc
import pytest
import requests

from tests.job_helpers import task_python
from tests.procs import DevProcess, until, wait_node_ready

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def d(trellis_dev: DevProcess) -> DevProcess:
    """The session's plain `trellis dev` (this file's job and variable names are its own)."""
    wait_node_ready(trellis_dev)
    return trellis_dev


@pytest.fixture(scope="module")
def n(d: DevProcess) -> nomad.Nomad:
    return nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=40)


def http(d: DevProcess, method: str, path: str, **kw: Any) -> requests.Response:
    headers = {"X-Nomad-Token": d.root_token}
    return requests.request(method, d.scheduler + path, headers=headers, timeout=60, **kw)


S = 10**9
SLEEPER = "import time\nx = bytearray(8 * 1024 * 1024)\nprint('up', flush=True)\ntime.sleep(600)"


def service_job(job_id: str, **group: Any) -> dict[str, Any]:
    return {
        "ID": job_id,
        "Name": job_id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "Count": 1,
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "raw_exec",
                        "Config": {"command": task_python(), "args": ["-c", SLEEPER]},
                        "Resources": {"CPU": 50, "MemoryMB": 64},
                    }
                ],
                **group,
            }
        ],
    }


def test_variables_with_python_nomad(n: nomad.Nomad) -> None:
    created = n.variable.create_variable("app/config", {"Items": {"user": "u", "pass": "p"}})
    assert created["Items"] == {"user": "u", "pass": "p"}
    assert n.variable.get_variable("app/config")["Items"]["pass"] == "p"
    assert "app/config" in n.variables
    assert [v["Path"] for v in n.variables.get_variables(prefix="app/")] == ["app/config"]
    with pytest.raises(nexc.VariableConflict):
        n.variable.create_variable("app/config", {"Items": {"a": "b"}}, cas=0)
    index = created["ModifyIndex"]
    again = n.variable.create_variable("app/config", {"Items": {"a": "b"}}, cas=index)
    assert again["Items"] == {"a": "b"}
    with pytest.raises(nexc.VariableConflict):
        n.variable.delete_variable("app/config", cas=index)
    assert n.variable.delete_variable("app/config", cas=again["ModifyIndex"]).status_code == 204
    assert "app/config" not in n.variable


def test_agent_status_and_raft(d: DevProcess, n: nomad.Nomad) -> None:
    me = n.agent.get_agent()
    assert me["config"]["Region"] == "global"
    members = n.agent.get_members()
    assert len(members["Members"]) == 1 and members["Members"][0]["Status"] == "alive"
    servers = n.agent.get_servers()
    assert servers and all(s.endswith(":4647") for s in servers)
    assert n.status.leader.get_leader() == servers[0]
    assert n.status.peers.get_peers() == servers
    joined = n.agent.join_agent(servers[0])
    assert joined["num_joined"] == 1 and joined["error"] == ""
    assert n.agent.join_agent("10.9.9.9:4648")["num_joined"] == 0
    assert n.agent.update_servers(servers) == 200
    raft = n.operator.get_configuration()
    assert [s["Address"] for s in raft["Servers"]] == servers and raft["Servers"][0]["Leader"]
    health = http(d, "GET", "/v1/agent/health")
    assert health.status_code == 200 and health.json()["server"]["ok"] is True


def test_validate_job(n: nomad.Nomad) -> None:
    good = n.validate.validate_job({"Job": service_job("valid")})
    assert good.status_code == 200 and good.json()["ValidationErrors"] is None
    broken = service_job("broken")
    broken["TaskGroups"][0]["Tasks"][0]["Driver"] = ""
    bad = n.validate.validate_job({"Job": broken}).json()
    assert bad["Error"] and any("Missing task driver" in e for e in bad["ValidationErrors"])
    with pytest.raises(nexc.BadRequestNomadException):
        n.validate.validate_job({"NotAJob": 1})
    assert "valid" not in n.jobs  # validation writes nothing


def test_stats_deployments_and_scaling(d: DevProcess, n: nomad.Nomad) -> None:
    host = n.client.stats.read_stats()
    assert host["Memory"]["Total"] > 0 and host["CPU"] and host["Uptime"] > 0
    # A long min_healthy_time keeps the deployment running while the test pauses it.
    update = {"MaxParallel": 1, "MinHealthyTime": 60 * S, "HealthyDeadline": 120 * S}
    update["ProgressDeadline"] = 180 * S
    spec = service_job("statsy", Scaling={"Min": 1, "Max": 3, "Enabled": True}, Update=update)
    n.jobs.register_job({"Job": spec})

    def live() -> Any:
        allocs = [a for a in n.job.get_allocations("statsy") if a["ClientStatus"] == "running"]
        return allocs[0] if allocs else None

    alloc = until(live, what="a running allocation")
    usage = until(
        lambda: (
            (s := n.client.allocation.read_allocation_stats(alloc["ID"]))["Tasks"]["t"][
                "ResourceUsage"
            ]["MemoryStats"]["RSS"]
            > 8 * 1024 * 1024
            and s
        ),
        what="the task's memory in its stats",
    )
    assert (
        usage["ResourceUsage"]["MemoryStats"]["RSS"]
        >= usage["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"]
    )
    with pytest.raises(nexc.URLNotFoundNomadException):
        n.client.allocation.read_allocation_stats("00000000-dead-beef-0000-000000000000")
    # Scaling policies come from the group's scaling block.
    policies = n.scaling.get_scaling_policies(job="statsy")
    assert len(policies) == 1 and policies[0]["Target"]["Group"] == "g"
    policy = n.scaling.get_scaling_policy(policies[0]["ID"])
    assert (policy["Min"], policy["Max"], policy["Type"]) == (1, 3, "horizontal")
    # Deployment pause, resume and fail.
    dep = until(lambda: n.job.get_deployment("statsy"), what="a deployment")
    assert dep["Status"] == "running"
    paused = n.deployment.pause_deployment(dep["ID"], True)
    assert paused["DeploymentModifyIndex"] > 0
    assert n.deployment.get_deployment(dep["ID"])["Status"] == "paused"
    resumed = n.deployment.pause_deployment(dep["ID"], False)
    assert resumed["EvalID"]
    assert n.deployment.get_deployment(dep["ID"])["Status"] == "running"
    n.deployment.fail_deployment(dep["ID"])
    assert n.deployment.get_deployment(dep["ID"])["Status"] == "failed"
    with pytest.raises(nexc.BadRequestNomadException):
        n.deployment.pause_deployment(dep["ID"], True)  # terminal now
    n.client.gc_all_allocations.garbage_collect()
    n.job.deregister_job("statsy")


def test_namespaces_with_python_nomad(n: nomad.Nomad) -> None:
    n.namespace.create_namespace({"Name": "team-a", "Description": "A"})
    assert "team-a" in n.namespaces and n.namespace.get_namespace("team-a")["Description"] == "A"
    n.namespace.update_namespace("team-a", {"Name": "team-a", "Description": "B"})
    assert n.namespaces["team-a"]["Description"] == "B"
    n.namespace.delete_namespace("team-a")
    assert "team-a" not in n.namespaces
    with pytest.raises(nexc.BadRequestNomadException):
        n.namespace.delete_namespace("default")


def test_metrics(d: DevProcess, n: nomad.Nomad) -> None:
    summary = n.metrics.get_metrics()
    names = {g["Name"] for g in summary["Gauges"]}
    assert "nomad_nomad_job_status_running" in names and "process_resident_memory_bytes" in names
    text = http(d, "GET", "/v1/metrics", params={"format": "prometheus"})
    assert text.status_code == 200 and text.headers["Content-Type"].startswith("text/plain")
    assert "\nnomad_raft_appliedIndex " in text.text
    assert http(d, "GET", "/v1/metrics", params={"format": "xml"}).status_code == 400


def batch_with_template(job_id: str, tmpl: str, script: str) -> dict[str, Any]:
    return {
        "ID": job_id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
                "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "raw_exec",
                        "Config": {"command": task_python(), "args": ["-c", script]},
                        "Resources": {"CPU": 50, "MemoryMB": 32},
                        "Templates": [
                            {"EmbeddedTmpl": tmpl, "DestPath": "local/out.txt"},
                            {"EmbeddedTmpl": tmpl, "DestPath": "secrets/v.env", "Envvars": True},
                        ],
                    }
                ],
            }
        ],
    }


def test_templates_read_their_jobs_variables(d: DevProcess, n: nomad.Nomad) -> None:
    greeting = "hello-" + uuid.uuid4().hex
    n.variable.create_variable("nomad/jobs/tmpl", {"Items": {"greeting": greeting}})
    n.variable.create_variable("nomad/jobs/other", {"Items": {"greeting": "not yours"}})
    tmpl = 'GREETING={{ with nomadVar "nomad/jobs/tmpl" }}{{ .greeting }}{{ end }}\n'
    script = (
        "import os\n"
        "print(open(os.path.join(os.environ['NOMAD_TASK_DIR'], 'out.txt')).read().strip())\n"
        "print('env', os.environ.get('GREETING'), flush=True)\n"
    )
    n.jobs.register_job({"Job": batch_with_template("tmpl", tmpl, script)})

    def done() -> Any:
        allocs = n.job.get_allocations("tmpl")
        return allocs[0] if allocs and allocs[0]["ClientStatus"] == "complete" else None

    alloc = until(done, what="the template job to finish")
    out = n.client.stream_logs.stream(alloc["ID"], "t", "stdout", plain=True)
    assert out.splitlines() == [f"GREETING={greeting}", f"env {greeting}"]
    # Another job's variables are out of a task's reach: the task fails to set up.
    other = 'X={{ with nomadVar "nomad/jobs/other" }}{{ .greeting }}{{ end }}\n'
    n.jobs.register_job({"Job": batch_with_template("tmpl2", other, "print('ran')")})

    def failed() -> Any:
        allocs = n.job.get_allocations("tmpl2")
        return allocs[0] if allocs and allocs[0]["ClientStatus"] == "failed" else None

    alloc = until(failed, what="the forbidden template to fail")
    messages = " ".join(
        e.get("DisplayMessage") or e.get("Message") or ""
        for e in alloc["TaskStates"]["t"]["Events"]
    )
    assert "only its job's variables" in messages
    # The value never reached a log file of any service.
    logs = Path(re.search(r"logs in (\S+?)\)", "\n".join(d.output)).group(1))  # type: ignore[union-attr]
    for f in logs.iterdir():
        assert greeting not in f.read_text(errors="replace"), f.name
