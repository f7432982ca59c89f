"""Deterministic apply of log entries to the tables (Nomad's FSM). Time and ids come from the
entry or its payload, never from the replica, so every replica computes the same state.

Listeners (`on_pending`) hear about evaluations that became `pending`, so the leader's broker
can enqueue them without polling."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from services.scheduler import acl_bootstrap, nodeauth
from services.scheduler.admit import spec_changed
from services.scheduler.placement.resources import Res, alloc_res, node_capacity
from services.scheduler.state import lifecycle
from services.scheduler.state.events import EventRing
from services.scheduler.state.tables import (
    TERMINAL_EVAL,
    TRACKED_SUBMISSIONS,
    TRACKED_VERSIONS,
    Tables,
    alloc_terminal,
    client_terminal,
    jkey,
)
from services.scheduler.variables import apply as variables_apply
from shared.replog import ApplyError, LogEntry

ENFORCE = "Enforcing job modify index"
UNBLOCKED = "unblocked: capacity changed"


def ns_time(entry: LogEntry) -> int:
    return int(entry.time * 1e9)


def derived_id(entry: LogEntry, *parts: str) -> str:
    """An id every replica derives the same way from the entry."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, "/".join((entry.id, *parts))))


def new_eval(
    eval_id: str,
    job: dict[str, Any],
    triggered_by: str,
    *,
    node_id: str = "",
    deployment_id: str = "",
    status: str = "pending",
    priority: int = 0,
) -> dict[str, Any]:
    return {
        "ID": eval_id,
        "Namespace": job.get("Namespace", "default"),
        "Priority": priority or job.get("Priority", 50),
        "Type": job.get("Type", "service"),
        "TriggeredBy": triggered_by,
        "JobID": job["ID"],
        "JobModifyIndex": job.get("JobModifyIndex", 0),
        "NodeID": node_id,
        "NodeModifyIndex": 0,
        "DeploymentID": deployment_id,
        "Status": status,
        "StatusDescription": "",
        "Wait": 0,
        "WaitUntil": None,
        "NextEval": "",
        "PreviousEval": "",
        "BlockedEval": "",
        "RelatedEvals": None,
        "FailedTGAllocs": None,
        "ClassEligibility": None,
        "EscapedComputedClass": False,
        "QuotaLimitReached": "",
        "AnnotatePlan": False,
        "QueuedAllocations": None,
        "LeaderACL": "",
        "SnapshotIndex": 0,
        "CreateIndex": 0,
        "ModifyIndex": 0,
        "CreateTime": 0,
        "ModifyTime": 0,
    }


