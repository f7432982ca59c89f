"""Which terminal records garbage collection removes (Nomad's core scheduler): evaluations that
are terminal with all their allocations terminal, older than eval_gc_threshold (batch jobs'
evals only once their job is collectable too); stopped or dead jobs older than
job_gc_threshold with nothing live; terminal deployments older than deployment_gc_threshold.
Ages come from the records' ModifyTime or, for jobs, SubmitTime. Pure: the caller writes the
selection through the log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.state.tables import TERMINAL_EVAL, Tables, alloc_terminal, jkey

HOUR_NS = 3600 * 1_000_000_000
TERMINAL_DEPLOYMENT = ("successful", "failed", "cancelled")


@dataclass(frozen=True)
class Thresholds:
    job_ns: int = 4 * HOUR_NS
    eval_ns: int = HOUR_NS
    deployment_ns: int = HOUR_NS
    batch_eval_ns: int = 24 * HOUR_NS


FORCE = Thresholds(0, 0, 0, 0)


@dataclass
class Selection:
    jobs: list[str] = field(default_factory=list)
    evals: list[str] = field(default_factory=list)
    allocs: list[str] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.jobs or self.evals or self.allocs or self.deployments)

    def payload(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "evals": self.evals,
            "allocs": self.allocs,
            "deployments": self.deployments,
        }


def _job_collectable(t: Tables, key: str, job: dict[str, Any], now: int, th: Thresholds) -> bool:
    if not (job.get("Stop") or job.get("Status") == "dead"):
        return False
    parent = (job.get("Periodic") or {}).get("Enabled") or job.get("ParameterizedJob")
    if parent and not job.get("Stop"):
        return False  # a parent is "dead" between launches, yet still wanted
    if now - int(job.get("SubmitTime") or 0) < th.job_ns:
        return False
    return not (t.live_allocs.get(key, 0) > 0 or t.live_evals.get(key, 0) > 0)


def select(t: Tables, now: int, th: Thresholds, limit: int = 5000) -> Selection:
    """At most `limit` records per kind, so one log entry stays small."""
    sel = Selection()
    dead_jobs: set[str] = set()
    for key, job in t.jobs.items():
        if len(sel.jobs) < limit and _job_collectable(t, key, job, now, th):
            sel.jobs.append(key)
            dead_jobs.add(key)
    for ev in t.evals.values():
        if len(sel.evals) >= limit:
            break
        if ev["Status"] not in TERMINAL_EVAL:
            continue
        key = jkey(ev["Namespace"], ev["JobID"])
        gone = key in dead_jobs or key not in t.jobs
        age = now - int(ev.get("ModifyTime") or 0)
        job = t.jobs.get(key)
        batch = job is not None and job.get("Type") == "batch"
        if not gone and age < (th.batch_eval_ns if batch else th.eval_ns):
            continue
        allocs = [t.allocs[i] for i in t.allocs_by_eval.get(ev["ID"], ()) if i in t.allocs]
        if any(not alloc_terminal(a) for a in allocs):
            continue
        # A batch job's finished allocations are its results: kept while the job is.
        if batch and not gone:
            continue
        sel.evals.append(ev["ID"])
        sel.allocs.extend(a["ID"] for a in allocs)
    chosen = set(sel.allocs)
    for key in dead_jobs:
        for a in t.job_allocs(*key.split("\x00", 1)):
            if a["ID"] not in chosen and alloc_terminal(a):
                sel.allocs.append(a["ID"])
                chosen.add(a["ID"])
        for ev in t.job_evals(*key.split("\x00", 1)):
            if ev["ID"] not in sel.evals and ev["Status"] in TERMINAL_EVAL:
                sel.evals.append(ev["ID"])
    for dep in t.deployments.values():
        if len(sel.deployments) >= limit:
            break
        key = jkey(dep["Namespace"], dep["JobID"])
        if dep["Status"] not in TERMINAL_DEPLOYMENT and key not in dead_jobs:
            continue
        age = now - int(dep.get("ModifyTime") or dep.get("_Time") or 0)
        if key in dead_jobs or age >= th.deployment_ns:
            live = [
                a
                for a in t.job_allocs(dep["Namespace"], dep["JobID"])
                if a.get("DeploymentID") == dep["ID"] and not alloc_terminal(a)
            ]
            if not live:
                sel.deployments.append(dep["ID"])
    return sel
