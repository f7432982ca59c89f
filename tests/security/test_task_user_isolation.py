"""A job owner who runs a task as its own `user` reads nothing of the agent's (issue 19, item 1,
past the environment): through a real `trellis dev` (data dir made by dev itself, under /tmp),
a raw_exec task running as `nobody` tries the files that lead to root — the dev keys, the
cluster key, every service's NATS credentials, the client's node secret, the client agent's
environment — and to list the data dir. Every attempt is refused, and the task still runs."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import nomad
import pytest

from tests.job_helpers import finished_alloc, one_task_job, raw_exec_task
from tests.procs import DevProcess, dev_client_agent

pytestmark = pytest.mark.e2e

# Each probe prints "read <what>" or "denied <what>"; the test wants only "denied".
PROBE = r"""
out="$NOMAD_TASK_DIR/probe.txt"
: > "$out"
for f in "$DATA/dev-keys.json" "$DATA/cluster.key" "$DATA/nats.conf" \
         "$DATA"/nats-users/*.json "$DATA/client/secret-id" "/proc/$AGENT/environ"; do
  if cat "$f" > /dev/null 2>&1; then echo "read $f" >> "$out"; else echo "denied $f" >> "$out"; fi
done
if ls "$DATA" > /dev/null 2>&1; then echo "read listing"; else echo "denied listing"; fi >> "$out"
echo "uid $(id -u)" >> "$out"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a task's user needs a root agent")
def test_a_task_running_as_its_own_user_reads_nothing_of_the_agents(
    trellis_acl_dev: DevProcess,
) -> None:
    d = trellis_acl_dev
    agent, _ = dev_client_agent(d.nats_url)
    data_dir = d.data_dir
    client = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=10)
    task = raw_exec_task(
        "t",
        "/bin/sh",
        "-c",
        PROBE,
        User="nobody",
        Env={"DATA": data_dir, "AGENT": str(agent)},
        Resources={"CPU": 100, "MemoryMB": 64},
    )
    client.jobs.register_job({"Job": one_task_job("probe", task)})
    alloc = finished_alloc(client, "probe")
    assert alloc["ClientStatus"] == "complete", alloc.get("TaskStates")
    probe = Path(data_dir, "client", "alloc", alloc["ID"], "t", "local", "probe.txt")
    lines = probe.read_text().splitlines()

    assert f"uid {pwd.getpwnam('nobody').pw_uid}" in lines
    results = [line for line in lines if not line.startswith("uid ")]
    assert len(results) >= 7, results  # keys, cluster key, nats.conf, users, secret, environ, ls
    assert not [line for line in results if not line.startswith("denied ")], results