class SchedulerFSM:
    def __init__(self) -> None:
        self.t = Tables()
        self.on_pending: list[Callable[[dict[str, Any]], None]] = []
        self.on_apply: list[Callable[[int], None]] = []
        self._handlers: dict[str, Callable[[int, LogEntry, Any], Any]] = {
            "job.register": self._job_register,
            "job.deregister": self._job_deregister,
            "job.stable": self._job_stable,
            "eval.upsert": self._eval_upsert,
            "plan.apply": self._plan_apply,
            "alloc.client_update": self._alloc_client_update,
            "node.register": self._node_register,
            "node.status": self._node_status,
            "node.eligibility": self._node_eligibility,
            "deployment.promote": self._deployment_promote,
            "deployment.status": self._deployment_status,
            "acl.bootstrap": self._acl_bootstrap,
            "acl.policy.upsert": self._acl_policy_upsert,
            "acl.policy.delete": self._acl_policy_delete,
            "acl.token.upsert": self._acl_token_upsert,
            "acl.token.delete": self._acl_token_delete,
            "var.apply": lambda i, e, p: variables_apply.apply_variable(self.t, i, e, p),
            "namespace.apply": lambda i, e, p: variables_apply.apply_namespace(self.t, i, e, p),
            "job.scale": lambda i, e, p: lifecycle.job_scale(self, i, e, p),
            "alloc.transition": lambda i, e, p: lifecycle.alloc_transition(self, i, e, p),
            "node.drain": lambda i, e, p: lifecycle.node_drain(self, i, e, p),
            "gc.apply": lambda i, e, p: lifecycle.gc_apply(self, i, e, p),
            "periodic.launch": lambda i, e, p: lifecycle.periodic_launch(self, i, e, p),
        }
        self._touched: set[str] = set()
        self.events = EventRing()

    # -- StateMachine protocol

    def apply(self, index: int, entry: LogEntry) -> Any:
        handler = self._handlers.get(entry.type)
        if handler is None:
            raise ApplyError(400, f"unknown log entry type {entry.type!r}")
        payload = msgspec.msgpack.decode(entry.payload)
        self._touched = set()
        self.t.changes = []
        result = handler(index, entry, payload)
        for key in self._touched:
            self._refresh_job_status(index, key)
        self._record_events(index, entry.type)
        for cb in self.on_apply:
            cb(index)
        return result

    def _record_events(self, index: int, kind: str) -> None:
        changes = self.t.changes
        self.t.changes = []
        for key in sorted(self._touched):
            job = self.t.jobs.get(key)
            if job is not None and job.get("ModifyIndex") == index:
                changes.append(("Job", job))
            elif job is None and kind in ("job.deregister", "gc.apply"):
                ns, _, job_id = key.partition("\x00")
                changes.append(("Job", {"ID": job_id, "Namespace": ns}))
        if self.t.index["nodes"] == index:
            changes += [("Node", n) for n in self.t.nodes.values() if n.get("ModifyIndex") == index]
        self.events.add(index, kind, changes)

    def snapshot(self) -> bytes:
        return self.t.dump()

    def restore(self, data: bytes, index: int) -> None:
        self.t = Tables()
        self.t.load(data)

    # -- helpers

    def _bump(self, index: int, *tables: str) -> None:
        for name in tables:
            self.t.index[name] = index

    def _put_eval(self, index: int, entry: LogEntry, ev: dict[str, Any]) -> None:
        old = self.t.evals.get(ev["ID"])
        ev = dict(ev)
        ev["CreateIndex"] = old["CreateIndex"] if old else index
        ev["CreateTime"] = old["CreateTime"] if old else ns_time(entry)
        ev["ModifyIndex"] = index
        ev["ModifyTime"] = ns_time(entry)
        self.t.put_eval(ev)
        self._bump(index, "evals")
        self._touched.add(jkey(ev["Namespace"], ev["JobID"]))
        if ev["Status"] == "pending":
            for cb in self.on_pending:
                cb(ev)

    def _job_eval(
        self,
        index: int,
        entry: LogEntry,
        key: str,
        trigger: str,
        *,
        node_id: str = "",
        deployment_id: str = "",
    ) -> dict[str, Any] | None:
        job = self.t.jobs.get(key)
        if job is None:
            return None
        ev = new_eval(
            derived_id(entry, key, trigger, node_id),
            job,
            trigger,
            node_id=node_id,
            deployment_id=deployment_id,
        )
        self._put_eval(index, entry, ev)
        return ev

    def _refresh_job_status(self, index: int, key: str) -> None:
        job = self.t.jobs.get(key)
        if job is None:
            return
        status = self._job_status(key, job)
        if status != job.get("Status"):
            job = dict(job)
            job["Status"] = status
            job["ModifyIndex"] = index
            self.t.jobs[key] = job
            self._bump(index, "jobs")

    def _job_status(self, key: str, job: dict[str, Any]) -> str:
        if (
            job.get("Type") == "system"
            or (job.get("Periodic") or {}).get("Enabled")
            or job.get("ParameterizedJob")
        ):
            return "dead" if job.get("Stop") else "running"
        if self.t.live_allocs.get(key, 0) > 0:
            return "running"
        if self.t.live_evals.get(key, 0) > 0:
            return "pending"
        if self.t.allocs_by_job.get(key) or self.t.evals_by_job.get(key):
            return "dead"
        return "pending"

    def _unblock(self, index: int, entry: LogEntry, except_job: str = "") -> None:
        """Capacity changed: blocked evaluations get another chance."""
        self._bump(index, "unblock")  # for a blocked eval planned before it, written after
        for ev in [e for e in self.t.evals.values() if e["Status"] == "blocked"]:
            if jkey(ev["Namespace"], ev["JobID"]) == except_job:
                continue
            ev = dict(ev)
            ev["Status"] = "pending"
            ev["StatusDescription"] = UNBLOCKED
            self._put_eval(index, entry, ev)

    # -- jobs

    def _store_version(self, key: str, job: dict[str, Any]) -> None:
        versions = [job, *self.t.versions.get(key, [])]
        if len(versions) > TRACKED_VERSIONS:
            keep = versions[:TRACKED_VERSIONS]
            if not any(v.get("Stable") for v in keep):
                stable = next((v for v in versions[TRACKED_VERSIONS:] if v.get("Stable")), None)
                if stable is not None:
                    keep[-1] = stable
            versions = keep
        self.t.versions[key] = versions

    def _job_register(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        job = p["job"]
        key = jkey(job["Namespace"], job["ID"])
        existing = self.t.jobs.get(key)
        if p.get("enforce_index"):
            want = int(p.get("job_modify_index") or 0)
            if want == 0 and existing is not None:
                raise ApplyError(400, f"{ENFORCE} 0: job already exists")
            if want != 0 and existing is None:
                raise ApplyError(400, f"{ENFORCE} {want}: job does not exist")
            if existing is not None and want != existing["JobModifyIndex"]:
                raise ApplyError(
                    400,
                    f"{ENFORCE} {want}: job exists with conflicting job "
                    f"modify index: {existing['JobModifyIndex']}",
                )
        if p.get("preserve_counts") and existing is not None:
            counts = {g["Name"]: g["Count"] for g in existing.get("TaskGroups") or []}
            for g in job.get("TaskGroups") or []:
                if g["Name"] in counts:
                    g["Count"] = counts[g["Name"]]
        if existing is None or spec_changed(existing, job):
            job = dict(job)
            job["CreateIndex"] = existing["CreateIndex"] if existing else index
            job["ModifyIndex"] = job["JobModifyIndex"] = index
            job["Version"] = existing["Version"] + 1 if existing else 0
            job["Stable"] = False
            job["SubmitTime"] = ns_time(entry)
            job["Status"] = existing.get("Status", "pending") if existing else "pending"
            if existing and existing.get("_Queued"):
                job["_Queued"] = existing["_Queued"]
            self.t.jobs[key] = job
            self._store_version(key, job)
            self._bump(index, "jobs", "job_version", "job_summary")
            sub = p.get("submission")
            if sub:
                subs = self.t.submissions.setdefault(key, {})
                subs[job["Version"]] = {
                    **sub,
                    "Namespace": job["Namespace"],
                    "JobID": job["ID"],
                    "Version": job["Version"],
                    "JobModifyIndex": index,
                }
                for old in sorted(subs)[:-TRACKED_SUBMISSIONS]:
                    del subs[old]
                self._bump(index, "job_submission")
        else:
            job = existing
        self._touched.add(key)
        launch = p.get("launch")
        if launch:
            self.t.periodic_launch[launch["key"]] = int(launch["time"])
        out = {
            "EvalID": "",
            "EvalCreateIndex": 0,
            "JobModifyIndex": job["JobModifyIndex"],
            "Warnings": "",
        }
        ev = p.get("eval")
        if ev:
            ev = {**ev, "JobModifyIndex": job["JobModifyIndex"]}
            self._put_eval(index, entry, ev)
            out["EvalID"], out["EvalCreateIndex"] = ev["ID"], index
        return out

    def _job_deregister(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        key = jkey(p["namespace"], p["job_id"])
        existing = self.t.jobs.get(key)
        if existing is None:
            raise ApplyError(404, "job not found")
        if p.get("purge"):
            del self.t.jobs[key]
            self.t.versions.pop(key, None)
            self.t.submissions.pop(key, None)
            self.t.scaling_events.pop(key, None)
            job = existing
            self._bump(index, "jobs", "job_version")
        else:
            job = dict(existing)
            if not job.get("Stop"):
                job["Stop"] = True
                job["ModifyIndex"] = job["JobModifyIndex"] = index
                job["Version"] = existing["Version"] + 1
                job["Stable"] = False
                job["SubmitTime"] = ns_time(entry)
                self._store_version(key, job)
            self.t.jobs[key] = job
            self._bump(index, "jobs", "job_version")
        self._touched.add(key)
        out = {"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": job["JobModifyIndex"]}
        if p.get("eval"):
            ev = {**p["eval"], "JobModifyIndex": job["JobModifyIndex"]}
            self._put_eval(index, entry, ev)
            out["EvalID"], out["EvalCreateIndex"] = ev["ID"], index
        return out

    def _set_stable(self, index: int, key: str, version: int, stable: bool) -> bool:
        found = False
        versions = self.t.versions.get(key, [])
        for i, v in enumerate(versions):
            if v["Version"] == version:
                versions[i] = {**v, "Stable": stable}
                found = True
        job = self.t.jobs.get(key)
        if job is not None and job["Version"] == version:
            self.t.jobs[key] = {**job, "Stable": stable, "ModifyIndex": index}
            found = True
        if found:
            self._bump(index, "jobs", "job_version")
        return found

    def _job_stable(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        key = jkey(p["namespace"], p["job_id"])
        if key not in self.t.jobs:
            raise ApplyError(404, "job not found")
        if not self._set_stable(index, key, int(p["version"]), bool(p["stable"])):
            raise ApplyError(404, f"job version {p['version']} not found")
        return {"JobModifyIndex": self.t.jobs[key]["JobModifyIndex"]}

    # -- evaluations

    def _eval_upsert(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        for ev in p["evals"]:
            old = self.t.evals.get(ev["ID"])
            # A late ack for an eval already finished elsewhere must not reopen it.
            if (
                old is not None
                and old["Status"] in TERMINAL_EVAL
                and ev["Status"] not in (TERMINAL_EVAL)
            ):
                continue
            if ev["Status"] == "blocked" and ev.get("SnapshotIndex", 0) < self.t.index["unblock"]:
                # Planned on state older than the last capacity change, whose unblock it missed
                # (Nomad's missed unblock): evaluated again at once, not left waiting.
                ev = {**ev, "Status": "pending", "StatusDescription": UNBLOCKED}
            self._put_eval(index, entry, ev)
            if ev.get("QueuedAllocations") is not None and ev["Status"] in ("complete", "blocked"):
                key = jkey(ev["Namespace"], ev["JobID"])
                job = self.t.jobs.get(key)
                if job is not None:
                    self.t.jobs[key] = {
                        **job,
                        "_Queued": ev["QueuedAllocations"],
                        "_SummaryIndex": index,
                    }
                    self._bump(index, "job_summary")
        return {"index": index}

    # -- plans

    def _plan_apply(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        now = ns_time(entry)
        key = jkey(p["namespace"], p["job_id"])
        stopped: set[str] = set()
        freed = False
        for st in p.get("stop", []):
            old = self.t.allocs.get(st["ID"])
            if old is None:
                continue
            a = dict(old)
            a["DesiredStatus"] = st.get("DesiredStatus", "stop")
            a["DesiredDescription"] = st.get("DesiredDescription", "")
            if st.get("ClientStatus"):
                a["ClientStatus"] = st["ClientStatus"]
            if st.get("FollowupEvalID"):
                a["FollowupEvalID"] = st["FollowupEvalID"]
            a["ModifyIndex"] = a["AllocModifyIndex"] = index
            a["ModifyTime"] = now
            if not alloc_terminal(old):
                freed = True
            self.t.put_alloc(a)
            stopped.add(a["ID"])
        for up in p.get("update", []):
            old = self.t.allocs.get(up["ID"])
            if old is None or alloc_terminal(old):
                continue
            a = {**old, **up, "ModifyIndex": index, "AllocModifyIndex": index, "ModifyTime": now}
            self.t.put_alloc(a)
        dep = p.get("deployment")
        if dep:
            for other in self.t.job_deployments(dep["Namespace"], dep["JobID"]):
                if other["ID"] != dep["ID"] and other["Status"] in ("running", "paused"):
                    self.t.put_deployment(
                        {
                            **other,
                            "Status": "cancelled",
                            "StatusDescription": "Cancelled due to newer version of job",
                            "ModifyIndex": index,
                        }
                    )
            existing = self.t.deployments.get(dep["ID"])
            dep = {
                **dep,
                "CreateIndex": existing["CreateIndex"] if existing else index,
                "ModifyIndex": index,
            }
            self.t.put_deployment(dep)
            self._bump(index, "deployment")
        # Fit is re-checked here: another plan may have used the room since the snapshot.
        by_node: dict[str, list[dict[str, Any]]] = {}
        for a in p.get("place", []):
            by_node.setdefault(a["NodeID"], []).append(a)
        rejected: list[str] = []
        placed = 0
        for node_id, allocs in by_node.items():
            node = self.t.nodes.get(node_id)
            if (
                node is None
                or node.get("Status") != "ready"
                or node.get("SchedulingEligibility", "eligible") != "eligible"
            ):
                rejected += [a["ID"] for a in allocs]
                continue
            cap = node_capacity(node)
            used = Res()
            for other in self.t.node_allocs(node_id):
                if not alloc_terminal(other):
                    used.add(alloc_res(other))
            for a in allocs:
                used.add(alloc_res(a))
            if used.cpu > cap.cpu or used.mem > cap.mem or used.disk > cap.disk:
                rejected += [a["ID"] for a in allocs]
                continue
            for a in allocs:
                self._insert_alloc(index, now, a)
                placed += 1
        if p.get("stop") or p.get("place") or p.get("update"):
            self._bump(index, "allocs", "job_summary")
        self._touched.add(key)
        if freed:
            self._unblock(index, entry, except_job=key)
        return {"index": index, "rejected": rejected, "placed": placed}

    def _insert_alloc(self, index: int, now: int, a: dict[str, Any]) -> None:
        a = dict(a)
        a["CreateIndex"] = a["ModifyIndex"] = a["AllocModifyIndex"] = index
        a["CreateTime"] = a["ModifyTime"] = now
        node = self.t.nodes.get(a["NodeID"]) or {}
        a["NodeName"] = node.get("Name", "")
        prev_id = a.get("PreviousAllocation")
        if prev_id and prev_id in self.t.allocs:
            prev = dict(self.t.allocs[prev_id])
            prev["NextAllocation"] = a["ID"]
            prev["ModifyIndex"] = index
            self.t.put_alloc(prev)
        self.t.put_alloc(a)
        dep_id = a.get("DeploymentID")
        if dep_id and dep_id in self.t.deployments:
            dep = copy.deepcopy(self.t.deployments[dep_id])
            st = dep["TaskGroups"].get(a["TaskGroup"])
            if st is not None:
                st["PlacedAllocs"] += 1
                if (a.get("DeploymentStatus") or {}).get("Canary"):
                    st["PlacedCanaries"] = [*(st.get("PlacedCanaries") or []), a["ID"]]
                dep["ModifyIndex"] = index
                self.t.put_deployment(dep)
                self._bump(index, "deployment")

    # -- client updates

    def _alloc_client_update(
        self, index: int, entry: LogEntry, p: dict[str, Any]
    ) -> dict[str, Any]:
        now = ns_time(entry)
        failed_jobs: set[str] = set()
        health_jobs: dict[str, str] = {}
        freed = False
        # The nodes whose secrets the RPC checked; older entries carry none and trust all.
        authed = set(p["node_ids"]) if "node_ids" in p else None
        for up in p["updates"]:
            old = self.t.allocs.get(up["ID"])
            if old is None or old["ClientStatus"] == "lost":
                continue  # a lost allocation was already replaced; late reports don't revive it
            if authed is not None and old["NodeID"] not in authed:
                continue  # a node reports only on its own allocations
            a = dict(old)
            for f in ("ClientStatus", "ClientDescription", "TaskStates", "NetworkStatus"):
                if f in up:
                    a[f] = up[f]
            health = (up.get("DeploymentStatus") or {}).get("Healthy")
            old_health = (old.get("DeploymentStatus") or {}).get("Healthy")
            if health is not None and old_health is None:
                a["DeploymentStatus"] = {
                    **(old.get("DeploymentStatus") or {}),
                    **up["DeploymentStatus"],
                    "ModifyIndex": index,
                }
            a["ModifyIndex"] = index
            a["ModifyTime"] = now
            self.t.put_alloc(a)
            key = jkey(a["Namespace"], a["JobID"])
            self._touched.add(key)
            if client_terminal(a) and not client_terminal(old):
                freed = True
                if a["ClientStatus"] == "failed" and a["DesiredStatus"] == "run":
                    failed_jobs.add(key)
            if (
                health is not None
                and old_health is None
                and a.get("DeploymentID")
                and self._record_health(index, a, bool(health))
            ):
                health_jobs[key] = a["DeploymentID"]
        self._bump(index, "allocs", "job_summary")
        for key in sorted(failed_jobs):
            job = self.t.jobs.get(key)
            if job is not None and not job.get("Stop"):
                self._job_eval(index, entry, key, "alloc-failure")
        for key, dep_id in sorted(health_jobs.items()):
            job = self.t.jobs.get(key)
            if job is not None and key not in failed_jobs:
                self._job_eval(index, entry, key, "deployment-watcher", deployment_id=dep_id)
        if freed:
            self._unblock(index, entry)
        return {"index": index}

    def _record_health(self, index: int, alloc: dict[str, Any], healthy: bool) -> bool:
        """Count a health verdict; returns True when the deployment still needs the scheduler
        (more to roll, or canaries just promoted)."""
        dep = self.t.deployments.get(alloc["DeploymentID"])
        if dep is None or dep["Status"] != "running":
            return False
        dep = copy.deepcopy(dep)
        st = dep["TaskGroups"].get(alloc["TaskGroup"])
        if st is None:
            return False
        st["HealthyAllocs" if healthy else "UnhealthyAllocs"] += 1
        dep["ModifyIndex"] = index
        self._bump(index, "deployment")
        if not healthy:
            dep["Status"] = "failed"
            dep["StatusDescription"] = "Failed due to unhealthy allocations"
            self.t.put_deployment(dep)
            return False
        for g in dep["TaskGroups"].values():
            canaries = g.get("DesiredCanaries", 0)
            if canaries and not g["Promoted"] and g.get("AutoPromote"):
                healthy_canaries = sum(
                    1
                    for aid in g.get("PlacedCanaries") or []
                    if (self.t.allocs.get(aid, {}).get("DeploymentStatus") or {}).get("Healthy")
                )
                if healthy_canaries >= canaries:
                    g["Promoted"] = True
        done = all(
            g["HealthyAllocs"] >= g["DesiredTotal"]
            and (not g.get("DesiredCanaries") or g["Promoted"])
            for g in dep["TaskGroups"].values()
        )
        if done:
            dep["Status"] = "successful"
            dep["StatusDescription"] = "Deployment completed successfully"
            self.t.put_deployment(dep)
            self._set_stable(index, jkey(dep["Namespace"], dep["JobID"]), dep["JobVersion"], True)
            return False
        if any(g.get("DesiredCanaries") and not g["Promoted"] for g in dep["TaskGroups"].values()):
            dep["StatusDescription"] = "Deployment is running but requires manual promotion"
        self.t.put_deployment(dep)
        return True

    # -- deployments

    def _deployment_promote(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        dep = self.t.deployments.get(p["id"])
        if dep is None:
            raise ApplyError(404, "deployment not found")
        if dep["Status"] != "running":
            raise ApplyError(400, "can't promote terminal deployment")  # Nomad's exact text
        dep = copy.deepcopy(dep)
        groups = p.get("groups") or list(dep["TaskGroups"])
        for name in groups:
            if name in dep["TaskGroups"]:
                dep["TaskGroups"][name]["Promoted"] = True
        dep["StatusDescription"] = "Deployment is running"
        dep["ModifyIndex"] = index
        self.t.put_deployment(dep)
        self._bump(index, "deployment")
        ev = self._job_eval(
            index,
            entry,
            jkey(dep["Namespace"], dep["JobID"]),
            "deployment-watcher",
            deployment_id=dep["ID"],
        )
        return {
            "EvalID": ev["ID"] if ev else "",
            "EvalCreateIndex": index,
            "DeploymentModifyIndex": index,
        }

    def _deployment_status(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        dep = self.t.deployments.get(p["id"])
        if dep is None:
            raise ApplyError(404, "deployment not found")
        self.t.put_deployment(
            {
                **dep,
                "Status": p["status"],
                "StatusDescription": p.get("description", ""),
                "ModifyIndex": index,
            }
        )
        self._bump(index, "deployment")
        return {"DeploymentModifyIndex": index}

    # -- nodes

    def _node_ready_effects(self, index: int, entry: LogEntry, node_id: str) -> None:
        for key, job in list(self.t.jobs.items()):
            if job.get("Type") in ("system", "sysbatch") and not job.get("Stop"):
                self._job_eval(index, entry, key, "node-update", node_id=node_id)
        self._unblock(index, entry)

    def _node_register(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        nodes = p.get("nodes") or [p["node"]]
        for n in nodes:  # check every node before changing any: a refused entry changes nothing
            if not nodeauth.may_register(self.t.nodes.get(n["ID"]), n.get(nodeauth.HASH_FIELD, "")):
                raise ApplyError(403, nodeauth.REGISTER_MISMATCH)
        for n in nodes:
            old = self.t.nodes.get(n["ID"])
            node = dict(n)
            node["CreateIndex"] = old["CreateIndex"] if old else index
            node["ModifyIndex"] = index
            node.setdefault("Status", "ready")
            node.setdefault("SchedulingEligibility", "eligible")
            node["StatusUpdatedAt"] = int(entry.time)
            self.t.nodes[n["ID"]] = node
            if node["Status"] == "ready" and (old is None or old.get("Status") != "ready"):
                self._node_ready_effects(index, entry, n["ID"])
        self._bump(index, "nodes")
        return {"index": index}

    def _node_status(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        changed_down: list[str] = []
        for node_id in p["node_ids"]:
            old = self.t.nodes.get(node_id)
            if old is None or old.get("Status") == p["status"]:
                continue
            node = {
                **old,
                "Status": p["status"],
                "ModifyIndex": index,
                "StatusUpdatedAt": int(entry.time),
            }
            self.t.nodes[node_id] = node
            if p["status"] == "ready":
                self._node_ready_effects(index, entry, node_id)
            elif p["status"] == "down":
                changed_down.append(node_id)
        for node_id in changed_down:
            jobs = sorted(
                {
                    jkey(a["Namespace"], a["JobID"])
                    for a in self.t.node_allocs(node_id)
                    if not alloc_terminal(a)
                }
            )
            for key in jobs:
                self._job_eval(index, entry, key, "node-update", node_id=node_id)
        self._bump(index, "nodes")
        return {"index": index}

    def _node_eligibility(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        old = self.t.nodes.get(p["node_id"])
        if old is None:
            raise ApplyError(404, "node not found")
        self.t.nodes[p["node_id"]] = {
            **old,
            "SchedulingEligibility": p["eligibility"],
            "ModifyIndex": index,
        }
        self._bump(index, "nodes")
        if p["eligibility"] == "eligible":
            self._node_ready_effects(index, entry, p["node_id"])
        return {"index": index}

    # -- ACLs

    def _acl_bootstrap(self, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("configured"):
            # A management token from the configuration is the bootstrap: record it once, so
            # its index is the reset index an operator names in the reset file.
            if not self.t.acl_bootstrap_index:
                self.t.acl_bootstrap_index = index
            return {"reset_index": self.t.acl_bootstrap_index}
        refusal = acl_bootstrap.apply_refusal(
            self.t.acl_bootstrap_index, int(p.get("reset_index") or 0)
        )
        if refusal:
            raise ApplyError(400, refusal)
        self.t.acl_bootstrap_index = index
        token = self._put_token(index, entry, p["token"])
        return token

    def _put_token(self, index: int, entry: LogEntry, token: dict[str, Any]) -> dict[str, Any]:
        old = self.t.acl_tokens.get(token["AccessorID"])
        token = {
            **token,
            "CreateIndex": old["CreateIndex"] if old else index,
            "ModifyIndex": index,
            "CreateTime": old["CreateTime"] if old else _rfc3339(entry.time),
        }
        self.t.acl_tokens[token["AccessorID"]] = token
        self.t.token_by_secret[token["SecretID"]] = token["AccessorID"]
        self._bump(index, "acl_token")
        return token

    def _acl_policy_upsert(self, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
        for pol in p["policies"]:
            old = self.t.acl_policies.get(pol["Name"])
            self.t.acl_policies[pol["Name"]] = {
                **pol,
                "CreateIndex": old["CreateIndex"] if old else index,
                "ModifyIndex": index,
            }
        self._bump(index, "acl_policy")
        return {"index": index}

    def _acl_policy_delete(self, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
        for name in p["names"]:
            self.t.acl_policies.pop(name, None)
        self._bump(index, "acl_policy")
        return {"index": index}

    def _acl_token_upsert(self, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
        return [self._put_token(index, entry, t) for t in p["tokens"]]

    def _acl_token_delete(self, index: int, entry: LogEntry, p: dict[str, Any]) -> Any:
        for acc in p["accessors"]:
            tok = self.t.acl_tokens.pop(acc, None)
            if tok is not None:
                self.t.token_by_secret.pop(tok["SecretID"], None)
        self._bump(index, "acl_token")
        return {"index": index}


def _rfc3339(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
