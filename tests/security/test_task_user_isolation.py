"""A job owner who runs a task as its own `user` reads nothing of the agent's (issue 19, item 1,
past the environment): through a real `trellis dev` (data dir made by dev itself, under /tmp),
a raw_exec task running as `nobody` tries the files that lead to root — the dev keys, the
cluster key, every service's NATS credentials, the client's node secret, the client agent's
environment — and to list the data dir. Every attempt is refused, and the task still runs.
A task that names no `user` runs as the client's default task user (nobody), not as the root
agent: it reads neither the dev keys nor a service's /proc files; a task asking for root is
refused. A task that swaps its logs dir and files for symlinks to the dev keys or to a
root-owned file leads the root agent nowhere: the logs and fs APIs serve no key, and the log
writer's next rotation writes no file outside."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import nomad
import pytest
import requests

from tests.job_helpers import finished_alloc, one_task_job, raw_exec_task, task_log
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


# Printed on the task's stdout (read through the logs API): a task of nobody's cannot write
# into the test's dirs, and one that ran as root could write anywhere.
DEFAULT_PROBE = r"""
for f in "$DATA/dev-keys.json" "$DATA/client/secret-id" "/proc/$SECRETS/environ" \
         "/proc/$SECRETS/maps"; do
  if cat "$f" > /dev/null 2>&1; then echo "read $f"; else echo "denied $f"; fi
done
echo "uid $(id -u)"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the default task user needs a root agent")
def test_a_task_naming_no_user_runs_unprivileged(trellis_acl_dev: DevProcess) -> None:
    d = trellis_acl_dev
    secrets_pid, _ = dev_client_agent(d.nats_url, "secrets")
    client = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=10)
    task = raw_exec_task(
        "t",
        "/bin/sh",
        "-c",
        DEFAULT_PROBE,
        Env={"DATA": d.data_dir, "SECRETS": str(secrets_pid)},
        Resources={"CPU": 100, "MemoryMB": 64},
    )
    client.jobs.register_job({"Job": one_task_job("default-user-probe", task)})
    alloc = finished_alloc(client, "default-user-probe")
    assert alloc["ClientStatus"] == "complete", alloc.get("TaskStates")
    lines = task_log(d.scheduler, d.root_token, alloc["ID"], "t").splitlines()

    assert f"uid {pwd.getpwnam('nobody').pw_uid}" in lines, lines
    results = [line for line in lines if not line.startswith("uid ")]
    assert len(results) == 4, results
    assert not [line for line in results if not line.startswith("denied ")], results


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a task's user needs a root agent")
def test_a_task_asking_for_root_is_refused(trellis_acl_dev: DevProcess) -> None:
    d = trellis_acl_dev
    client = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=10)
    task = raw_exec_task(
        "t",
        "/bin/sh",
        "-c",
        'echo ran > "$NOMAD_TASK_DIR/ran"',
        User="root",
        Resources={"CPU": 100, "MemoryMB": 64},
    )
    client.jobs.register_job({"Job": one_task_job("root-probe", task)})
    alloc = finished_alloc(client, "root-probe")
    assert alloc["ClientStatus"] == "failed", alloc.get("TaskStates")
    events = alloc["TaskStates"]["t"]["Events"]
    setup = [e for e in events if e["Type"] == "Setup Failure"]
    assert setup and "uid 0" in setup[-1]["DisplayMessage"], events
    assert not [e for e in events if e["Type"] == "Started"], events
    assert not Path(d.data_dir, "client", "alloc", alloc["ID"], "t", "local", "ran").exists()


# The task swaps what the root agent later opens in its dirs for symlinks: its logs dir (for
# the logs API, and for the writer's next rotation), a file for fs/cat.
SWAP = r"""
ln -s "$DATA/dev-keys.json" "$NOMAD_TASK_DIR/keys"
cd "$NOMAD_ALLOC_DIR" && mv logs logs.old && mkdir logs && chmod 755 logs || exit 3
for i in 1 2 3; do ln -s "$VICTIM" "logs/t.stdout.$i"; done
ln -s "$DATA/dev-keys.json" logs/t.stderr.0
ln -s "$DATA/dev-keys.json" logs/t.stdout.0
echo swapped > "$NOMAD_TASK_DIR/swapped"
head -c 1500000 /dev/zero | tr '\0' x  # past MaxFileSizeMB: the writer opens a new file
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a task's user needs a root agent")
def test_symlinks_a_task_plants_lead_the_agent_nowhere(
    trellis_acl_dev: DevProcess, tmp_path: Path
) -> None:
    d = trellis_acl_dev
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    client = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=10)
    task = raw_exec_task(
        "t",
        "/bin/sh",
        "-c",
        SWAP,
        User="nobody",
        Env={"DATA": d.data_dir, "VICTIM": str(victim)},
        LogConfig={"MaxFiles": 3, "MaxFileSizeMB": 1},
        Resources={"CPU": 100, "MemoryMB": 64},
    )
    client.jobs.register_job({"Job": one_task_job("swap", task)})
    alloc = finished_alloc(client, "swap")
    assert alloc["ClientStatus"] == "complete", alloc.get("TaskStates")
    task_dir = Path(d.data_dir, "client", "alloc", alloc["ID"], "t")
    assert (task_dir / "local" / "swapped").exists(), "the task did not swap its logs dir"

    # The writer rotated in the logs dir it opened, not through the task's symlinks.
    assert victim.read_text() == "untouched\n"
    headers = {"X-Nomad-Token": d.root_token}
    secrets = (d.root_token, d.unseal_key)
    for stream in ("stdout", "stderr"):
        r = requests.get(
            f"{d.scheduler}/v1/client/fs/logs/{alloc['ID']}",
            params={"task": "t", "type": stream, "plain": "true", "origin": "start"},
            headers=headers,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert not [s for s in secrets if s in r.text], f"the {stream} logs served the dev keys"
    for path in ("t/local/keys", "alloc/logs/t.stderr.0"):
        for api in ("cat", "readat"):
            r = requests.get(
                f"{d.scheduler}/v1/client/fs/{api}/{alloc['ID']}",
                params={"path": path, "offset": 0, "limit": 4096, "follow": "false"},
                headers=headers,
                timeout=30,
            )
            assert r.status_code == 403, (api, path, r.status_code)
            assert not [s for s in secrets if s in r.text], (api, path)
