"""Stopping an allocation always ends its processes, whatever the runner was doing: a stop that
lands while a raw_exec task is still being launched kills the process launched after it, and a
second stop (the agent shutting down while the scheduler's stop is under way) returns only once
the tasks are dead. Real child processes; no NATS needed."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from services.scheduler.client.allocrunner import AllocRunner
from services.scheduler.client.drivers import RawExecDriver
from services.scheduler.client.drivers.raw_exec import _ProcHandle
from services.scheduler.client.taskdir import RunAs

pytestmark = pytest.mark.asyncio

NODE = {"ID": "node-1", "Name": "n1", "Datacenter": "dc1", "Attributes": {}, "Meta": {}}
KILL_TIMEOUT_NS = 1_000_000_000
STOP_LIMIT = 20.0  # far beyond the 1 s kill timeout: only a lost kill takes longer


def exited(handle: _ProcHandle) -> bool:
    return handle.proc.returncode is not None


class GatedRawExec(RawExecDriver):
    """raw_exec whose launch waits for the test's go: the runner is caught mid-start."""

    def __init__(self) -> None:
        self.starting = asyncio.Event()
        self.go = asyncio.Event()
        self.launched = asyncio.Event()
        self.handles: list[_ProcHandle] = []

    async def start(
        self,
        task: dict[str, Any],
        config: dict[str, Any],
        env: dict[str, str],
        task_dir: str,
        run_as: RunAs | None = None,
    ) -> _ProcHandle:
        self.starting.set()
        await self.go.wait()
        handle = await super().start(task, config, env, task_dir, run_as)
        self.handles.append(handle)
        self.launched.set()
        return handle


@pytest.fixture
def driver() -> Iterator[GatedRawExec]:
    gated = GatedRawExec()
    yield gated
    for h in gated.handles:  # a failed test leaves no process behind
        if not exited(h):
            h.proc.kill()


@pytest.fixture
def data_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="trellis-taskkill-")
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def runner_for(data_dir: str, driver: RawExecDriver, command: list[str]) -> AllocRunner:
    task = {
        "Name": "sleeper",
        "Driver": "raw_exec",
        "Config": {"command": command[0], "args": command[1:]},
        "KillTimeout": KILL_TIMEOUT_NS,
        "Resources": {"CPU": 100, "MemoryMB": 32},
    }
    alloc = {
        "ID": str(uuid.uuid4()),
        "Name": "killjob.g[0]",
        "TaskGroup": "g",
        "Namespace": "default",
        "JobID": "killjob-" + uuid.uuid4().hex[:8],
    }
    return AllocRunner(
        alloc,
        {"Name": "g", "Tasks": [task]},
        "service",
        NODE,
        {"raw_exec": driver},
        data_dir,
        lambda _id, _update: None,
    )


async def test_stop_while_starting_kills_the_process_launched_after_it(
    data_dir: str, driver: GatedRawExec
) -> None:
    runner = runner_for(data_dir, driver, ["/bin/sleep", "300"])
    runner.start()
    await asyncio.wait_for(driver.starting.wait(), STOP_LIMIT)
    stop = asyncio.ensure_future(runner.stop())
    # The kill reached the task while it had no process to signal; only now does it launch.
    await asyncio.wait_for(runner.tasks["sleeper"]._kill.wait(), STOP_LIMIT)
    assert not stop.done() and not driver.handles
    driver.go.set()
    await asyncio.wait_for(stop, STOP_LIMIT)
    assert len(driver.handles) == 1
    assert exited(driver.handles[0]), "the process launched after the stop still runs"
    state = runner.tasks["sleeper"].state
    assert state["State"] == "dead"
    assert "Started" not in [e["Type"] for e in state["Events"]]


async def test_a_second_stop_waits_until_the_tasks_are_dead(
    data_dir: str, driver: GatedRawExec
) -> None:
    driver.go.set()
    # Ignores SIGTERM: only the SIGKILL after the kill timeout ends it.
    runner = runner_for(data_dir, driver, ["/bin/sh", "-c", "trap '' TERM; sleep 300 & wait"])
    runner.start()
    await asyncio.wait_for(driver.launched.wait(), STOP_LIMIT)
    assert runner.client_status() == "running"
    handle = driver.handles[0]
    first = asyncio.ensure_future(runner.stop())
    second = asyncio.ensure_future(runner.stop())
    await asyncio.wait_for(second, STOP_LIMIT)
    assert exited(handle), "the second stop returned while the task still ran"
    await asyncio.wait_for(first, STOP_LIMIT)
    assert runner.tasks["sleeper"].state["State"] == "dead"
