"""A job owner gets no credential through a task's environment (issue 19, item 1). Through a real
`trellis dev --acl`: a raw_exec job submitted with python-nomad dumps its environment; it holds
no TRELLIS_* variable, no token, no NATS URL or credentials path, nothing of the client agent's
own environment, Nomad's NOMAD_* variables with the right values, and a plain PATH."""

from __future__ import annotations

import json
import re

import nomad
import pytest

from services.scheduler.client.taskenv import PLAIN_PATH
from tests.job_helpers import finished_alloc, one_task_job, raw_exec_task, task_log, task_python
from tests.procs import DevProcess, dev_client_agent

pytestmark = pytest.mark.e2e

SCRIPT = """
import json, os, stat
keys = ("NOMAD_ALLOC_DIR", "NOMAD_TASK_DIR", "NOMAD_SECRETS_DIR")
dirs = {k: os.environ.get(k, "") for k in keys}
modes = {}
for k, v in dirs.items():
    try:
        modes[k] = oct(stat.S_IMODE(os.stat(v).st_mode))
    except OSError as exc:  # reported, so the checks below say what is wrong
        modes[k] = exc.strerror
out = {"env": dict(os.environ), "cwd": os.getcwd(), "modes": modes}
print(json.dumps(out))
"""

# Names of the agent's variables whose values are credentials or lead to them.
SENSITIVE = re.compile(r"TOKEN|SECRET|PASSWORD|CREDENTIAL|KEY|NATS", re.IGNORECASE)


def test_task_environment_holds_no_credential(trellis_acl_dev: DevProcess) -> None:
    d = trellis_acl_dev
    _, agent_env = dev_client_agent(d.nats_url)
    client = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=10)
    task = raw_exec_task(
        "t",
        task_python(),  # the task runs as nobody: it reports on its stdout
        "-c",
        SCRIPT,
        Env={"GREETING": "hello from ${NOMAD_GROUP_NAME}"},
        Meta={"team-key": "k1"},
        Resources={"CPU": 200, "MemoryMB": 96},
    )
    job = one_task_job(
        "envjob", task, group_extra={"Meta": {"tier": "web"}}, Meta={"owner": "team-a"}
    )
    client.jobs.register_job({"Job": job})
    alloc = finished_alloc(client, "envjob")
    assert alloc["ClientStatus"] == "complete", alloc.get("TaskStates")
    dump = json.loads(task_log(d.scheduler, d.root_token, alloc["ID"], "t"))

    env: dict[str, str] = dump["env"]
    # Nothing of Trellis's own configuration, no credential, no way onto the bus.
    assert not [k for k in env if k.startswith("TRELLIS_")], sorted(env)
    values = list(env.values())
    # (Failures name keys, never the values: they would be the credentials.)
    assert not [k for k, v in env.items() if d.root_token in v], "the root token leaked"
    assert not [k for k, v in env.items() if "nats://" in v or "tls://" in v]
    assert not [k for k, v in env.items() if v.endswith((".creds", ".nk", ".jwt"))]
    for name, value in agent_env.items():
        if name.startswith("TRELLIS_") and SENSITIVE.search(name) and len(value) >= 6:
            assert not [k for k, v in env.items() if value in v], name
        if name.startswith("TRELLIS_") and len(value) >= 6:
            leaked = value in values
            assert not leaked, name
    # Paths into the data dir lead only to this allocation's own directory.
    alloc_dir = env["NOMAD_ALLOC_DIR"].rsplit("/", 1)[0]
    assert alloc_dir.endswith(f"/client/alloc/{alloc['ID']}")
    data_dir = alloc_dir.split("/client/alloc/")[0]
    for v in values:
        if data_dir in v:
            assert v.startswith(alloc_dir), v
    # Nomad's variables, with Nomad's values.
    expected = {
        "NOMAD_ALLOC_ID": alloc["ID"],
        "NOMAD_SHORT_ALLOC_ID": alloc["ID"][:8],
        "NOMAD_ALLOC_NAME": "envjob.g[0]",
        "NOMAD_ALLOC_INDEX": "0",
        "NOMAD_TASK_NAME": "t",
        "NOMAD_GROUP_NAME": "g",
        "NOMAD_JOB_ID": "envjob",
        "NOMAD_JOB_NAME": "envjob",
        "NOMAD_NAMESPACE": "default",
        "NOMAD_REGION": "global",
        "NOMAD_DC": "dc1",
        "NOMAD_CPU_LIMIT": "200",
        "NOMAD_MEMORY_LIMIT": "96",
        "NOMAD_ALLOC_DIR": f"{alloc_dir}/alloc",
        "NOMAD_TASK_DIR": f"{alloc_dir}/t/local",
        "NOMAD_SECRETS_DIR": f"{alloc_dir}/t/secrets",
        "NOMAD_META_owner": "team-a",
        "NOMAD_META_OWNER": "team-a",
        "NOMAD_META_TIER": "web",
        "NOMAD_META_team_key": "k1",
        "NOMAD_META_TEAM_KEY": "k1",
        "GREETING": "hello from g",
        "PATH": PLAIN_PATH,
        "HOME": f"{alloc_dir}/t",
        "TMPDIR": f"{alloc_dir}/t/tmp",
    }
    assert {k: env.get(k) for k in expected} == expected
    assert "NOMAD_JOB_PARENT_ID" not in env  # Nomad sets it only for child jobs
    assert dump["cwd"] == f"{alloc_dir}/t"
    assert set(dump["modes"].values()) == {"0o700"}, dump["modes"]
