"""The task environment builder: built from nothing, Nomad's NOMAD_* variables and values, meta
layering and key cleaning, the job's env block last."""

from __future__ import annotations

import pytest

from services.scheduler.client.taskenv import (
    PLAIN_PATH,
    JobInfo,
    TaskDirs,
    alloc_index,
    build_task_env,
    clean_env_key,
    interpolate,
)

ALLOC = {
    "ID": "0f5ee4a7-4b2c-4f0c-9d7f-3f6a2b1c9e10",
    "Name": "web.app[2]",
    "TaskGroup": "app",
    "Namespace": "default",
    "JobID": "web",
}
NODE = {
    "ID": "node-1",
    "Name": "n1",
    "Datacenter": "dc7",
    "Attributes": {"kernel.name": "linux"},
    "Meta": {"rack": "r1"},
}
DIRS = TaskDirs("/data/alloc/a1", "/data/alloc/a1/web")


def build(task: dict[str, object] | None = None, **job: object) -> dict[str, str]:
    info = JobInfo(**{"id": "web", **job})  # type: ignore[arg-type]
    t = {"Name": "server", **(task or {})}
    return build_task_env(
        alloc=ALLOC,
        job=info,
        group={"Name": "app", "Meta": {"tier": "g"}},
        task=t,
        node=NODE,
        dirs=DIRS,
    )


def test_nothing_from_the_agent_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRELLIS_SCHEDULER_MANAGEMENT_TOKEN", "root-secret")
    monkeypatch.setenv("TRELLIS_NATS_URL", "nats://127.0.0.1:4222")
    monkeypatch.setenv("PATH", "/opt/agent/venv/bin:/usr/bin")
    monkeypatch.setenv("HOME", "/root")
    env = build()
    assert not [k for k in env if k.startswith("TRELLIS_")]
    assert "root-secret" not in env.values()
    assert env["PATH"] == PLAIN_PATH
    assert env["HOME"] == DIRS.task and env["TMPDIR"] == "/data/alloc/a1/web/tmp"
    # Only what the builder defines: NOMAD_* and the plain base.
    assert {k for k in env if not k.startswith("NOMAD_")} == {"PATH", "HOME", "TMPDIR"}


def test_nomad_variables() -> None:
    env = build({"Resources": {"CPU": 250, "MemoryMB": 128}}, name="Web", parent_id="web-parent")
    assert env["NOMAD_ALLOC_DIR"] == "/data/alloc/a1/alloc"
    assert env["NOMAD_TASK_DIR"] == "/data/alloc/a1/web/local"
    assert env["NOMAD_SECRETS_DIR"] == "/data/alloc/a1/web/secrets"
    assert env["NOMAD_ALLOC_ID"] == ALLOC["ID"]
    assert env["NOMAD_SHORT_ALLOC_ID"] == ALLOC["ID"][:8]
    assert env["NOMAD_ALLOC_NAME"] == "web.app[2]"
    assert env["NOMAD_ALLOC_INDEX"] == "2"
    assert env["NOMAD_TASK_NAME"] == "server"
    assert env["NOMAD_GROUP_NAME"] == "app"
    assert env["NOMAD_JOB_ID"] == "web"
    assert env["NOMAD_JOB_NAME"] == "Web"
    assert env["NOMAD_JOB_PARENT_ID"] == "web-parent"
    assert env["NOMAD_NAMESPACE"] == "default"
    assert env["NOMAD_REGION"] == "global"
    assert env["NOMAD_DC"] == "dc7"
    assert env["NOMAD_CPU_LIMIT"] == "250"
    assert env["NOMAD_MEMORY_LIMIT"] == "128"


def test_unset_values_are_omitted_as_nomad_does() -> None:
    env = build()
    for key in ("NOMAD_JOB_PARENT_ID", "NOMAD_CPU_LIMIT", "NOMAD_MEMORY_LIMIT"):
        assert key not in env
    assert "NOMAD_MEMORY_MAX_LIMIT" not in env
    assert env["NOMAD_JOB_NAME"] == "web"  # the name defaults to the ID


def test_meta_layers_upper_and_given_case_and_cleaned_keys() -> None:
    env = build(
        {"Meta": {"tier": "t", "team-key": "${node.datacenter}"}},
        meta={"tier": "j", "Owner": "ops"},
    )
    assert env["NOMAD_META_tier"] == env["NOMAD_META_TIER"] == "t"  # task > group > job
    assert env["NOMAD_META_Owner"] == env["NOMAD_META_OWNER"] == "ops"
    assert env["NOMAD_META_team_key"] == env["NOMAD_META_TEAM_KEY"] == "dc7"


def test_job_env_block_wins_and_interpolates() -> None:
    env = build(
        {
            "Env": {
                "GREETING": "hi ${NOMAD_ALLOC_INDEX} in ${node.datacenter}",
                "PATH": "/opt/tool/bin",
                "RACK": "${meta.rack}",
                "NOMAD_REGION": "mine",
            }
        }
    )
    assert env["GREETING"] == "hi 2 in dc7"
    assert env["PATH"] == "/opt/tool/bin"
    assert env["RACK"] == "r1"
    assert env["NOMAD_REGION"] == "mine"


def test_helpers() -> None:
    assert clean_env_key("NOMAD_META_a-b c/d.e") == "NOMAD_META_a_b_c_d.e"
    assert clean_env_key("9x") == "_x"
    assert alloc_index("j.g[10]") == "10"
    assert alloc_index("weird") == "0"
    assert interpolate(["${attr.kernel.name}", {"k": "${unknown}"}], {}, NODE) == [
        "linux",
        {"k": "${unknown}"},
    ]
