"""Day-two state changes without NATS: scaling events and versions, migrations stopped and
replaced, drain decisions honouring migrate.max_parallel, GC selection with Nomad's thresholds,
plan annotations, and an unchanged re-register after the summary moved."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any
from unittest import mock

from services.scheduler import gc, housekeeper
from services.scheduler.annotate import annotate, desired_updates
from services.scheduler.diff import job_diff
from services.scheduler.housekeeper import drain_decisions

from .test_sched_fsm import Log, web
from .test_sched_placement import node

HOUR = gc.HOUR_NS


def cluster(nodes: int = 2) -> Log:
    log = Log()
    log.append("node.register", {"nodes": [node(i) for i in range(nodes)]})
    return log


async def placed(log: Log, job: dict[str, Any]) -> list[dict[str, Any]]:
    r = log.register(job)
    await log.schedule(r["EvalID"])
    log.client("running")
    return [a for a in log.fsm.t.allocs.values() if a["DesiredStatus"] == "run"]


async def test_unchanged_register_after_summary_keeps_version() -> None:
    log = cluster()
    await placed(log, web())
    log.append(
        "eval.upsert",
        {"evals": [{**next(iter(log.fsm.t.evals.values())), "QueuedAllocations": {"g": 0}}]},
    )
    assert log.fsm.t.jobs["default\x00web"].get("_Queued") is not None
    before = log.fsm.t.jobs["default\x00web"]["JobModifyIndex"]
    again = log.register(web())
    assert again["JobModifyIndex"] == before
    assert log.fsm.t.jobs["default\x00web"]["Version"] == 0


async def test_scale_makes_a_version_and_records_events() -> None:
    log = cluster()
    await placed(log, web(count=1))
    r = log.append(
        "job.scale",
        {
            "namespace": "default",
            "job_id": "web",
            "group": "g",
            "count": 3,
            "message": "up",
            "eval": {**next(iter(log.fsm.t.evals.values())), "ID": "e-scale", "Status": "pending"},
        },
    )
    job = log.fsm.t.jobs["default\x00web"]
    assert job["Version"] == 1 and job["TaskGroups"][0]["Count"] == 3 and r["EvalID"] == "e-scale"
    log.append(
        "job.scale",
        {
            "namespace": "default",
            "job_id": "web",
            "group": "g",
            "count": None,
            "message": "just a note",
            "error": True,
        },
    )
    events = log.fsm.t.scaling_events["default\x00web"]["g"]
    assert [(e["Count"], e["PreviousCount"], e["Message"]) for e in events] == [
        (3, 1, "up"),
        (None, 3, "just a note"),
    ]
    assert log.fsm.t.jobs["default\x00web"]["Version"] == 1  # an event alone: no new version


async def test_migrate_transition_replaces_under_the_same_name() -> None:
    log = cluster(1)
    [a] = await placed(log, web(count=1))
    r = log.append("alloc.transition", {"ids": [a["ID"]], "trigger": "alloc-stop"})
    [ev_id] = r["EvalIDs"]
    await log.schedule(ev_id)
    t = log.fsm.t
    assert t.allocs[a["ID"]]["DesiredStatus"] == "stop"
    [new] = [x for x in t.allocs.values() if x["DesiredStatus"] == "run"]
    assert new["Name"] == a["Name"] and new["PreviousAllocation"] == a["ID"]


async def test_drain_moves_max_parallel_at_a_time() -> None:
    log = cluster(2)
    job = web(count=3)
    job["TaskGroups"][0]["Migrate"] = {"MaxParallel": 2}
    job["TaskGroups"][0]["Update"] = None
    job["Constraints"] = [{"LTarget": "${node.unique.id}", "RTarget": "n0", "Operand": "="}]
    await placed(log, job)
    t = log.fsm.t
    assert {a["NodeID"] for a in t.allocs.values()} == {"n0"}
    log.append("node.drain", {"node_id": "n0", "strategy": {"Deadline": 0, "ForceDeadline": 0}})
    assert t.nodes["n0"]["SchedulingEligibility"] == "ineligible"
    migrate, stop, done = drain_decisions(t, time.time_ns())
    assert len(migrate) == 2 and not stop and not done
    log.append("alloc.transition", {"ids": migrate})
    # Until the replacements run, nothing more moves.
    assert drain_decisions(t, time.time_ns())[0] == []
    # Forced by the deadline: the rest moves at once.
    t.nodes["n0"] = {**t.nodes["n0"], "DrainStrategy": {"ForceDeadline": 1}}
    assert len(drain_decisions(t, time.time_ns())[0]) == 1


async def test_gc_thresholds_and_purged_jobs() -> None:
    log = cluster(1)
    r = log.register(
        {
            **web(count=1),
            "ID": "old",
            "Type": "batch",
            "TaskGroups": [{**web()["TaskGroups"][0], "Count": 1, "Update": None}],
        }
    )
    await log.schedule(r["EvalID"])
    log.client("complete")
    t = log.fsm.t
    now = time.time_ns()
    # A finished batch job that is not stopped keeps its results.
    assert gc.select(t, now + 2 * HOUR, gc.Thresholds()).empty()
    log.append("job.deregister", {"namespace": "default", "job_id": "old", "purge": False})
    # Stopped, but younger than job_gc_threshold (4h): kept.
    sel = gc.select(t, now + HOUR, gc.Thresholds())
    assert sel.jobs == []
    sel = gc.select(t, now + 5 * HOUR, gc.Thresholds())
    assert sel.jobs == ["default\x00old"] and sel.allocs and sel.evals
    log.append("gc.apply", sel.payload())
    assert "default\x00old" not in t.jobs and not t.allocs and not t.evals
    assert not t.allocs_by_job.get("default\x00old")
    # A purged job's records go at once with the forced thresholds (/v1/system/gc).
    r = log.register(web(count=1))
    await log.schedule(r["EvalID"])
    log.client("running")
    log.append("job.deregister", {"namespace": "default", "job_id": "web", "purge": True})
    assert not gc.select(t, time.time_ns(), gc.FORCE).allocs  # still running on its node
    log.client("complete")
    sel = gc.select(t, time.time_ns(), gc.FORCE)
    assert sel.allocs and sel.evals
    log.append("gc.apply", sel.payload())
    assert not t.allocs and not t.evals
    restored = type(t)()
    restored.load(t.dump())  # snapshots stay consistent after removals
    assert restored.allocs == {} and restored.scaling_events == {}


def test_plan_annotations() -> None:
    old = web(count=1)
    new = web(count=3)
    new["TaskGroups"][0]["Tasks"][0]["Env"] = {"V": "2"}
    d = job_diff(old, new)
    live = [{"ID": "a1", "TaskGroup": "g"}]
    place = [
        {"ID": "n1", "TaskGroup": "g", "PreviousAllocation": "a1"},
        {"ID": "n2", "TaskGroup": "g"},
        {"ID": "n3", "TaskGroup": "g"},
    ]
    desired = desired_updates(place, [{"ID": "a1"}], [], live, ["g"])
    assert desired["g"]["Place"] == 2 and desired["g"]["DestructiveUpdate"] == 1
    assert desired["g"]["Stop"] == 0 and desired["g"]["Ignore"] == 0
    annotate(d, desired)
    g = d["TaskGroups"][0]
    assert g["Updates"] == {"create": 2, "create/destroy update": 1}
    assert next(f for f in g["Fields"] if f["Name"] == "Count")["Annotations"] == ["forces create"]
    assert g["Tasks"][0]["Annotations"] == ["forces create/destroy update"]
    only_kill = web(count=1)
    only_kill["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = 9
    d2 = annotate(job_diff(old, only_kill), {})
    assert d2["TaskGroups"][0]["Tasks"][0]["Annotations"] == ["forces in-place update"]


async def test_drain_stops_system_allocs_last_then_completes() -> None:
    log = cluster(1)
    t = log.fsm.t
    sys_alloc = {
        "ID": "s1",
        "Namespace": "default",
        "JobID": "sys",
        "JobType": "system",
        "TaskGroup": "g",
        "NodeID": "n0",
        "DesiredStatus": "run",
        "ClientStatus": "running",
    }
    t.put_alloc(sys_alloc)
    log.append("node.drain", {"node_id": "n0", "strategy": {"IgnoreSystemJobs": False}})
    assert drain_decisions(t, time.time_ns()) == ([], ["s1"], [])
    t.nodes["n0"] = {**t.nodes["n0"], "DrainStrategy": {"IgnoreSystemJobs": True}}
    assert drain_decisions(t, time.time_ns()) == ([], [], ["n0"])
    log.append("node.drain", {"node_id": "n0", "strategy": None, "complete": True})
    node = t.nodes["n0"]
    assert node["DrainStrategy"] is None and node["LastDrain"]["Status"] == "complete"
    assert node["SchedulingEligibility"] == "ineligible"  # until marked eligible again


class FakeCtx:
    """What the housekeeper needs of ApiContext: the tables and a log to append to."""

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def t(self) -> Any:
        return self.log.fsm.t

    async def append(self, kind: str, payload: dict[str, Any]) -> tuple[int, Any]:
        return 0, self.log.append(kind, payload)


async def test_periodic_launches_when_due_and_prohibits_overlap() -> None:
    log = cluster(1)
    job = web(count=1, ID="nightly", Type="batch")
    job["TaskGroups"][0]["Update"] = None
    job["Periodic"] = {"Enabled": True, "Spec": "* * * * * * *", "ProhibitOverlap": True}
    log.register(job)
    hk = housekeeper.Housekeeper(FakeCtx(log), gc_interval=3600)  # type: ignore[arg-type]
    t = log.fsm.t
    t.jobs["default\x00nightly"]["SubmitTime"] -= 5 * 10**9  # registered 5 s ago
    await hk.periodic_tick()
    children = t.children("default", "nightly")
    assert len(children) == 1 and children[0]["ID"].startswith("nightly/periodic-")
    assert t.periodic_launch["default\x00nightly"] > 0
    t.periodic_launch["default\x00nightly"] -= 20 * 10**9
    await hk.periodic_tick()  # the first child has not finished: no overlap
    assert len(t.children("default", "nightly")) == 1
    t.jobs["default\x00nightly"]["Periodic"]["ProhibitOverlap"] = False
    await hk.periodic_tick()
    assert len(t.children("default", "nightly")) == 2
    assert log.fsm.t.job_summary("default", "nightly")["Children"]["Pending"] == 2
    # A leader back after an hour launches once, not once per missed second: two passes at
    # one instant (the housekeeper's clock held, so no second boundary can fall between them
    # on a loaded machine and make the second pass due for a launch of its own).
    t.periodic_launch["default\x00nightly"] -= 3600 * 10**9
    held = time.time_ns()
    clock = SimpleNamespace(time_ns=lambda: held, perf_counter=time.perf_counter)
    with mock.patch.object(housekeeper, "time", clock):
        await hk.periodic_tick()
        await hk.periodic_tick()
    assert len(t.children("default", "nightly")) == 3
    assert t.periodic_launch["default\x00nightly"] == held  # the next one counts from now
