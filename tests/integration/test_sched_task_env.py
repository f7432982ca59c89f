"""raw_exec tasks for real (child processes, no NATS needed): the process sees exactly the
environment built for it and nothing of the agent's, its directories are private from creation,
and with a root agent a task's `user` runs it as that user, a task naming none runs as the
client's default task user (nobody), and a uid-0 user is refused unless the client allows it."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.scheduler.client.allocrunner import AllocRunner
from services.scheduler.client.drivers import MockDriver, RawExecDriver
from services.scheduler.client.taskdir import TaskUsers
from services.scheduler.client.taskenv import PLAIN_PATH, JobInfo
from tests.job_helpers import task_python

pytestmark = pytest.mark.asyncio

NODE = {"ID": "node-1", "Name": "n1", "Datacenter": "dc1", "Attributes": {}, "Meta": {}}


@pytest.fixture
def data_dir() -> Iterator[str]:
    # Under /tmp and traversable, as a client data dir a task user must reach its dir through.
    path = tempfile.mkdtemp(prefix="trellis-taskenv-")
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def alloc() -> dict[str, Any]:
    return {
        "ID": str(uuid.uuid4()),
        "Name": "envjob.g[0]",
        "TaskGroup": "g",
        "Namespace": "default",
        "JobID": "envjob",
    }


async def run(
    data_dir: str,
    tasks: list[dict[str, Any]],
    job: JobInfo | None = None,
    users: TaskUsers = TaskUsers(),
) -> AllocRunner:
    a = alloc()
    runner = AllocRunner(
        a,
        {"Name": "g", "Tasks": tasks},
        "batch",
        NODE,
        {"raw_exec": RawExecDriver(), "mock": MockDriver()},
        data_dir,
        lambda _id, _update: None,
        job or JobInfo(id="envjob"),
        users=users,
    )
    runner.start()
    deadline = time.monotonic() + 30
    while runner.client_status() not in ("complete", "failed"):
        assert time.monotonic() < deadline, "the task did not finish"
        await asyncio.sleep(0.02)
    return runner


DUMP = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


async def test_process_sees_exactly_the_built_environment(
    data_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRELLIS_SCHEDULER_MANAGEMENT_TOKEN", "agent-secret-token")
    monkeypatch.setenv("TRELLIS_NATS_CREDENTIALS_FILE", "/data/nats/client.creds")
    task = {
        "Name": "dump",
        "Driver": "raw_exec",
        # Into its own dir: under a root agent the task runs as nobody.
        "Config": {"command": task_python(), "args": ["-c", DUMP, "local/env.json"]},
        # Python would add LC_CTYPE to a locale-less environment (PEP 538): not for this dump.
        "Env": {"GREETING": "hello ${NOMAD_ALLOC_INDEX}", "PYTHONCOERCECLOCALE": "0"},
        "Resources": {"CPU": 100, "MemoryMB": 64},
    }
    runner = await run(data_dir, [task], JobInfo(id="envjob", meta={"owner": "ops"}))
    assert runner.client_status() == "complete", runner.tasks["dump"].state
    out = Path(runner.tasks["dump"].task_dir, "local", "env.json")
    seen = json.loads(await asyncio.to_thread(out.read_text))
    assert seen == runner.tasks["dump"].env  # not one variable more or less
    assert not [k for k in seen if k.startswith("TRELLIS_")]
    assert "agent-secret-token" not in seen.values()
    assert seen["PATH"] == PLAIN_PATH and seen["GREETING"] == "hello 0"
    assert seen["NOMAD_META_OWNER"] == "ops" and seen["NOMAD_MEMORY_LIMIT"] == "64"
    task_dir = Path(runner.tasks["dump"].task_dir)
    modes = {
        p: stat.S_IMODE(p.stat().st_mode)
        for p in (
            Path(runner.alloc_dir),
            Path(runner.alloc_dir) / "alloc",
            task_dir,
            task_dir / "local",
            task_dir / "secrets",
            task_dir / "tmp",
            Path(runner.alloc_dir) / "alloc" / "logs",
            Path(runner.alloc_dir) / "alloc" / "logs" / "dump.stdout.0",
            Path(runner.alloc_dir) / "alloc" / "logs" / "dump.stderr.0",
        )
    }
    assert modes.pop(Path(runner.alloc_dir)) == 0o711
    assert set(modes.values()) <= {0o700, 0o600}, modes


async def test_mock_driver_gets_the_same_environment_and_no_dirs(data_dir: str) -> None:
    task = {"Name": "m", "Driver": "mock", "Config": {"run_for": "10ms"}}
    runner = await run(data_dir, [task])
    assert runner.client_status() == "complete"
    assert runner.tasks["m"].env["NOMAD_TASK_NAME"] == "m"
    assert runner.tasks["m"].env["PATH"] == PLAIN_PATH
    assert not await asyncio.to_thread(os.path.exists, runner.alloc_dir)  # fleets stay cheap


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root agent")
async def test_task_user_runs_the_task_as_that_user(data_dir: str) -> None:
    nobody = pwd.getpwnam("nobody")
    task = {
        "Name": "who",
        "Driver": "raw_exec",
        "User": "nobody",
        "Config": {"command": "/bin/sh", "args": ["-c", 'id -u > "$NOMAD_TASK_DIR/uid"']},
    }
    runner = await run(data_dir, [task])
    assert runner.client_status() == "complete", runner.tasks["who"].state
    task_dir = Path(runner.tasks["who"].task_dir)
    assert (task_dir / "local" / "uid").read_text().strip() == str(nobody.pw_uid)
    for p in (task_dir, task_dir / "local", task_dir / "secrets", Path(runner.alloc_dir) / "alloc"):
        st = p.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (nobody.pw_uid, 0o700), p


async def test_unknown_user_is_a_setup_failure(data_dir: str) -> None:
    task = {
        "Name": "x",
        "Driver": "raw_exec",
        "User": "no-such-user-" + uuid.uuid4().hex[:6],
        "Config": {"command": "/bin/true"},
    }
    runner = await run(data_dir, [task])
    assert runner.client_status() == "failed"
    events = runner.tasks["x"].state["Events"]
    assert events[-1]["Type"] == "Setup Failure" and "unknown user" in events[-1]["DisplayMessage"]


ID_TASK = {
    "Name": "who",
    "Driver": "raw_exec",
    "Config": {"command": "/bin/sh", "args": ["-c", 'id -u > "$NOMAD_TASK_DIR/uid"']},
}


def _uid_of(runner: AllocRunner) -> str:
    return (Path(runner.tasks["who"].task_dir) / "local" / "uid").read_text().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="the default task user needs a root agent")
async def test_a_task_naming_no_user_runs_as_the_default_task_user(data_dir: str) -> None:
    runner = await run(data_dir, [ID_TASK])
    assert runner.client_status() == "complete", runner.tasks["who"].state
    assert _uid_of(runner) == str(pwd.getpwnam("nobody").pw_uid)
    task_dir = await asyncio.to_thread(Path(runner.tasks["who"].task_dir).stat)
    assert task_dir.st_uid == pwd.getpwnam("nobody").pw_uid
    # Another default, as the client's task_user setting names it.
    other = await run(data_dir, [ID_TASK], users=TaskUsers(default="daemon"))
    assert _uid_of(other) == str(pwd.getpwnam("daemon").pw_uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root agent")
async def test_a_uid_0_user_is_refused_unless_the_client_allows_it(data_dir: str) -> None:
    task = {**ID_TASK, "User": pwd.getpwuid(0).pw_name}
    runner = await run(data_dir, [task])
    assert runner.client_status() == "failed"
    last = runner.tasks["who"].state["Events"][-1]
    assert last["Type"] == "Setup Failure" and "uid 0" in last["DisplayMessage"], last
    assert not (Path(runner.tasks["who"].task_dir) / "local" / "uid").exists()
    # A root default is refused the same way.
    runner = await run(data_dir, [ID_TASK], users=TaskUsers(default="root"))
    assert runner.client_status() == "failed"
    allowed = await run(data_dir, [task], users=TaskUsers(allow_root=True))
    assert allowed.client_status() == "complete", allowed.tasks["who"].state
    assert _uid_of(allowed) == "0"
