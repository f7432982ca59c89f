"""The state machine and schedulers without NATS: register, versions, plan fit at apply,
lost-node replacement, rolling updates, the eval broker."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from typing import Any

import msgspec
import pytest

from services.scheduler.admit import admit
from services.scheduler.broker import EvalBroker
from services.scheduler.scheduling.generic import GenericScheduler
from services.scheduler.scheduling.system import SystemScheduler
from services.scheduler.state.fsm import SchedulerFSM, new_eval
from shared.replog import ApplyError, LogEntry

from .test_sched_placement import node


class Log:
    """Applies entries the way ReplicatedLog does, in memory."""

    def __init__(self) -> None:
        self.fsm = SchedulerFSM()
        self.index = itertools.count(1)

    def append(self, kind: str, payload: dict[str, Any]) -> Any:
        entry = LogEntry(
            type=kind,
            payload=msgspec.msgpack.encode(payload),
            time=time.time(),
            id=uuid.uuid4().hex,
        )
        return self.fsm.apply(next(self.index), entry)

    def register(self, job: dict[str, Any], **extra: Any) -> dict[str, Any]:
        admitted = admit(job)
        ev = new_eval(str(uuid.uuid4()), admitted, "job-register")
        return self.append("job.register", {"job": admitted, "eval": ev, **extra})

    async def schedule(self, eval_id: str) -> dict[str, Any]:
        ev = self.fsm.t.evals[eval_id]
        cls = SystemScheduler if ev["Type"] in ("system", "sysbatch") else GenericScheduler
        plan = await cls(
            self.fsm.t,
            ev,
            now=time.time_ns(),
            new_id=lambda: str(uuid.uuid4()),
            rng=random.Random(1),
        ).compute()
        result = self.append("plan.apply", plan.payload()) if not plan.empty() else {}
        self.append(
            "eval.upsert",
            {"evals": [{**ev, "Status": "complete", "QueuedAllocations": plan.queued}]},
        )
        return result

    def client(self, status: str, **extra: Any) -> None:
        ups = [
            {"ID": a["ID"], "ClientStatus": status, **extra}
            for a in self.fsm.t.allocs.values()
            if a["DesiredStatus"] == "run"
        ]
        self.append("alloc.client_update", {"updates": ups})


def web(count: int = 2, run_for: str = "1h", **over: Any) -> dict[str, Any]:
    return {
        "ID": "web",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "Count": count,
                "Update": {"MaxParallel": 1, "MinHealthyTime": 0},
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "mock",
                        "Config": {"run_for": run_for},
                        "Resources": {"CPU": 500, "MemoryMB": 256},
                    }
                ],
            }
        ],
        **over,
    }


def test_register_versions_and_enforce_index() -> None:
    log = Log()
    r1 = log.register(web())
    assert r1["JobModifyIndex"] == 1 and r1["EvalCreateIndex"] == 1
    job = log.fsm.t.jobs["default\x00web"]
    assert (job["Version"], job["CreateIndex"], job["Status"]) == (0, 1, "pending")
    # Same spec: no new version, a new eval all the same.
    r2 = log.register(web())
    assert r2["JobModifyIndex"] == 1 and r2["EvalID"] != r1["EvalID"]
    assert len(log.fsm.t.versions["default\x00web"]) == 1
    r3 = log.register(web(count=3))
    assert r3["JobModifyIndex"] == 3 and log.fsm.t.jobs["default\x00web"]["Version"] == 1
    with pytest.raises(ApplyError, match="Enforcing job modify index 0: job already exists"):
        log.register(web(count=4), enforce_index=True, job_modify_index=0)
    with pytest.raises(ApplyError, match="conflicting job modify index: 3"):
        log.register(web(count=4), enforce_index=True, job_modify_index=1)
    assert log.register(web(count=4), enforce_index=True, job_modify_index=3)


def test_versions_and_submissions_pruned_to_six() -> None:
    log = Log()
    for i in range(9):
        log.register(web(count=i + 1), submission={"Source": f"v{i}", "Format": "hcl2"})
    versions = log.fsm.t.versions["default\x00web"]
    assert [v["Version"] for v in versions] == [8, 7, 6, 5, 4, 3]
    assert sorted(log.fsm.t.submissions["default\x00web"]) == [3, 4, 5, 6, 7, 8]


def test_periodic_job_gets_no_eval_status_running() -> None:
    log = Log()
    job = web(Type="batch", Periodic={"Spec": "*/5 * * * *"})
    admitted = admit(job)
    out = log.append("job.register", {"job": admitted, "eval": None})
    assert out["EvalID"] == ""
    assert log.fsm.t.jobs["default\x00web"]["Status"] == "running"


async def test_place_then_fit_rechecked_at_apply() -> None:
    log = Log()
    log.append("node.register", {"nodes": [node(1)]})
    r = log.register(web(count=6))
    result = await log.schedule(r["EvalID"])
    assert result["placed"] == 6 and result["rejected"] == []
    allocs = sorted(log.fsm.t.allocs.values(), key=lambda a: a["Name"])
    assert [a["Name"] for a in allocs] == [f"web.g[{i}]" for i in range(6)]
    assert log.fsm.t.jobs["default\x00web"]["Status"] == "running"
    # A stale plan that no longer fits is rejected at apply.
    extra = {
        **allocs[0],
        "ID": str(uuid.uuid4()),
        "Name": "web.g[9]",
        "Resources": {"CPU": 2000, "MemoryMB": 100, "DiskMB": 0},
    }
    out = log.append(
        "plan.apply", {"namespace": "default", "job_id": "web", "eval_id": "x", "place": [extra]}
    )
    assert out["rejected"] == [extra["ID"]]


async def test_blocked_then_unblocked_by_new_node() -> None:
    log = Log()
    r = log.register(web(count=2))
    await log.schedule(r["EvalID"])
    ev = log.fsm.t.evals[r["EvalID"]]
    assert ev["QueuedAllocations"] == {"g": 2}
    seen: list[str] = []
    log.fsm.on_pending.append(lambda e: seen.append(e["Status"]))
    blocked = new_eval(
        str(uuid.uuid4()), log.fsm.t.jobs["default\x00web"], "queued-allocs", status="blocked"
    )
    log.append("eval.upsert", {"evals": [blocked]})
    log.append("node.register", {"nodes": [node(1)]})
    assert log.fsm.t.evals[blocked["ID"]]["Status"] == "pending" and seen == ["pending"]


async def test_a_blocked_eval_planned_before_a_new_node_is_evaluated_again() -> None:
    """The node arrives between the plan (no node: nothing fits) and the write of the
    blocked eval: its unblock came too early to see the eval, so the write re-opens it
    (else the job waits for the next capacity change, as a loaded CI machine showed)."""
    log = Log()
    r = log.register(web(count=2))
    planned_at = log.fsm.t.index["jobs"]  # the state the worker's plan saw: no node
    log.append("node.register", {"nodes": [node(1)]})
    seen: list[str] = []
    log.fsm.on_pending.append(lambda e: seen.append(e["ID"]))
    job = log.fsm.t.jobs["default\x00web"]
    late = new_eval(str(uuid.uuid4()), job, "queued-allocs", status="blocked")
    done = {**log.fsm.t.evals[r["EvalID"]], "Status": "complete", "BlockedEval": late["ID"]}
    late["SnapshotIndex"] = done["SnapshotIndex"] = planned_at
    log.append("eval.upsert", {"evals": [done, late]})
    assert log.fsm.t.evals[late["ID"]]["Status"] == "pending" and seen == [late["ID"]]
    # Planned on the state with the node: blocked it stays, until capacity changes again.
    fresh = new_eval(str(uuid.uuid4()), job, "queued-allocs", status="blocked")
    fresh["SnapshotIndex"] = log.fsm.t.index["nodes"]
    log.append("eval.upsert", {"evals": [fresh]})
    assert log.fsm.t.evals[fresh["ID"]]["Status"] == "blocked" and seen == [late["ID"]]
    log.append("node.register", {"nodes": [node(2)]})
    assert log.fsm.t.evals[fresh["ID"]]["Status"] == "pending" and seen[-1] == fresh["ID"]


async def test_lost_node_allocations_replaced_with_tracker() -> None:
    log = Log()
    log.append("node.register", {"nodes": [node(1), node(2)]})
    r = log.register(web(count=2))
    await log.schedule(r["EvalID"])
    log.client("running")
    victim = next(iter(log.fsm.t.allocs.values()))["NodeID"]
    log.append("node.status", {"node_ids": [victim], "status": "down"})
    ev = next(e for e in log.fsm.t.evals.values() if e["TriggeredBy"] == "node-update")
    assert ev["NodeID"] == victim
    await log.schedule(ev["ID"])
    allocs = list(log.fsm.t.allocs.values())
    lost = [a for a in allocs if a["ClientStatus"] == "lost"]
    live = [a for a in allocs if a["DesiredStatus"] == "run" and a["ClientStatus"] != "lost"]
    assert len(lost) == 1 and len(live) == 2
    new = next(a for a in live if a["PreviousAllocation"] == lost[0]["ID"])
    assert new["NodeID"] != victim and new["Name"] == lost[0]["Name"]
    assert new["RescheduleTracker"]["Events"][0]["PrevNodeID"] == victim
    assert lost[0]["NextAllocation"] == new["ID"]


async def test_rolling_update_and_stable_version() -> None:
    log = Log()
    log.append("node.register", {"nodes": [node(1), node(2)]})
    r = log.register(web(count=2))
    await log.schedule(r["EvalID"])
    dep = next(iter(log.fsm.t.deployments.values()))
    assert dep["TaskGroups"]["g"]["DesiredTotal"] == 2
    log.client("running", DeploymentStatus={"Healthy": True})
    dep = log.fsm.t.deployments[dep["ID"]]
    assert dep["Status"] == "successful"
    assert log.fsm.t.jobs["default\x00web"]["Stable"] is True
    # A destructive change rolls one allocation at a time (MaxParallel 1).
    r = log.register(web(count=2, run_for="2h"))
    await log.schedule(r["EvalID"])
    new = [a for a in log.fsm.t.allocs.values() if a["JobVersion"] == 1]
    stopped = [a for a in log.fsm.t.allocs.values() if a["DesiredStatus"] == "stop"]
    assert len(new) == 1 and len(stopped) == 1
    assert new[0]["PreviousAllocation"] == stopped[0]["ID"]


async def test_system_job_one_per_node() -> None:
    log = Log()
    log.append("node.register", {"nodes": [node(1), node(2), node(3, Datacenter="dc9")]})
    r = log.register({**web(count=1), "Type": "system"})
    await log.schedule(r["EvalID"])
    assert sorted(a["NodeID"] for a in log.fsm.t.allocs.values()) == ["n1", "n2"]
    log.append("node.register", {"nodes": [node(4)]})
    ev = next(e for e in log.fsm.t.evals.values() if e["NodeID"] == "n4")
    await log.schedule(ev["ID"])
    assert len(log.fsm.t.allocs) == 3


def test_snapshot_roundtrip() -> None:
    log = Log()
    log.append("node.register", {"nodes": [node(1)]})
    log.register(web(), submission={"Source": "x", "Format": "hcl2"})
    other = SchedulerFSM()
    other.restore(log.fsm.snapshot(), 2)
    assert other.t.jobs == log.fsm.t.jobs
    assert other.t.submissions == log.fsm.t.submissions
    assert other.t.index["jobs"] == log.fsm.t.index["jobs"]


async def test_broker_one_per_job_nack_and_redelivery() -> None:
    failed: list[str] = []
    canceled: list[str] = []
    gone = asyncio.Event()
    b = EvalBroker(
        nack_timeout=0.3,
        delivery_limit=2,
        on_failed=lambda e: (failed.append(e["ID"]), gone.set()),
        on_cancel=lambda es: canceled.extend(e["ID"] for e in es),
    )

    def mk(i: int, job: str) -> dict[str, Any]:
        return {
            "ID": f"e{i}",
            "Namespace": "default",
            "JobID": job,
            "Type": "service",
            "Priority": 50,
            "CreateIndex": i,
        }

    for i, j in enumerate(["a", "a", "a", "b"]):
        b.enqueue(mk(i, j))
    got = await b.dequeue([], 1)
    got2 = await b.dequeue([], 1)
    assert got and got2 and {got[0]["JobID"], got2[0]["JobID"]} == {"a", "b"}
    assert await b.dequeue([], 0.05) is None  # the other "a" evals wait for the first
    first_a = got if got[0]["JobID"] == "a" else got2
    b_eval = got2 if first_a is got else got
    assert b.ack(first_a[0]["ID"], first_a[1]) and b.ack(b_eval[0]["ID"], b_eval[1])
    assert not b.ack(b_eval[0]["ID"], b_eval[1])  # a second ack is refused
    nxt = await b.dequeue([], 1)
    assert nxt and nxt[0]["ID"] == "e2" and canceled == ["e1"]  # newest wins, older canceled
    # No ack: the nack timeout redelivers, up to the delivery limit.
    again = await b.dequeue([], 2)
    assert again and again[0]["ID"] == "e2"
    await asyncio.wait_for(gone.wait(), 2)
    assert failed == ["e2"]
