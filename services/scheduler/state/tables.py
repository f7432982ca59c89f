"""In-memory tables and their secondary indexes, with the per-table Raft index that blocking
queries watch. Records are dicts in Nomad's JSON shape; keys starting with `_` are internal."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import msgspec

TERMINAL_EVAL = ("complete", "failed", "canceled")
TERMINAL_CLIENT = ("complete", "failed", "lost")
SUMMARY_BIN = {
    "pending": "Starting",
    "running": "Running",
    "complete": "Complete",
    "failed": "Failed",
    "lost": "Lost",
    "unknown": "Unknown",
}
TRACKED_VERSIONS = 6
TRACKED_SUBMISSIONS = 6


def jkey(namespace: str, job_id: str) -> str:
    return f"{namespace}\x00{job_id}"


def alloc_terminal(a: dict[str, Any]) -> bool:
    return a.get("DesiredStatus") in ("stop", "evict") or a.get("ClientStatus") in TERMINAL_CLIENT


def client_terminal(a: dict[str, Any]) -> bool:
    return a.get("ClientStatus") in TERMINAL_CLIENT


class Tables:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, list[dict[str, Any]]] = {}  # newest first
        self.submissions: dict[str, dict[int, dict[str, Any]]] = {}
        self.evals: dict[str, dict[str, Any]] = {}
        self.allocs: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.acl_policies: dict[str, dict[str, Any]] = {}
        self.acl_tokens: dict[str, dict[str, Any]] = {}  # by AccessorID
        self.acl_bootstrap_index = 0
        # Nomad Variables by "<ns>\x00<path>" (values sealed); namespaces by name
        self.variables: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        # job key -> {group: [scaling events, newest last]}
        self.scaling_events: dict[str, dict[str, list[dict[str, Any]]]] = {}
        # parent job key -> unix ns of its last periodic launch
        self.periodic_launch: dict[str, int] = {}
        # What the entry being applied changed, for the event stream (state/events.py).
        self.changes: list[tuple[str, dict[str, Any]]] = []
        self.index: dict[str, int] = defaultdict(int)
        self._rebuild()

    # -- secondary indexes (rebuilt after a restore; never serialized)

    def _rebuild(self) -> None:
        self.allocs_by_job: dict[str, set[str]] = defaultdict(set)
        self.allocs_by_node: dict[str, set[str]] = defaultdict(set)
        self.allocs_by_eval: dict[str, set[str]] = defaultdict(set)
        self.evals_by_job: dict[str, set[str]] = defaultdict(set)
        self.deps_by_job: dict[str, set[str]] = defaultdict(set)
        self.token_by_secret: dict[str, str] = {}
        # (job key) -> {group: {bin: count}}
        self.summary: dict[str, dict[str, dict[str, int]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(int))
        )
        self.live_allocs: dict[str, int] = defaultdict(int)
        self.live_evals: dict[str, int] = defaultdict(int)
        for a in self.allocs.values():
            self._index_alloc(None, a)
        for e in self.evals.values():
            self._index_eval(None, e)
        for d in self.deployments.values():
            self.deps_by_job[jkey(d["Namespace"], d["JobID"])].add(d["ID"])
        for t in self.acl_tokens.values():
            self.token_by_secret[t["SecretID"]] = t["AccessorID"]

    def _index_alloc(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        key = jkey(new["Namespace"], new["JobID"])
        if old is None:
            self.allocs_by_job[key].add(new["ID"])
            self.allocs_by_node[new["NodeID"]].add(new["ID"])
            self.allocs_by_eval[new.get("EvalID", "")].add(new["ID"])
        groups = self.summary[key]
        if old is not None:
            groups[old["TaskGroup"]][SUMMARY_BIN.get(old["ClientStatus"], "Unknown")] -= 1
            if not alloc_terminal(old):
                self.live_allocs[key] -= 1
        groups[new["TaskGroup"]][SUMMARY_BIN.get(new["ClientStatus"], "Unknown")] += 1
        if not alloc_terminal(new):
            self.live_allocs[key] += 1

    def _index_eval(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        key = jkey(new["Namespace"], new["JobID"])
        if old is None:
            self.evals_by_job[key].add(new["ID"])
        elif old["Status"] not in TERMINAL_EVAL:
            self.live_evals[key] -= 1
        if new["Status"] not in TERMINAL_EVAL:
            self.live_evals[key] += 1

    def put_alloc(self, alloc: dict[str, Any]) -> None:
        old = self.allocs.get(alloc["ID"])
        self.allocs[alloc["ID"]] = alloc
        self._index_alloc(old, alloc)
        self.changes.append(("Allocation", alloc))

    def put_eval(self, ev: dict[str, Any]) -> None:
        old = self.evals.get(ev["ID"])
        self.evals[ev["ID"]] = ev
        self._index_eval(old, ev)
        self.changes.append(("Evaluation", ev))

    def put_deployment(self, dep: dict[str, Any]) -> None:
        self.deployments[dep["ID"]] = dep
        self.changes.append(("Deployment", dep))
        self.deps_by_job[jkey(dep["Namespace"], dep["JobID"])].add(dep["ID"])

    # -- removals (garbage collection)

    def drop_alloc(self, alloc_id: str) -> None:
        a = self.allocs.pop(alloc_id, None)
        if a is None:
            return
        key = jkey(a["Namespace"], a["JobID"])
        self.allocs_by_job.get(key, set()).discard(alloc_id)
        self.allocs_by_node.get(a["NodeID"], set()).discard(alloc_id)
        self.allocs_by_eval.get(a.get("EvalID", ""), set()).discard(alloc_id)
        bins = self.summary.get(key, {}).get(a["TaskGroup"])
        if bins is not None:
            bins[SUMMARY_BIN.get(a["ClientStatus"], "Unknown")] -= 1
        if not alloc_terminal(a):
            self.live_allocs[key] -= 1

    def drop_eval(self, eval_id: str) -> None:
        ev = self.evals.pop(eval_id, None)
        if ev is None:
            return
        key = jkey(ev["Namespace"], ev["JobID"])
        self.evals_by_job.get(key, set()).discard(eval_id)
        if ev["Status"] not in TERMINAL_EVAL:
            self.live_evals[key] -= 1

    def drop_deployment(self, dep_id: str) -> None:
        dep = self.deployments.pop(dep_id, None)
        if dep is not None:
            self.deps_by_job.get(jkey(dep["Namespace"], dep["JobID"]), set()).discard(dep_id)

    def drop_job(self, key: str) -> None:
        self.jobs.pop(key, None)
        self.versions.pop(key, None)
        self.submissions.pop(key, None)
        self.scaling_events.pop(key, None)
        self.periodic_launch.pop(key, None)
        for idx in (self.allocs_by_job, self.evals_by_job, self.deps_by_job, self.summary):
            if not idx.get(key):
                idx.pop(key, None)  # type: ignore[attr-defined]
        if not self.live_allocs.get(key):
            self.live_allocs.pop(key, None)
        if not self.live_evals.get(key):
            self.live_evals.pop(key, None)

    # -- reads

    def children(self, namespace: str, parent_id: str) -> list[dict[str, Any]]:
        return [
            j
            for j in self.jobs.values()
            if j.get("ParentID") == parent_id and j["Namespace"] == namespace
        ]

    def job_allocs(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        return [self.allocs[i] for i in self.allocs_by_job.get(jkey(namespace, job_id), ())]

    def node_allocs(self, node_id: str) -> list[dict[str, Any]]:
        return [self.allocs[i] for i in self.allocs_by_node.get(node_id, ())]

    def job_evals(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        return [self.evals[i] for i in self.evals_by_job.get(jkey(namespace, job_id), ())]

    def job_deployments(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        return [self.deployments[i] for i in self.deps_by_job.get(jkey(namespace, job_id), ())]

    def latest_deployment(self, namespace: str, job_id: str) -> dict[str, Any] | None:
        deps = self.job_deployments(namespace, job_id)
        return max(deps, key=lambda d: d["CreateIndex"]) if deps else None

    def job_version(self, namespace: str, job_id: str, version: int) -> dict[str, Any] | None:
        for j in self.versions.get(jkey(namespace, job_id), ()):
            if j["Version"] == version:
                return j
        job = self.jobs.get(jkey(namespace, job_id))
        return job if job is not None and job["Version"] == version else None

    def job_summary(self, namespace: str, job_id: str) -> dict[str, Any]:
        job = self.jobs.get(jkey(namespace, job_id))
        groups = self.summary.get(jkey(namespace, job_id), {})
        names = [g["Name"] for g in (job or {}).get("TaskGroups") or []] or list(groups)
        queued = (job or {}).get("_Queued") or {}
        out = {}
        for name in names:
            bins = groups.get(name, {})
            out[name] = {
                "Queued": queued.get(name, 0),
                "Complete": bins.get("Complete", 0),
                "Failed": bins.get("Failed", 0),
                "Running": bins.get("Running", 0),
                "Starting": bins.get("Starting", 0),
                "Lost": bins.get("Lost", 0),
                "Unknown": bins.get("Unknown", 0),
            }
        return {
            "JobID": job_id,
            "Namespace": namespace,
            "Summary": out,
            "Children": self._children_summary(namespace, job_id, job),
            "CreateIndex": (job or {}).get("CreateIndex", 0),
            "ModifyIndex": max(
                (job or {}).get("ModifyIndex", 0), (job or {}).get("_SummaryIndex", 0)
            ),
        }

    def _children_summary(
        self, namespace: str, job_id: str, job: dict[str, Any] | None
    ) -> dict[str, int]:
        out = {"Pending": 0, "Running": 0, "Dead": 0}
        if job is None or not (job.get("Periodic") or job.get("ParameterizedJob")):
            return out
        for child in self.children(namespace, job_id):
            status = str(child.get("Status") or "pending").capitalize()
            if status in out:
                out[status] += 1
        return out

    # -- snapshots

    _SERIAL = (
        "jobs",
        "versions",
        "submissions",
        "evals",
        "allocs",
        "deployments",
        "nodes",
        "acl_policies",
        "acl_tokens",
        "acl_bootstrap_index",
        "variables",
        "namespaces",
        "scaling_events",
        "periodic_launch",
    )

    def dump(self) -> bytes:
        data = {name: getattr(self, name) for name in self._SERIAL}
        data["index"] = dict(self.index)
        data["submissions"] = {
            k: {str(v): s for v, s in subs.items()} for k, subs in self.submissions.items()
        }
        return msgspec.msgpack.encode(data)

    def load(self, raw: bytes) -> None:
        data = msgspec.msgpack.decode(raw)
        for name in self._SERIAL:
            if name in data:
                setattr(self, name, data[name])
        self.submissions = {
            k: {int(v): s for v, s in subs.items()}
            for k, subs in data.get("submissions", {}).items()
        }
        self.index = defaultdict(int, data.get("index", {}))
        self._rebuild()
