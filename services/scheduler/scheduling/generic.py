"""The generic scheduler (service and batch): reconcile a job's allocations with its spec —
lost and failed allocations replaced, counts met, destructive updates rolled under a deployment
with canaries — and place what is missing with the Placer."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from services.scheduler.placement.placer import Placer
from services.scheduler.scheduling.base import NOT_NEEDED, BaseScheduler
from services.scheduler.scheduling.plan import Plan, new_alloc
from services.scheduler.scheduling.reschedule import may_reschedule, next_delay, tracker_with
from services.scheduler.state.fsm import new_eval
from services.scheduler.state.tables import Tables, client_terminal

CHUNK = 256  # placements between yields to the event loop

LOST = "alloc is lost since its node is down"
UPDATING = "alloc is being updated due to job update"
RESCHEDULED = "alloc was rescheduled because it failed"
MIGRATING = "alloc is being migrated"
_INDEX = re.compile(r"\[(\d+)\]$")

# Group fields whose change does not need new allocations (Nomad updates those in place).
_INPLACE_OK = {
    "Count",
    "Update",
    "Meta",
    "Spreads",
    "Affinities",
    "Constraints",
    "ReschedulePolicy",
    "Migrate",
    "Scaling",
    "StopAfterClientDisconnect",
    "MaxClientDisconnect",
    "ShutdownDelay",
}


def name_index(name: str) -> int:
    m = _INDEX.search(name)
    return int(m.group(1)) if m else 0


def destructive(old_tg: dict[str, Any] | None, new_tg: dict[str, Any]) -> bool:
    if old_tg is None:
        return True
    keys = (set(old_tg) | set(new_tg)) - _INPLACE_OK - {"Name"}
    return any(old_tg.get(k) != new_tg.get(k) for k in keys)


def _group_of(job: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    for tg in (job or {}).get("TaskGroups") or []:
        if tg["Name"] == name:
            return tg
    return None


class GenericScheduler(BaseScheduler):
    def __init__(self, state: Tables, ev: dict[str, Any], **kw: Any) -> None:
        super().__init__(state, ev, **kw)
        self.batch = ev["Type"] == "batch"

    async def compute(self) -> Plan:
        plan, job, allocs = self.inputs()
        if job is None or job.get("Stop"):
            return self.stop_running(plan, allocs)
        assert job is not None
        placer = Placer(
            list(self.s.nodes.values()), list(self.s.allocs.values()), job, rng=self.rng
        )
        dep = self._deployment(job)
        done = 0
        for tg in job.get("TaskGroups") or []:
            mine = [a for a in allocs if a["TaskGroup"] == tg["Name"]]
            done = await self._group(plan, placer, job, tg, mine, dep, done)
        gone = {g["Name"] for g in job.get("TaskGroups") or []}
        for a in allocs:
            if (
                a["TaskGroup"] not in gone
                and a["DesiredStatus"] == "run"
                and not client_terminal(a)
            ):
                plan.stop.append({"ID": a["ID"], "DesiredDescription": NOT_NEEDED})
        if dep is not None and dep.get("_new"):
            dep.pop("_new")
            if any(a.get("DeploymentID") == dep["ID"] for a in plan.place):
                plan.deployment = dep
            else:
                for a in plan.place:
                    a["DeploymentID"] = ""
        return plan

    def _deployment(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The running deployment for this job version, or a new one to create."""
        if job["Type"] != "service":
            return None
        groups = {
            tg["Name"]: tg
            for tg in job.get("TaskGroups") or []
            if (tg.get("Update") or {}).get("MaxParallel", 0) > 0
        }
        if not groups:
            return None
        latest = self.s.latest_deployment(job["Namespace"], job["ID"])
        if (
            latest is not None
            and latest["JobVersion"] == job["Version"]
            and latest["JobCreateIndex"] == job["CreateIndex"]
        ):
            return latest if latest["Status"] in ("running", "paused") else None
        allocs = self.s.job_allocs(job["Namespace"], job["ID"])
        live = [a for a in allocs if a["DesiredStatus"] == "run" and not client_terminal(a)]
        old = [a for a in live if a["JobVersion"] != job["Version"]]
        first_run = not live
        needs = first_run or any(
            destructive(
                _group_of(
                    self.s.job_version(job["Namespace"], job["ID"], a["JobVersion"]), a["TaskGroup"]
                ),
                groups.get(a["TaskGroup"], {}),
            )
            for a in old
            if a["TaskGroup"] in groups
        )
        if not needs:
            return None
        dep_groups = {}
        for name, tg in groups.items():
            u = tg["Update"]
            canary = int(u.get("Canary") or 0) if old else 0
            dep_groups[name] = {
                "AutoRevert": bool(u.get("AutoRevert")),
                "AutoPromote": bool(u.get("AutoPromote")),
                "ProgressDeadline": int(u.get("ProgressDeadline") or 0),
                "Promoted": False,
                "PlacedCanaries": None,
                "DesiredCanaries": canary,
                "DesiredTotal": int(tg.get("Count") or 0),
                "PlacedAllocs": 0,
                "HealthyAllocs": 0,
                "UnhealthyAllocs": 0,
                "RequireProgressBy": None,
            }
        return {
            "ID": self.new_id(),
            "Namespace": job["Namespace"],
            "JobID": job["ID"],
            "JobVersion": job["Version"],
            "JobModifyIndex": job["JobModifyIndex"],
            "JobSpecModifyIndex": job["JobModifyIndex"],
            "JobCreateIndex": job["CreateIndex"],
            "IsMultiregion": False,
            "TaskGroups": dep_groups,
            "Status": "running",
            "StatusDescription": "Deployment is running"
            if not any(g["DesiredCanaries"] for g in dep_groups.values())
            else "Deployment is running pending automatic promotion",
            "EvalPriority": self.ev.get("Priority", 50),
            "CreateIndex": 0,
            "ModifyIndex": 0,
            "_new": True,
        }

    async def _place(
        self,
        plan: Plan,
        placer: Placer,
        job: dict[str, Any],
        tg: dict[str, Any],
        name: str,
        done: int,
        *,
        prev: dict[str, Any] | None = None,
        tracker: dict[str, Any] | None = None,
        dep: dict[str, Any] | None = None,
        canary: bool = False,
    ) -> int:
        if done and done % CHUNK == 0:
            await asyncio.sleep(0)
        penalty = {prev["NodeID"]} if prev is not None and tracker is not None else None
        node, metrics = placer.select(tg, penalty)
        if node is None:
            plan.fail(tg["Name"], metrics)
            plan.queued[tg["Name"]] = plan.queued.get(tg["Name"], 0) + 1
            return done + 1
        a = new_alloc(self.new_id(), job, tg, name, node, self.ev["ID"], metrics)
        if prev is not None:
            a["PreviousAllocation"] = prev["ID"]
        if tracker is not None:
            a["RescheduleTracker"] = tracker
        if dep is not None and tg["Name"] in dep["TaskGroups"]:
            a["DeploymentID"] = dep["ID"]
            if canary:
                a["DeploymentStatus"] = {
                    "Healthy": None,
                    "Timestamp": None,
                    "Canary": True,
                    "ModifyIndex": 0,
                }
        plan.place.append(a)
        return done + 1

    async def _group(
        self,
        plan: Plan,
        placer: Placer,
        job: dict[str, Any],
        tg: dict[str, Any],
        allocs: list[dict[str, Any]],
        dep: dict[str, Any] | None,
        done: int,
    ) -> int:
        name_of = f"{job['ID']}.{tg['Name']}"
        count = int(tg.get("Count") or 0)
        plan.queued.setdefault(tg["Name"], 0)
        untainted: list[dict[str, Any]] = []
        occupied: set[int] = set()
        replacements: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for a in allocs:
            if a.get("_JobCreateIndex", job["CreateIndex"]) != job["CreateIndex"]:
                if a["DesiredStatus"] == "run" and not client_terminal(a):
                    plan.stop.append({"ID": a["ID"], "DesiredDescription": NOT_NEEDED})
                continue
            if a["DesiredStatus"] != "run":
                continue
            node = self.s.nodes.get(a["NodeID"])
            status = a["ClientStatus"]
            if status in ("pending", "running", "unknown"):
                if node is None or node.get("Status") == "down":
                    plan.stop.append(
                        {"ID": a["ID"], "DesiredDescription": LOST, "ClientStatus": "lost"}
                    )
                    delay = 0
                    replacements.append((a, tracker_with(a, self.now, delay)))
                elif (a.get("DesiredTransition") or {}).get("Migrate"):
                    # Stopped by the user or drained off its node: replaced, same name.
                    plan.stop.append({"ID": a["ID"], "DesiredDescription": MIGRATING})
                    placer.release(a)
                    replacements.append((a, None))
                else:
                    untainted.append(a)
                continue
            if status == "complete":
                if self.batch:
                    occupied.add(name_index(a["Name"]))
                continue
            if status == "failed" and not a.get("NextAllocation"):
                policy = tg.get("ReschedulePolicy")
                if may_reschedule(policy, a.get("RescheduleTracker"), self.now):
                    delay = next_delay(policy or {}, a.get("RescheduleTracker"))
                    ready_at = int(a.get("ModifyTime") or 0) + delay
                    if ready_at <= self.now:
                        plan.stop.append({"ID": a["ID"], "DesiredDescription": RESCHEDULED})
                        replacements.append((a, tracker_with(a, self.now, delay)))
                    else:
                        self._followup(plan, job, a, ready_at)
                        occupied.add(name_index(a["Name"]))
                else:
                    occupied.add(name_index(a["Name"]))
        # Replacements keep their predecessor's name.
        promoted = (
            dep is None
            or not dep["TaskGroups"].get(tg["Name"], {}).get("DesiredCanaries")
            or dep["TaskGroups"][tg["Name"]]["Promoted"]
        )
        canaries = [
            a
            for a in untainted
            if (a.get("DeploymentStatus") or {}).get("Canary")
            and dep is not None
            and a.get("DeploymentID") == dep["ID"]
        ]
        counted = [a for a in untainted if promoted or a not in canaries]
        current = [a for a in counted if a["JobVersion"] == job["Version"]]
        outdated = [a for a in counted if a["JobVersion"] != job["Version"]]
        inplace, destruct = [], []
        for a in outdated:
            old_job = self.s.job_version(job["Namespace"], job["ID"], a["JobVersion"])
            (destruct if destructive(_group_of(old_job, tg["Name"]), tg) else inplace).append(a)
        for a in inplace:
            plan.update.append({"ID": a["ID"], "JobVersion": job["Version"]})
        keep = current + inplace + destruct
        # Too many: stop the highest names, outdated ones first.
        excess = len(keep) + len(occupied) + len(replacements) - count
        if excess > 0:
            order = sorted(
                keep, key=lambda a: (a in current or a in inplace, -name_index(a["Name"]))
            )
            for a in order[:excess]:
                plan.stop.append({"ID": a["ID"], "DesiredDescription": NOT_NEEDED})
                placer.release(a)
                keep.remove(a)
                if a in destruct:
                    destruct.remove(a)
            surplus = excess - len(order[:excess])
            replacements = replacements[: max(0, len(replacements) - surplus)]
        for prev, tracker in replacements:
            done = await self._place(
                plan, placer, job, tg, prev["Name"], done, prev=prev, tracker=tracker, dep=dep
            )
        used = (
            occupied
            | {name_index(a["Name"]) for a in keep}
            | {name_index(p["Name"]) for p, _ in replacements}
        )
        missing = count - len(keep) - len(occupied) - len(replacements)
        idx = 0
        while missing > 0:
            while idx in used:
                idx += 1
            used.add(idx)
            done = await self._place(plan, placer, job, tg, f"{name_of}[{idx}]", done, dep=dep)
            missing -= 1
        # Canaries first, then destructive updates at MaxParallel when under a deployment.
        dstate = dep["TaskGroups"].get(tg["Name"]) if dep is not None else None
        if (
            destruct
            and dstate is not None
            and dstate.get("DesiredCanaries")
            and not dstate["Promoted"]
        ):
            want = dstate["DesiredCanaries"] - len(canaries)
            for a in destruct[: max(0, want)]:
                done = await self._place(
                    plan, placer, job, tg, a["Name"], done, dep=dep, canary=True
                )
            return done
        limit = len(destruct)
        if dstate is not None:
            parallel = int((tg.get("Update") or {}).get("MaxParallel") or 1)
            unhealthy = sum(
                1
                for a in untainted
                if a.get("DeploymentID") == dep["ID"]
                and (a.get("DeploymentStatus") or {}).get("Healthy") is None
                and not (a.get("DeploymentStatus") or {}).get("Canary")
            )
            pending_new = sum(1 for a in plan.place if a["TaskGroup"] == tg["Name"])
            limit = max(0, parallel - unhealthy - pending_new)
        for a in sorted(destruct, key=lambda a: name_index(a["Name"]))[:limit]:
            plan.stop.append({"ID": a["ID"], "DesiredDescription": UPDATING})
            placer.release(a)
            done = await self._place(plan, placer, job, tg, a["Name"], done, prev=a, dep=dep)
        return done

    def _followup(
        self, plan: Plan, job: dict[str, Any], alloc: dict[str, Any], ready_at: int
    ) -> None:
        existing = alloc.get("FollowupEvalID")
        if existing and self.s.evals.get(existing, {}).get("Status") == "pending":
            return
        for ev in plan.followups:
            if ev["WaitUntil"] == ready_at:
                plan.update.append({"ID": alloc["ID"], "FollowupEvalID": ev["ID"]})
                return
        ev = new_eval(self.new_id(), job, "alloc-failure")
        ev["WaitUntil"] = ready_at
        ev["PreviousEval"] = self.ev["ID"]
        plan.followups.append(ev)
        plan.update.append({"ID": alloc["ID"], "FollowupEvalID": ev["ID"]})
